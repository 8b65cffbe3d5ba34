// Stand-ins for the part of the CUDA runtime API this addon uses, for builds without a CUDA
// toolkit. Every call fails with cudaErrorNoDevice; status() reports NOT_BUILT_WITH_CUDA before
// any of them is reached.
#pragma once

#include <cstddef>
#include <cstring>

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorNotReady = 600,
  cudaErrorPeerAccessUnsupported = 217,
  cudaErrorOperatingSystem = 304,
  cudaErrorPeerAccessAlreadyEnabled = 704,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
struct cudaUUID_t {
  char bytes[16];
};
struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  size_t totalGlobalMem;
  int major, minor, multiProcessorCount, asyncEngineCount, pciBusID, pciDeviceID, pciDomainID;
  int canMapHostMemory, unifiedAddressing, integrated;
};
typedef struct CUmemPoolHandle_st* cudaMemPool_t;
struct cudaIpcMemHandle_t {
  char reserved[64];
};
#define cudaIpcMemLazyEnablePeerAccess 0x01
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
enum cudaDeviceP2PAttr {
  cudaDevP2PAttrPerformanceRank = 1,
  cudaDevP2PAttrAccessSupported = 2,
  cudaDevP2PAttrNativeAtomicSupported = 3,
};
enum cudaDeviceAttr {
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMemoryPoolsSupported = 115,
  cudaDevAttrIntegrated = 18,
  cudaDevAttrCanMapHostMemory = 19,
  cudaDevAttrManagedMemory = 83,
  cudaDevAttrHostNativeAtomicSupported = 86,
  cudaDevAttrPageableMemoryAccess = 88,
  cudaDevAttrConcurrentManagedAccess = 89,
  cudaDevAttrPageableMemoryAccessUsesHostPageTables = 100,
  cudaDevAttrDirectManagedMemAccessFromHost = 101,
};
enum cudaMemoryAdvise {
  cudaMemAdviseSetReadMostly = 1,
  cudaMemAdviseUnsetReadMostly = 2,
  cudaMemAdviseSetPreferredLocation = 3,
  cudaMemAdviseUnsetPreferredLocation = 4,
  cudaMemAdviseSetAccessedBy = 5,
  cudaMemAdviseUnsetAccessedBy = 6,
};
enum cudaMemRangeAttribute {
  cudaMemRangeAttributeReadMostly = 1,
  cudaMemRangeAttributePreferredLocation = 2,
  cudaMemRangeAttributeAccessedBy = 3,
  cudaMemRangeAttributeLastPrefetchLocation = 4,
  cudaMemRangeAttributePreferredLocationType = 5,
  cudaMemRangeAttributePreferredLocationId = 6,
  cudaMemRangeAttributeLastPrefetchLocationType = 7,
  cudaMemRangeAttributeLastPrefetchLocationId = 8,
};
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02
#define cudaCpuDeviceId ((int)-1)
enum cudaMemPoolAttr {
  cudaMemPoolAttrReleaseThreshold = 4,
  cudaMemPoolAttrReservedMemCurrent = 5,
  cudaMemPoolAttrReservedMemHigh = 6,
  cudaMemPoolAttrUsedMemCurrent = 7,
  cudaMemPoolAttrUsedMemHigh = 8,
};
enum cudaMemAllocationType { cudaMemAllocationTypePinned = 1 };
enum cudaMemAllocationHandleType { cudaMemHandleTypeNone = 0 };
enum cudaMemLocationType {
  cudaMemLocationTypeInvalid = 0,
  cudaMemLocationTypeDevice = 1,
  cudaMemLocationTypeHost = 2,
  cudaMemLocationTypeHostNuma = 3,
  cudaMemLocationTypeHostNumaCurrent = 4,
};
struct cudaMemLocation {
  cudaMemLocationType type;
  int id;
};
struct cudaMemPoolProps {
  cudaMemAllocationType allocType;
  cudaMemAllocationHandleType handleTypes;
  cudaMemLocation location;
};
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped 0x02
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaEnableDefault 0x0
enum cudaDriverEntryPointQueryResult { cudaDriverEntryPointSuccess = 0 };

#define CM_NOCUDA_FN(name, ...) \
  inline cudaError_t name(__VA_ARGS__) { return cudaErrorNoDevice; }
