// What cudaDeviceReset leaves a program under a budget: it fills --bytes (half with cudaMalloc, a
// quarter each with cudaMallocManaged and cudaMallocAsync), asks for as much again (refused under
// a budget of less than twice --bytes), resets the device, which frees what the context held
// with no free call (the cudaMalloc and cudaMallocManaged memory; the cudaMallocAsync block
// outlives the context), asks for --bytes once more, then frees the cudaMallocAsync block.
// Built with nvcc's default static runtime:
//
//   nvcc -O2 -o device-reset scripts/preload/device-reset.cu
//   device-reset [--bytes N] [--device N]
//
// Prints one JSON line: {"bytes","beforeReset","afterReset","infoAfterReset":{"free","total"},
// "infoAfterAsyncFree":{"free","total"}}: beforeReset and afterReset are "ok" or the error's name
// (cudaErrorMemoryAllocation); the two cudaMemGetInfo figures are taken while the second
// allocation is held, before and after the cudaMallocAsync block's cudaFreeAsync.
#include <cuda_runtime.h>

#include <cstdio>

#include "program.h"

using preload_program::Arg;
using preload_program::Fail;
using preload_program::MemInfo;
using preload_program::ReadMemInfo;

int main(int argc, char** argv) {
  const size_t bytes = Arg(argc, argv, "--bytes", 512ull << 20) / 4096 * 4096;
  const int device = static_cast<int>(Arg(argc, argv, "--device", 0));
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) Fail("cudaSetDevice", e);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  if ((e = cudaMalloc(&a, bytes / 2)) != cudaSuccess) Fail("cudaMalloc", e);
  if ((e = cudaMallocManaged(&c, bytes / 4)) != cudaSuccess) Fail("cudaMallocManaged", e);
  if ((e = cudaMallocAsync(&b, bytes / 4, nullptr)) != cudaSuccess) Fail("cudaMallocAsync", e);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) Fail("cudaDeviceSynchronize", e);
  // As much again, while all of it is held.
  void* more = nullptr;
  cudaError_t before = cudaMalloc(&more, bytes);
  if (before == cudaSuccess) cudaFree(more);
  (void)cudaGetLastError();
  // What the context holds goes with it: no cudaFree for a or c.
  if ((e = cudaDeviceReset()) != cudaSuccess) Fail("cudaDeviceReset", e);
  if ((e = cudaSetDevice(device)) != cudaSuccess) Fail("cudaSetDevice", e);
  cudaError_t after = cudaMalloc(&more, bytes);
  (void)cudaGetLastError();
  const MemInfo reset = ReadMemInfo();
  if ((e = cudaFreeAsync(b, nullptr)) != cudaSuccess) Fail("cudaFreeAsync", e);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) Fail("cudaDeviceSynchronize", e);
  const MemInfo freed = ReadMemInfo();
  if (after == cudaSuccess) cudaFree(more);
  std::printf(
      "{\"bytes\":%zu,\"beforeReset\":\"%s\",\"afterReset\":\"%s\",\"infoAfterReset\":{\"free\":%zu,"
      "\"total\":%zu},\"infoAfterAsyncFree\":{\"free\":%zu,\"total\":%zu}}\n",
      bytes, before == cudaSuccess ? "ok" : cudaGetErrorName(before),
      after == cudaSuccess ? "ok" : cudaGetErrorName(after), reset.free, reset.total, freed.free,
      freed.total);
  return 0;
}
