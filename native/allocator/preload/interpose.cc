// The interposer: preloaded into any CUDA program (LD_PRELOAD), it charges the program's device
// allocations to the group ledger named by CUDA_MEMORY_GROUP (member.h) and records them when
// CUDA_MEMORY_TRACE names a file (recorder.h). It links no CUDA library: it forwards every call to
// the host program's driver.
//
// Which level sees which allocation. Everything is charged at the driver API, once:
// - A program with the CUDA runtime linked statically (nvcc's default) or dynamically
//   (libcudart.so) does not call the driver's exported symbols: the runtime dlopens libcuda.so.1,
//   looks up cuGetProcAddress (or cuGetProcAddress_v2) with dlsym, and gets every other driver
//   entry point from it. So dlsym and cuGetProcAddress are interposed (as HAMi-core does): when
//   what they return is one of the driver functions below, the caller gets this library's wrapper
//   instead. cudaMalloc reaches cuMemAlloc_v2, cudaMallocAsync cuMemAllocAsync (or its per-thread
//   stream variant), cudaMallocFromPoolAsync cuMemAllocFromPoolAsync, cudaMallocManaged
//   cuMemAllocManaged, cudaMallocPitch and cudaMalloc3D cuMemAllocPitch_v2, and their frees the
//   matching cuMemFree_v2 / cuMemFreeAsync.
// - A program that calls the driver itself (linked with -lcuda, as llama.cpp's VMM pool and
//   PyTorch's expandable segments do) binds to the same wrappers by name, this library being
//   loaded first.
// The runtime API symbols themselves are not interposed, so nothing is charged twice.
//
// What is charged: cuMemAlloc_v2, cuMemAllocPitch_v2 (pitch × height), cuMemAllocManaged,
// cuMemAllocAsync, cuMemAllocFromPoolAsync (the size asked for; what the stream-ordered pool keeps
// reserved beyond its live allocations is not seen), and cuMemCreate of device memory (physical
// memory, charged at creation and given back at cuMemRelease; cuMemMap maps memory already
// charged). Not charged: CUDA arrays (cuArrayCreate, textures), graph memory nodes, host memory,
// the CUDA context itself, and the legacy 32-bit-size entry points. Only allocations on the
// group's device (CUDA_MEMORY_GROUP_DEVICE, a uuid as nvidia-smi -L prints it; without it, the
// process's device 0) are charged and recorded; others pass untouched.
//
// A context's end frees its memory with no free call for each allocation: cudaDeviceReset
// (cuDevicePrimaryCtxReset, or its _v2), the last cuDevicePrimaryCtxRelease and cuCtxDestroy are
// interposed too, and give back what was charged for every cuMemAlloc, cuMemAllocPitch and
// cuMemAllocManaged made in that context. Stream-ordered allocations and cuMemCreate's handles
// outlive contexts, and stay charged until their own free.
//
// Cooperative: a process that does not preload this library, or that calls the driver through a
// path that bypasses dlsym, is not bound. MIG and MPS are the hard boundaries.
#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "allocator/preload/allocations.h"
#include "allocator/preload/cuda_abi.h"
#include "allocator/preload/member.h"
#include "allocator/preload/recorder.h"
#include "core/device/uuid.h"

#define CM_EXPORT extern "C" __attribute__((visibility("default")))

using namespace cm::preload;

// ---- dlsym, and the real one ----------------------------------------------------------------

// dlsym is defined in assembly below: a lookup with RTLD_NEXT means "after the caller", and glibc
// finds the caller from the return address, so that case must reach the real dlsym by a jump that
// leaves the caller's return address in place (another preloaded library that wraps malloc and
// looks up the next malloc must still find the next one, not its own). Every other lookup goes to
// cm_dlsym_hook.
extern "C" {
__attribute__((visibility("hidden"))) void* (*cm_real_dlsym)(void*, const char*) = nullptr;
__attribute__((visibility("hidden"))) void* cm_dlsym_hook(void* handle, const char* name);
__attribute__((visibility("hidden"))) void* cm_dlsym_next_early(void* handle, const char* name);
}

