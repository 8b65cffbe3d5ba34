// A context's end frees its memory with no free call for each allocation: cudaDeviceReset
// (cuDevicePrimaryCtxReset, or its _v2), the last cuDevicePrimaryCtxRelease and cuCtxDestroy give
// back what was charged for every cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged and array made in
// that context, and the memory its streams kept (the interposer records the context current at
// each, charge.h's LivingContext). Stream-ordered allocations and cuMemCreate's handles outlive
// contexts, and stay charged until their own free. A green context frees nothing when destroyed:
// its allocations go with its device's primary context (an H200 showed a green context's 256 MiB
// still held after cuGreenCtxDestroy and gone after cudaDeviceReset), so they are recorded as the
// primary's.
#include "allocator/preload/areas.h"
#include "allocator/preload/charge.h"

using namespace cm::preload;

namespace {

// A context destroyed or reset by `end()`: the allocations made in it are taken out of their
// tables before, as a free takes its one out (the context's addresses may be handed out again the
// moment it is gone), and put back if it fails; their charges come back once it has succeeded.
// The streams' lock is held throughout: its handle may be handed out again the moment it is gone.
template <typename End>
CUresult EndContext(CUcontext context, CUdevice dev, End end) {
  if (!Active() || !context) return end();
  {
    StreamsHeld streams;
    std::vector<std::pair<uint64_t, Allocation>> pointers, arrays;
    g_pointers.RemoveContext(context, &pointers);
    g_arrays.RemoveContext(context, &arrays);
    CUresult r = end();
    if (r != kCudaSuccess) {
      for (const auto& [key, a] : pointers) g_pointers.Insert(key, a);
      for (const auto& [key, a] : arrays) g_arrays.Insert(key, a);
      return r;
    }
    GiveBack(pointers, "");
    GiveBack(arrays, "array");
    StreamsAfterContextEnd(context);
  }
  GraphsAfterContextEnd(dev);
  return kCudaSuccess;
}

// A release of the primary context of `dev` by `release()`: the last one resets it, which frees
// its memory as cuDevicePrimaryCtxReset does. Whether it was the last is known only after, by the
// context no longer being active.
template <typename Release>
CUresult ReleasePrimary(CUdevice dev, Release release) {
  if (!Active()) return release();
  {
    StreamsHeld streams;
    CUcontext context = PrimaryContext(dev);
    CUresult r = release();
    if (r != kCudaSuccess || !context || PrimaryActive(dev)) return r;
    std::vector<std::pair<uint64_t, Allocation>> pointers, arrays;
    g_pointers.RemoveContext(context, &pointers);
    g_arrays.RemoveContext(context, &arrays);
    GiveBack(pointers, "");
    GiveBack(arrays, "array");
    StreamsAfterContextEnd(context);
  }
  GraphsAfterContextEnd(dev);
  return kCudaSuccess;
}

}  // namespace

// Each in its current (_v2) and older form.
#define CM_PRIMARY_RESET(name, fn)                                  \
  CM_WRAPPER CUresult name(CUdevice dev) {                          \
    CUcontext context = Active() ? PrimaryContext(dev) : nullptr;   \
    return EndContext(context, dev, [&] { return Call<fn>(dev); }); \
  }
#define CM_PRIMARY_RELEASE(name, fn)                           \
  CM_WRAPPER CUresult name(CUdevice dev) {                     \
    return ReleasePrimary(dev, [&] { return Call<fn>(dev); }); \
  }
#define CM_CTX_DESTROY(name, fn)                                        \
  CM_WRAPPER CUresult name(CUcontext context) {                         \
    CUdevice dev = Active() ? DeviceOfContext(context) : -1;            \
    return EndContext(context, dev, [&] { return Call<fn>(context); }); \
  }
CM_PRIMARY_RESET(cuDevicePrimaryCtxReset_v2, kDevicePrimaryCtxResetV2)
CM_PRIMARY_RESET(cuDevicePrimaryCtxReset, kDevicePrimaryCtxReset)
CM_PRIMARY_RELEASE(cuDevicePrimaryCtxRelease_v2, kDevicePrimaryCtxReleaseV2)
CM_PRIMARY_RELEASE(cuDevicePrimaryCtxRelease, kDevicePrimaryCtxRelease)
CM_CTX_DESTROY(cuCtxDestroy_v2, kCtxDestroyV2)
CM_CTX_DESTROY(cuCtxDestroy, kCtxDestroy)

CM_WRAPPER CUresult cuCtxFromGreenCtx(CUcontext* context, CUgreenCtx green) {
  CUresult r = Call<kCtxFromGreenCtx>(context, green);
  if (r == kCudaSuccess && context && *context && Active()) NoteGreenContext(*context);
  return r;
}
