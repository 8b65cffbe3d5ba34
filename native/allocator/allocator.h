// The JS binding of the pool allocators in core/: createAllocator() and the calls on it, over
// either the CUDA device or a simulated one.
#pragma once

#include <napi.h>

#include <algorithm>
#include <memory>
#include <vector>

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

class PoolBinding {
 public:
  // Members are destroyed in reverse order: the pool records its last region frees into the
  // recorder and returns them to the upstream as it goes, so both must outlive it.
  std::unique_ptr<core::Upstream> upstream;
  std::unique_ptr<core::Recorder> recorder;  // while recording, and after, until the next start
  std::unique_ptr<core::Pool> pool;
  bool closed = false;
  // Blocks a forced close found busy (an asynchronous copy still using them): the pool keeps its
  // regions until the last of them is released, since the copy may still touch their memory.
  uint64_t deferred = 0;
  core::GroupUpstream* group = nullptr;  // the upstream, when the pool charges a group budget
  // Publishes the bytes in use to the group ledger, if there is one.
  void PublishInUse() noexcept {
    if (group && pool) group->ledger().PublishInUse(pool->bytes_in_use());
  }
  // The end of close(): every region goes back and the group sees this member leave.
  void ReleaseRegions() noexcept;
};

// A buffer carved from a PoolBinding's pool: the pool (kept alive while the buffer is) and its
// core::Pool block.
struct PoolAllocation : Allocation {
  using Allocation::Allocation;
  std::shared_ptr<PoolBinding> pool;
  core::Pool::Chunk* block = nullptr;
};

// Free and total memory of a device (cudaMemGetInfo); zeros if it cannot be read.
struct AsyncPool;

// The allocators this environment made, both backends, held weakly: allocatorsLive() counts the
// open ones for leak checks.
struct MadeAllocators : InstanceState {
  std::vector<std::weak_ptr<PoolBinding>> bfc;
  std::vector<std::weak_ptr<AsyncPool>> async;
};
// Adds `made` to `list`, dropping the entries of allocators that are gone.
template <class T>
void RememberAllocator(std::vector<std::weak_ptr<T>>* list, const std::shared_ptr<T>& made) {
  list->erase(std::remove_if(list->begin(), list->end(),
                             [](const std::weak_ptr<T>& w) { return w.expired(); }),
              list->end());
  list->push_back(made);
}

core::MemInfo DeviceMemInfo(int device);
// The errors both backends give: a closed allocator (ERR_ALLOCATOR_CLOSED), and close() while
// buffers are live (ERR_ALLOCATOR_BUSY).
[[noreturn]] void ThrowAllocatorClosed(Napi::Env env);
[[noreturn]] void ThrowAllocatorBusy(Napi::Env env, uint64_t live, uint64_t bytes_in_use);
// The OutOfMemoryError for an allocator's report, shared by both backends.
// With `group`, the error carries the group that refused the region.
Napi::Value OomError(Napi::Env env, const core::OomInfo& oom,
                     const core::GroupSnapshot* group = nullptr);

// The statistics both backends report: the named figures and the counters (RMM's and PyTorch's
// current, peak, allocated/total and freed).
Napi::Object StatsObject(Napi::Env env, const core::PoolStats& s);

// The `platform` option ({ capBytes, capSource, defaultBytes, defaultSource }, resolved by
// lib/device/platform.ts) into `policy`; absent: no platform limit.
void ReadPlatformLimit(Napi::Env env, Napi::Value v, core::PolicyOptions* policy);

// setMemoryFraction's argument as a limit of `total` bytes; a RangeError outside [0, 1].
core::ResolvedLimit ReadFractionLimit(Napi::Env env, Napi::Value v, uint64_t total);

// createAllocator's initialPoolBytes (absent: 0): a multiple of 256, at most `limit` (a
// RangeError naming `limit_source` otherwise).
uint64_t ReadInitialPoolBytes(Napi::Env env, Napi::Value v, uint64_t limit,
                              const std::string& limit_source);

// An alloc()'s alignment argument: absent gives 256, else a power of two up to 1 GiB.
size_t ReadAlignment(Napi::Env env, Napi::Value v);
void InitAllocator(Napi::Env env, Napi::Object exports);

}  // namespace cm
