// A CUDA program that allocates and frees device memory of random sizes for a given time, as a
// training loop's tensors come and go, for the run where it shares a group budget with other
// processes under the interposer (cuda-memory run). Built with nvcc's default, the static CUDA
// runtime, so it reaches the driver the way most CUDA binaries do:
//
//   nvcc -O2 -o alloc-churn scripts/preload/alloc-churn.cu
//   alloc-churn [--seconds S] [--min-bytes N] [--max-bytes N] [--max-live-bytes N] [--seed N]
//               [--api malloc|async|managed] [--device N] [--go FILE]
//
// Sizes are log-uniform from --min-bytes (1 MiB) to --max-bytes (1 GiB); the program keeps
// allocating while it holds less than --max-live-bytes (no cap by default) and frees a random live
// allocation with probability one half otherwise. Each allocation is written once (cudaMemset), so
// the memory is really in use. A refusal (cudaErrorMemoryAllocation) is counted and the program
// goes on, freeing one allocation; any other error ends it with exit status 1. SIGTERM ends the
// loop early, as its time running out does (the summary is still printed). At the end, one
// JSON line on stdout: {"allocs","frees","refusals","peakBytes","leastRefusedBytes","seconds",
// "api","pid"}: leastRefusedBytes is the smallest footprint the program would have held had a
// refused allocation been granted (what it held plus what it asked, each rounded as the device
// rounds it: whole 2 MiB pages above 1 MiB), null without a refusal. --go FILE: once its context
// and stream are made, the program prints "ready" and waits (two minutes at most) for FILE to
// exist before its time starts, so that the members of one run set themselves up before any of
// them churns.
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "program.h"

using preload_program::Arg;
using preload_program::ArgText;
using preload_program::Fail;

namespace {

volatile sig_atomic_t stop = 0;
void Stop(int) { stop = 1; }

struct Block {
  void* p;
  size_t bytes;
};
}  // namespace

int main(int argc, char** argv) {
  double seconds = static_cast<double>(Arg(argc, argv, "--seconds", 120));
  uint64_t min_bytes = Arg(argc, argv, "--min-bytes", 1ull << 20);
  uint64_t max_bytes = Arg(argc, argv, "--max-bytes", 1ull << 30);
  uint64_t max_live = Arg(argc, argv, "--max-live-bytes", UINT64_MAX);
  std::string api = ArgText(argc, argv, "--api", "malloc");
  if (api != "malloc" && api != "async" && api != "managed") {
    std::fprintf(stderr, "alloc-churn: --api is %s; expected malloc, async or managed\n",
                 api.c_str());
    return 2;
  }
  if (min_bytes == 0 || max_bytes < min_bytes) {
    std::fprintf(stderr, "alloc-churn: expected 0 < --min-bytes <= --max-bytes\n");
    return 2;
  }
  cudaError_t e = cudaSetDevice(static_cast<int>(Arg(argc, argv, "--device", 0)));
  if (e != cudaSuccess) Fail("cudaSetDevice", e);
  cudaStream_t stream;
  if ((e = cudaStreamCreate(&stream)) != cudaSuccess) Fail("cudaStreamCreate", e);
  if (const char* go = ArgText(argc, argv, "--go", nullptr)) {
    std::printf("ready\n");
    std::fflush(stdout);
    for (int i = 0; i < 120000 && access(go, F_OK) != 0; ++i) usleep(1000);
  }

  std::mt19937_64 rng(Arg(argc, argv, "--seed", 1));
  std::uniform_real_distribution<double> logsize(std::log2(static_cast<double>(min_bytes)),
                                                 std::log2(static_cast<double>(max_bytes)));
  std::vector<Block> live;
  uint64_t allocs = 0, frees = 0, refusals = 0, live_bytes = 0, peak = 0;
  // The device's footprint of what is live, and the least it would have been at a refusal.
  constexpr uint64_t kPage = 2ull << 20;
  auto footprint = [](uint64_t n) { return n <= kPage / 2 ? n : (n + kPage - 1) / kPage * kPage; };
  uint64_t live_footprint = 0, least_refused = UINT64_MAX;

  auto free_one = [&]() {
    if (live.empty()) return;
    size_t i = rng() % live.size();
    Block b = live[i];
    live[i] = live.back();
    live.pop_back();
    cudaError_t r = api == "async" ? cudaFreeAsync(b.p, stream) : cudaFree(b.p);
    if (r != cudaSuccess) Fail("cudaFree", r);
    live_bytes -= b.bytes;
    live_footprint -= footprint(b.bytes);
    ++frees;
  };

  signal(SIGTERM, Stop);
  auto start = std::chrono::steady_clock::now();
  while (!stop && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
         seconds) {
    bool grow = live.empty() || (live_bytes < max_live && (rng() & 1));
    if (!grow) {
      free_one();
      continue;
    }
    size_t bytes = static_cast<size_t>(std::exp2(logsize(rng)));
    void* p = nullptr;
    cudaError_t r = api == "async"     ? cudaMallocAsync(&p, bytes, stream)
                    : api == "managed" ? cudaMallocManaged(&p, bytes)
                                       : cudaMalloc(&p, bytes);
    if (r == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky; cleared so that later calls report their own
      ++refusals;
      if (live_footprint + footprint(bytes) < least_refused)
        least_refused = live_footprint + footprint(bytes);
      free_one();
      continue;
    }
    if (r != cudaSuccess) Fail("allocating", r);
    if ((r = cudaMemsetAsync(p, 0, bytes, stream)) != cudaSuccess) Fail("cudaMemsetAsync", r);
    live.push_back({p, bytes});
    live_bytes += bytes;
    live_footprint += footprint(bytes);
    if (live_bytes > peak) peak = live_bytes;
    ++allocs;
  }
  if ((e = cudaStreamSynchronize(stream)) != cudaSuccess) Fail("cudaStreamSynchronize", e);
  while (!live.empty()) free_one();
  if ((e = cudaStreamSynchronize(stream)) != cudaSuccess) Fail("cudaStreamSynchronize", e);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char least[32] = "null";
  if (least_refused != UINT64_MAX)
    std::snprintf(least, sizeof least, "%llu", static_cast<unsigned long long>(least_refused));
  std::printf(
      "{\"allocs\":%llu,\"frees\":%llu,\"refusals\":%llu,\"peakBytes\":%llu,"
      "\"leastRefusedBytes\":%s,\"seconds\":%.3f,\"api\":\"%s\",\"pid\":%d}\n",
      static_cast<unsigned long long>(allocs), static_cast<unsigned long long>(frees),
      static_cast<unsigned long long>(refusals), static_cast<unsigned long long>(peak), least, took,
      api.c_str(), static_cast<int>(getpid()));
  return 0;
}
