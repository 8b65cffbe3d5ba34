// How fast a DMA engine moves data into (d2h) and out of (h2d) pinned host memory, depending on
// what the CPU did to that memory just before: nothing, read it (one thread or eight, ordinary or
// non-temporal stores on the other side, then clflush/clflushopt or not), or wrote it. The
// staged path's ring layout follows from what this printed on the H100 host (BENCHMARKS.md,
// docs/benchmarks/h100-2026-11-22-dma-cache-state.txt). Also times cudaMemcpyAsync while another
// thread sits in cudaEventSynchronize.
//
//   nvcc -O2 -std=c++17 -Xcompiler -mclflushopt -o /tmp/dma-cache-state scripts/dma-cache-state.cu
//   /tmp/dma-cache-state
#include <cuda_runtime.h>
#include <emmintrin.h>
#include <immintrin.h>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <thread>
#include <atomic>
#include <chrono>
#include "nt-copy.h"
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)
static void par(int t, size_t n, void (*f)(char*, const char*, size_t), char* d, const char* s) {
  std::vector<std::thread> th; size_t per = n / t;
  for (int i = 0; i < t; i++) th.emplace_back([=] { f(d + i * per, s + i * per, per); });
  for (auto& x : th) x.join();
}
static void plain(char* d, const char* s, size_t n) { memcpy(d, s, n); }
static void nt_flush(char* d, const char* s, size_t n) { nt_copy(d, s, n); for (size_t i = 0; i < n; i += 64) _mm_clflushopt((void*)(s + i)); _mm_sfence(); }
static void nta_read(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    _mm_prefetch(s + i + 512, _MM_HINT_NTA);
    const __m128i* p = (const __m128i*)(s + i); __m128i* o = (__m128i*)(d + i);
    __m128i a = _mm_loadu_si128(p), b = _mm_loadu_si128(p + 1), c = _mm_loadu_si128(p + 2), e = _mm_loadu_si128(p + 3);
    _mm_stream_si128(o, a); _mm_stream_si128(o + 1, b); _mm_stream_si128(o + 2, c); _mm_stream_si128(o + 3, e);
  }
  _mm_sfence();
}
static void flush(char* d, const char*, size_t n) { for (size_t i = 0; i < n; i += 64) _mm_clflush(d + i); _mm_mfence(); }
int main() {
  const size_t R = 64 << 20;
  char *dev, *ring; CK(cudaMalloc(&dev, R)); CK(cudaHostAlloc((void**)&ring, R, cudaHostAllocPortable));
  char* host = (char*)aligned_alloc(4096, R); memset(host, 1, R); memset(ring, 2, R);
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  const char* names[] = {"untouched", "cpu read (memcpy out, 1 thread)", "cpu read (nt out, 1 thread)", "cpu read (nt out, 8 threads)", "cpu read then clflush", "cpu wrote (memcpy in, 1 thread)", "cpu wrote (nt in, 1 thread)", "cpu wrote (memcpy in, 8 threads)", "cpu read (nt out, 8 thr) + clflushopt", "cpu read (prefetchnta, 8 threads)", "cpu read (memcpy out, 8 threads)"};
  for (size_t n : {size_t(512) << 10, size_t(1) << 20, size_t(4) << 20, size_t(8) << 20}) {
    for (int dir = 0; dir < 2; dir++) {
      for (int mode = 0; mode < 11; mode++) {
        std::vector<float> ms;
        for (int it = 0; it < 40; it++) {
          switch (mode) {
            case 1: memcpy(host, ring, n); break;
            case 2: nt_copy(host, ring, n); break;
            case 3: par(8, n, nt_copy, host, ring); break;
            case 4: memcpy(host, ring, n); flush(ring, 0, n); break;
            case 5: memcpy(ring, host, n); break;
            case 6: nt_copy(ring, host, n); break;
            case 7: par(8, n, plain, ring, host); break;
            case 8: par(8, n, nt_flush, host, ring); break;
            case 9: par(8, n, nta_read, host, ring); break;
            case 10: par(8, n, plain, host, ring); break;
          }
          CK(cudaEventRecord(a, st));
          if (dir == 0) CK(cudaMemcpyAsync(ring, dev, n, cudaMemcpyDeviceToHost, st));
          else CK(cudaMemcpyAsync(dev, ring, n, cudaMemcpyHostToDevice, st));
          CK(cudaEventRecord(b, st)); CK(cudaEventSynchronize(b));
          float t; CK(cudaEventElapsedTime(&t, a, b)); if (it >= 5) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        printf("%s %5zu KiB, ring %-34s: %6.1f GB/s (median %.1f us)\n", dir ? "h2d" : "d2h", n >> 10, names[mode], n / (ms[ms.size() / 2] * 1e6), ms[ms.size() / 2] * 1e3);
      }
    }
  }
  // cudaMemcpyAsync call cost from a thread while another thread spins in cudaEventSynchronize.
  for (int other = 0; other < 3; other++) {
    std::atomic<bool> stop{false};
    std::thread w([&] {
      CK(cudaSetDevice(0));
      while (!stop) {
        if (other == 1) { cudaEventSynchronize(b); }
        else if (other == 2) { std::this_thread::yield(); }
      }
    });
    std::vector<double> us;
    for (int it = 0; it < 200; it++) {
      auto t0 = std::chrono::steady_clock::now();
      CK(cudaMemcpyAsync(dev, ring, 512 << 10, cudaMemcpyHostToDevice, st));
      CK(cudaEventRecord(b, st));
      auto t1 = std::chrono::steady_clock::now();
      CK(cudaStreamSynchronize(st));
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    stop = true; w.join();
    std::sort(us.begin(), us.end());
    printf("cudaMemcpyAsync+EventRecord 512 KiB h2d call, other thread %s: median %.1f us, p90 %.1f us, max %.1f\n",
           other == 0 ? "busy loop" : other == 1 ? "in cudaEventSynchronize" : "yielding", us[100], us[180], us.back());
  }
  return 0;
}
