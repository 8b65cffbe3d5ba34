// The several-GPU baseline in C++: what the CUDA runtime does with nothing in between, measured
// the way p2pBandwidthLatencyTest does (cudaMemcpyPeerAsync with peer access on, repeated copies
// timed on the host after a synchronization), for every visible GPU and every pair:
// - pinned h2d and d2h of each GPU alone, then of all GPUs at once (one host thread per GPU,
//   released together): per GPU and in total;
// - every ordered pair one way, every unordered pair both ways at once, and the latency of a
//   4-byte peer copy.
// Build and run on a GPU machine:
//   nvcc -O2 -std=c++17 -o p2p-baseline scripts/p2p-baseline.cc && ./p2p-baseline [bytes]
// Prints one JSON object; GB/s are 1e9 bytes per second, medians of `reps` copies.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {              \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));                 \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

namespace {

const int kReps = 10;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Gpu {
  void* a = nullptr;
  void* b = nullptr;
  void* host = nullptr;  // pinned
  cudaStream_t stream = nullptr;
};

// kReps + 1 copies of `bytes` between GPU d and its pinned buffer; the first is not counted.
std::vector<double> HostCopies(Gpu& g, int d, size_t bytes, bool to_device) {
  CHECK(cudaSetDevice(d));
  std::vector<double> rates;
  for (int r = 0; r <= kReps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    CHECK(to_device ? cudaMemcpyAsync(g.a, g.host, bytes, cudaMemcpyHostToDevice, g.stream)
                    : cudaMemcpyAsync(g.host, g.a, bytes, cudaMemcpyDeviceToHost, g.stream));
    CHECK(cudaStreamSynchronize(g.stream));
    if (r) rates.push_back(bytes / Seconds(t0) / 1e9);
  }
  return rates;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (1ull << 30);
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  std::vector<Gpu> gpus(n);
  for (int d = 0; d < n; ++d) {
    CHECK(cudaSetDevice(d));
    for (int p = 0; p < n; ++p) {
      int can = 0;
      CHECK(cudaDeviceCanAccessPeer(&can, d, p));
      if (p != d && can) CHECK(cudaDeviceEnablePeerAccess(p, 0));
    }
    CHECK(cudaMalloc(&gpus[d].a, bytes));
    CHECK(cudaMalloc(&gpus[d].b, bytes));
    CHECK(cudaMallocHost(&gpus[d].host, bytes));
    CHECK(cudaStreamCreateWithFlags(&gpus[d].stream, cudaStreamNonBlocking));
  }
  std::string out = "{\"bytes\": " + std::to_string(bytes) + ", \"devices\": " + std::to_string(n);
  char num[64];
  auto fmt = [&num](double v) {
    std::snprintf(num, sizeof num, "%.2f", v);
    return std::string(num);
  };

  for (bool to_device : {true, false}) {
    const char* name = to_device ? "h2d" : "d2h";
    std::vector<double> alone(n), together(n);
    for (int d = 0; d < n; ++d) alone[d] = Median(HostCopies(gpus[d], d, bytes, to_device));
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    auto t0 = std::chrono::steady_clock::now();
    for (int d = 0; d < n; ++d)
      threads.emplace_back([&, d] {
        while (!go.load()) std::this_thread::yield();
        together[d] = Median(HostCopies(gpus[d], d, bytes, to_device));
      });
    t0 = std::chrono::steady_clock::now();
    go = true;
    for (auto& t : threads) t.join();
    const double total = n * (kReps + 1.0) * bytes / Seconds(t0) / 1e9;
    out += std::string(", \"") + name + "\": {\"alone\": [";
    for (int d = 0; d < n; ++d) out += (d ? ", " : "") + fmt(alone[d]);
    out += "], \"together\": [";
    for (int d = 0; d < n; ++d) out += (d ? ", " : "") + fmt(together[d]);
    out += "], \"totalGBps\": " + fmt(total) + "}";
  }

  out += ", \"pairs\": [";
  bool first = true;
  for (int from = 0; from < n; ++from)
    for (int to = 0; to < n; ++to) {
      if (from == to) continue;
      Gpu &s = gpus[from], &t = gpus[to];
      CHECK(cudaSetDevice(from));
      std::vector<double> uni, bidir, latency;
      for (int r = 0; r <= kReps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        CHECK(cudaMemcpyPeerAsync(t.a, to, s.a, from, bytes, s.stream));
        CHECK(cudaStreamSynchronize(s.stream));
        if (r) uni.push_back(bytes / Seconds(t0) / 1e9);
      }
      if (from < to)
        for (int r = 0; r <= kReps; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          CHECK(cudaSetDevice(from));
          CHECK(cudaMemcpyPeerAsync(t.b, to, s.b, from, bytes, s.stream));
          CHECK(cudaSetDevice(to));
          CHECK(cudaMemcpyPeerAsync(s.a, from, t.a, to, bytes, t.stream));
          CHECK(cudaStreamSynchronize(s.stream));
          CHECK(cudaStreamSynchronize(t.stream));
          if (r) bidir.push_back(2.0 * bytes / Seconds(t0) / 1e9);
        }
      CHECK(cudaSetDevice(from));
      for (int r = 0; r <= 100; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        CHECK(cudaMemcpyPeerAsync(t.b, to, s.b, from, 4, s.stream));
        CHECK(cudaStreamSynchronize(s.stream));
        if (r) latency.push_back(Seconds(t0) * 1e6);
      }
      int can = 0;
      CHECK(cudaDeviceCanAccessPeer(&can, from, to));
      out += std::string(first ? "" : ", ") + "{\"from\": " + std::to_string(from) +
             ", \"to\": " + std::to_string(to) + ", \"peerAccess\": " + (can ? "true" : "false") +
             ", \"uniGBps\": " + fmt(Median(uni)) +
             (from < to ? ", \"bidirGBps\": " + fmt(Median(bidir)) : std::string()) +
             ", \"latencyUs\": " + fmt(Median(latency)) + "}";
      first = false;
    }
  out += "]}";
  std::printf("%s\n", out.c_str());
  return 0;
}
