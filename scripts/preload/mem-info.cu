// What cudaMemGetInfo tells a program before and after it allocates: under the interposer, in a
// group, the device as the group's budget leaves the program (total: the budget; free: what the
// group can still charge), plainly the device itself. Built with nvcc's default static runtime:
//
//   nvcc -O2 -o mem-info scripts/preload/mem-info.cu
//   mem-info [--bytes N] [--device N]
//
// Prints one JSON line: {"before":{"free","total"},"after":{"free","total"},"bytes"}, "after"
// taken while an allocation of --bytes (default 256 MiB) is held.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "program.h"

using preload_program::Arg;
using preload_program::Fail;
using preload_program::MemInfo;
using preload_program::ReadMemInfo;

int main(int argc, char** argv) {
  size_t bytes = Arg(argc, argv, "--bytes", 256ull << 20);
  cudaError_t e = cudaSetDevice(static_cast<int>(Arg(argc, argv, "--device", 0)));
  if (e != cudaSuccess) Fail("cudaSetDevice", e);
  const MemInfo before = ReadMemInfo();
  void* p = nullptr;
  if ((e = cudaMalloc(&p, bytes)) != cudaSuccess) Fail("cudaMalloc", e);
  const MemInfo after = ReadMemInfo();
  if ((e = cudaFree(p)) != cudaSuccess) Fail("cudaFree", e);
  std::printf(
      "{\"before\":{\"free\":%zu,\"total\":%zu},\"after\":{\"free\":%zu,\"total\":%zu},"
      "\"bytes\":%zu}\n",
      before.free, before.total, after.free, after.total, bytes);
  return 0;
}
