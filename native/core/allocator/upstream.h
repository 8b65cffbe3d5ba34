// The source of large memory regions that a pool carves up: the CUDA device (cudaMalloc) or a
// simulated device with no memory behind its addresses. Policy code sees only this interface, so
// the same pool runs on a real GPU and, in tests, on a host without one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace cm::core {

struct MemInfo {
  uint64_t free = 0;
  uint64_t total = 0;
};

// Outcome of Upstream::Allocate. Out-of-memory is an expected result that pools recover from
// (back off, collect garbage); any other failure is reported to the caller unchanged.
struct UpstreamStatus {
  enum Kind { kOk, kOutOfMemory, kError } kind = kOk;
  int code = 0;      // the upstream's own code (a cudaError_t for the CUDA device)
  std::string call;  // what failed, e.g. "cudaMalloc"
  static UpstreamStatus Ok() { return {}; }
};

class Upstream {
 public:
  virtual ~Upstream() = default;
  virtual UpstreamStatus Allocate(size_t bytes, uint64_t* address) = 0;
  // Never throws: it runs from destructors and finalizers.
  virtual void Deallocate(uint64_t address, size_t bytes) noexcept = 0;
  virtual MemInfo GetMemInfo() = 0;
  virtual int device() const = 0;
  virtual int ccMajor() const = 0;
  virtual int ccMinor() const = 0;
  virtual bool simulated() const = 0;
  // Managed (unified) memory: regions the driver pages between the device and the host, so that
  // more than the device's memory can be taken (oversubscription). HostBytes() is the host memory
  // they may spill into (0 where unknown).
  virtual bool managed() const { return false; }
  virtual uint64_t HostBytes() const { return 0; }
  // What an allocation of `bytes` takes on the device (core/allocator/footprint.h): whole pages on
  // a GPU; exactly `bytes` by default and on a simulated device, whose accounting is exact.
  virtual uint64_t Footprint(uint64_t bytes) const { return bytes; }

  // Expandable segments (CUDA virtual memory management): an address range is reserved once and
  // physical memory is mapped into it, and out of it, in granules. Granularity() is 0 where the
  // upstream cannot do this; Why() then says why.
  virtual uint64_t Granularity() const { return 0; }
  virtual std::string Why() const { return "this upstream has no virtual memory management"; }
  virtual UpstreamStatus Reserve(uint64_t bytes, uint64_t* address) {
    (void)bytes;
    (void)address;
    return {UpstreamStatus::kError, 0, "reserve"};
  }
  virtual void Unreserve(uint64_t address, uint64_t bytes) noexcept {
    (void)address;
    (void)bytes;
  }
  // Maps `bytes` (a multiple of Granularity()) at `address` inside a reservation, a granule at a
  // time, so that any run of granules can later be unmapped on its own; on failure nothing of
  // it stays mapped.
  virtual UpstreamStatus Map(uint64_t address, uint64_t bytes) {
    (void)address;
    (void)bytes;
    return {UpstreamStatus::kError, 0, "map"};
  }
  virtual void Unmap(uint64_t address, uint64_t bytes) noexcept {
    (void)address;
    (void)bytes;
  }
};

// A device that exists only as numbers: it hands out disjoint, never reused address ranges and
// keeps free/total exact, so allocator policies can be tested bit for bit without a GPU.
class SimulatedUpstream final : public Upstream {
 public:
  SimulatedUpstream(uint64_t total, uint64_t free, int cc_major, int cc_minor, int device = 0);
  UpstreamStatus Allocate(size_t bytes, uint64_t* address) override;
  void Deallocate(uint64_t address, size_t bytes) noexcept override;
  MemInfo GetMemInfo() override { return {free_, total_}; }
  int device() const override { return device_; }
  int ccMajor() const override { return major_; }
  int ccMinor() const override { return minor_; }
  bool simulated() const override { return true; }
  // Managed regions: what does not fit in the device's free memory is resident in `host_bytes`
  // of host memory instead, as the driver evicts pages of an oversubscribed device to the host;
  // an allocation fails only when both are full.
  void SetManaged(uint64_t host_bytes) {
    managed_ = true;
    host_total_ = host_free_ = host_bytes;
  }
  bool managed() const override { return managed_; }
  uint64_t HostBytes() const override { return host_total_; }
  uint64_t hostFree() const { return host_free_; }
  size_t liveAllocations() const { return live_.size(); }
  // Makes the next `n` allocations fail as out of memory, whatever is free (fault injection).
  void FailNext(int n) { fail_next_ = n; }
  // Virtual memory as the H100 has it: 2 MiB granules unless set otherwise (0 turns it off).
  void SetGranularity(uint64_t g) { granularity_ = g; }
  uint64_t Granularity() const override { return granularity_; }
  std::string Why() const override { return "the simulated device was made without granules"; }
  UpstreamStatus Reserve(uint64_t bytes, uint64_t* address) override;
  void Unreserve(uint64_t address, uint64_t bytes) noexcept override;
  UpstreamStatus Map(uint64_t address, uint64_t bytes) override;
  void Unmap(uint64_t address, uint64_t bytes) noexcept override;
  uint64_t mappedBytes() const { return mapped_; }
  size_t reservations() const { return reserved_.size(); }

 private:
  uint64_t total_, free_;
  int major_, minor_, device_;
  uint64_t next_address_;
  int fail_next_ = 0;
  std::map<uint64_t, size_t> live_;
  bool managed_ = false;
  uint64_t host_total_ = 0, host_free_ = 0;
  std::map<uint64_t, uint64_t> on_host_;  // managed: bytes of a region resident on the host
  uint64_t granularity_ = 2ull << 20;
  uint64_t mapped_ = 0;
  std::map<uint64_t, uint64_t> reserved_;  // base -> size
  // Mapped memory as disjoint ranges, start -> end: the work of a call does not grow with the
  // number of granules it covers (2^52 bytes in 256-byte granules would be 2^44 of them).
  std::map<uint64_t, uint64_t> mapped_ranges_;
};

}  // namespace cm::core
