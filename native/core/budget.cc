#include "budget.h"

#include <algorithm>

namespace cm::core {

bool Budget::Charge(uint64_t requested) {
  uint64_t rounded = Round(requested);
  if (rounded > limit_ || in_use_ > limit_ - rounded) {
    ++num_ooms_;
    return false;
  }
  in_use_ += rounded;
  requested_ += requested;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  largest_ = std::max(largest_, rounded);
  ++live_;
  ++num_allocs_;
  return true;
}

void Budget::Uncharge(uint64_t requested) {
  in_use_ -= Round(requested);
  requested_ -= requested;
  --live_;
  --num_allocs_;
}

void Budget::Release(uint64_t requested) {
  in_use_ -= Round(requested);
  requested_ -= requested;
  --live_;
  ++num_frees_;
}

PoolStats Budget::Stats() const {
  PoolStats s;
  s.bytes_in_use = in_use_;
  s.peak_bytes_in_use = peak_in_use_;
  s.requested_bytes_in_use = requested_;
  s.bytes_limit = limit_;
  s.num_allocs = num_allocs_;
  s.num_frees = num_frees_;
  s.num_ooms = num_ooms_;
  s.largest_alloc_size = largest_;
  return s;
}

OomInfo Budget::Oom(uint64_t requested) const {
  OomInfo o;
  o.requested = requested;
  o.rounded = Round(requested);
  o.limit = limit_;
  o.limit_source = source_;
  o.bytes_in_use = in_use_;
  return o;
}

}  // namespace cm::core
