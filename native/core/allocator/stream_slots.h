// What a context's streams take on the device. Each stream takes memory of the driver's beside
// its context, and the driver keeps it when the stream is destroyed, for the next one. On an H200
// with driver 580, NVML's per-process figure above the context was 8 MiB for 16 streams, 34 MiB for
// 64 (still 34 once they were destroyed) and 140 MiB for 256. A context is therefore charged
// kStreamBytes for each of the most streams it has had live at once, until its end. No Node, no
// CUDA; not thread-safe (the caller holds its lock across the driver call).
#pragma once

#include <cstdint>

namespace cm::core {

// What one stream is charged: at or above every figure measured.
constexpr uint64_t kStreamBytes = 576ull << 10;

class StreamSlots {
 public:
  // Before a stream is created: what to charge for it (0 where a destroyed one's memory is kept).
  uint64_t ToCharge() const { return live_ < kept_ ? 0 : kStreamBytes; }
  // Created, with `charge` asked of ToCharge() and `charged` of it really charged (less where the
  // charge failed open).
  void Created(uint64_t charge, uint64_t charged) {
    ++live_;
    if (charge) ++kept_;
    charged_ += charged;
  }
  void Destroyed() {
    if (live_) --live_;
  }
  // What the context's end gives back.
  uint64_t charged() const { return charged_; }
  uint64_t live() const { return live_; }
  uint64_t kept() const { return kept_; }

 private:
  uint64_t live_ = 0, kept_ = 0, charged_ = 0;
};

}  // namespace cm::core