#if defined(__x86_64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
dlsym:
  cmpq $-1, %rdi
  jne cm_dlsym_hook
  movq cm_real_dlsym(%rip), %rax
  testq %rax, %rax
  jz cm_dlsym_next_early
  jmp *%rax
  .size dlsym, .-dlsym
)");
#else
CM_EXPORT void* dlsym(void* handle, const char* name) {
  // Without the jump, RTLD_NEXT is resolved as if from this library: right for any library
  // preloaded before this one.
  if (handle == RTLD_NEXT) return cm_dlsym_next_early(handle, name);
  return cm_dlsym_hook(handle, name);
}
#endif

namespace {

using DlsymFn = void* (*)(void*, const char*);

DlsymFn RealDlsym() {
  DlsymFn f = cm_real_dlsym;
  if (f) return f;
  // dlvsym is not interposed. glibc 2.34 moved dlsym into libc with a new version.
  f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
  if (!f) f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
  cm_real_dlsym = f;
  return f;
}

// ---- the driver functions wrapped, and the real ones ----------------------------------------

enum Fn {
  kGetProcAddress,
  kGetProcAddressV2,
  kMemAlloc,
  kMemFree,
  kMemAllocPitch,
  kMemAllocManaged,
  kMemAllocAsync,
  kMemAllocAsyncPtsz,
  kMemAllocFromPoolAsync,
  kMemAllocFromPoolAsyncPtsz,
  kMemFreeAsync,
  kMemFreeAsyncPtsz,
  kMemCreate,
  kMemRelease,
  kMemGetInfo,
  kDevicePrimaryCtxReset,
  kDevicePrimaryCtxResetV2,
  kCtxDestroy,
  kCtxDestroyV2,
  kDevicePrimaryCtxRelease,
  kDevicePrimaryCtxReleaseV2,
  kWrapped,  // the ones below are only called, never handed out
  kCtxGetDevice = kWrapped,
  kDeviceGetUuidV2,
  kDeviceGetUuid,
  kCtxGetCurrent,
  kDevicePrimaryCtxGetState,
  kDevicePrimaryCtxRetain,
  kCount
};

const char* const kNames[kCount] = {"cuGetProcAddress",
                                    "cuGetProcAddress_v2",
                                    "cuMemAlloc_v2",
                                    "cuMemFree_v2",
                                    "cuMemAllocPitch_v2",
                                    "cuMemAllocManaged",
                                    "cuMemAllocAsync",
                                    "cuMemAllocAsync_ptsz",
                                    "cuMemAllocFromPoolAsync",
                                    "cuMemAllocFromPoolAsync_ptsz",
                                    "cuMemFreeAsync",
                                    "cuMemFreeAsync_ptsz",
                                    "cuMemCreate",
                                    "cuMemRelease",
                                    "cuMemGetInfo_v2",
                                    "cuDevicePrimaryCtxReset",
                                    "cuDevicePrimaryCtxReset_v2",
                                    "cuCtxDestroy",
                                    "cuCtxDestroy_v2",
                                    "cuDevicePrimaryCtxRelease",
                                    "cuDevicePrimaryCtxRelease_v2",
                                    "cuCtxGetDevice",
                                    "cuDeviceGetUuid_v2",
                                    "cuDeviceGetUuid",
                                    "cuCtxGetCurrent",
                                    "cuDevicePrimaryCtxGetState",
                                    "cuDevicePrimaryCtxRetain"};

void* g_wrappers[kWrapped];  // filled in by the constructor below
std::atomic<void*> g_real[kCount];
std::atomic<bool> g_resolved{false};
std::mutex g_resolve_mutex;

// Looks up the driver's own functions, once the driver is loaded: in libcuda.so.1 if the program
// has it loaded, else in whatever comes after this library.
bool Resolve() {
  if (g_resolved.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(g_resolve_mutex);
  if (g_resolved.load(std::memory_order_relaxed)) return true;
  DlsymFn real = RealDlsym();
  if (!real) return false;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  bool any = false;
  for (int i = 0; i < kCount; ++i) {
    void* p = h ? real(h, kNames[i]) : nullptr;
    if (!p) p = real(RTLD_NEXT, kNames[i]);
    g_real[i].store(p, std::memory_order_relaxed);
    any = any || p;
  }
  if (h) dlclose(h);       // the program's own reference keeps it loaded
  if (!any) return false;  // no driver yet: tried again at the next call
  g_resolved.store(true, std::memory_order_release);
  return true;
}

template <typename F>
F Real(Fn f) {
  Resolve();
  return reinterpret_cast<F>(g_real[f].load(std::memory_order_relaxed));
}

bool Active() {
  static const bool active = Member::Get().enabled() || Recorder::Get().enabled();
  return active;
}

// The wrapper for a driver function the program was about to get, else the function itself.
void* Substitute(void* p) {
  if (!p || !Active() || !Resolve()) return p;
  // A wrapper not filled in yet (a lookup from another library's constructor that ran before
  // this one's) leaves the driver's function in place.
  for (int i = 0; i < kWrapped; ++i)
    if (g_real[i].load(std::memory_order_relaxed) == p) return g_wrappers[i] ? g_wrappers[i] : p;
  return p;
}

// The wrapper for what cuGetProcAddress answered for `symbol`: by the address first, as for dlsym;
// if the driver handed out an address of its own that no exported symbol has, by the name and
// version, as the driver picks them (a base name at version 3020 or later is the _v2 entry
// point, cuCtxDestroy from 4000 and cuDevicePrimaryCtxReset and Release from 11000; the per-thread
// default stream flag picks the _ptsz form; cuGetProcAddress itself is _v2 from 12000 on). Anything
// else is left as the driver answered.
void* SubstituteProc(const char* symbol, int version, uint64_t flags, void* p) {
  void* w = Substitute(p);
  if (w != p || !p || !symbol || !Active()) return w;
  constexpr uint64_t kPerThreadStream = 2;  // CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
  bool ptsz = flags & kPerThreadStream;
  // `older`: the entry point below min_version (kCount: none wrapped there).
  static const struct {
    const char* name;
    int min_version;
    Fn legacy, per_thread, older;
  } kByName[] = {
      {"cuMemAlloc", 3020, kMemAlloc, kMemAlloc, kCount},
      {"cuMemFree", 3020, kMemFree, kMemFree, kCount},
      {"cuMemAllocPitch", 3020, kMemAllocPitch, kMemAllocPitch, kCount},
      {"cuMemAllocManaged", 0, kMemAllocManaged, kMemAllocManaged, kCount},
      {"cuMemAllocAsync", 0, kMemAllocAsync, kMemAllocAsyncPtsz, kCount},
      {"cuMemAllocFromPoolAsync", 0, kMemAllocFromPoolAsync, kMemAllocFromPoolAsyncPtsz, kCount},
      {"cuMemFreeAsync", 0, kMemFreeAsync, kMemFreeAsyncPtsz, kCount},
      {"cuMemCreate", 0, kMemCreate, kMemCreate, kCount},
      {"cuMemRelease", 0, kMemRelease, kMemRelease, kCount},
      {"cuMemGetInfo", 3020, kMemGetInfo, kMemGetInfo, kCount},
      {"cuDevicePrimaryCtxReset", 11000, kDevicePrimaryCtxResetV2, kDevicePrimaryCtxResetV2,
       kDevicePrimaryCtxReset},
      {"cuDevicePrimaryCtxRelease", 11000, kDevicePrimaryCtxReleaseV2, kDevicePrimaryCtxReleaseV2,
       kDevicePrimaryCtxRelease},
      {"cuCtxDestroy", 4000, kCtxDestroyV2, kCtxDestroyV2, kCtxDestroy},
      {"cuGetProcAddress", 12000, kGetProcAddressV2, kGetProcAddressV2, kGetProcAddress},
  };
  for (const auto& e : kByName) {
    if (std::strcmp(symbol, e.name) != 0) continue;
    const Fn f = version >= e.min_version ? (ptsz ? e.per_thread : e.legacy) : e.older;
    void* w = f < kWrapped ? g_wrappers[f] : nullptr;
    return w ? w : p;
  }
  return p;
}

// ---- which device ---------------------------------------------------------------------------

std::string UuidOf(CUdevice dev) {
  using UuidFn = CUresult (*)(CUuuid*, CUdevice);
  CUuuid u;
  UuidFn f = Real<UuidFn>(kDeviceGetUuidV2);
  if (!f) f = Real<UuidFn>(kDeviceGetUuid);
  if (!f || f(&u, dev) != kCudaSuccess) return "";
  return cm::core::GpuUuid(u.bytes);
}

// The group's device key: CUDA_MEMORY_GROUP_DEVICE, else the uuid of the process's device 0
// (empty, and asked again next time, while the driver cannot say it).
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

// Whether allocations on device `dev` are charged and recorded (cached per ordinal).
constexpr int kCachedDevices = 64;
std::atomic<signed char> g_tracked[kCachedDevices];  // 0 unknown, 1 yes, -1 no

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
  using Fn1 = CUresult (*)(CUdevice*);
  CUdevice d = -1;
  Fn1 f = Real<Fn1>(kCtxGetDevice);
  if (!f || f(&d) != kCudaSuccess) return -1;
  return d;
}

// The calling thread's current context (null when there is none or the driver cannot say).
CUcontext CurrentContext() {
  using Fn1 = CUresult (*)(CUcontext*);
  CUcontext c = nullptr;
  Fn1 f = Real<Fn1>(kCtxGetCurrent);
  if (!f || f(&c) != kCudaSuccess) return nullptr;
  return c;
}

// Whether the primary context of `dev` is active (false when the driver cannot say).
bool PrimaryActive(CUdevice dev) {
  using StateFn = CUresult (*)(CUdevice, unsigned*, int*);
  StateFn state = Real<StateFn>(kDevicePrimaryCtxGetState);
  unsigned flags = 0;
  int active = 0;
  return state && state(dev, &flags, &active) == kCudaSuccess && active;
}

// The primary context of `dev` while it is active, without changing it: retained and released
// again, which leaves its count as it was (null when it is not active or the driver cannot say).
CUcontext PrimaryContext(CUdevice dev) {
  using RetainFn = CUresult (*)(CUcontext*, CUdevice);
  using ReleaseFn = CUresult (*)(CUdevice);
  RetainFn retain = Real<RetainFn>(kDevicePrimaryCtxRetain);
  ReleaseFn release = Real<ReleaseFn>(kDevicePrimaryCtxReleaseV2);
  if (!release) release = Real<ReleaseFn>(kDevicePrimaryCtxRelease);  // a driver before 11.0
  if (!retain || !release || !PrimaryActive(dev)) return nullptr;
  CUcontext c = nullptr;
  if (retain(&c, dev) != kCudaSuccess) return nullptr;
  release(dev);
  return c;
}

// ---- allocations the library makes for itself ----------------------------------------------

// Whether the caller of a driver entry point is the cuda-memory addon (cuda_memory.node, or the
// prebuilt cuda-memory.*.node): its group allocators charge their regions to the ledger
// themselves, so in a process where they are members too, the interposer must not charge the same
// regions again (Member::Take). Cached per return address: the addon's calls come from a few.
bool IsAddon(const char* path) {
  const char* base = std::strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = std::strlen(base);
  bool node = n > 5 && std::strcmp(base + n - 5, ".node") == 0;
  return node && (std::strcmp(base, "cuda_memory.node") == 0 ||
                  std::strncmp(base, "cuda-memory.", 12) == 0);
}

std::atomic<uint64_t> g_callers[64];  // (return address << 1) | from the addon
// The addon's count of its own group members (core/allocator/ledger.h, MembersNamed).
std::atomic<Member::LibraryMembers> g_library_members{nullptr};

// The addon's count of its members, if `caller` is in the addon (else null).
Member::LibraryMembers FromLibrary(void* caller) {
  uint64_t a = reinterpret_cast<uintptr_t>(caller);
  std::atomic<uint64_t>& slot = g_callers[(a >> 4) % 64];
  uint64_t e = slot.load(std::memory_order_relaxed);
  if (a && e >> 1 == a) return e & 1 ? g_library_members.load(std::memory_order_acquire) : nullptr;
  Dl_info info;
  bool lib = caller && dladdr(caller, &info) && info.dli_fname && IsAddon(info.dli_fname);
  if (lib && !g_library_members.load(std::memory_order_acquire)) {
    void* h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    DlsymFn real = RealDlsym();
    void* f = h && real ? real(h, "cuda_memory_ledger_members_named") : nullptr;
    if (h) dlclose(h);
    g_library_members.store(reinterpret_cast<Member::LibraryMembers>(f), std::memory_order_release);
  }
  slot.store(a << 1 | (lib ? 1 : 0), std::memory_order_relaxed);
  return lib ? g_library_members.load(std::memory_order_acquire) : nullptr;
}

// ---- the common paths -----------------------------------------------------------------------

// Never destroyed: a runtime may free, release or reset from an exit handler that runs after the
// static destructors of this library.
Allocations& g_pointers = *new Allocations;
Allocations& g_handles = *new Allocations;

// Where an allocation lives: in the context current when it was made, freed when that context is
// reset or destroyed (cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged), or outside any context
// (stream-ordered pools' allocations and cuMemCreate's handles, which a reset or a destroy
// leaves, as cuCtxDestroy's documentation says and the H100 showed).
enum class Lives { kInContext, kOutsideContexts };

// An allocation of `bytes` on `dev` through `api`: charged before alloc() runs, given back if it
// fails, then remembered under key() for its free.
template <typename Alloc, typename Key>
CUresult Allocate(void* caller, Allocations& table, bool handle, Lives lives, CUdevice dev,
                  uint64_t bytes, const char* api, Alloc alloc, Key key) {
  if (!Active() || !Tracked(dev)) return alloc();
  Member& m = Member::Get();
  Member::Verdict v = m.Take(bytes, api, GroupDevice(), FromLibrary(caller));
  if (v == Member::Verdict::kRefused) {
    Recorder::Get().Oom(bytes);
    return kCudaErrorOutOfMemory;
  }
  CUresult r = alloc();
  if (r != kCudaSuccess) {
    if (v == Member::Verdict::kCharged) m.Give(bytes);
    if (r == kCudaErrorOutOfMemory) Recorder::Get().Oom(bytes);
    return r;
  }
  uint64_t k = key();
  void* context = lives == Lives::kInContext ? CurrentContext() : nullptr;  // for EndContext
  if (!table.Insert(k, {bytes, v == Member::Verdict::kCharged, context})) {
    if (v == Member::Verdict::kCharged) m.Give(bytes);  // untracked: its free will be uncharged
    return r;
  }
  Recorder::Get().Alloc(handle, k, bytes);
  return r;
}

// A free of `key`: what it was charged comes back once the driver has freed it.
template <typename Free>
CUresult Release(Allocations& table, bool handle, uint64_t key, Free free) {
  if (!Active()) return free();
  Allocation a;
  // Out of the table before the free: once freed, another thread may get the same address.
  bool known = table.Remove(key, &a);
  CUresult r = free();
  if (!known) return r;
  if (r != kCudaSuccess) {
    table.Insert(key, a);
    return r;
  }
  if (a.charged) Member::Get().Give(a.bytes);
  Recorder::Get().Free(handle, key, a.bytes);
  return r;
}

template <typename F, typename... A>
CUresult Forward(Fn f, A... args) {
  F real = Real<F>(f);
  return real ? real(args...) : kCudaErrorNotInitialized;
}

// A context destroyed or reset by `end()`, which frees every allocation made in it with no free
// call for each: their charges come back once it has succeeded. They are taken out of the table
// before, as a free takes its one out (the context's addresses may be handed out again the
// moment it is gone), and put back if it fails. Only what lives in a context (Lives::kInContext):
// stream-ordered allocations and cuMemCreate's handles survive it, and the program still frees
// them (cuMemFreeAsync, cuMemRelease).
void GiveBack(const std::vector<std::pair<uint64_t, Allocation>>& gone) {
  uint64_t charged = 0;  // given back at once: one ledger operation, not one per allocation
  for (const auto& [key, a] : gone) {
    if (a.charged) charged += a.bytes;
    Recorder::Get().Free(false, key, a.bytes);
  }
  if (charged) Member::Get().Give(charged);
}

template <typename End>
CUresult EndContext(CUcontext context, End end) {
  if (!Active() || !context) return end();
  std::vector<std::pair<uint64_t, Allocation>> gone;
  g_pointers.RemoveContext(context, &gone);
  CUresult r = end();
  if (r != kCudaSuccess) {
    for (const auto& [key, a] : gone) g_pointers.Insert(key, a);
    return r;
  }
  GiveBack(gone);
  return r;
}

// A release of the primary context of `dev` by `release()`: the last one resets it, which frees
// its memory as cuDevicePrimaryCtxReset does. Whether it was the last is known only after, by the
// context no longer being active.
template <typename Release>
CUresult ReleasePrimary(CUdevice dev, Release release) {
  CUcontext context = Active() ? PrimaryContext(dev) : nullptr;
  CUresult r = release();
  if (r != kCudaSuccess || !context || PrimaryActive(dev)) return r;
  std::vector<std::pair<uint64_t, Allocation>> gone;
  g_pointers.RemoveContext(context, &gone);
  GiveBack(gone);
  return r;
}

}  // namespace

