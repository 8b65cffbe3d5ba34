// Streams: each takes device memory of the driver's beside its context (core::kStreamBytes, what
// an H200 took for one), charged to the group when it is created on the group's device and given
// back when it is destroyed or its context ends. A stream the budget cannot afford is not created:
// the call answers CUDA_ERROR_OUT_OF_MEMORY, as the driver does when it has no memory left for one.
#include "allocator/preload/charge.h"
#include "core/allocator/footprint.h"

using namespace cm::preload;

namespace {

template <typename Forward>
CUresult Create(void* caller, CUstream* stream, const char* api, Forward forward) {
  if (!stream) return forward();
  return Allocate(caller, g_streams, "stream", Lives::kInContext, CurrentDevice(),
                  cm::core::kStreamBytes, api, forward,
                  [&] { return reinterpret_cast<uint64_t>(*stream); });
}

template <typename Forward>
CUresult Destroy(CUstream stream, Forward forward) {
  return Release(g_streams, "stream", reinterpret_cast<uint64_t>(stream), forward);
}

}  // namespace

CM_WRAPPER CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  return Create(__builtin_return_address(0), stream, "cuStreamCreate",
                [&] { return Call<kStreamCreate>(stream, flags); });
}

CM_WRAPPER CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return Create(__builtin_return_address(0), stream, "cuStreamCreateWithPriority",
                [&] { return Call<kStreamCreateWithPriority>(stream, flags, priority); });
}

CM_WRAPPER CUresult cuStreamDestroy_v2(CUstream stream) {
  return Destroy(stream, [&] { return Call<kStreamDestroyV2>(stream); });
}

CM_WRAPPER CUresult cuStreamDestroy(CUstream stream) {
  return Destroy(stream, [&] { return Call<kStreamDestroy>(stream); });
}
