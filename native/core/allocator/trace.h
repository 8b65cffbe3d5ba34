// What a recording allocator writes: one event per allocation, free, refused request, region
// taken or given back, and emptyCache, with the block's id, sizes and place. Kept in the pool so
// that region events (which only the pool sees) and block events share one order and one clock.
// No Node, no CUDA.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace cm::core {

enum class TraceAction : uint8_t { kAlloc, kFree, kOom, kRegionAlloc, kRegionFree, kEmptyCache };

struct TraceEvent {
  uint64_t time_ns;    // since recording started
  uint64_t id;         // alloc, free: the block; oom: 0
  uint64_t requested;  // alloc, oom: bytes asked for; free: the block's request
  uint64_t size;       // alloc, free: the block's size; oom: rounded request; region: its size;
                       // emptyCache: bytes released
  uint64_t region;     // the region's address (alloc, free, region events)
  uint64_t offset;     // the block's offset in its region (alloc, free)
  TraceAction action;
};

class Recorder {
 public:
  explicit Recorder(size_t max_events) : max_(max_events), start_(Clock::now()) {
    events_.reserve(std::min<size_t>(max_events, 1u << 16));
  }
  // Keeps the first max_events events and counts the rest: a trace that starts at the beginning
  // replays; one that lost its beginning would free blocks it never saw allocated.
  void Add(TraceAction action, uint64_t id, uint64_t requested, uint64_t size, uint64_t region,
           uint64_t offset) {
    if (events_.size() >= max_) {
      ++dropped_;
      return;
    }
    uint64_t t = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count());
    events_.push_back(TraceEvent{t, id, requested, size, region, offset, action});
  }
  const std::vector<TraceEvent>& events() const { return events_; }
  uint64_t dropped() const { return dropped_; }

 private:
  using Clock = std::chrono::steady_clock;
  size_t max_;
  Clock::time_point start_;
  std::vector<TraceEvent> events_;
  uint64_t dropped_ = 0;
};

const char* ActionName(TraceAction action);

}  // namespace cm::core
