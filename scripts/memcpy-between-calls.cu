// A 4 KiB cudaMemcpy timed around the call only: back to back, and with other work between calls (a
// 1.5 us spin with no memory traffic, or reading 32 KiB / 256 KiB / 2 MiB), to see whether what runs
// between two copies (a JavaScript caller, say) slows the copy itself. Build and run on a GPU machine:
//   nvcc -O2 -o memcpy-between-calls scripts/memcpy-between-calls.cu && ./memcpy-between-calls
// Output of 2026-11-23 on the H100: docs/benchmarks/h100-2026-11-23-memcpy-between-calls.txt.
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
using Clock = std::chrono::steady_clock;
static double med(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
volatile unsigned long sink;
int main() {
  const size_t n = 4096; const int N = 2000;
  cudaSetDevice(0);
  void *host, *dev; cudaMallocHost(&host, n); cudaMalloc(&dev, n);
  std::vector<unsigned long> junk(2u << 20 >> 3, 1);
  auto between = [&](int w) {
    if (w == 1) { auto t = Clock::now(); while (Clock::now() - t < std::chrono::nanoseconds(1500)) {} }
    size_t words = w == 2 ? 4096 : w == 3 ? 32768 : w == 4 ? 262144 : 0;
    unsigned long s = 0; for (size_t i = 0; i < words; i += 8) s += junk[i]; sink = s;
  };
  const char* names[] = {"back to back", "1.5 us spin", "read 32 KiB", "read 256 KiB", "read 2 MiB"};
  for (int h2d = 1; h2d >= 0; --h2d) {
    cudaMemcpyKind k = h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    void* d = h2d ? dev : host; const void* s = h2d ? host : dev;
    std::vector<std::vector<double>> m(5);
    for (int round = 0; round < 3; ++round)
      for (int w = 0; w < 5; ++w) {
        std::vector<double> t(N);
        for (int i = 0; i < N + 100; ++i) { between(w); auto t0 = Clock::now(); cudaMemcpy(d, s, n, k); double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); if (i >= 100) t[i - 100] = us; }
        m[w].push_back(med(t));
      }
    for (int w = 0; w < 5; ++w) printf("%s %-14s %.2f %.2f %.2f  median %.2f us\n", h2d ? "h2d" : "d2h", names[w], m[w][0], m[w][1], m[w][2], med(m[w]));
  }
  printf("errors: %s\n", cudaGetErrorString(cudaGetLastError()));
}