CM_NOCUDA_FN(cudaGetDeviceCount, int*)
CM_NOCUDA_FN(cudaGetDeviceProperties, cudaDeviceProp*, int)
CM_NOCUDA_FN(cudaDeviceGetPCIBusId, char*, int, int)
CM_NOCUDA_FN(cudaSetDevice, int)
CM_NOCUDA_FN(cudaGetDevice, int*)
CM_NOCUDA_FN(cudaMemGetInfo, size_t*, size_t*)
CM_NOCUDA_FN(cudaMalloc, void**, size_t)
CM_NOCUDA_FN(cudaFree, void*)
CM_NOCUDA_FN(cudaMallocManaged, void**, size_t, unsigned)
CM_NOCUDA_FN(cudaMemPrefetchAsync, const void*, size_t, cudaMemLocation, unsigned, cudaStream_t)
CM_NOCUDA_FN(cudaMemAdvise, const void*, size_t, cudaMemoryAdvise, cudaMemLocation)
CM_NOCUDA_FN(cudaMemRangeGetAttribute, void*, size_t, cudaMemRangeAttribute, const void*, size_t)
CM_NOCUDA_FN(cudaHostAlloc, void**, size_t, unsigned)
CM_NOCUDA_FN(cudaMallocHost, void**, size_t)
CM_NOCUDA_FN(cudaFreeHost, void*)
CM_NOCUDA_FN(cudaHostRegister, void*, size_t, unsigned)
CM_NOCUDA_FN(cudaHostUnregister, void*)
CM_NOCUDA_FN(cudaHostGetDevicePointer, void**, void*, unsigned)
CM_NOCUDA_FN(cudaMemcpy, void*, const void*, size_t, cudaMemcpyKind)
CM_NOCUDA_FN(cudaMemcpyAsync, void*, const void*, size_t, cudaMemcpyKind, cudaStream_t)
CM_NOCUDA_FN(cudaMemset, void*, int, size_t)
CM_NOCUDA_FN(cudaMemsetAsync, void*, int, size_t, cudaStream_t)
CM_NOCUDA_FN(cudaStreamCreateWithFlags, cudaStream_t*, unsigned)
CM_NOCUDA_FN(cudaStreamDestroy, cudaStream_t)
CM_NOCUDA_FN(cudaStreamSynchronize, cudaStream_t)
CM_NOCUDA_FN(cudaStreamQuery, cudaStream_t)
CM_NOCUDA_FN(cudaStreamGetDevice, cudaStream_t, int*)
CM_NOCUDA_FN(cudaStreamWaitEvent, cudaStream_t, cudaEvent_t, unsigned)
CM_NOCUDA_FN(cudaEventCreateWithFlags, cudaEvent_t*, unsigned)
CM_NOCUDA_FN(cudaEventCreate, cudaEvent_t*)
CM_NOCUDA_FN(cudaEventDestroy, cudaEvent_t)
CM_NOCUDA_FN(cudaEventRecord, cudaEvent_t, cudaStream_t)
CM_NOCUDA_FN(cudaEventSynchronize, cudaEvent_t)
CM_NOCUDA_FN(cudaEventQuery, cudaEvent_t)
CM_NOCUDA_FN(cudaEventElapsedTime, float*, cudaEvent_t, cudaEvent_t)
CM_NOCUDA_FN(cudaDeviceSynchronize)
CM_NOCUDA_FN(cudaDeviceGetAttribute, int*, cudaDeviceAttr, int)
CM_NOCUDA_FN(cudaMemPoolCreate, cudaMemPool_t*, const cudaMemPoolProps*)
CM_NOCUDA_FN(cudaMemPoolDestroy, cudaMemPool_t)
CM_NOCUDA_FN(cudaDeviceGetDefaultMemPool, cudaMemPool_t*, int)
CM_NOCUDA_FN(cudaMemPoolSetAttribute, cudaMemPool_t, cudaMemPoolAttr, void*)
CM_NOCUDA_FN(cudaMemPoolGetAttribute, cudaMemPool_t, cudaMemPoolAttr, void*)
CM_NOCUDA_FN(cudaMemPoolTrimTo, cudaMemPool_t, size_t)
CM_NOCUDA_FN(cudaMallocFromPoolAsync, void**, size_t, cudaMemPool_t, cudaStream_t)
CM_NOCUDA_FN(cudaFreeAsync, void*, cudaStream_t)
CM_NOCUDA_FN(cudaIpcGetMemHandle, cudaIpcMemHandle_t*, void*)
CM_NOCUDA_FN(cudaIpcOpenMemHandle, void**, cudaIpcMemHandle_t, unsigned)
CM_NOCUDA_FN(cudaIpcCloseMemHandle, void*)
CM_NOCUDA_FN(cudaGetDriverEntryPointByVersion, const char*, void**, unsigned int,
             unsigned long long, cudaDriverEntryPointQueryResult*)
CM_NOCUDA_FN(cudaDeviceCanAccessPeer, int*, int, int)
CM_NOCUDA_FN(cudaDeviceEnablePeerAccess, int, unsigned)
CM_NOCUDA_FN(cudaDeviceGetP2PAttribute, int*, cudaDeviceP2PAttr, int, int)
CM_NOCUDA_FN(cudaMemcpyPeerAsync, void*, int, const void*, int, size_t, cudaStream_t)
CM_NOCUDA_FN(cudaPointerGetAttributes, cudaPointerAttributes*, const void*)
#undef CM_NOCUDA_FN
inline cudaError_t cudaDriverGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}
inline cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorName(cudaError_t) { return "cudaErrorNoDevice"; }
inline const char* cudaGetErrorString(cudaError_t) { return "this addon was built without CUDA"; }
