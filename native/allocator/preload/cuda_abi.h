// The few types and values of the CUDA driver API that the interposer needs, declared here so that
// it builds without a CUDA toolkit (it links no CUDA library: it forwards to the host program's
// driver). They are part of the driver's stable ABI (cuda.h); only what is read is declared, and
// test/allocator/preload/abi_check.cc holds every layout here against cuda.h where a toolkit is
// installed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cm::preload {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUdeviceptr_v1 = unsigned int;  // the 32-bit pointers of the entry points before CUDA 3.2
using CUstream = void*;
using CUevent = void*;
using CUcontext = void*;
using CUgreenCtx = void*;
using CUmemoryPool = void*;
using CUarray = void*;
using CUmipmappedArray = void*;
using CUgraph = void*;
using CUgraphNode = void*;
using CUgraphExec = void*;
using CUmemGenericAllocationHandle = unsigned long long;

constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorOutOfMemory = 2;     // CUDA_ERROR_OUT_OF_MEMORY
constexpr CUresult kCudaErrorNotInitialized = 3;  // CUDA_ERROR_NOT_INITIALIZED

struct CUuuid {
  unsigned char bytes[16];
};

// Where memory lives (CUmemLocation) and what cuMemCreate is asked for (the head of
// CUmemAllocationProp).
constexpr int kMemLocationTypeDevice = 1;  // CU_MEM_LOCATION_TYPE_DEVICE: id is a device ordinal
struct CUmemLocation {
  int type;
  int id;
};
struct CUmemAllocationPropHead {
  int type;
  int requestedHandleTypes;
  CUmemLocation location;
};
struct CUmemAllocationProp {
  CUmemAllocationPropHead head;
  void* win32HandleMetaData;
  unsigned char allocFlags[8];
};
constexpr int kMemAllocationTypePinned = 1;  // CU_MEM_ALLOCATION_TYPE_PINNED

// A stream-ordered pool's properties (CUmemPoolProps) and attributes.
struct CUmemPoolProps {
  int allocType;
  int handleTypes;
  CUmemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};
constexpr int kMemPoolAttrReservedMemCurrent = 5;   // CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
constexpr int kGraphMemAttrReservedMemCurrent = 2;  // CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT

// The special streams: the NULL stream's, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, on the
// calling thread's current device.
inline bool SpecialStream(CUstream s) {
  auto v = reinterpret_cast<uintptr_t>(s);
  return v == 0 || v == 1 || v == 2;
}

// CUDA arrays (CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR) and their flags.
struct CUDA_ARRAY_DESCRIPTOR {
  size_t Width;
  size_t Height;
  int Format;
  unsigned int NumChannels;
};
struct CUDA_ARRAY3D_DESCRIPTOR {
  size_t Width;
  size_t Height;
  size_t Depth;
  int Format;
  unsigned int NumChannels;
  unsigned int Flags;
};
constexpr unsigned kArray3dLayered = 0x01;          // CUDA_ARRAY3D_LAYERED
constexpr unsigned kArray3dCubemap = 0x04;          // CUDA_ARRAY3D_CUBEMAP
constexpr unsigned kArray3dSparse = 0x40;           // CUDA_ARRAY3D_SPARSE: no memory until mapped
constexpr unsigned kArray3dDeferredMapping = 0x80;  // CUDA_ARRAY3D_DEFERRED_MAPPING: likewise

// Graph memory nodes (CUDA_MEM_ALLOC_NODE_PARAMS) and the node types walked to find them.
struct CUDA_MEM_ALLOC_NODE_PARAMS {
  CUmemPoolProps poolProps;
  const void* accessDescs;
  size_t accessDescCount;
  size_t bytesize;
  CUdeviceptr dptr;
};
constexpr int kGraphNodeTypeGraph = 4;      // CU_GRAPH_NODE_TYPE_GRAPH: a child graph
constexpr int kGraphNodeTypeMemAlloc = 10;  // CU_GRAPH_NODE_TYPE_MEM_ALLOC

// NVML (libnvidia-ml.so.1, nvml.h): a device handle, the memory figures of
// nvmlDeviceGetMemoryInfo and _v2, and the return codes the wrappers give themselves.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlMemory_v2_t {
  unsigned int version;  // nvmlMemory_v2 (kNvmlMemoryV2)
  unsigned long long total, reserved, free, used;
};
constexpr unsigned kNvmlMemoryV2 =
    sizeof(nvmlMemory_v2_t) | 2u << 24;  // NVML_STRUCT_VERSION(Memory, 2)
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorInvalidArgument = 2;    // NVML_ERROR_INVALID_ARGUMENT
constexpr nvmlReturn_t kNvmlErrorFunctionNotFound = 13;  // NVML_ERROR_FUNCTION_NOT_FOUND
constexpr unsigned kNvmlUuidBytes = 96;                  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

}  // namespace cm::preload
