// The driver's entry points the interposer wraps, and those it only calls, each written once:
// its id, its symbol and its parameters; then NVML's the same way (CM_NVML_WRAPPED, CM_NVML_CALLED:
// nvml.h). From these lists come the ids (Fn), the names looked up in the driver, the typed
// pointers to the driver's own functions (Real, Call) and the wrappers handed out in their place
// (Wrapper). Every wrapped symbol is exported (exports.map), and
// test/allocator/preload.test.js holds the export map and the built library to this list.
#pragma once

#include "allocator/preload/cuda_abi.h"

// Wrapped: the program reaches them by name (linked with -lcuda), by dlsym or cuGetProcAddress,
// and gets this library's function of the same symbol instead of the driver's.
#define CM_WRAPPED(X)                                                                         \
  X(GetProcAddress, cuGetProcAddress, (const char*, void**, int, uint64_t))                   \
  X(GetProcAddressV2, cuGetProcAddress_v2, (const char*, void**, int, uint64_t, void*))       \
  X(MemAlloc, cuMemAlloc_v2, (CUdeviceptr*, size_t))                                          \
  X(MemFree, cuMemFree_v2, (CUdeviceptr))                                                     \
  X(MemAllocV1, cuMemAlloc, (CUdeviceptr_v1*, unsigned int))                                  \
  X(MemFreeV1, cuMemFree, (CUdeviceptr_v1))                                                   \
  X(MemAllocPitch, cuMemAllocPitch_v2, (CUdeviceptr*, size_t*, size_t, size_t, unsigned int)) \
  X(MemAllocManaged, cuMemAllocManaged, (CUdeviceptr*, size_t, unsigned int))                 \
  X(MemAllocAsync, cuMemAllocAsync, (CUdeviceptr*, size_t, CUstream))                         \
  X(MemAllocAsyncPtsz, cuMemAllocAsync_ptsz, (CUdeviceptr*, size_t, CUstream))                \
  X(MemAllocFromPoolAsync, cuMemAllocFromPoolAsync,                                           \
    (CUdeviceptr*, size_t, CUmemoryPool, CUstream))                                           \
  X(MemAllocFromPoolAsyncPtsz, cuMemAllocFromPoolAsync_ptsz,                                  \
    (CUdeviceptr*, size_t, CUmemoryPool, CUstream))                                           \
  X(MemFreeAsync, cuMemFreeAsync, (CUdeviceptr, CUstream))                                    \
  X(MemFreeAsyncPtsz, cuMemFreeAsync_ptsz, (CUdeviceptr, CUstream))                           \
  X(MemPoolCreate, cuMemPoolCreate, (CUmemoryPool*, const CUmemPoolProps*))                   \
  X(MemPoolDestroy, cuMemPoolDestroy, (CUmemoryPool))                                         \
  X(MemPoolTrimTo, cuMemPoolTrimTo, (CUmemoryPool, size_t))                                   \
  X(StreamSynchronize, cuStreamSynchronize, (CUstream))                                       \
  X(StreamSynchronizePtsz, cuStreamSynchronize_ptsz, (CUstream))                              \
  X(EventSynchronize, cuEventSynchronize, (CUevent))                                          \
  X(CtxSynchronize, cuCtxSynchronize, ())                                                     \
  X(CtxSynchronizeV2, cuCtxSynchronize_v2, (CUcontext))                                       \
  X(MemCreate, cuMemCreate,                                                                   \
    (CUmemGenericAllocationHandle*, size_t, const void*, unsigned long long))                 \
  X(MemRelease, cuMemRelease, (CUmemGenericAllocationHandle))                                 \
  X(MemMap, cuMemMap,                                                                         \
    (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))          \
  X(MemUnmap, cuMemUnmap, (CUdeviceptr, size_t))                                              \
  X(MemRetainAllocationHandle, cuMemRetainAllocationHandle,                                   \
    (CUmemGenericAllocationHandle*, void*))                                                   \
  X(ArrayCreate, cuArrayCreate_v2, (CUarray*, const CUDA_ARRAY_DESCRIPTOR*))                  \
  X(Array3DCreate, cuArray3DCreate_v2, (CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*))            \
  X(MipmappedArrayCreate, cuMipmappedArrayCreate,                                             \
    (CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned int))                        \
  X(ArrayDestroy, cuArrayDestroy, (CUarray))                                                  \
  X(MipmappedArrayDestroy, cuMipmappedArrayDestroy, (CUmipmappedArray))                       \
  X(GraphInstantiateWithFlags, cuGraphInstantiateWithFlags,                                   \
    (CUgraphExec*, CUgraph, unsigned long long))                                              \
  X(GraphInstantiateWithParams, cuGraphInstantiateWithParams, (CUgraphExec*, CUgraph, void*)) \
  X(GraphInstantiateWithParamsPtsz, cuGraphInstantiateWithParams_ptsz,                        \
    (CUgraphExec*, CUgraph, void*))                                                           \
  X(GraphUpload, cuGraphUpload, (CUgraphExec, CUstream))                                      \
  X(GraphUploadPtsz, cuGraphUpload_ptsz, (CUgraphExec, CUstream))                             \
  X(GraphLaunch, cuGraphLaunch, (CUgraphExec, CUstream))                                      \
  X(GraphLaunchPtsz, cuGraphLaunch_ptsz, (CUgraphExec, CUstream))                             \
  X(GraphExecDestroy, cuGraphExecDestroy, (CUgraphExec))                                      \
  X(DeviceGraphMemTrim, cuDeviceGraphMemTrim, (CUdevice))                                     \
  X(MemGetInfo, cuMemGetInfo_v2, (size_t*, size_t*))                                          \
  X(DeviceTotalMem, cuDeviceTotalMem_v2, (size_t*, CUdevice))                                 \
  X(DeviceTotalMemV1, cuDeviceTotalMem, (unsigned int*, CUdevice))                            \
  X(DevicePrimaryCtxReset, cuDevicePrimaryCtxReset, (CUdevice))                               \
  X(DevicePrimaryCtxResetV2, cuDevicePrimaryCtxReset_v2, (CUdevice))                          \
  X(CtxDestroy, cuCtxDestroy, (CUcontext))                                                    \
  X(CtxDestroyV2, cuCtxDestroy_v2, (CUcontext))                                               \
  X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, (CUdevice))                           \
  X(DevicePrimaryCtxReleaseV2, cuDevicePrimaryCtxRelease_v2, (CUdevice))                      \
  X(CtxFromGreenCtx, cuCtxFromGreenCtx, (CUcontext*, CUgreenCtx))                             \
  X(StreamCreate, cuStreamCreate, (CUstream*, unsigned int))                                  \
  X(StreamCreateWithPriority, cuStreamCreateWithPriority, (CUstream*, unsigned int, int))     \
  X(StreamDestroy, cuStreamDestroy, (CUstream))                                               \
  X(StreamDestroyV2, cuStreamDestroy_v2, (CUstream))                                          \
  X(GreenCtxStreamCreate, cuGreenCtxStreamCreate, (CUstream*, CUgreenCtx, unsigned int, int))

