#include "allocator/preload/driver.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "allocator/preload/member.h"
#include "allocator/preload/recorder.h"
#include "core/allocator/footprint.h"
#include "core/device/uuid.h"

extern "C" {
// Shared with the dlsym defined in assembly (interpose.cc).
__attribute__((visibility("hidden"))) void* (*cm_real_dlsym)(void*, const char*) = nullptr;
}

namespace cm::preload {

#define CM_NAME(id, symbol, params) #symbol,
const char* const kNames[kCount] = {CM_WRAPPED(CM_NAME) CM_CALLED(CM_NAME)};
#undef CM_NAME

namespace {

#define CM_ADDRESS(id, symbol, params) reinterpret_cast<void*>(&symbol),
void* const kWrappers[kWrapped] = {CM_WRAPPED(CM_ADDRESS)};
#undef CM_ADDRESS

std::atomic<void*> g_real[kCount];
std::atomic<bool> g_resolved{false};
std::mutex g_resolve_mutex;

}  // namespace

DlsymFn RealDlsym() {
  DlsymFn f = cm_real_dlsym;
  if (f) return f;
  // dlvsym is not interposed. glibc 2.34 moved dlsym into libc with a new version.
  f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
  if (!f) f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
  cm_real_dlsym = f;
  return f;
}

bool ResolveTable(const char* soname, const char* const names[], int count,
                  std::atomic<void*> out[], bool keep_open) {
  DlsymFn real = RealDlsym();
  if (!real) return false;
  void* h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  bool any = false;
  for (int i = 0; i < count; ++i) {
    void* p = h ? real(h, names[i]) : nullptr;
    if (!p) p = real(RTLD_NEXT, names[i]);
    out[i].store(p, std::memory_order_relaxed);
    any = any || p;
  }
  if (h && !keep_open) dlclose(h);  // the program's own reference keeps it loaded
  return any;
}

bool Resolve() {
  if (g_resolved.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(g_resolve_mutex);
  if (g_resolved.load(std::memory_order_relaxed)) return true;
  if (!ResolveTable("libcuda.so.1", kNames, kCount, g_real, false))
    return false;  // tried again later
  g_resolved.store(true, std::memory_order_release);
  return true;
}

void* RealAddress(Fn f) {
  Resolve();
  return g_real[f].load(std::memory_order_relaxed);
}

void* Wrapper(Fn f) { return f < kWrapped ? kWrappers[f] : nullptr; }

bool Active() {
  static const bool active = Member::Get().enabled() || Recorder::Get().enabled();
  return active;
}

std::string UuidOf(CUdevice dev) {
  CUuuid u;
  CUresult r = Call<kDeviceGetUuidV2>(&u, dev);
  if (r != kCudaSuccess && Call<kDeviceGetUuid>(&u, dev) != kCudaSuccess) return "";
  return cm::core::GpuUuid(u.bytes);
}

const std::string& GroupDevice() {
  static std::string key;  // written once, before `known` is set
  static std::atomic<bool> known{false};
  static std::mutex mutex;
  static const std::string none;
  if (known.load(std::memory_order_acquire)) return key;
  std::lock_guard<std::mutex> lock(mutex);
  if (!known.load(std::memory_order_relaxed)) {
    const char* v = std::getenv("CUDA_MEMORY_GROUP_DEVICE");
    std::string k = v && *v ? std::string(v) : UuidOf(0);
    if (k.empty()) return none;
    key = k;
    known.store(true, std::memory_order_release);
  }
  return key;
}

namespace {
constexpr int kCachedDevices = 64;
std::atomic<signed char> g_tracked[kCachedDevices];  // 0 unknown, 1 yes, -1 no
}  // namespace

bool Tracked(CUdevice dev) {
  if (dev < 0) return false;
  // The group of the library's simulated devices: the process's device 0 stands for it (tests,
  // and planning on a machine whose programs run against a stand-in driver).
  if (GroupDevice() == "simulated") return dev == 0;
  if (dev < kCachedDevices) {
    signed char t = g_tracked[dev].load(std::memory_order_relaxed);
    if (t) return t > 0;
  }
  std::string uuid = UuidOf(dev);
  if (uuid.empty()) return false;  // not cached: the driver may answer later
  bool yes = uuid == GroupDevice();
  if (dev < kCachedDevices) g_tracked[dev].store(yes ? 1 : -1, std::memory_order_relaxed);
  return yes;
}

CUdevice CurrentDevice() {
  CUdevice d = -1;
  return Call<kCtxGetDevice>(&d) == kCudaSuccess ? d : -1;
}

CUcontext CurrentContext() {
  CUcontext c = nullptr;
  return Call<kCtxGetCurrent>(&c) == kCudaSuccess ? c : nullptr;
}

CUdevice DeviceOfContext(CUcontext context) {
  if (!context) return -1;
  CUdevice d = -1;
  if (Real<kCtxGetDeviceV2>()) return Call<kCtxGetDeviceV2>(&d, context) == kCudaSuccess ? d : -1;
  // A driver before 13.0: made current for the question, then the caller's current again.
  if (Call<kCtxPushCurrent>(context) != kCudaSuccess) return -1;
  if (Call<kCtxGetDevice>(&d) != kCudaSuccess) d = -1;
  CUcontext popped = nullptr;
  Call<kCtxPopCurrent>(&popped);
  return d;
}

CUdevice DeviceOfStream(CUstream stream) {
  if (SpecialStream(stream)) return CurrentDevice();
  CUcontext c = nullptr;
  if (Call<kStreamGetCtx>(stream, &c) != kCudaSuccess) return CurrentDevice();
  return DeviceOfContext(c);
}

bool PrimaryActive(CUdevice dev) {
  unsigned flags = 0;
  int active = 0;
  return Call<kDevicePrimaryCtxGetState>(dev, &flags, &active) == kCudaSuccess && active;
}

CUcontext PrimaryContext(CUdevice dev) {
  if (!Real<kDevicePrimaryCtxRetain>() || !PrimaryActive(dev)) return nullptr;
  CUcontext c = nullptr;
  if (Call<kDevicePrimaryCtxRetain>(&c, dev) != kCudaSuccess) return nullptr;
  // Released again, which leaves its count as it was (a driver before 11.0 has no _v2).
  if (Real<kDevicePrimaryCtxReleaseV2>())
    Call<kDevicePrimaryCtxReleaseV2>(dev);
  else
    Call<kDevicePrimaryCtxRelease>(dev);
  return c;
}

uint64_t DevicePage(CUdevice dev) {
  static std::atomic<uint64_t> pages[kCachedDevices];
  if (dev < 0 || dev >= kCachedDevices) return core::kDevicePage;
  uint64_t p = pages[dev].load(std::memory_order_relaxed);
  if (p) return p;
  CUmemAllocationProp prop = {};
  prop.head.type = kMemAllocationTypePinned;
  prop.head.location = {kMemLocationTypeDevice, dev};
  size_t g = 0;  // CU_MEM_ALLOC_GRANULARITY_MINIMUM (0)
  p = Call<kMemGetAllocationGranularity>(&g, &prop, 0) == kCudaSuccess && g ? g : core::kDevicePage;
  pages[dev].store(p, std::memory_order_relaxed);
  return p;
}

}  // namespace cm::preload
