// The interposer: preloaded into any CUDA program (LD_PRELOAD), it charges the program's device
// memory to the group ledger named by CUDA_MEMORY_GROUP (member.h) for as long as the memory lives,
// and records it when CUDA_MEMORY_TRACE names a file (recorder.h). It links no CUDA library: it
// forwards every call to the host program's driver.
//
// Which level sees which allocation. Everything is charged at the driver API, once:
// - A program with the CUDA runtime linked statically (nvcc's default) or dynamically
//   (libcudart.so) does not call the driver's exported symbols: the runtime dlopens libcuda.so.1,
//   looks up cuGetProcAddress (or cuGetProcAddress_v2) with dlsym, and gets every other driver
//   entry point from it. So dlsym and cuGetProcAddress are interposed (as HAMi-core does): when
//   what they return is one of the driver functions the interposer wraps (hooks.h), the caller gets
//   the interposer's wrapper instead.
// - A program that calls the driver itself (linked with -lcuda, as llama.cpp's VMM pool and
//   PyTorch's expandable segments do) binds to the same wrappers by name, this library being
//   loaded first.
// - A module loaded with RTLD_DEEPBIND binds to its own dependencies first, the driver and libc's
//   dlsym among them, past this library: its references to the wrapped names are bound to the
//   wrappers when it is loaded (loader.cc). A module loaded into another link-map namespace
//   (dlmopen) cannot be reached: said on stderr and recorded beside the ledger.
// The runtime API symbols themselves are not interposed, so nothing is charged twice.
//
// The wrappers live by API area: memory.cc (cuMemAlloc, pitch, managed, cuMemGetInfo,
// cuDeviceTotalMem), nvml.cc (NVML's memory queries, reached by name or by dlsym), vmm.cc
// (cuMemCreate and its mappings), pools.cc (stream-ordered allocations and their pools' reserves),
// arrays.cc, graphs.cc (graph memory nodes), contexts.cc (a context's end, green contexts). What is
// charged and what is not, and what fails open, is the table in docs/internals.md. Only memory on
// the group's device (CUDA_MEMORY_GROUP_DEVICE, a uuid as nvidia-smi -L prints it; without it, the
// process's device 0) is charged and recorded; the rest passes untouched.
//
// Cooperative: a process that does not preload this library is not bound. MIG and MPS are the hard
// boundaries.
#include <dlfcn.h>
#include <pthread.h>

#include <cstring>

#include "allocator/preload/areas.h"
#include "allocator/preload/charge.h"
#include "allocator/preload/loader.h"
#include "allocator/preload/nvml.h"

using namespace cm::preload;

// ---- dlsym ----------------------------------------------------------------------------------

// dlsym is defined in assembly below: a lookup with RTLD_NEXT means "after the caller", and glibc
// finds the caller from the return address, so that case must reach the real dlsym by a jump that
// leaves the caller's return address in place (another preloaded library that wraps malloc and
// looks up the next malloc must still find the next one, not its own). Every other lookup goes to
// cm_dlsym_hook.
extern "C" {
extern __attribute__((visibility("hidden"))) void* (*cm_real_dlsym)(void*, const char*);
__attribute__((visibility("hidden"))) void* cm_dlsym_hook(void* handle, const char* name);
__attribute__((visibility("hidden"))) void* cm_dlsym_next_early(void* handle, const char* name);
}

#if defined(__x86_64__)
asm(R"(
  .text
  .globl dlsym
  .globl cm_dlsym_self
  .hidden cm_dlsym_self
  .type dlsym, @function
dlsym:
cm_dlsym_self:
  cmpq $-1, %rdi
  jne cm_dlsym_hook
  movq cm_real_dlsym(%rip), %rax
  testq %rax, %rax
  jz cm_dlsym_next_early
  jmp *%rax
  .size dlsym, .-dlsym
)");
#else
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) {
  // Without the jump, RTLD_NEXT is resolved as if from this library: right for any library
  // preloaded before this one.
  if (handle == RTLD_NEXT) return cm_dlsym_next_early(handle, name);
  return cm_dlsym_hook(handle, name);
}
#endif

