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
  size_t liveAllocations() const { return live_.size(); }
  // Makes the next `n` allocations fail as out of memory, whatever is free (fault injection).
  void FailNext(int n) { fail_next_ = n; }

 private:
  uint64_t total_, free_;
  int major_, minor_, device_;
  uint64_t next_address_;
  int fail_next_ = 0;
  std::map<uint64_t, size_t> live_;
};

}  // namespace cm::core
