#include "core/allocator/upstream.h"

#include <algorithm>
#include <iterator>

namespace cm::core {

namespace {
// Simulated addresses start high and well aligned, like real device virtual addresses, and are
// spaced so that no two regions are ever adjacent (adjacent regions must never coalesce).
constexpr uint64_t kSimulatedBase = 0x7f0000000000ull;
constexpr uint64_t kRegionAlign = 2ull << 20;
}  // namespace

SimulatedUpstream::SimulatedUpstream(uint64_t total, uint64_t free, int cc_major, int cc_minor,
                                     int device)
    : total_(total),
      free_(free),
      major_(cc_major),
      minor_(cc_minor),
      device_(device),
      next_address_(kSimulatedBase) {}

UpstreamStatus SimulatedUpstream::Allocate(size_t bytes, uint64_t* address) {
  uint64_t room = managed_ ? free_ + host_free_ : free_;
  if (fail_next_ > 0 || bytes > room) {
    if (fail_next_ > 0) --fail_next_;
    return {UpstreamStatus::kOutOfMemory, 2,
            managed_ ? "simulated cudaMallocManaged" : "simulated cudaMalloc"};
  }
  *address = next_address_;
  next_address_ += (bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign + kRegionAlign;
  uint64_t on_device = bytes < free_ ? bytes : free_;
  free_ -= on_device;
  if (bytes > on_device) {
    host_free_ -= bytes - on_device;
    on_host_[*address] = bytes - on_device;
  }
  live_[*address] = bytes;
  return UpstreamStatus::Ok();
}

void SimulatedUpstream::Deallocate(uint64_t address, size_t) noexcept {
  auto it = live_.find(address);
  if (it == live_.end()) return;
  uint64_t on_host = 0;
  auto h = on_host_.find(address);
  if (h != on_host_.end()) {
    on_host = h->second;
    on_host_.erase(h);
  }
  free_ += it->second - on_host;
  host_free_ += on_host;
  live_.erase(it);
}

UpstreamStatus SimulatedUpstream::Reserve(uint64_t bytes, uint64_t* address) {
  if (granularity_ == 0) return {UpstreamStatus::kError, 801, "simulated cuMemAddressReserve"};
  *address = next_address_;
  next_address_ += (bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign + kRegionAlign;
  reserved_[*address] = bytes;
  return UpstreamStatus::Ok();
}

void SimulatedUpstream::Unreserve(uint64_t address, uint64_t) noexcept { reserved_.erase(address); }

UpstreamStatus SimulatedUpstream::Map(uint64_t address, uint64_t bytes) {
  if (fail_next_ > 0 || bytes > free_) {
    if (fail_next_ > 0) --fail_next_;
    return {UpstreamStatus::kOutOfMemory, 2, "simulated cuMemCreate"};
  }
  if (bytes == 0) return UpstreamStatus::Ok();
  // The pool maps only what is not mapped; a range that touches a mapped one joins it.
  uint64_t start = address, end = address + bytes;
  auto next = mapped_ranges_.lower_bound(start);
  if (next != mapped_ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->second == start) {
      start = prev->first;
      mapped_ranges_.erase(prev);
    }
  }
  if (next != mapped_ranges_.end() && next->first == end) {
    end = next->second;
    mapped_ranges_.erase(next);
  }
  mapped_ranges_[start] = end;
  free_ -= bytes;
  mapped_ += bytes;
  return UpstreamStatus::Ok();
}

void SimulatedUpstream::Unmap(uint64_t address, uint64_t bytes) noexcept {
  // Gives back the part of [address, address + bytes) that is mapped, splitting ranges it cuts.
  const uint64_t start = address, end = address + bytes;
  auto it = mapped_ranges_.lower_bound(start);
  if (it != mapped_ranges_.begin() && std::prev(it)->second > start) --it;
  while (it != mapped_ranges_.end() && it->first < end) {
    const uint64_t from = it->first, to = it->second;
    const uint64_t cut_from = std::max(from, start), cut_to = std::min(to, end);
    it = mapped_ranges_.erase(it);
    if (from < cut_from) mapped_ranges_[from] = cut_from;
    if (cut_to < to) it = mapped_ranges_.emplace(cut_to, to).first;
    free_ += cut_to - cut_from;
    mapped_ -= cut_to - cut_from;
  }
}

}  // namespace cm::core