namespace {

// The wrapper for a driver function the program was about to get, else the function itself.
void* Substitute(void* p) {
  if (!p || !Active() || !Resolve()) return p;
  for (int i = 0; i < kWrapped; ++i)
    if (RealAddress(static_cast<Fn>(i)) == p) return Wrapper(static_cast<Fn>(i));
  return p;
}

// The wrapper for what cuGetProcAddress answered for `symbol`: by the address first, as for dlsym;
// if the driver handed out an address of its own that no exported symbol has, by the name and
// version, as the driver picks them (a base name at version 3020 or later is the _v2 entry point,
// below it the 32-bit v1 one; cuCtxDestroy and cuStreamDestroy from 4000 and
// cuDevicePrimaryCtxReset and Release from 11000; the per-thread default stream flag picks the
// _ptsz form; cuGetProcAddress itself is _v2 from 12000 on). Anything else is left as the driver
// answered.
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
      {"cuMemAlloc", 3020, kMemAlloc, kMemAlloc, kMemAllocV1},
      {"cuMemFree", 3020, kMemFree, kMemFree, kMemFreeV1},
      {"cuMemAllocPitch", 3020, kMemAllocPitch, kMemAllocPitch, kCount},
      {"cuMemAllocManaged", 0, kMemAllocManaged, kMemAllocManaged, kCount},
      {"cuMemAllocAsync", 0, kMemAllocAsync, kMemAllocAsyncPtsz, kCount},
      {"cuMemAllocFromPoolAsync", 0, kMemAllocFromPoolAsync, kMemAllocFromPoolAsyncPtsz, kCount},
      {"cuMemFreeAsync", 0, kMemFreeAsync, kMemFreeAsyncPtsz, kCount},
      {"cuMemPoolCreate", 0, kMemPoolCreate, kMemPoolCreate, kCount},
      {"cuMemPoolDestroy", 0, kMemPoolDestroy, kMemPoolDestroy, kCount},
      {"cuMemPoolTrimTo", 0, kMemPoolTrimTo, kMemPoolTrimTo, kCount},
      {"cuStreamSynchronize", 0, kStreamSynchronize, kStreamSynchronizePtsz, kCount},
      {"cuEventSynchronize", 0, kEventSynchronize, kEventSynchronize, kCount},
      {"cuMemCreate", 0, kMemCreate, kMemCreate, kCount},
      {"cuMemRelease", 0, kMemRelease, kMemRelease, kCount},
      {"cuMemMap", 0, kMemMap, kMemMap, kCount},
      {"cuMemUnmap", 0, kMemUnmap, kMemUnmap, kCount},
      {"cuMemRetainAllocationHandle", 0, kMemRetainAllocationHandle, kMemRetainAllocationHandle,
       kCount},
      {"cuArrayCreate", 3020, kArrayCreate, kArrayCreate, kCount},
      {"cuArray3DCreate", 3020, kArray3DCreate, kArray3DCreate, kCount},
      {"cuMipmappedArrayCreate", 0, kMipmappedArrayCreate, kMipmappedArrayCreate, kCount},
      {"cuArrayDestroy", 0, kArrayDestroy, kArrayDestroy, kCount},
      {"cuMipmappedArrayDestroy", 0, kMipmappedArrayDestroy, kMipmappedArrayDestroy, kCount},
      {"cuGraphInstantiateWithFlags", 0, kGraphInstantiateWithFlags, kGraphInstantiateWithFlags,
       kCount},
      {"cuGraphInstantiateWithParams", 0, kGraphInstantiateWithParams,
       kGraphInstantiateWithParamsPtsz, kCount},
      {"cuGraphUpload", 0, kGraphUpload, kGraphUploadPtsz, kCount},
      {"cuGraphLaunch", 0, kGraphLaunch, kGraphLaunchPtsz, kCount},
      {"cuGraphExecDestroy", 0, kGraphExecDestroy, kGraphExecDestroy, kCount},
      {"cuDeviceGraphMemTrim", 0, kDeviceGraphMemTrim, kDeviceGraphMemTrim, kCount},
      {"cuMemGetInfo", 3020, kMemGetInfo, kMemGetInfo, kCount},
      {"cuDeviceTotalMem", 3020, kDeviceTotalMem, kDeviceTotalMem, kDeviceTotalMemV1},
      {"cuDevicePrimaryCtxReset", 11000, kDevicePrimaryCtxResetV2, kDevicePrimaryCtxResetV2,
       kDevicePrimaryCtxReset},
      {"cuDevicePrimaryCtxRelease", 11000, kDevicePrimaryCtxReleaseV2, kDevicePrimaryCtxReleaseV2,
       kDevicePrimaryCtxRelease},
      {"cuCtxDestroy", 4000, kCtxDestroyV2, kCtxDestroyV2, kCtxDestroy},
      {"cuCtxFromGreenCtx", 0, kCtxFromGreenCtx, kCtxFromGreenCtx, kCount},
      {"cuStreamCreate", 0, kStreamCreate, kStreamCreate, kCount},
      {"cuStreamCreateWithPriority", 0, kStreamCreateWithPriority, kStreamCreateWithPriority,
       kCount},
      {"cuStreamDestroy", 4000, kStreamDestroyV2, kStreamDestroyV2, kStreamDestroy},
      {"cuGreenCtxStreamCreate", 0, kGreenCtxStreamCreate, kGreenCtxStreamCreate, kCount},
      {"cuGetProcAddress", 12000, kGetProcAddressV2, kGetProcAddressV2, kGetProcAddress},
  };
  for (const auto& e : kByName) {
    if (std::strcmp(symbol, e.name) != 0) continue;
    const Fn f = version >= e.min_version ? (ptsz ? e.per_thread : e.legacy) : e.older;
    void* w = f < kWrapped ? Wrapper(f) : nullptr;
    return w ? w : p;
  }
  return p;
}

}  // namespace