// ---- the interposed entry points ------------------------------------------------------------

extern "C" void* cm_dlsym_hook(void* handle, const char* name) {
  DlsymFn real = RealDlsym();
  if (!real) return nullptr;
  void* p = real(handle, name);
  if (p && name && name[0] == 'c' && name[1] == 'u') return Substitute(p);
  return p;
}

extern "C" void* cm_dlsym_next_early(void* handle, const char* name) {
  DlsymFn real = RealDlsym();
  return real ? real(handle, name) : nullptr;
}

CM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags) {
  using F = CUresult (*)(const char*, void**, int, uint64_t);
  CUresult r = Forward<F>(kGetProcAddress, symbol, pfn, version, flags);
  if (r == kCudaSuccess && pfn) *pfn = SubstituteProc(symbol, version, flags, *pfn);
  return r;
}

CM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags,
                                       void* status) {
  using F = CUresult (*)(const char*, void**, int, uint64_t, void*);
  CUresult r = Forward<F>(kGetProcAddressV2, symbol, pfn, version, flags, status);
  if (r == kCudaSuccess && pfn) *pfn = SubstituteProc(symbol, version, flags, *pfn);
  return r;
}

CM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  using F = CUresult (*)(CUdeviceptr*, size_t);
  return Allocate(
      __builtin_return_address(0), g_pointers, false, Lives::kInContext, CurrentDevice(), bytes,
      "cuMemAlloc", [&] { return Forward<F>(kMemAlloc, dptr, bytes); }, [&] { return *dptr; });
}

