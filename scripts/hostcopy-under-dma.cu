// The host's copy rate from pageable into pinned memory (12 threads claiming 64 KiB pieces,
// non-temporal stores, into a 64 MiB pinned ring taken in turn, as the staged path does) with the
// copy engine idle and with it busy moving pinned memory to the device or back: how much of the
// host's copy rate is left while the DMA engine reads or writes host memory at full speed.
// Build and run on a GPU machine:
//   nvcc -O2 -o hostcopy-under-dma scripts/hostcopy-under-dma.cu -lpthread && ./hostcopy-under-dma
// Output of 2026-11-23 on the H100: docs/benchmarks/h100-2026-11-23-hostcopy-under-dma.txt.
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
struct Team {
  int T; std::vector<std::thread> th; std::atomic<int> gen{0}, done{0}; std::atomic<size_t> next{0};
  char* dst = nullptr; const char* src = nullptr; size_t n = 0; std::atomic<bool> stop{false};
  void work() { const size_t piece = 64 << 10; for (;;) { size_t i = next.fetch_add(1); if (i * piece >= n) break; nt_copy(dst + i * piece, src + i * piece, std::min(piece, n - i * piece)); } }
  Team(int t) : T(t) { for (int i = 1; i < T; ++i) th.emplace_back([this] { int seen = 0; while (!stop) { int g = gen.load(); if (g == seen) { _mm_pause(); continue; } seen = g; work(); done.fetch_add(1); } }); }
  void run(char* d, const char* s, size_t m) { dst = d; src = s; n = m; next = 0; done = 0; gen.fetch_add(1); work(); while (done.load() < T - 1) _mm_pause(); }
  ~Team() { stop = true; for (auto& t : th) t.join(); }
};
int main() {
  cudaSetDevice(0);
  const size_t big = 256u << 20, ringBytes = 64u << 20;
  char *pin, *ring, *dev; cudaHostAlloc((void**)&pin, big, cudaHostAllocPortable); cudaHostAlloc((void**)&ring, ringBytes, cudaHostAllocPortable); cudaMalloc(&dev, big);
  memset(pin, 1, big); memset(ring, 1, ringBytes);
  std::vector<char> src(ringBytes, 5);
  cudaStream_t st; cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  for (int T : {12}) {
    Team team(T);
    for (const char* dma : {"idle", "h2d", "d2h", "idle"}) {
      std::atomic<bool> stop{false};
      std::thread pump;
      if (dma[0] != 'i') pump = std::thread([&] { cudaSetDevice(0); while (!stop) { if (dma[0] == 'h') cudaMemcpyAsync(dev, pin, big, cudaMemcpyHostToDevice, st); else cudaMemcpyAsync(pin, dev, big, cudaMemcpyDeviceToHost, st); cudaStreamSynchronize(st); } });
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (size_t n : {size_t(1) << 20, size_t(4) << 20, size_t(16) << 20, size_t(64) << 20}) {
        std::vector<double> t; size_t at = 0;
        int iters = n >= (64u << 20) ? 40 : 400;
        for (int i = 0; i < iters; ++i) {
          if (at + n > ringBytes) at = 0;
          auto t0 = Clock::now(); team.run(ring + at, src.data() + (i % 2) * 0, n); auto t1 = Clock::now();
          t.push_back(std::chrono::duration<double>(t1 - t0).count()); at += n;
        }
        std::sort(t.begin(), t.end());
        printf("dmaload threads %d, copy engine %s: pageable->pinned %3zu MiB: %.1f GB/s (median of %d)\n", T, dma, n >> 20, n / t[t.size() / 2] / 1e9, iters);
      }
      stop = true; if (pump.joinable()) pump.join();
    }
  }
  printf("dmaload errors: %s\n", cudaGetErrorString(cudaGetLastError()));
}
