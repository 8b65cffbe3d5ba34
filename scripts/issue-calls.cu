// What a staged h2d copy of 4 MiB pays for its DMA calls, and whether a chunk queued in advance
// behind a flag in pinned memory (cuStreamWaitValue32) starts sooner than one issued when its
// bytes are ready. Build and run on a GPU machine:
//   nvcc -O2 -std=c++17 -o issue-calls scripts/issue-calls.cu && ./issue-calls
// Output of 2026-11-23 on the H100: docs/benchmarks/h100-2026-11-23-issue-calls.txt.
#include <cuda.h>
#include <cuda_runtime.h>
#include <emmintrin.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#define CK(x) do { auto e = (x); if (e) { printf("%s: error %d\n", #x, (int)e); exit(1); } } while (0)
using Clk = std::chrono::steady_clock;
static double us(Clk::time_point a, Clk::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }
static double med(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
static double p90(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() * 9 / 10]; }
static void spin_us(double t) { auto a = Clk::now(); while (us(a, Clk::now()) < t) {} }
typedef CUresult (*WaitFn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
int main() {
  const size_t N = 4 << 20; const size_t chunks[] = {512 << 10, 1 << 20, 1 << 20, 1 << 20, 512 << 10};
  char *dev, *ring; CK(cudaMalloc(&dev, 64 << 20)); CK(cudaHostAlloc((void**)&ring, 64 << 20, cudaHostAllocPortable));
  memset(ring, 1, 64 << 20);
  cudaStream_t st, other; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  const int R = 300;
  // A: issue time of one 512 KiB h2d after the stream went idle (same thread), and the next ones.
  { std::vector<double> first, second, third;
    for (int i = 0; i < R; i++) { CK(cudaStreamSynchronize(st)); spin_us(20);
      auto t0 = Clk::now(); cudaMemcpyAsync(dev, ring, 512 << 10, cudaMemcpyHostToDevice, st); auto t1 = Clk::now();
      cudaMemcpyAsync(dev + (1 << 20), ring + (1 << 20), 1 << 20, cudaMemcpyHostToDevice, st); auto t2 = Clk::now();
      cudaMemcpyAsync(dev + (2 << 20), ring + (2 << 20), 1 << 20, cudaMemcpyHostToDevice, st); auto t3 = Clk::now();
      if (i >= 20) { first.push_back(us(t0, t1)); second.push_back(us(t1, t2)); third.push_back(us(t2, t3)); } }
    printf("A same thread after idle: 1st issue med %.2f p90 %.2f us, 2nd %.2f, 3rd %.2f\n", med(first), p90(first), med(second), med(third)); }
  // B: the same issued from another thread (handed over by a flag), and with a third thread
  // sitting in cudaEventSynchronize on a long copy meanwhile.
  for (int waiter = 0; waiter < 2; waiter++) {
    std::atomic<int> go{0}, done{0}; std::vector<double> t;
    std::thread th([&] { for (int i = 0; i < R; i++) { while (go.load() <= i) {} auto t0 = Clk::now(); cudaMemcpyAsync(dev, ring, 512 << 10, cudaMemcpyHostToDevice, st); auto t1 = Clk::now(); if (i >= 20) t.push_back(us(t0, t1)); done.store(i + 1); } });
    for (int i = 0; i < R; i++) { CK(cudaStreamSynchronize(st));
      std::thread w;
      if (waiter) { cudaMemcpyAsync(dev + (8 << 20), ring + (8 << 20), 32 << 20, cudaMemcpyHostToDevice, other); cudaEventRecord(ev, other); w = std::thread([&] { cudaEventSynchronize(ev); }); spin_us(30); }
      spin_us(20); go.store(i + 1); while (done.load() <= i) {}
      if (waiter) w.join(); }
    th.join();
    printf("B other thread%s: issue med %.2f p90 %.2f us\n", waiter ? ", a third in cudaEventSynchronize" : "", med(t), p90(t)); }
  // C: whole 4 MiB: one call; five chunks back to back; five chunks each after a simulated host
  // copy (8 us first, then 6 us each, issuing when ready); the same chunks queued in advance behind
  // a flag (cuStreamWaitValue32) that the host raises when each chunk is ready.
  WaitFn wait = nullptr; cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void**)&wait, 12000, cudaEnableDefault, &q));
  int attr = -1; typedef CUresult (*AttrFn)(int*, CUdevice_attribute, CUdevice); AttrFn ga = nullptr; cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", (void**)&ga, 12000, cudaEnableDefault, &q); if (ga) ga(&attr, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 0);
  printf("cuStreamWaitValue32 %s (query %d), wait-value-nor attr %d\n", wait ? "found" : "missing", (int)q, attr);
  volatile uint32_t* flag; CK(cudaHostAlloc((void**)&flag, 64, cudaHostAllocPortable | cudaHostAllocMapped));
  void* flag_dev; CK(cudaHostGetDevicePointer(&flag_dev, (void*)flag, 0));
  uint32_t gen = 0;
  for (int round = 0; round < 2; round++)
  for (int mode = 0; mode < 5; mode++) {
    std::vector<double> t;
    for (int i = 0; i < R; i++) {
      CK(cudaStreamSynchronize(st)); spin_us(20);
      auto t0 = Clk::now();
      if (mode == 0) cudaMemcpyAsync(dev, ring, N, cudaMemcpyHostToDevice, st);
      else if (mode == 1) { size_t off = 0; for (size_t c : chunks) { cudaMemcpyAsync(dev + off, ring + off, c, cudaMemcpyHostToDevice, st); cudaEventRecord(ev, st); off += c; } }
      else if (mode == 2) { size_t off = 0; int k = 0; for (size_t c : chunks) { spin_us(k++ ? 6 : 8); cudaMemcpyAsync(dev + off, ring + off, c, cudaMemcpyHostToDevice, st); cudaEventRecord(ev, st); off += c; } }
      else if (mode == 3 || mode == 4) {
        // queue first (on this thread, as the caller would while others copy), then raise flags.
        // mode 3: all chunks queued behind flags; mode 4: only the first, the rest issued when ready.
        size_t off = 0; int k = 0;
        std::atomic<int> raised{0};
        std::thread host([&] { spin_us(8); *flag = gen + 1; _mm_sfence(); raised = 1; for (int j = 1; j < 5; j++) { spin_us(6); if (mode == 3) { *flag = gen + 1 + j; _mm_sfence(); } raised = j + 1; } });
        for (size_t c : chunks) {
          if (mode == 3 || k == 0) { CK(wait(st, (CUdeviceptr)flag_dev, gen + 1 + k, CU_STREAM_WAIT_VALUE_GEQ)); }
          else while (raised.load() < k + 1) {}
          cudaMemcpyAsync(dev + off, ring + off, c, cudaMemcpyHostToDevice, st); cudaEventRecord(ev, st); off += c; k++; }
        host.join(); gen += 5;
      }
      cudaStreamSynchronize(st);
      auto t1 = Clk::now();
      if (i >= 20) t.push_back(us(t0, t1));
    }
    const char* names[] = {"one 4 MiB call", "5 chunks back to back", "5 chunks issued as ready (8+6x4 us host)", "5 chunks queued behind flags", "first chunk behind a flag, rest as ready"};
    printf("C round %d %-45s med %.1f us (%.1f GB/s) p90 %.1f\n", round, names[mode], med(t), N / med(t) / 1e3, p90(t));
  }
}