CM_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  using F = CUresult (*)(CUdeviceptr);
  return Release(g_pointers, false, p, [&] { return Forward<F>(kMemFree, p); });
}

CM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  using F = CUresult (*)(CUdeviceptr*, size_t, unsigned int);
  return Allocate(
      __builtin_return_address(0), g_pointers, false, Lives::kInContext, CurrentDevice(), bytes,
      "cuMemAllocManaged", [&] { return Forward<F>(kMemAllocManaged, dptr, bytes, flags); },
      [&] { return *dptr; });
}

CM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                      unsigned int element) {
  using F = CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
  CUdevice dev = CurrentDevice();
  // The pitch is known only afterwards: the row is charged rounded up to 512 bytes (the largest
  // pitch alignment CUDA devices use) before, and the charge trued up to pitch × height after.
  size_t row = width > SIZE_MAX - 511 ? width : (width + 511) & ~size_t(511);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(row), static_cast<uint64_t>(height), &bytes))
    return Forward<F>(kMemAllocPitch, dptr, pitch, width, height, element);
  CUresult r = Allocate(
      __builtin_return_address(0), g_pointers, false, Lives::kInContext, dev, bytes,
      "cuMemAllocPitch",
      [&] { return Forward<F>(kMemAllocPitch, dptr, pitch, width, height, element); },
      [&] { return *dptr; });
  if (r != kCudaSuccess || !Active() || !pitch) return r;
  Allocation a;
  if (!g_pointers.Remove(*dptr, &a)) return r;
  uint64_t actual = static_cast<uint64_t>(*pitch) * height;
  if (a.charged && actual > a.bytes &&
      Member::Get().Take(actual - a.bytes, "cuMemAllocPitch", GroupDevice()) ==
          Member::Verdict::kRefused) {
    Forward<CUresult (*)(CUdeviceptr)>(kMemFree, *dptr);
    Member::Get().Give(a.bytes);
    Recorder::Get().Free(false, *dptr, a.bytes);
    Recorder::Get().Oom(actual);
    return kCudaErrorOutOfMemory;
  }
  if (a.charged && actual < a.bytes) Member::Get().Give(a.bytes - actual);
  a.bytes = actual;
  g_pointers.Insert(*dptr, a);
  return r;
}