// NVML's (libnvidia-ml.so.1), wrapped: reached by name (linked with -lnvidia-ml, as nvidia-smi
// may be) or by dlsym on NVML's handle (pynvml, the addon), answered by nvml.cc.
#define CM_NVML_WRAPPED(X)                                                  \
  X(NvmlMemoryInfo, nvmlDeviceGetMemoryInfo, (nvmlDevice_t, nvmlMemory_t*)) \
  X(NvmlMemoryInfoV2, nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t, nvmlMemory_v2_t*))

// Only called, never handed out.
#define CM_CALLED(X)                                                                     \
  X(CtxGetDevice, cuCtxGetDevice, (CUdevice*))                                           \
  X(CtxGetDeviceV2, cuCtxGetDevice_v2, (CUdevice*, CUcontext))                           \
  X(DeviceGetUuidV2, cuDeviceGetUuid_v2, (CUuuid*, CUdevice))                            \
  X(DeviceGetUuid, cuDeviceGetUuid, (CUuuid*, CUdevice))                                 \
  X(DeviceGetCount, cuDeviceGetCount, (int*))                                            \
  X(CtxGetCurrent, cuCtxGetCurrent, (CUcontext*))                                        \
  X(CtxPushCurrent, cuCtxPushCurrent_v2, (CUcontext))                                    \
  X(CtxPopCurrent, cuCtxPopCurrent_v2, (CUcontext*))                                     \
  X(DevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, (CUdevice, unsigned*, int*))   \
  X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, (CUcontext*, CUdevice))            \
  X(StreamGetCtx, cuStreamGetCtx, (CUstream, CUcontext*))                                \
  X(DeviceGetMemPool, cuDeviceGetMemPool, (CUmemoryPool*, CUdevice))                     \
  X(DeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, (CUmemoryPool*, CUdevice))       \
  X(MemPoolGetAttribute, cuMemPoolGetAttribute, (CUmemoryPool, int, void*))              \
  X(DeviceGetGraphMemAttribute, cuDeviceGetGraphMemAttribute, (CUdevice, int, void*))    \
  X(GraphGetNodes, cuGraphGetNodes, (CUgraph, CUgraphNode*, size_t*))                    \
  X(GraphNodeGetType, cuGraphNodeGetType, (CUgraphNode, int*))                           \
  X(GraphMemAllocNodeGetParams, cuGraphMemAllocNodeGetParams,                            \
    (CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS*))                                          \
  X(GraphChildGraphNodeGetGraph, cuGraphChildGraphNodeGetGraph, (CUgraphNode, CUgraph*)) \
  X(MemGetAllocationGranularity, cuMemGetAllocationGranularity,                          \
    (size_t*, const CUmemAllocationProp*, int))