extern "C" void* cm_dlsym_hook(void* handle, const char* name) {
  DlsymFn real = RealDlsym();
  if (!real) return nullptr;
  void* p = real(handle, name);
  if (p && name && name[0] == 'c' && name[1] == 'u') return Substitute(p);
  if (p && name && name[0] == 'n') return NvmlSubstitute(name, p);
  return p;
}

extern "C" void* cm_dlsym_next_early(void* handle, const char* name) {
  DlsymFn real = RealDlsym();
  return real ? real(handle, name) : nullptr;
}

CM_WRAPPER CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags) {
  CUresult r = Call<kGetProcAddress>(symbol, pfn, version, flags);
  if (r == kCudaSuccess && pfn) *pfn = SubstituteProc(symbol, version, flags, *pfn);
  return r;
}

CM_WRAPPER CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags,
                                        void* status) {
  CUresult r = Call<kGetProcAddressV2>(symbol, pfn, version, flags, status);
  if (r == kCudaSuccess && pfn) *pfn = SubstituteProc(symbol, version, flags, *pfn);
  return r;
}

// ---- process life ---------------------------------------------------------------------------

namespace {

// The locks of this library are taken before the ledger's, in the order a charge takes them: the
// area's (pools, graphs, streams, VMM), then the member's, then the tables'.
void BeforeFork() {
  PoolsBeforeFork();
  GraphsBeforeFork();
  StreamsBeforeFork();
  VmmBeforeFork();
  Member::Get().BeforeFork();
  Recorder::Get().BeforeFork();
  ChargeBeforeFork();
}
void AfterForkParent() {
  ChargeAfterForkParent();
  Recorder::Get().AfterForkParent();
  Member::Get().AfterForkParent();
  VmmAfterForkParent();
  StreamsAfterForkParent();
  GraphsAfterForkParent();
  PoolsAfterForkParent();
}
void AfterForkChild() {
  ChargeAfterForkChild();
  Recorder::Get().AfterForkChild();
  Member::Get().AfterForkChild();
  VmmAfterForkChild();
  StreamsAfterForkChild();
  GraphsAfterForkChild();
  PoolsAfterForkChild();
}

__attribute__((constructor)) void Load() {
  RealDlsym();
  LoaderInit();
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
