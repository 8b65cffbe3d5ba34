// The peer-copy baseline in C++: what the CUDA runtime does between two GPUs with nothing in
// between, measured the way p2pBandwidthLatencyTest does (cudaMemcpyPeerAsync, peer access on,
// events around repeated copies). Build on a GPU machine: nvcc -O2 -o p2p scripts/p2p-baseline.cc
// Prints one JSON object: unidirectional and bidirectional GB/s (1e9) at the given size.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {              \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));                 \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

static double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (1ull << 30);
  int reps = 10;
  void *a[2], *b[2];
  cudaStream_t s[2];
  for (int d = 0; d < 2; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CHECK(cudaMalloc(&a[d], bytes));
    CHECK(cudaMalloc(&b[d], bytes));
    CHECK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
  }
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto secs = [](auto t0, auto t1) { return std::chrono::duration<double>(t1 - t0).count(); };
  std::vector<double> uni[2], bidir;
  for (int r = 0; r < reps + 1; ++r) {
    for (int d = 0; d < 2; ++d) {  // d -> 1-d, driven by the source's stream
      CHECK(cudaSetDevice(d));
      auto t0 = now();
      CHECK(cudaMemcpyPeerAsync(a[1 - d], 1 - d, a[d], d, bytes, s[d]));
      CHECK(cudaStreamSynchronize(s[d]));
      if (r) uni[d].push_back(bytes / secs(t0, now()) / 1e9);
    }
    auto t0 = now();
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpyPeerAsync(b[1], 1, b[0], 0, bytes, s[0]));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMemcpyPeerAsync(a[0], 0, a[1], 1, bytes, s[1]));
    CHECK(cudaStreamSynchronize(s[0]));
    CHECK(cudaStreamSynchronize(s[1]));
    if (r) bidir.push_back(2.0 * bytes / secs(t0, now()) / 1e9);
  }
  std::printf("{\"bytes\": %zu, \"uni01GBps\": %.1f, \"uni10GBps\": %.1f, \"bidirGBps\": %.1f}\n", bytes,
              Median(uni[0]), Median(uni[1]), Median(bidir));
  return 0;
}
