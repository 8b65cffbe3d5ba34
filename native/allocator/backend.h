// One interface for the allocator backends, named as createAllocator's `backend` option names
// them: 'bfc', the BFC pool over core::Pool (bfc.h), and 'async', CUDA's stream-ordered pool
// (async.h). createAllocator() reads its options once for both (ReadAllocatorOptions); every
// allocator* export reads its arguments and makes one call through the Backend behind the handle.
#pragma once

#include <napi.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "binding/instance.h"
#include "core/allocator/compose.h"
#include "core/allocator/policy.h"
#include "core/allocator/pool.h"
#include "memory/buffers.h"

namespace cm {

enum class BackendKind { kBfc, kAsync };

// createAllocator's `simulate`: a device that exists only as numbers (core::SimulatedUpstream).
struct SimulatedDevice {
  uint64_t total_bytes = 0, free_bytes = 0;
  int cc_major = 9, cc_minor = 0;
  std::optional<uint64_t> granularity;  // absent: the upstream's default
  uint64_t host_bytes = 0;              // what a managed allocator's regions may spill into
};

// createAllocator's options as the addon takes them (lib/allocator/allocator.ts has validated
// and resolved them; this checks again, cheaply, what it reads).
struct AllocatorOptions {
  BackendKind backend = BackendKind::kBfc;
  int device = 0;
  // Limits (memoryFraction, memoryLimit, oversubscribe, the platform's), allowGrowth,
  // initialPoolBytes, garbageCollection, expandableSegments and the group (`shared`).
  core::AllocatorSpec spec;
  bool managed = false;
  bool async_default_pool = false;  // 'async': the device's default pool, not one of its own
  std::optional<SimulatedDevice> simulate;
};

// Reads createAllocator's options object. Throws a TypeError or RangeError naming the option,
// and ERR_NOT_SUPPORTED for an option the backend cannot take.
AllocatorOptions ReadAllocatorOptions(Napi::Env env, Napi::Value v);

class Backend;
using BackendRef = std::shared_ptr<Backend>;

// What an allocator does, whichever backend it has. The exports check the handle and that the
// allocator is open (Close excepted) before calling.
class Backend {
 public:
  // A block of `bytes` (at least 1) at `alignment` (a power of two, at least 256), as a buffer
  // handle; `stream` (undefined: none) orders it where the backend is stream-ordered. `self` is
  // this backend's own reference, which the block keeps. Throws OutOfMemoryError.
  virtual Napi::Value Alloc(Napi::Env env, const BackendRef& self, uint64_t bytes, size_t alignment,
                            Napi::Value stream) = 0;
  virtual Napi::Object Stats(Napi::Env env) = 0;
  // The regions taken from the device (empty where the backend does not take its own).
  virtual Napi::Array Regions(Napi::Env env) = 0;
  // What allocatorInfo() reports: the device, the policy and the limit in force.
  virtual Napi::Object Info(Napi::Env env) = 0;
  virtual void ResetPeak() = 0;
  virtual void ResetAccumulated() = 0;
  // Sets the limit to a share of the device's total memory (`fraction`, read by
  // ReadFractionLimit); returns the new limit in bytes.
  virtual uint64_t SetFraction(Napi::Env env, Napi::Value fraction) = 0;
  // Gives back what no block uses; returns the bytes released.
  virtual uint64_t EmptyCache() = 0;
  // Gives all memory back and marks the allocator closed; with live blocks, throws
  // ERR_ALLOCATOR_BUSY unless `force`, which makes them freed buffers. Returns the bytes given
  // back. Called on an open allocator only.
  virtual uint64_t Close(Napi::Env env, bool force) = 0;
  // Recording, the trace and the snapshot of the pool's blocks. A backend that does not report
  // its blocks refuses them with ERR_NOT_SUPPORTED (these defaults).
  virtual void Record(Napi::Env env, Napi::Value max_events);
  virtual Napi::Value Trace(Napi::Env env);
  virtual Napi::Value Snapshot(Napi::Env env);
  // The pressure on its group (core::PressureOn) where the group's ledger changed since the last
  // call, or under pressure: null for none (also without a group), an object { reason, bytes,
  // pids, borrowing } for some, and undefined where nothing changed, which is the cheap answer a
  // poller mostly gets.
  virtual Napi::Value Pressure(Napi::Env env) { return env.Null(); }
  // The allocator's handle was collected (its blocks may still hold the backend). Never throws.
  virtual void Collected() noexcept {}
  // Counts this open allocator in `rows` for leak checks (allocatorsLive()): one 'allocator' of
  // its pool bytes on its device, and one 'group' where it is a group member.
  virtual void CountLive(std::vector<LiveRow>* rows) = 0;
  // Enters what CountLive counts now (the allocator, its group membership) in the process-wide
  // tally of environment `id`, by count: the pool's bytes change too often to be entered there.
  void Tally(uint64_t id);
  // Takes that out again (at close, or when the allocator goes without one). Never throws.
  void Untally() noexcept;
  virtual ~Backend();

  bool closed = false;

 private:
  uint64_t tally_id_ = 0;
  std::vector<LiveRow> tallied_;
};

// Makes an allocator of each backend from its options (the exports wrap it in a handle).
BackendRef CreateBfcBackend(Napi::Env env, const AllocatorOptions& options);
BackendRef CreateAsyncBackend(Napi::Env env, const AllocatorOptions& options);

// Free and total memory of a device (cudaMemGetInfo); zeros if it cannot be read.
core::MemInfo DeviceMemInfo(int device);
// The errors both backends give: a closed allocator (ERR_ALLOCATOR_CLOSED), and close() while
// buffers are live (ERR_ALLOCATOR_BUSY).
[[noreturn]] void ThrowAllocatorClosed(Napi::Env env);
[[noreturn]] void ThrowAllocatorBusy(Napi::Env env, uint64_t live, uint64_t bytes_in_use);
// The OutOfMemoryError for an allocator's report, shared by both backends.
// With `refusal`, the error carries the group that refused the region, why, and how long the
// allocation waited (groupReason, groupWaitedMs).
Napi::Value OomError(Napi::Env env, const core::OomInfo& oom,
                     const core::GroupRefusal* refusal = nullptr);

// The statistics both backends report: the named figures and the counters (RMM's and PyTorch's
// current, peak, allocated/total and freed).
Napi::Object StatsObject(Napi::Env env, const core::PoolStats& s);

// setMemoryFraction's argument as a limit of `total` bytes; a RangeError outside [0, 1].
core::ResolvedLimit ReadFractionLimit(Napi::Env env, Napi::Value v, uint64_t total);

// createAllocator, allocatorAlloc and the other allocator* exports.
void InitAllocator(Napi::Env env, Napi::Object exports);

}  // namespace cm
