// NVML's memory queries on the group's device (nvml.h). NVML's own functions come from
// libnvidia-ml.so.1 once the program has it loaded, by its soname (as nvidia-smi and pynvml load
// it), the handle kept so that they stay valid (driver.h: ResolveTable); before that, from what
// dlsym handed out.
#include "allocator/preload/nvml.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "allocator/preload/areas.h"
#include "allocator/preload/charge.h"
#include "core/allocator/tenant_view.h"

using namespace cm::preload;

namespace {

#define CM_NAME(id, symbol, params) #symbol,
const char* const kNvmlNames[kNvmlCount] = {CM_NVML_WRAPPED(CM_NAME) CM_NVML_CALLED(CM_NAME)};
#undef CM_NAME
#define CM_ADDRESS(id, symbol, params) reinterpret_cast<void*>(&symbol),
void* const kNvmlWrappers[kNvmlWrapped] = {CM_NVML_WRAPPED(CM_ADDRESS)};
#undef CM_ADDRESS

template <NvmlFn f>
struct NvmlSignature;
#define CM_SIGNATURE(id, symbol, params) \
  template <>                            \
  struct NvmlSignature<k##id> {          \
    using type = nvmlReturn_t(*) params; \
  };
CM_NVML_WRAPPED(CM_SIGNATURE)
CM_NVML_CALLED(CM_SIGNATURE)
#undef CM_SIGNATURE

std::atomic<void*> g_real[kNvmlCount];      // from NVML's handle
std::atomic<void*> g_handed[kNvmlWrapped];  // what dlsym found, for a handle not found by name
std::atomic<bool> g_resolved{false};
std::mutex g_resolve_mutex;

void ResolveNvml() {
  if (g_resolved.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_resolve_mutex);
  if (g_resolved.load(std::memory_order_relaxed)) return;
  // Kept open: NVML's functions stay where they are while this library may call them.
  if (ResolveTable("libnvidia-ml.so.1", kNvmlNames, kNvmlCount, g_real, true))
    g_resolved.store(true, std::memory_order_release);  // else tried again at the next call
}

template <NvmlFn f>
typename NvmlSignature<f>::type Real() {
  ResolveNvml();
  void* p = g_real[f].load(std::memory_order_relaxed);
  if (!p && f < kNvmlWrapped) p = g_handed[f].load(std::memory_order_relaxed);
  return reinterpret_cast<typename NvmlSignature<f>::type>(p);
}

// Whether NVML's `device` is the group's, by its uuid; known answers kept per handle (NVML's
// handles live as long as the library).
constexpr int kCachedHandles = 64;
std::atomic<nvmlDevice_t> g_handles[kCachedHandles];
std::atomic<signed char> g_verdicts[kCachedHandles];  // 0 unknown, 1 the group's, -1 not

bool GroupsDevice(nvmlDevice_t device) {
  if (!device) return false;
  for (int i = 0; i < kCachedHandles; ++i) {
    nvmlDevice_t h = g_handles[i].load(std::memory_order_acquire);
    if (!h) break;
    if (h != device) continue;
    signed char v = g_verdicts[i].load(std::memory_order_acquire);
    if (v) return v > 0;
    break;
  }
  const std::string& key = GroupDevice();
  if (key.empty() || key == "simulated") return false;  // not cached: the driver may say later
  auto uuid_of = Real<kNvmlUuid>();
  char uuid[kNvmlUuidBytes] = {};
  if (!uuid_of || uuid_of(device, uuid, sizeof uuid) != kNvmlSuccess) return false;
  uuid[sizeof uuid - 1] = 0;
  bool yes = key == uuid;
  for (int i = 0; i < kCachedHandles; ++i) {
    nvmlDevice_t none = nullptr;
    if (g_handles[i].compare_exchange_strong(none, device, std::memory_order_acq_rel) ||
        none == device) {
      g_verdicts[i].store(yes ? 1 : -1, std::memory_order_release);
      break;
    }
  }
  return yes;
}

// The group's view of NVML's figures for `device` (total and free as NVML gave them), for a
// caller that is not the addon (whose own queries see the device as it is, as for cuMemGetInfo).
// False where the group does not apply: the figures stay NVML's.
bool GroupView(void* caller, nvmlDevice_t device, uint64_t total, uint64_t free,
               cm::core::TenantMemory* out) {
  if (!Active() || LibraryCaller(caller) || !GroupsDevice(device)) return false;
  RefreshPools();
  cm::core::MemInfo info{free, total};
  if (!Member::Get().MemInfo(GroupDevice(), &info)) return false;
  *out = cm::core::TenantFigures(info);
  return true;
}

}  // namespace

namespace cm::preload {

void* NvmlWrapperNamed(const char* name) {
  if (!name || std::strncmp(name, "nvml", 4) != 0) return nullptr;
  for (int i = 0; i < kNvmlWrapped; ++i)
    if (!std::strcmp(name, kNvmlNames[i])) return kNvmlWrappers[i];
  return nullptr;
}

void* NvmlSubstitute(const char* name, void* p) {
  if (!p || !Active()) return p;
  void* w = NvmlWrapperNamed(name);
  if (!w || w == p) return p;
  for (int i = 0; i < kNvmlWrapped; ++i) {
    if (kNvmlWrappers[i] != w) continue;
    void* none = nullptr;
    g_handed[i].compare_exchange_strong(none, p, std::memory_order_relaxed);
  }
  return w;
}

}  // namespace cm::preload

namespace {

// nvmlDeviceGetMemoryInfo and _v2: NVML's answer, then, on the group's device, the group's view.
// NULL for the figures is NVML's own error, answered here: nothing is forwarded or written. The
// _v2 figures add the memory the driver reserves for itself, which no allocation can take: inside
// the group it is none of the budget (reserved 0), so that total = free + used as in v1.
template <NvmlFn f, typename Memory>
nvmlReturn_t MemoryInfo(void* caller, nvmlDevice_t device, Memory* memory) {
  if (!memory) return kNvmlErrorInvalidArgument;
  auto real = Real<f>();
  if (!real) return kNvmlErrorFunctionNotFound;
  nvmlReturn_t r = real(device, memory);
  cm::core::TenantMemory v;
  if (r != kNvmlSuccess || !GroupView(caller, device, memory->total, memory->free, &v)) return r;
  memory->total = v.total;
  memory->free = v.free;
  memory->used = v.used;
  if constexpr (std::is_same_v<Memory, nvmlMemory_v2_t>) memory->reserved = 0;
  return r;
}

}  // namespace

CM_WRAPPER nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  return MemoryInfo<kNvmlMemoryInfo>(__builtin_return_address(0), device, memory);
}

CM_WRAPPER nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  return MemoryInfo<kNvmlMemoryInfoV2>(__builtin_return_address(0), device, memory);
}
