// How fast the DMA engine moves pinned memory while host threads copy memory of their own: what
// the staged path's transfers can reach while its copy team works, on this host. For each count of
// copying threads (1, 2, 4, 8, 12, ... up to the CPUs less two), each thread copies a 1 MiB source,
// which stays in the cache as a benchmark's Node buffer of a few MiB does (--source-mib N: the
// threads' sources are N MiB together, each thread's rounded up to whole MiB, as large as a staged
// copy of N MiB reads), over 64 MiB of its own with the team's own copy (CopyBytes with
// non-temporal stores, so every byte goes to memory, as into the staged path's ring below 64 MiB),
// while cudaMemcpyAsync moves 4, 16 and 64 MiB of pinned memory to the device (--to-host: from the
// device); with --both-ways, 256 MiB and 1 GiB each way at once (one stream each way), as a staged
// copy both ways moves them. Each sample with the threads copying follows one with them asleep, so
// that both see the same state of the machine. With --write-gbps, the threads write at each of the
// rates given instead (one thread per 10 GB/s, each paced to its share): the engine's share at the
// very rate a staged copy must write to keep up with it. Build and run on a GPU machine, from the
// project root:
//   nvcc -O2 -std=c++17 -I native -o dma-under-host-copy scripts/dma-under-host-copy.cc \
//     native/core/transfer/copy_team.cc native/core/device/numa.cc
//   ./dma-under-host-copy [--device N] [--reps N] [--to-host | --both-ways] [--write-gbps 20,30,46]
//                         [--source-mib N]
// Prints one JSON object: per thread count (and pace) and size, the medians in GB/s (1e9 bytes per
// second, both directions' bytes counted with --both-ways) alone and with the threads copying, the
// share that keeps, the threads' own copy rate while they copied (a millisecond after they woke
// up to when they were put to sleep), and their sources' size together (sourceMiB).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/transfer/copy_team.h"  // CopyBytes: the team's own copy
#include "measure.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMiB = size_t{1} << 20;