// The stream-ordered allocators, each in its legacy-stream and per-thread-stream form.
#define CM_ASYNC_ALLOC(name, fn)                                                                  \
  CM_EXPORT CUresult name(CUdeviceptr* dptr, size_t bytes, CUstream stream) {                     \
    using F = CUresult (*)(CUdeviceptr*, size_t, CUstream);                                       \
    return Allocate(                                                                              \
        __builtin_return_address(0), g_pointers, false, Lives::kOutsideContexts, CurrentDevice(), \
        bytes, "cuMemAllocAsync", [&] { return Forward<F>(fn, dptr, bytes, stream); },            \
        [&] { return *dptr; });                                                                   \
  }
#define CM_POOL_ALLOC(name, fn)                                                                   \
  CM_EXPORT CUresult name(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream) {  \
    using F = CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);                         \
    return Allocate(                                                                              \
        __builtin_return_address(0), g_pointers, false, Lives::kOutsideContexts, CurrentDevice(), \
        bytes, "cuMemAllocFromPoolAsync",                                                         \
        [&] { return Forward<F>(fn, dptr, bytes, pool, stream); }, [&] { return *dptr; });        \
  }
#define CM_ASYNC_FREE(name, fn)                                                      \
  CM_EXPORT CUresult name(CUdeviceptr p, CUstream stream) {                          \
    using F = CUresult (*)(CUdeviceptr, CUstream);                                   \
    return Release(g_pointers, false, p, [&] { return Forward<F>(fn, p, stream); }); \
  }
