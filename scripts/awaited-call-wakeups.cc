// What an awaited call pays on this host for the threads it wakes, measured on a managed prefetch
// (cudaMemPrefetchAsync, then cudaStreamSynchronize) of 64 MiB and 1 GiB to the device and back to
// the host. An awaited call that keeps the JavaScript thread free runs its work on another thread
// and hands its end back to the event loop, which sleeps while it waits; each hand-off to a
// sleeping thread costs that thread's wake-up. Four ways, and the head-N ways, each sample of one
// beside one of each other, the order rotated:
//   raw        the calling thread prefetches and waits
//   two-wakes  handed to a sleeping thread, its end handed back to the sleeping caller (a
//              condition variable each way, as a libuv pool thread is woken, then the event loop)
//   one-wake   handed to a spinning thread, its end handed back to the sleeping caller: the least
//              an awaited call can pay, since the event loop sleeps until it is told
//   no-wake    handed to a spinning thread, the caller spinning too: the change of thread alone
//   head-N     a way to hide the first wake: the caller hands the call to a sleeping thread,
//              then, while that thread wakes, prefetches the first N MiB itself (N from --heads,
//              0 for the whole size); the thread moves the rest once the caller's part is made,
//              then its end is handed back as in two-wakes. headUs is how long the caller's own
//              call held it, the time an event loop would stall. (On an H100 a split prefetch
//              cost more than the wake it hides, and the whole call held its caller for 70-85%
//              of the move, so the library's prefetch stays a two-wakes hand-off.)
// Build and run on a GPU machine, from the project root (CUDA 13 or later: cudaMemPrefetchAsync
// takes a cudaMemLocation):
//   nvcc -O2 -std=c++17 -o awaited-call-wakeups scripts/awaited-call-wakeups.cc
//   ./awaited-call-wakeups [--device N] [--reps N] [--heads 2,0]
// Prints one JSON object: per size and direction, the median microseconds of each way and its
// share of the raw call's rate (raw time over its time), and for each head-N way headUs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "measure.h"

namespace {

using Clock = std::chrono::steady_clock;

// A thread that runs one job at a time, handed over by a condition variable (it sleeps until the
// job comes) or by a flag it spins on (woken before the timing starts, it spins until the job
// comes, then sleeps again, so that it takes no CPU from the other ways). Its caller waits for
// the end the same two ways. Run() returns the microseconds from the hand-off to the end.
class Runner {
 public:
  Runner(int device, bool spin) : spin_(spin) {
    thread_ = std::thread([this, device] {
      CHECK(cudaSetDevice(device));
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(mutex_);
          cv_.wait(lock, [&] { return state_ == kJob || state_ == kArmed || state_ == kQuit; });
          if (state_ == kQuit) return;
          if (state_ == kArmed) state_.store(kSpinning, std::memory_order_release);
        }
        while (state_.load(std::memory_order_acquire) == kSpinning) {
        }
        job_();
        std::lock_guard<std::mutex> lock(mutex_);
        state_.store(kDone, std::memory_order_release);
        cv_.notify_all();
      }
    });
  }
  ~Runner() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      state_ = kQuit;
    }
    cv_.notify_all();
    thread_.join();
  }
  // `meanwhile` runs on the calling thread once the job is handed over, before it waits.
  double Run(std::function<void()> job, bool spin_wait,
             const std::function<void()>& meanwhile = {}) {
    job_ = std::move(job);
    if (spin_) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        state_ = kArmed;
      }
      cv_.notify_all();
      while (state_.load(std::memory_order_acquire) != kSpinning) {
      }
    }
    const auto t0 = Clock::now();
    if (spin_) {
      state_.store(kJob, std::memory_order_release);
    } else {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        state_ = kJob;
      }
      cv_.notify_all();
    }
    if (meanwhile) meanwhile();
    if (spin_wait) {
      while (state_.load(std::memory_order_acquire) != kDone) {
      }
    } else {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return state_ == kDone; });
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = kIdle;
    return us;
  }

 private:
  enum { kIdle, kArmed, kSpinning, kJob, kDone, kQuit };
  const bool spin_;
  std::atomic<int> state_{kIdle};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::function<void()> job_;
  std::thread thread_;
};