// NVML's, only called.
#define CM_NVML_CALLED(X) X(NvmlUuid, nvmlDeviceGetUUID, (nvmlDevice_t, char*, unsigned int))

namespace cm::preload {

#define CM_ID(id, symbol, params) k##id,
enum Fn { CM_WRAPPED(CM_ID) kWrapped, kCalledFirst = kWrapped - 1, CM_CALLED(CM_ID) kCount };
#undef CM_ID

// The symbol of each entry point, by id.
extern const char* const kNames[kCount];

// The type of each entry point's function, by id.
template <Fn f>
struct Signature;
#define CM_SIGNATURE(id, symbol, params) \
  template <>                            \
  struct Signature<k##id> {              \
    using type = CUresult(*) params;     \
  };
CM_WRAPPED(CM_SIGNATURE)
CM_CALLED(CM_SIGNATURE)
#undef CM_SIGNATURE

// The driver's own function for `f` (null where the driver has none, or is not loaded yet: looked
// up again at the next call).
void* RealAddress(Fn f);
template <Fn f>
typename Signature<f>::type Real() {
  return reinterpret_cast<typename Signature<f>::type>(RealAddress(f));
}
// Calls the driver's own `f`; CUDA_ERROR_NOT_INITIALIZED where there is none.
template <Fn f, typename... A>
CUresult Call(A... args) {
  auto real = Real<f>();
  return real ? real(args...) : kCudaErrorNotInitialized;
}

// This library's wrapper of `f` (f < kWrapped).
void* Wrapper(Fn f);

}  // namespace cm::preload

// The wrappers, defined by the files of their API area (each definition is a CM_WRAPPER).
#define CM_WRAPPER extern "C" __attribute__((visibility("default")))
#define CM_DECLARE(id, symbol, params) CM_WRAPPER CUresult symbol params;
namespace cm::preload {
CM_WRAPPED(CM_DECLARE)
}
#undef CM_DECLARE
