#include "core/allocator/upstream.h"

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
  for (uint64_t a = address; a < address + bytes; a += granularity_) granules_[a] = true;
  free_ -= bytes;
  mapped_ += bytes;
  return UpstreamStatus::Ok();
}

void SimulatedUpstream::Unmap(uint64_t address, uint64_t bytes) noexcept {
  for (uint64_t a = address; a < address + bytes; a += granularity_)
    if (granules_.erase(a)) {
      free_ += granularity_;
      mapped_ -= granularity_;
    }
}

}  // namespace cm::core
