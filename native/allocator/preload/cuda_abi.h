// The few types and values of the CUDA driver API that the interposer needs, declared here so that
// it builds without a CUDA toolkit (it links no CUDA library: it forwards to the host program's
// driver). They are part of the driver's stable ABI (cuda.h); only what is read is declared.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cm::preload {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUstream = void*;
using CUcontext = void*;
using CUmemoryPool = void*;
using CUmemGenericAllocationHandle = unsigned long long;

constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorOutOfMemory = 2;     // CUDA_ERROR_OUT_OF_MEMORY
constexpr CUresult kCudaErrorNotInitialized = 3;  // CUDA_ERROR_NOT_INITIALIZED

struct CUuuid {
  unsigned char bytes[16];
};

// The head of CUmemAllocationProp: what cuMemCreate is asked for and where.
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

}  // namespace cm::preload
