// What a program reads as the device's total memory: the runtime's
// cudaGetDeviceProperties().totalGlobalMem, the driver's cuDeviceTotalMem (taken from the driver
// as the runtime takes it, cudaGetDriverEntryPointByVersion), and cudaMemGetInfo's total, for
// device 0; under the interposer in a group, the budget. Built with nvcc's default static runtime:
//
//   nvcc -O2 -o device-totals scripts/preload/device-totals.cu
//
// Prints one JSON line: {"totalGlobalMem","cuDeviceTotalMem","memGetInfo":{"free","total"}}.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "program.h"

using preload_program::Fail;
using preload_program::MemInfo;
using preload_program::ReadMemInfo;

int main() {
  cudaError_t e = cudaSetDevice(0);
  if (e != cudaSuccess) Fail("cudaSetDevice", e);
  cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) Fail("cudaGetDeviceProperties", e);
  CUresult (*total_mem)(size_t*, CUdevice) = nullptr;
  cudaDriverEntryPointQueryResult found;
  if ((e = cudaGetDriverEntryPointByVersion("cuDeviceTotalMem", reinterpret_cast<void**>(&total_mem),
                                            12000, cudaEnableDefault, &found)) != cudaSuccess ||
      !total_mem)
    Fail("cudaGetDriverEntryPointByVersion(cuDeviceTotalMem)", e);
  size_t driver_total = 0;
  CUresult r = total_mem(&driver_total, 0);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "device-totals: cuDeviceTotalMem: error %d\n", static_cast<int>(r));
    return 1;
  }
  const MemInfo info = ReadMemInfo();
  std::printf("{\"totalGlobalMem\":%zu,\"cuDeviceTotalMem\":%zu,\"memGetInfo\":{\"free\":%zu,\"total\":%zu}}\n",
              prop.totalGlobalMem, driver_total, info.free, info.total);
  return 0;
}
