// A fake DMA engine for the transfer pipelines' tests: it runs on its own thread and moves chunks
// between the ring and a "device" vector after random delays, reading and writing the ring at the
// moment it runs, so ring bytes used again too early corrupt the data and the byte comparison
// fails. Failures can be injected at the n-th Issue or Wait.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/transfer/staging_pipeline.h"

namespace cm::core {

class FakeDma : public StagingTransport {
 public:
  // A ring of `ring_bytes` (aligned to 4 KiB, as pinned memory is) with `slots` completion markers.
  FakeDma(std::vector<char>& device, bool to_device, size_t ring_bytes, int slots, unsigned seed)
      : device_(device),
        to_device_(to_device),
        ring_bytes_(ring_bytes),
        ring_(static_cast<char*>(std::aligned_alloc(4096, (ring_bytes + 4095) / 4096 * 4096))),
        slot_seq_(slots, 0),
        rng_(seed),
        engine_([this] { Run(); }) {}
  // The staged pipeline's ring for `shape`.
  FakeDma(std::vector<char>& device, StagingDirection direction, const StagingShape& shape,
          unsigned seed)
      : FakeDma(device, direction == StagingDirection::kToDevice, StagingRingBytes(shape),
                shape.slots, seed) {}
  ~FakeDma() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    queued_.notify_all();
    engine_.join();
    std::free(ring_);
  }

  char* ring() override { return ring_; }

  TransportStatus Issue(const StagingChunk& c) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_issue_at && ++issues_ == fail_issue_at) return {7, "fakeIssue"};
    if (c.ring_offset + c.length > ring_bytes_) return {9, "chunk past the end of the ring"};
    in_order = in_order && c.offset == next_offset_;
    next_offset_ = c.offset + c.length;
    if (std::find(issuers.begin(), issuers.end(), std::this_thread::get_id()) == issuers.end())
      issuers.push_back(std::this_thread::get_id());
    slot_seq_[c.slot] = ++issued_;
    queue_.push_back({c, issued_});
    ++transfers;
    queued_.notify_all();
    return {};
  }

  TransportStatus Wait(int s) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (fail_wait_at && ++waits_ == fail_wait_at) return {11, "fakeWait"};
    uint64_t target = slot_seq_[s];
    done_.wait(lock, [&] { return completed_ >= target; });
    return {};
  }

  TransportStatus Finish() override {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return completed_ >= issued_; });
    finished_with_nothing_moving = queue_.empty() && completed_ == issued_;
    return {};
  }

  int fail_issue_at = 0, fail_wait_at = 0;
  int transfers = 0;
  bool finished_with_nothing_moving = false;
  // Chunks were issued front to back (meaningful for a FakeDma used for one copy), and by which
  // threads.
  bool in_order = true;
  std::vector<std::thread::id> issuers;

 private:
  struct Request {
    StagingChunk chunk;
    uint64_t seq;
  };

  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      queued_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Request r = queue_.front();
      queue_.pop_front();
      int delay = static_cast<int>(rng_() % 40);
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(delay));
      char* ring = ring_ + r.chunk.ring_offset;
      if (to_device_)
        std::memcpy(device_.data() + r.chunk.offset, ring, r.chunk.length);
      else
        std::memcpy(ring, device_.data() + r.chunk.offset, r.chunk.length);
      lock.lock();
      completed_ = r.seq;
      done_.notify_all();
    }
  }

  std::vector<char>& device_;
  const bool to_device_;
  const size_t ring_bytes_;
  char* ring_;
  std::vector<uint64_t> slot_seq_;
  std::mt19937 rng_;
  std::mutex mutex_;
  std::condition_variable queued_, done_;
  std::deque<Request> queue_;
  uint64_t issued_ = 0, completed_ = 0;
  size_t next_offset_ = 0;
  int issues_ = 0, waits_ = 0;
  bool stop_ = false;
  std::thread engine_;
};

}  // namespace cm::core
