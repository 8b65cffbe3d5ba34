// A 4 KiB synchronous copy from and to pinned memory, done each way the CUDA runtime and driver
// allow (cudaMemcpy; cudaMemcpyAsync on the legacy, a blocking, a non-blocking and the per-thread
// stream, then a synchronize or a query loop; cuMemcpyHtoD/DtoH; cuMemcpy*Async then
// cuStreamSynchronize), each timed per call and taken in turn over five rounds of 3,000 calls.
// Build and run on a GPU machine:
//   nvcc -O2 -o small-copy-calls scripts/small-copy-calls.cu -lcuda && ./small-copy-calls
// Output of 2026-11-23 on the H100: docs/benchmarks/h100-2026-11-23-small-copy-calls.txt.
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>
using Clock = std::chrono::steady_clock;
static double med(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
int main() {
  const size_t n = 4096; const int N = 3000;
  cudaSetDevice(0);
  void *host, *dev; cudaMallocHost(&host, n); cudaMalloc(&dev, n);
  cudaStream_t nb, bl; cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking); cudaStreamCreate(&bl);
  for (int h2d = 1; h2d >= 0; --h2d) {
    cudaMemcpyKind k = h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    void* d = h2d ? dev : host; const void* s = h2d ? host : dev;
    std::vector<std::pair<const char*, std::function<void()>>> ways = {
      {"cudaMemcpy", [&] { cudaMemcpy(d, s, n, k); }},
      {"async(0)+streamSync(0)", [&] { cudaMemcpyAsync(d, s, n, k, 0); cudaStreamSynchronize(0); }},
      {"async(0)+query spin", [&] { cudaMemcpyAsync(d, s, n, k, 0); while (cudaStreamQuery(0) == cudaErrorNotReady) {} }},
      {"async(blocking)+sync", [&] { cudaMemcpyAsync(d, s, n, k, bl); cudaStreamSynchronize(bl); }},
      {"async(nonblocking)+sync", [&] { cudaMemcpyAsync(d, s, n, k, nb); cudaStreamSynchronize(nb); }},
      {"async(perThread)+sync", [&] { cudaMemcpyAsync(d, s, n, k, cudaStreamPerThread); cudaStreamSynchronize(cudaStreamPerThread); }},
      {"cuMemcpyHtoD/DtoH", [&] { if (h2d) cuMemcpyHtoD((CUdeviceptr)dev, host, n); else cuMemcpyDtoH(host, (CUdeviceptr)dev, n); }},
      {"cuMemcpy*Async(nb)+cuStreamSync", [&] { if (h2d) cuMemcpyHtoDAsync((CUdeviceptr)dev, host, n, (CUstream)nb); else cuMemcpyDtoHAsync(host, (CUdeviceptr)dev, n, (CUstream)nb); cuStreamSynchronize((CUstream)nb); }},
    };
    std::vector<std::vector<double>> meds(ways.size());
    for (int round = 0; round < 5; ++round)
      for (size_t w = 0; w < ways.size(); ++w) {
        for (int i = 0; i < 200; ++i) ways[w].second();
        std::vector<double> t(N);
        for (int i = 0; i < N; ++i) { auto t0 = Clock::now(); ways[w].second(); t[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }
        meds[w].push_back(med(t));
      }
    for (size_t w = 0; w < ways.size(); ++w) {
      printf("small %s %-34s", h2d ? "h2d" : "d2h", ways[w].first);
      for (double m : meds[w]) printf(" %6.2f", m);
      printf("  median %.2f us\n", med(meds[w]));
    }
  }
  printf("small errors: %s\n", cudaGetErrorString(cudaGetLastError()));
}
