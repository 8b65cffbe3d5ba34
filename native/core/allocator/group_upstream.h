// An Upstream that charges every region to a group ledger before taking it from the upstream it
// wraps, and gives the charge back when the region is returned: the pool's policies (growth,
// preallocation, garbage collection) run unchanged, and a region the group cannot afford looks to
// them like memory the device does not have. A region is charged what the device takes for it
// (Upstream::Footprint: whole 2 MiB pages on a GPU), not what the pool asked for.
//
// While a region is taken, the calling thread is known to be charging this ledger
// (cuda_memory_charging_ledger, below), so that the interposer preloaded into the same process
// (native/allocator/preload/) leaves exactly that region to this charge and charges everything
// else the process takes.
#pragma once

#include <memory>

#include "core/allocator/ledger.h"
#include "core/allocator/upstream.h"

namespace cm::core {

class GroupUpstream final : public Upstream {
 public:
  GroupUpstream(std::unique_ptr<Upstream> inner, std::unique_ptr<Ledger> ledger)
      : inner_(std::move(inner)), ledger_(std::move(ledger)) {}
  ~GroupUpstream() override = default;

  UpstreamStatus Allocate(size_t bytes, uint64_t* address) override;
  void Deallocate(uint64_t address, size_t bytes) noexcept override;
  MemInfo GetMemInfo() override { return inner_->GetMemInfo(); }
  int device() const override { return inner_->device(); }
  int ccMajor() const override { return inner_->ccMajor(); }
  int ccMinor() const override { return inner_->ccMinor(); }
  bool simulated() const override { return inner_->simulated(); }
  bool managed() const override { return inner_->managed(); }
  uint64_t HostBytes() const override { return inner_->HostBytes(); }
  uint64_t Footprint(uint64_t bytes) const override { return inner_->Footprint(bytes); }
  // Expandable segments: each mapped granule is charged to the group like a region.
  uint64_t Granularity() const override { return inner_->Granularity(); }
  std::string Why() const override { return inner_->Why(); }
  UpstreamStatus Reserve(uint64_t bytes, uint64_t* address) override {
    return inner_->Reserve(bytes, address);
  }
  void Unreserve(uint64_t address, uint64_t bytes) noexcept override {
    inner_->Unreserve(address, bytes);
  }
  UpstreamStatus Map(uint64_t address, uint64_t bytes) override;
  void Unmap(uint64_t address, uint64_t bytes) noexcept override;

  Ledger& ledger() { return *ledger_; }
  Upstream& inner() { return *inner_; }
  // Forgets the last refusal (call before an allocation). A member with a wait (its terms'
  // wait_ms) waits for room for one charge of at most `wait_bytes` in this allocation: the least
  // the pool can take for it; 0, none waits.
  void ClearRefusal(uint64_t wait_bytes = 0) {
    refused_ = false;
    wait_bytes_ = wait_bytes;
  }
  // The refusal of the last region the group could not afford since ClearRefusal, if any.
  bool refused() const { return refused_; }
  const GroupRefusal& refusal() const { return refusal_; }

 private:
  // Charges `bytes` to the group, then takes them (take() returns the upstream's answer); the
  // charge is given back if the upstream refuses.
  template <typename Take>
  UpstreamStatus Charged(uint64_t bytes, Take take);

  std::unique_ptr<Upstream> inner_;
  std::unique_ptr<Ledger> ledger_;
  bool refused_ = false;
  uint64_t wait_bytes_ = 0;
  GroupRefusal refusal_;
};

}  // namespace cm::core

// The ledger file (its name, without the folder) this thread is charging a region to right now,
// or null: asked by the interposer, by this name, of the addon that it finds as a caller.
extern "C" __attribute__((visibility("default"))) const char* cuda_memory_charging_ledger();