CM_ASYNC_ALLOC(cuMemAllocAsync, kMemAllocAsync)
CM_ASYNC_ALLOC(cuMemAllocAsync_ptsz, kMemAllocAsyncPtsz)
CM_POOL_ALLOC(cuMemAllocFromPoolAsync, kMemAllocFromPoolAsync)
CM_POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz, kMemAllocFromPoolAsyncPtsz)
CM_ASYNC_FREE(cuMemFreeAsync, kMemFreeAsync)
CM_ASYNC_FREE(cuMemFreeAsync_ptsz, kMemFreeAsyncPtsz)

CM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes, const void* prop,
                               unsigned long long flags) {
  using F = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const void*, unsigned long long);
  const auto* head = static_cast<const CUmemAllocationPropHead*>(prop);
  CUdevice dev = head && head->location.type == kMemLocationTypeDevice ? head->location.id : -1;
  return Allocate(
      __builtin_return_address(0), g_handles, true, Lives::kOutsideContexts, dev, bytes,
      "cuMemCreate", [&] { return Forward<F>(kMemCreate, handle, bytes, prop, flags); },
      [&] { return *handle; });
}

CM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  using F = CUresult (*)(CUmemGenericAllocationHandle);
  return Release(g_handles, true, handle, [&] { return Forward<F>(kMemRelease, handle); });
}

