#include "allocator/preload/charge.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "allocator/preload/areas.h"

namespace cm::preload {

Allocations& g_pointers = *new Allocations;
Allocations& g_arrays = *new Allocations;

namespace {

// Whether a file is the cuda-memory addon (cuda_memory.node, or the prebuilt cuda-memory.*.node).
bool IsAddon(const char* path) {
  const char* base = std::strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = std::strlen(base);
  bool node = n > 5 && std::strcmp(base + n - 5, ".node") == 0;
  return node && (std::strcmp(base, "cuda_memory.node") == 0 ||
                  std::strncmp(base, "cuda-memory.", 12) == 0);
}

using ChargingFn = const char* (*)();
std::atomic<uint64_t> g_callers[64];  // (return address << 1) | from the addon
// The addon's cuda_memory_charging_ledger (core/allocator/group_upstream.h).
std::atomic<ChargingFn> g_charging{nullptr};

}  // namespace

bool LibraryCaller(void* caller) {
  uint64_t a = reinterpret_cast<uintptr_t>(caller);
  if (!a) return false;
  std::atomic<uint64_t>& slot = g_callers[(a >> 4) % 64];
  uint64_t e = slot.load(std::memory_order_relaxed);
  if (e >> 1 == a) return e & 1;
  Dl_info info;
  bool lib = dladdr(caller, &info) && info.dli_fname && IsAddon(info.dli_fname);
  if (lib && !g_charging.load(std::memory_order_acquire)) {
    void* h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    DlsymFn real = RealDlsym();
    void* f = h && real ? real(h, "cuda_memory_charging_ledger") : nullptr;
    if (h) dlclose(h);
    g_charging.store(reinterpret_cast<ChargingFn>(f), std::memory_order_release);
  }
  slot.store(a << 1 | (lib ? 1 : 0), std::memory_order_relaxed);
  return lib;
}

const char* LibraryCharging(void* caller) {
  if (!LibraryCaller(caller)) return nullptr;
  ChargingFn f = g_charging.load(std::memory_order_acquire);
  return f ? f() : nullptr;
}

namespace {
std::mutex g_green_mutex;
std::unordered_map<CUcontext, CUdevice>& g_green = *new std::unordered_map<CUcontext, CUdevice>;
std::atomic<bool> g_any_green{false};
}  // namespace

void NoteGreenContext(CUcontext context) {
  CUdevice dev = DeviceOfContext(context);
  std::lock_guard<std::mutex> lock(g_green_mutex);
  try {
    g_green[context] = dev;
    g_any_green.store(true, std::memory_order_release);
  } catch (...) {
  }
}

CUcontext LivingContext() {
  CUcontext c = CurrentContext();
  if (!c || !g_any_green.load(std::memory_order_acquire)) return c;
  CUdevice dev;
  {
    std::lock_guard<std::mutex> lock(g_green_mutex);
    auto it = g_green.find(c);
    if (it == g_green.end()) return c;
    dev = it->second;
  }
  return PrimaryContext(dev);
}

Member::Verdict TakeAfterTrim(uint64_t bytes, const char* api, const char* library) {
  TrimPools();
  return Member::Get().Take(bytes, api, GroupDevice(), library);
}

Member::Verdict TakeOrTrim(uint64_t bytes, const char* api, const char* library) {
  Member::Verdict v = Member::Get().Take(bytes, api, GroupDevice(), library, /*quiet=*/true);
  return v == Member::Verdict::kNoRoom ? TakeAfterTrim(bytes, api, library) : v;
}

cm::core::ReserveOps Prepaid::Drawing(cm::core::ReserveOps ops, uint64_t* uncharged) {
  ops.take = [this, uncharged, take = ops.take](uint64_t n) {
    uint64_t use = std::min(n, left_);
    if (n > use && !take(n - use)) return false;
    left_ -= use;
    if (!charged_) *uncharged += use;
    return true;
  };
  return ops;
}

void GiveBack(const std::vector<std::pair<uint64_t, Allocation>>& gone, const char* kind) {
  uint64_t charged = 0;  // given back at once: one ledger operation, not one per allocation
  for (const auto& [key, a] : gone) {
    if (a.charged) charged += a.bytes;
    Recorder::Get().Free(kind, key, a.bytes);
  }
  if (charged) Member::Get().Give(charged);
}

void ChargeBeforeFork() {
  g_pointers.BeforeFork();
  g_arrays.BeforeFork();
  g_green_mutex.lock();
}
void ChargeAfterForkParent() {
  g_green_mutex.unlock();
  g_arrays.AfterForkParent();
  g_pointers.AfterForkParent();
}
void ChargeAfterForkChild() {
  g_green.clear();
  g_green_mutex.unlock();
  g_arrays.AfterForkChild();
  g_pointers.AfterForkChild();
}

}  // namespace cm::preload
