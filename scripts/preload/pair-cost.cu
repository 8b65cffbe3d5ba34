// Times cudaMalloc+cudaFree pairs, each pair alone, so that the cost the interposer adds is
// measured side by side with the raw pair: run it once plainly and once under the preload
// (LD_PRELOAD=cuda_memory_preload.so with CUDA_MEMORY_GROUP set, or cuda-memory run), on the same
// GPU, and compare the medians. Built with nvcc's default static runtime:
//
//   nvcc -O2 -o pair-cost scripts/preload/pair-cost.cu
//   pair-cost [--bytes N] [--pairs N] [--warmup N] [--device N]
//
// Prints one JSON line: {"bytes","pairs","medianNs","p10Ns","p90Ns","meanNs","minNs","preloaded"}
// ("preloaded": whether LD_PRELOAD names the interposer and CUDA_MEMORY_GROUP is set).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program.h"

using preload_program::Arg;
using preload_program::Fail;

int main(int argc, char** argv) {
  size_t bytes = Arg(argc, argv, "--bytes", 1ull << 20);
  size_t pairs = Arg(argc, argv, "--pairs", 2000);
  size_t warmup = Arg(argc, argv, "--warmup", 100);
  if (bytes == 0 || pairs == 0) {
    std::fprintf(stderr, "pair-cost: --bytes and --pairs must be positive\n");
    return 2;
  }
  cudaError_t e = cudaSetDevice(static_cast<int>(Arg(argc, argv, "--device", 0)));
  if (e != cudaSuccess) Fail("cudaSetDevice", e);
  if ((e = cudaFree(nullptr)) != cudaSuccess) Fail("creating the context", e);
  std::vector<double> ns;
  ns.reserve(pairs);
  for (size_t i = 0; i < warmup + pairs; ++i) {
    void* p = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    if ((e = cudaMalloc(&p, bytes)) != cudaSuccess) Fail("cudaMalloc", e);
    if ((e = cudaFree(p)) != cudaSuccess) Fail("cudaFree", e);
    auto t1 = std::chrono::steady_clock::now();
    if (i >= warmup) ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  std::vector<double> s = ns;
  std::sort(s.begin(), s.end());
  auto at = [&](double q) { return s[static_cast<size_t>(q * (s.size() - 1))]; };
  double mean = 0;
  for (double v : ns) mean += v / ns.size();
  const char* pre = std::getenv("LD_PRELOAD");
  const char* group = std::getenv("CUDA_MEMORY_GROUP");
  bool preloaded = pre && std::strstr(pre, "cuda_memory_preload") && group && *group;
  std::printf(
      "{\"bytes\":%zu,\"pairs\":%zu,\"medianNs\":%.0f,\"p10Ns\":%.0f,\"p90Ns\":%.0f,"
      "\"meanNs\":%.0f,\"minNs\":%.0f,\"preloaded\":%s}\n",
      bytes, pairs, at(0.5), at(0.1), at(0.9), mean, s.front(), preloaded ? "true" : "false");
  return 0;
}
