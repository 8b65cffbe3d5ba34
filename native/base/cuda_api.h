// The CUDA runtime API, or, in a build without a CUDA toolkit, stand-ins that report no device
// (nocuda/cuda_runtime_api.h). Everything else includes this, never the toolkit header itself,
// so both builds compile the same code.
#pragma once

#ifdef CUDA_MEMORY_NO_CUDA
#include "base/nocuda/cuda_runtime_api.h"
#else
#include <cuda_runtime_api.h>
#endif

// cudaSetDevice, skipped when `device` is already this thread's current device (a copy of a few
// KiB is a handful of microseconds, and cudaSetDevice is not free).
inline cudaError_t UseDevice(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return cudaSuccess;
  return cudaSetDevice(device);
}
