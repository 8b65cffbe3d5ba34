#include "core/allocator/budget.h"

#include <algorithm>

namespace cm::core {

bool Budget::Charge(uint64_t requested, uint64_t taken) {
  uint64_t rounded = Round(std::max(requested, taken));
  uint64_t in_use = counters_.allocated_bytes.current;
  if (rounded > limit_ || in_use > limit_ - rounded) {
    ++counters_.num_ooms;
    return false;
  }
  counters_.allocated_bytes.Add(rounded);
  counters_.requested_bytes.Add(requested);
  counters_.allocations.Add(1);
  counters_.largest_alloc_size = std::max(counters_.largest_alloc_size, rounded);
  return true;
}

void Budget::Uncharge(uint64_t requested, uint64_t taken) {
  // Not an allocation after all: taken back from the totals too, not counted as a free.
  counters_.allocated_bytes.Cancel(Round(std::max(requested, taken)));
  counters_.requested_bytes.Cancel(requested);
  counters_.allocations.Cancel(1);
}

void Budget::Release(uint64_t requested, uint64_t taken) {
  counters_.allocated_bytes.Sub(Round(std::max(requested, taken)));
  counters_.requested_bytes.Sub(requested);
  counters_.allocations.Sub(1);
}

PoolStats Budget::Stats() const {
  PoolStats s;
  s.counters = counters_;
  s.FromCounters();
  s.bytes_limit = limit_;
  return s;
}

OomInfo Budget::Oom(uint64_t requested) const {
  OomInfo o;
  o.requested = requested;
  o.rounded = Round(requested);
  o.limit = limit_;
  o.limit_source = source_;
  o.bytes_in_use = counters_.allocated_bytes.current;
  return o;
}

}  // namespace cm::core