// The device's memory as the group's budget leaves it to this process (Member::MemInfo), on the
// group's device; the addon's own calls get the device's figures, as its allocators account for
// the group themselves and report the device as it is.
CM_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  using F = CUresult (*)(size_t*, size_t*);
  CUresult r = Forward<F>(kMemGetInfo, free_bytes, total_bytes);
  if (r != kCudaSuccess || !free_bytes || !total_bytes || !Active() ||
      FromLibrary(__builtin_return_address(0)) || !Tracked(CurrentDevice()))
    return r;
  cm::core::MemInfo info{*free_bytes, *total_bytes};
  if (Member::Get().MemInfo(GroupDevice(), &info)) {
    *free_bytes = static_cast<size_t>(info.free);
    *total_bytes = static_cast<size_t>(info.total);
  }
  return r;
}

// cudaDeviceReset and the driver's own reset and destroy: the context's memory goes with it.
// Each in its current (_v2) and older form.
#define CM_PRIMARY_RESET(name, fn)                                   \
  CM_EXPORT CUresult name(CUdevice dev) {                            \
    using F = CUresult (*)(CUdevice);                                \
    CUcontext context = Active() ? PrimaryContext(dev) : nullptr;    \
    return EndContext(context, [&] { return Forward<F>(fn, dev); }); \
  }
#define CM_PRIMARY_RELEASE(name, fn)                                 \
  CM_EXPORT CUresult name(CUdevice dev) {                            \
    using F = CUresult (*)(CUdevice);                                \
    return ReleasePrimary(dev, [&] { return Forward<F>(fn, dev); }); \
  }
#define CM_CTX_DESTROY(name, fn)                                         \
  CM_EXPORT CUresult name(CUcontext context) {                           \
    using F = CUresult (*)(CUcontext);                                   \
    return EndContext(context, [&] { return Forward<F>(fn, context); }); \
  }
