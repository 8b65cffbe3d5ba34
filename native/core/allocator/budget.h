// The accounting of a backend whose memory comes from elsewhere (CUDA's stream-ordered pool has
// no hard cap): the allocator's limit, what is charged against it, and the statistics, kept as
// the BFC pool keeps them so both backends report alike. No Node, no CUDA.
#pragma once

#include <cstdint>
#include <string>

#include "core/allocator/pool.h"

namespace cm::core {

class Budget {
 public:
  Budget(uint64_t limit, std::string limit_source)
      : limit_(limit), source_(std::move(limit_source)) {}

  // Requests round up to 256 bytes, as cudaMalloc and the BFC pool align them; a size too large
  // to round saturates (and can never fit).
  static uint64_t Round(uint64_t bytes) {
    return bytes > UINT64_MAX - (kMinBlock - 1) ? UINT64_MAX
                                                : (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
  }

  // Charges a request of `requested` bytes (what the caller asked for) that takes `taken` bytes
  // (at least requested: padding for an alignment included), if it fits under the limit; false
  // (counted as an OOM) if not. The requested figures count `requested`; the allocated ones and
  // the limit count `taken`, rounded. Call Uncharge() if the memory then cannot be had.
  bool Charge(uint64_t requested, uint64_t taken);
  bool Charge(uint64_t requested) { return Charge(requested, requested); }
  // Takes back a charge made for memory that could not be had (not counted as a free).
  void Uncharge(uint64_t requested, uint64_t taken);
  void Uncharge(uint64_t requested) { Uncharge(requested, requested); }
  // The buffer was freed: the figures it was charged with.
  void Release(uint64_t requested, uint64_t taken);
  void Release(uint64_t requested) { Release(requested, requested); }
  void CountOom() { ++counters_.num_ooms; }
  void ResetPeak() { counters_.ResetPeak(); }
  void ResetAccumulated() { counters_.ResetAccumulated(); }
  // A new limit (setMemoryFraction): later charges are held to it; lowering it frees nothing.
  void SetLimit(uint64_t limit, std::string source) {
    limit_ = limit / kMinBlock * kMinBlock;
    source_ = std::move(source);
  }

  uint64_t limit() const { return limit_; }
  const std::string& limit_source() const { return source_; }
  uint64_t in_use() const { return counters_.allocated_bytes.current; }
  uint64_t live() const { return counters_.allocations.current; }
  // Everything but the pool's own figures (pool bytes, free blocks), which the caller fills in.
  PoolStats Stats() const;
  // The out-of-memory report for `requested`, the pool's figures filled in by the caller.
  OomInfo Oom(uint64_t requested) const;

 private:
  uint64_t limit_;
  std::string source_;
  // reserved_bytes and segments stay 0: the driver keeps the reservation.
  PoolCounters counters_;
};

}  // namespace cm::core
