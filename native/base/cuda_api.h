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

// A driver API entry point by name, in the form the CUDA 12.0 headers declare (the addon links
// only the runtime, and reaches the driver's own calls through it), cast to F; null where the
// driver gives none (in a build without CUDA, always). A failed query leaves no error pending.
template <typename F>
F DriverEntryPoint(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !p) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(p);
}