cudaMemLocation Location(bool device, int id) {
  cudaMemLocation l{};
  l.type = device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  l.id = device ? id : 0;
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  const int device = measure::Arg(argc, argv, "--device", 0);
  const int reps = measure::Arg(argc, argv, "--reps", 0);
  std::vector<double> heads = {2, 0};  // MiB
  if (!measure::List(argc, argv, "--heads", &heads)) {
    std::fprintf(stderr, "--heads: a list of sizes in MiB, 0 for the whole size, such as 2,0\n");
    return 2;
  }
  CHECK(cudaSetDevice(device));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Runner sleeping(device, false), spinning(device, true);
  std::vector<std::string> names = {"raw", "two-wakes", "one-wake", "no-wake"};
  for (double h : heads) {
    char name[32];
    std::snprintf(name, sizeof name, "head-%g", h);
    names.push_back(h ? name : "head-all");
  }
  const int ways = static_cast<int>(names.size());
  std::printf("{\"device\": %d, \"rows\": [", device);
  bool first = true;
  for (size_t bytes : {size_t{64} << 20, size_t{1} << 30}) {
    void* m = nullptr;
    CHECK(cudaMallocManaged(&m, bytes, cudaMemAttachGlobal));
    std::memset(m, 1, bytes);
    for (bool to_device : {true, false}) {
      const cudaMemLocation to = Location(to_device, device);
      auto prefetch = [&](bool dev) {
        CHECK(cudaMemPrefetchAsync(m, bytes, Location(dev, device), 0, stream));
        CHECK(cudaStreamSynchronize(stream));
      };
      // head-N: the caller's part first, then the thread's, which waits for it (briefly: the
      // caller's call holds it about as long as the thread takes to wake).
      auto with_head = [&](size_t head, std::vector<double>* held) {
        std::atomic<bool> made{false};
        double us = 0;
        const auto job = [&] {
          while (!made.load(std::memory_order_acquire)) std::this_thread::yield();
          if (head < bytes)
            CHECK(cudaMemPrefetchAsync(static_cast<char*>(m) + head, bytes - head, to, 0, stream));
          CHECK(cudaStreamSynchronize(stream));
        };
        const auto mine = [&] {
          const auto t0 = Clock::now();
          CHECK(cudaMemPrefetchAsync(m, head, to, 0, stream));
          us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          made.store(true, std::memory_order_release);
        };
        const double total = sleeping.Run(job, false, mine);
        if (held) held->push_back(us);
        return total;
      };
      const int n = reps > 0 ? reps : bytes > (size_t{64} << 20) ? 12 : 40;
      std::vector<std::vector<double>> t(ways), held(heads.size());
      for (int i = 0; i < n + 2; ++i)
        for (int k = 0; k < ways; ++k) {
          const int way = (k + i) % ways;
          prefetch(!to_device);  // the pages start where the timed prefetch moves them from
          const auto job = [&] { prefetch(to_device); };
          double us = 0;
          if (way == 0) {
            const auto t0 = Clock::now();
            job();
            us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          }
          if (way == 1) us = sleeping.Run(job, false);
          if (way == 2) us = spinning.Run(job, false);
          if (way == 3) us = spinning.Run(job, true);
          if (way >= 4) {
            const double mib = heads[way - 4];
            const size_t h = mib ? std::min(bytes, static_cast<size_t>(mib * (1 << 20))) : bytes;
            us = with_head(h, i >= 2 ? &held[way - 4] : nullptr);
          }
          if (i >= 2) t[way].push_back(us);  // the first two rounds warm every way up
        }
      const double raw = measure::Median(t[0]);
      std::printf("%s\n  {\"bytes\": %zu, \"to\": \"%s\", \"samples\": %d", first ? "" : ",", bytes,
                  to_device ? "device" : "host", n);
      for (int w = 0; w < ways; ++w) {
        std::printf(", \"%s\": {\"us\": %.1f, \"share\": %.3f", names[w].c_str(),
                    measure::Median(t[w]), raw / measure::Median(t[w]));
        if (w >= 4)
          std::printf(", \"headUs\": %.1f, \"headUsMax\": %.1f", measure::Median(held[w - 4]),
                      *std::max_element(held[w - 4].begin(), held[w - 4].end()));
        std::printf("}");
      }
      std::printf("}");
      std::fflush(stdout);
      first = false;
    }
    CHECK(cudaFree(m));
  }
  std::printf("\n]}\n");
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