CM_PRIMARY_RESET(cuDevicePrimaryCtxReset_v2, kDevicePrimaryCtxResetV2)
CM_PRIMARY_RESET(cuDevicePrimaryCtxReset, kDevicePrimaryCtxReset)
CM_PRIMARY_RELEASE(cuDevicePrimaryCtxRelease_v2, kDevicePrimaryCtxReleaseV2)
CM_PRIMARY_RELEASE(cuDevicePrimaryCtxRelease, kDevicePrimaryCtxRelease)
CM_CTX_DESTROY(cuCtxDestroy_v2, kCtxDestroyV2)
CM_CTX_DESTROY(cuCtxDestroy, kCtxDestroy)

// ---- process life ---------------------------------------------------------------------------

namespace {

void BeforeFork() {
  Member::Get().BeforeFork();
  Recorder::Get().BeforeFork();
  g_pointers.BeforeFork();
  g_handles.BeforeFork();
}
void AfterForkParent() {
  g_handles.AfterForkParent();
  g_pointers.AfterForkParent();
  Recorder::Get().AfterForkParent();
  Member::Get().AfterForkParent();
}
void AfterForkChild() {
  g_handles.AfterForkChild();
  g_pointers.AfterForkChild();
  Recorder::Get().AfterForkChild();
  Member::Get().AfterForkChild();
}

__attribute__((constructor)) void Load() {
  g_wrappers[kGetProcAddress] = reinterpret_cast<void*>(&cuGetProcAddress);
  g_wrappers[kGetProcAddressV2] = reinterpret_cast<void*>(&cuGetProcAddress_v2);
  g_wrappers[kMemAlloc] = reinterpret_cast<void*>(&cuMemAlloc_v2);
  g_wrappers[kMemFree] = reinterpret_cast<void*>(&cuMemFree_v2);
  g_wrappers[kMemAllocPitch] = reinterpret_cast<void*>(&cuMemAllocPitch_v2);
  g_wrappers[kMemAllocManaged] = reinterpret_cast<void*>(&cuMemAllocManaged);
  g_wrappers[kMemAllocAsync] = reinterpret_cast<void*>(&cuMemAllocAsync);
  g_wrappers[kMemAllocAsyncPtsz] = reinterpret_cast<void*>(&cuMemAllocAsync_ptsz);
  g_wrappers[kMemAllocFromPoolAsync] = reinterpret_cast<void*>(&cuMemAllocFromPoolAsync);
  g_wrappers[kMemAllocFromPoolAsyncPtsz] = reinterpret_cast<void*>(&cuMemAllocFromPoolAsync_ptsz);
  g_wrappers[kMemFreeAsync] = reinterpret_cast<void*>(&cuMemFreeAsync);
  g_wrappers[kMemFreeAsyncPtsz] = reinterpret_cast<void*>(&cuMemFreeAsync_ptsz);
  g_wrappers[kMemCreate] = reinterpret_cast<void*>(&cuMemCreate);
  g_wrappers[kMemRelease] = reinterpret_cast<void*>(&cuMemRelease);
  g_wrappers[kMemGetInfo] = reinterpret_cast<void*>(&cuMemGetInfo_v2);
  g_wrappers[kDevicePrimaryCtxReset] = reinterpret_cast<void*>(&cuDevicePrimaryCtxReset);
  g_wrappers[kDevicePrimaryCtxResetV2] = reinterpret_cast<void*>(&cuDevicePrimaryCtxReset_v2);
  g_wrappers[kCtxDestroy] = reinterpret_cast<void*>(&cuCtxDestroy);
  g_wrappers[kCtxDestroyV2] = reinterpret_cast<void*>(&cuCtxDestroy_v2);
  g_wrappers[kDevicePrimaryCtxRelease] = reinterpret_cast<void*>(&cuDevicePrimaryCtxRelease);
  g_wrappers[kDevicePrimaryCtxReleaseV2] = reinterpret_cast<void*>(&cuDevicePrimaryCtxRelease_v2);
  RealDlsym();
  // The ledger's own fork handlers are registered first, so that these run before them at fork
  // (handlers run in reverse order): this library's locks are taken before the ledger's, in the
  // order a join takes them.
  cm::core::Ledger::PublisherStatus();
  pthread_atfork(BeforeFork, AfterForkParent, AfterForkChild);
}

__attribute__((destructor)) void Unload() {
  Recorder::Get().Flush();
  Member::Get().Leave();
}

}  // namespace