// Threads that copy memory of their own while running, and sleep otherwise: each from a source of
// its own (`source` bytes shared out, each thread's rounded up to whole MiB; 1 MiB stays in the
// cache as a benchmark's Node buffer of a few MiB does), over 64 MiB of its own (non-temporal
// stores, so every byte goes to memory, as into the staged path's ring). With a pace (bytes per
// second, the threads' together), each thread copies 256 KiB at a time and waits, spinning on the
// clock, until its share of the pace allows the next.
class Copiers {
 public:
  Copiers(int n, double pace, size_t source)
      : src_(n),
        dst_(n),
        pace_(pace / n),
        source_(std::max<size_t>(1, (source / kMiB + n - 1) / n) * kMiB) {
    for (int t = 0; t < n; ++t) {
      src_[t] = static_cast<char*>(std::aligned_alloc(4096, source_));
      dst_[t] = static_cast<char*>(std::aligned_alloc(4096, kTarget));
      if (!src_[t] || !dst_[t]) {
        std::fprintf(stderr, "dma-under-host-copy: out of host memory for the copying threads\n");
        std::exit(1);
      }
      std::memset(src_[t], 1, source_);  // every page touched before any timing
      std::memset(dst_[t], 2, kTarget);
    }
    for (int t = 0; t < n; ++t) threads_.emplace_back(&Copiers::Loop, this, t);
  }
  ~Copiers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      running_ = false;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
    for (char* b : src_) std::free(b);
    for (char* b : dst_) std::free(b);
  }
  // Copying (true) or asleep (false). Woken threads get a millisecond to reach full rate before
  // their bytes and time count; stopping returns once every thread has finished its copy.
  void Run(bool on) {
    if (threads_.empty()) return;
    std::unique_lock<std::mutex> lock(mutex_);
    if (running_ == on) return;
    if (on) {
      running_ = true;
      lock.unlock();
      wake_.notify_all();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      mark_ = copied_.load();
      since_ = Clock::now();
    } else {
      counted_ += copied_.load() - mark_;
      busy_ += std::chrono::duration<double>(Clock::now() - since_).count();
      running_ = false;
      asleep_.wait(lock, [&] { return active_ == 0; });
    }
  }
  // The bytes of their sources together (each thread's a whole MiB, rounded up).
  size_t SourceBytes() const { return source_ * src_.size(); }
  // Their copy rate in GB/s over the spells counted.
  double Rate() const { return busy_ > 0 ? counted_ / busy_ / 1e9 : 0; }

 private:
  void Loop(int t) {
    size_t at = 0, from = 0;  // where in its target, and in its source
    const size_t piece = pace_ > 0 ? kPacedPiece : kMiB;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return running_.load() || stop_; });
      if (stop_) return;
      ++active_;
      lock.unlock();
      const Clock::time_point start = Clock::now();
      double done = 0;
      while (running_.load(std::memory_order_relaxed)) {
        cm::core::CopyBytes(dst_[t] + at, src_[t] + from, piece, /*streaming=*/true);
        copied_.fetch_add(piece, std::memory_order_relaxed);
        at = (at + piece) % kTarget;
        from = (from + piece) % source_;
        done += static_cast<double>(piece);
        if (pace_ > 0) {
          const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(done / pace_));
          while (Clock::now() < due && running_.load(std::memory_order_relaxed)) {
          }
        }
      }
      lock.lock();
      --active_;
      asleep_.notify_all();
    }
  }

  static constexpr size_t kTarget = 64 * kMiB, kPacedPiece = kMiB / 4;
  std::vector<char*> src_, dst_;
  const double pace_;    // bytes per second, each thread; 0: as fast as it can
  const size_t source_;  // bytes of each thread's source, whole MiB
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, asleep_;
  std::atomic<bool> running_{false};  // written under mutex_, read without it while copying
  bool stop_ = false;
  int active_ = 0;  // threads copying now (under mutex_)
  std::atomic<uint64_t> copied_{0};
  uint64_t mark_ = 0, counted_ = 0;  // the main thread's: bytes at a spell's start, and counted
  Clock::time_point since_;
  double busy_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const int device = measure::Arg(argc, argv, "--device", 0);
  const int reps = std::max(5, measure::Arg(argc, argv, "--reps", 25));
  const bool both = measure::Flag(argc, argv, "--both-ways");
  const bool to_host = !both && measure::Flag(argc, argv, "--to-host");
  // --write-gbps 20,30,46: paced writes at each rate in turn (threads: one per 10 GB/s), instead of
  // each count of threads writing as fast as they can.
  std::vector<double> paces;
  if (!measure::List(argc, argv, "--write-gbps", &paces) ||
      std::count(paces.begin(), paces.end(), 0.0)) {
    std::fprintf(stderr, "--write-gbps: a list of rates in GB/s, such as 20,30,46\n");
    return 2;
  }
  for (double& pace : paces) pace *= 1e9;
  const int source_mib = measure::Arg(argc, argv, "--source-mib", 1);
  if (source_mib < 1) {
    std::fprintf(stderr, "--source-mib: the threads' sources together, in MiB (at least 1)\n");
    return 2;
  }
  const std::vector<size_t> sizes = both ? std::vector<size_t>{256 * kMiB, 1024 * kMiB}
                                         : std::vector<size_t>{4 * kMiB, 16 * kMiB, 64 * kMiB};
  CHECK(cudaSetDevice(device));
  const size_t most = sizes.back();
  // To the device from pinned[0] into dev[0] (--to-host: back); with --both-ways also from dev[1]
  // into pinned[1].
  void *pinned[2] = {nullptr, nullptr}, *dev[2] = {nullptr, nullptr};
  cudaStream_t streams[2] = {nullptr, nullptr};
  for (int i = 0; i < (both ? 2 : 1); ++i) {
    CHECK(cudaMallocHost(&pinned[i], most));
    CHECK(cudaMalloc(&dev[i], most));
    CHECK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
    std::memset(pinned[i], 0x5a, most);
  }
  auto transfer = [&](size_t n) {
    if (to_host)
      CHECK(cudaMemcpyAsync(pinned[0], dev[0], n, cudaMemcpyDeviceToHost, streams[0]));
    else
      CHECK(cudaMemcpyAsync(dev[0], pinned[0], n, cudaMemcpyHostToDevice, streams[0]));
    if (both) CHECK(cudaMemcpyAsync(pinned[1], dev[1], n, cudaMemcpyDeviceToHost, streams[1]));
    CHECK(cudaStreamSynchronize(streams[0]));
    if (both) CHECK(cudaStreamSynchronize(streams[1]));
  };
  std::vector<int> counts;
  const int most_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 2);
  for (int n : {1, 2}) counts.push_back(std::min(n, most_threads));
  for (int n = 4; n <= most_threads; n += 4) counts.push_back(n);
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());

  if (!paces.empty()) {
    counts.clear();
    for (double pace : paces)
      counts.push_back(std::min(most_threads, static_cast<int>(std::ceil(pace / 10e9))));
  }

  std::printf("{\"device\":%d,\"reps\":%d,\"askedSourceMiB\":%d,\"direction\":\"%s\",\"rows\":[",
              device, reps, source_mib,
              both      ? "both"
              : to_host ? "d2h"
                        : "h2d");
  for (size_t c = 0; c < counts.size(); ++c) {
    const double pace = paces.empty() ? 0 : paces[c];
    Copiers copiers(counts[c], pace, static_cast<size_t>(source_mib) * kMiB);
    std::printf("%s{\"threads\":%d,\"sourceMiB\":%zu", c ? "," : "", counts[c],
                copiers.SourceBytes() / kMiB);
    if (pace > 0) std::printf(",\"paceGbps\":%.1f", pace / 1e9);
    for (size_t n : sizes) {
      transfer(n);  // warm-up
      std::vector<double> alone, loaded;
      for (int i = 0; i < reps; ++i)
        for (bool on : {false, true}) {
          copiers.Run(on);
          Clock::time_point t0 = Clock::now();
          transfer(n);
          (on ? loaded : alone).push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        }
      copiers.Run(false);
      const double bytes = static_cast<double>(n) * (both ? 2 : 1);
      const double a = bytes / measure::Median(alone) / 1e9,
                   l = bytes / measure::Median(loaded) / 1e9;
      std::printf(",\"%zuMiB\":{\"alone\":%.2f,\"copying\":%.2f,\"share\":%.3f}", n / kMiB, a, l,
                  l / a);
    }
    std::printf(",\"hostCopyGbps\":%.1f}", copiers.Rate());
  }
  std::printf("]}\n");
  for (int i = 0; i < 2; ++i) {
    if (streams[i]) CHECK(cudaStreamDestroy(streams[i]));
    if (dev[i]) CHECK(cudaFree(dev[i]));
    if (pinned[i]) CHECK(cudaFreeHost(pinned[i]));
  }
  return 0;
}
