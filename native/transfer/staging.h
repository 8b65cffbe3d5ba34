// The staged path for pageable host memory. cudaMemcpy from pageable memory moves one small
// bounce buffer at a time; here a team of host threads copies between the Node buffer and a ring
// of pinned chunks while the DMA engine moves earlier chunks (core/transfer/staging_pipeline.h has
// the schedule and how it overlaps). Used by copy()/copyAsync() for pageable buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "binding/errors.h"
#include "binding/instance.h"
#include "core/device/numa.h"
#include "core/transfer/copy_team.h"
#include "core/transfer/staging_pipeline.h"

namespace cm {

class StagingEngine;

// Non-temporal stores on the staged path: always, never, or where they measured faster
// (StreamingFor).
enum class Streaming { kAuto, kOn, kOff };

// The environment's staged-path state (Instance::State).
struct StagingState : InstanceState {
  std::mutex mutex;
  // One per device and direction (key device * 2 + 1 for device-to-host), made on first use, so
  // that copies in the two directions overlap. The two directions share one team of copy threads
  // per device (key: the device), kept on the device's NUMA node where placement applies.
  std::map<int, std::shared_ptr<StagingEngine>> engines;
  std::map<int, std::shared_ptr<core::CopyTeam>> teams;
  std::map<int, std::shared_ptr<const core::NumaPlan>> numa_plans;  // per device, read once
  // configureStaging()'s settings.
  struct Config {
    size_t chunk_bytes = 0;  // 0: the tuned default
    size_t first_chunk_bytes = 0;
    size_t last_chunk_bytes = 0;
    int slots = 0;
    int threads = 0;
    std::optional<Streaming> streaming;  // none: the default
    int64_t auto_h2d = -1;               // -1: default
    int64_t auto_d2h = -1;
  } config;
};

inline StagingState& Staging(Instance& inst) { return inst.State<StagingState>(); }

// Host-to-device copies from this size up use ordinary stores into the ring under Streaming::kAuto:
// on the H100 host they measured faster than streaming stores there and slower below
// (docs/transfers.md).
constexpr size_t kOrdinaryStoresFrom = 64u << 20;

// Whether a staged copy (or the benchmark's host copy) of n bytes uses non-temporal stores.
inline bool StreamingFor(Streaming s, bool to_host, size_t n) {
  if (s != Streaming::kAuto) return s == Streaming::kOn;
  return to_host || n < kOrdinaryStoresFrom;
}

struct StagingOptions {
  size_t chunk_bytes;        // one ring slot, the largest chunk
  size_t first_chunk_bytes;  // the first chunk; later ones double up to chunk_bytes
  size_t last_chunk_bytes;   // the last chunk; chunks halve down to it at the end (see
                             // core::PlanOptions for where they only grow)
  int slots;
  int threads;          // the team, counting the thread that asked for the copy
  Streaming streaming;  // non-temporal stores into and out of the ring
  // Pageable copies from these sizes up take the staged path under strategy 'auto'.
  size_t auto_h2d;
  size_t auto_d2h;
};

// The tuned defaults with the environment's configureStaging() settings applied. Call under
// st.mutex.
StagingOptions StagingOptionsInForce(const StagingState& st);

// The chunk shape the options give.
inline core::StagingShape ShapeOf(const StagingOptions& o) {
  return {o.first_chunk_bytes, o.chunk_bytes, o.slots, o.last_chunk_bytes};
}

// The size from which strategy 'auto' stages a pageable copy in this direction.
size_t StagedThreshold(Instance& inst, bool to_host);

// The ring, stream and events of one device and direction.
class StagingEngine {
 public:
  // Allocates the pinned ring on `device`, its pages preferring `node` where that is >= 0; check
  // error() afterwards.
  StagingEngine(int device, bool to_host, const StagingOptions& options,
                std::shared_ptr<core::CopyTeam> team, int node);
  ~StagingEngine();
  const Error& error() const { return error_; }
  // The NUMA node the ring's pages are on (-1 unknown), and whether they were asked to go to one.
  int ring_node() const { return ring_node_; }
  bool ring_placed() const { return ring_placed_; }
  const core::CopyTeam& team() const { return *team_; }

  // Blocks until the data has arrived. One transfer at a time per engine; the two directions
  // (two engines) run at once and share the team.
  Error Copy(char* device_ptr, char* host, size_t n);
  // The chunks and pieces its next Copy of n bytes would use (its shape, its team's threads),
  // placed from the start of the ring rather than where that copy would start.
  core::StagingPlan PlanFor(size_t n) const;
  // Bytes of its ring (and of the one HostHalf takes).
  size_t RingBytes() const;
  // The host half of a Copy of n bytes alone, for the benchmark: the same plan, pieces, team and
  // stores, through `ring` (pinned, RingBytes() of it) in place of the engine's, from *ring_pos
  // on. `stand_in` stands for the device memory: each chunk moves between it and the ring by
  // memcpy as it is issued; null, nothing moves (what the benchmark's host-copy rows time).
  void HostHalf(char* host, size_t n, char* ring, char* stand_in, size_t* ring_pos);

 private:
  int device_;
  bool to_host_;
  StagingOptions options_;
  std::shared_ptr<core::CopyTeam> team_;
  Error error_;
  std::mutex mutex_;
  core::StagingShape Shape() const;
  core::StagingDirection Direction() const;
  // Who issues a copy's chunks (Copy and PlanFor agree on it).
  static constexpr core::IssueMode kIssue = core::IssueMode::kAuto;
  cudaStream_t stream_ = nullptr;
  char* ring_ = nullptr;           // one pinned block, StagingRingBytes(Shape()) bytes
  size_t ring_pos_ = 0;            // where the next copy starts in it (guarded by mutex_)
  std::vector<cudaEvent_t> done_;  // one per slot
  int ring_node_ = -1;
  bool ring_placed_ = false;
};

// The instance's engine for `device` and a direction, made with the instance's configuration on
// first use. Held by the caller for the copy: configureStaging() may replace it meanwhile.
std::shared_ptr<StagingEngine> GetStagingEngine(Instance& inst, int device, bool to_host,
                                                Error* err);
// The copy team for `device`'s NUMA node (made on first use).
std::shared_ptr<core::CopyTeam> GetStagingTeam(Instance& inst, int device);
// Where `device` sits among the host's NUMA nodes (sysfs, read once per instance and device).
std::shared_ptr<const core::NumaPlan> DevicePlacement(Instance& inst, int device);

void InitStaging(Napi::Env env, Napi::Object exports);

}  // namespace cm
