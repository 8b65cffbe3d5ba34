// How long one 1 MiB cudaMemcpyAsync (host to device, from pinned memory) takes to return, and
// the cudaEventRecord after it, while 0 to 15 other threads copy pageable memory into pinned
// memory with non-temporal stores (what the staged path's team does while a chunk is issued).
// The issuing thread does nothing else. Build and run on a GPU machine:
//   nvcc -O2 -o issue-under-load scripts/issue-under-load.cu -lpthread && ./issue-under-load
// Output of 2026-11-23 on the H100: docs/benchmarks/h100-2026-11-23-issue-under-load.txt.
#include <cuda_runtime.h>
#include <emmintrin.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#include "nt-copy.h"
using Clock = std::chrono::steady_clock;
int main() {
  cudaSetDevice(0);
  const size_t chunk = 1 << 20, region = 64 << 20;
  char *ring, *dev; cudaHostAlloc((void**)&ring, region, cudaHostAllocPortable); cudaMalloc(&dev, region);
  char* dring; cudaHostAlloc((void**)&dring, 256 << 20, cudaHostAllocPortable);
  std::vector<char> src(256 << 20, 3);
  cudaStream_t st; cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  cudaEvent_t ev; cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  for (int threads : {0, 4, 8, 11, 15}) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        size_t part = (256u << 20) / 16, off = t * part;
        while (!stop.load(std::memory_order_relaxed))
          for (size_t p = 0; p < part && !stop.load(std::memory_order_relaxed); p += 256 << 10) nt_copy(dring + off + p, src.data() + off + p, 256 << 10);
      });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::vector<double> call, rec;
    size_t at = 0;
    for (int i = 0; i < 4000; ++i) {
      auto t0 = Clock::now();
      cudaMemcpyAsync(dev + at, ring + at, chunk, cudaMemcpyHostToDevice, st);
      auto t1 = Clock::now();
      cudaEventRecord(ev, st);
      auto t2 = Clock::now();
      call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      rec.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
      at = (at + chunk) % region;
      if (i % 4 == 3) cudaStreamSynchronize(st);
    }
    cudaStreamSynchronize(st);
    stop = true;
    for (auto& t : ts) t.join();
    auto q = [](std::vector<double> v, double f) { std::sort(v.begin(), v.end()); return v[std::min(v.size() - 1, size_t(v.size() * f))]; };
    printf("load threads %2d: cudaMemcpyAsync 1MiB us median %.2f p90 %.2f p99 %.2f max %.1f; eventRecord median %.2f p99 %.2f max %.1f\n",
           threads, q(call, .5), q(call, .9), q(call, .99), q(call, 1), q(rec, .5), q(rec, .99), q(rec, 1));
  }
  printf("load errors: %s\n", cudaGetErrorString(cudaGetLastError()));
}
