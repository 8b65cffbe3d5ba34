#include "upstream.h"

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
  if (fail_next_ > 0 || bytes > free_) {
    if (fail_next_ > 0) --fail_next_;
    return {UpstreamStatus::kOutOfMemory, 2, "simulated cudaMalloc"};
  }
  *address = next_address_;
  next_address_ += (bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign + kRegionAlign;
  free_ -= bytes;
  live_[*address] = bytes;
  return UpstreamStatus::Ok();
}

void SimulatedUpstream::Deallocate(uint64_t address, size_t) noexcept {
  auto it = live_.find(address);
  if (it == live_.end()) return;
  free_ += it->second;
  live_.erase(it);
}

}  // namespace cm::core
