// The 'bfc' backend of createAllocator(): the BFC pool of core/ (core::Pool) over the CUDA device
// or a simulated one, behind the allocator Backend interface (backend.h).
#pragma once

#include <napi.h>

#include <memory>

#include "allocator/backend.h"
#include "binding/instance.h"
#include "core/allocator/group_upstream.h"
#include "core/allocator/policy.h"
#include "core/allocator/pool.h"
#include "memory/vmm.h"

namespace cm {

// cudaMalloc/cudaFree as a core::Upstream; with `managed`, cudaMallocManaged: regions the driver
// pages between the device and the host (a managed allocator's, which may oversubscribe).
class CudaUpstream final : public core::Upstream {
 public:
  explicit CudaUpstream(int device, bool managed = false);
  core::UpstreamStatus Allocate(size_t bytes, uint64_t* address) override;
  void Deallocate(uint64_t address, size_t bytes) noexcept override;
  core::MemInfo GetMemInfo() override;
  int device() const override { return device_; }
  int ccMajor() const override { return major_; }
  int ccMinor() const override { return minor_; }
  bool simulated() const override { return false; }
  bool managed() const override { return managed_; }
  // The host's physical memory: what an oversubscribed device can spill into at most.
  uint64_t HostBytes() const override;
  // Whole pages of the device's granularity (core/allocator/footprint.h).
  uint64_t Footprint(uint64_t bytes) const override;
  // Expandable segments through CUDA virtual memory management (memory/vmm.h).
  uint64_t Granularity() const override;
  std::string Why() const override { return why_; }
  core::UpstreamStatus Reserve(uint64_t bytes, uint64_t* address) override;
  void Unreserve(uint64_t address, uint64_t bytes) noexcept override;
  core::UpstreamStatus Map(uint64_t address, uint64_t bytes) override;
  void Unmap(uint64_t address, uint64_t bytes) noexcept override;

 private:
  int device_, major_ = 0, minor_ = 0;
  bool managed_;
  mutable bool vmm_checked_ = false;
  mutable uint64_t granule_ = 0;
  mutable std::string why_;
  std::unique_ptr<vmm::Space> space_;
};

// The 'bfc' backend: a core::Pool over the device's upstream (or a group's over it).
class BfcBackend final : public Backend {
 public:
  Napi::Value Alloc(Napi::Env env, const BackendRef& self, uint64_t bytes, size_t alignment,
                    Napi::Value stream) override;
  Napi::Object Stats(Napi::Env env) override;
  Napi::Array Regions(Napi::Env env) override;
  Napi::Object Info(Napi::Env env) override;
  void ResetPeak() override { pool->ResetPeakStats(); }
  void ResetAccumulated() override { pool->ResetAccumulatedStats(); }
  uint64_t SetFraction(Napi::Env env, Napi::Value fraction) override;
  uint64_t EmptyCache() override { return pool->EmptyCache(); }
  Napi::Value Pressure(Napi::Env env) override;
  uint64_t Close(Napi::Env env, bool force) override;
  void Record(Napi::Env env, Napi::Value max_events) override;
  Napi::Value Trace(Napi::Env env) override;
  Napi::Value Snapshot(Napi::Env env) override;
  void CountLive(std::vector<LiveRow>* rows) override;
  // The least the pool takes from the upstream for an allocation: a region that holds the block
  // wherever its start falls, as the device takes it (whole pages, or whole granules of a
  // segment). A group member with a wait waits for room for this much, and no more.
  uint64_t LeastRegion(uint64_t bytes, size_t alignment) const;
  // The pool's regions go back when the last block lets go of it too.
  void Collected() noexcept override {
    if (!closed) {
      closed = true;
      pool.reset();
    }
  }

  // Members are destroyed in reverse order: the pool records its last region frees into the
  // recorder and returns them to the upstream as it goes, so both must outlive it.
  std::unique_ptr<core::Upstream> upstream;
  std::unique_ptr<core::Recorder> recorder;  // while recording, and after, until the next start
  std::unique_ptr<core::Pool> pool;
  // Blocks a forced close found busy (an asynchronous copy still using them): the pool keeps its
  // regions until the last of them is released, since the copy may still touch their memory.
  uint64_t deferred = 0;
  core::GroupUpstream* group = nullptr;  // the upstream, when the pool charges a group budget
  // Whether the pool's limit is the group's budget (no limit of its own): it follows the budget
  // when that changes while the group runs (cuda-memory group set, setGroupBudget).
  bool limit_is_budget = false;
  // The group ledger's change counter at the last Pressure() that read the ledger (UINT64_MAX:
  // none yet), and whether that read found pressure.
  uint64_t pressure_seen = UINT64_MAX;
  bool pressure_on = false;
  // With limit_is_budget: sets the pool's limit to the group's budget as the ledger has it now;
  // true if that changed it. Called when an allocation fails, so that a raised budget is used.
  bool FollowBudget();
  // Publishes the bytes in use to the group ledger, if there is one.
  void PublishInUse() noexcept {
    if (group && pool) group->ledger().PublishInUse(pool->bytes_in_use());
  }
  // The end of close(): every region goes back and the group sees this member leave.
  void ReleaseRegions() noexcept;
};

// A buffer carved from a BfcBackend's pool: the backend (kept alive while the buffer is) and its
// core::Pool block.
struct PoolAllocation : Allocation {
  using Allocation::Allocation;
  std::shared_ptr<BfcBackend> pool;
  core::Pool::Chunk* block = nullptr;
};

// Registers the BFC pool's own export: blockId (the id a recording allocator gave a block).
void InitBfc(Napi::Env env, Napi::Object exports);

}  // namespace cm
