// The staged path for pageable host memory, without CUDA: how a copy is cut into chunks (one DMA
// transfer each, through one slot of a pinned ring) and pieces (one thread's memcpy each), and the
// job that runs them on a CopyTeam so the CPU copies and the DMA engine overlap.
//
// Chunks grow from `first_chunk`, doubling, to `max_chunk`, and shrink again, halving, to
// `last_chunk` at the end. A copy has two parts that nothing overlaps: the first chunk's first
// stage (the CPU copying it into the ring, or the DMA engine bringing it in) and the last chunk's
// second stage. Small chunks at both ends keep both short, which is what makes copies of a few
// MiB fast; chunks in the middle are large, so per-transfer costs vanish at 1 GiB. Each chunk is
// split into up to `threads` pieces of at least 64 KiB, and the whole team copies it, while
// earlier chunks are still moving on the DMA engine.
//
// To the device below kCallerIssuesBelow (where the caller issues, see IssueMode) chunks only
// grow, and the last takes what is left. There the team fills the ring twice as fast as the DMA
// engine empties it, so the last chunk is in the ring long before the engine reaches it and a
// small one gains nothing, while every transfer costs the engine time of its own. 4 MiB goes in
// three chunks instead of five (docs/transfers.md).
//
// The ring is one block of `slots` x `max_chunk` bytes, and chunks take it in turn byte by byte:
// each chunk goes where the one before it ended, and each copy where the copy before it ended.
// So ring memory is used again only after a ring's worth of other traffic. A DMA engine writing
// into lines that a core has just read (and still holds in its cache) ran at a third to half of
// its speed on the H100 host, as did one reading lines just written with ordinary stores; by the
// time the ring comes round, those lines have left the cores' caches (docs/transfers.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/transfer/copy_team.h"

namespace cm::core {

struct StagingShape {
  size_t first_chunk;     // bytes of the first chunk
  size_t max_chunk;       // bytes of one ring slot, the largest chunk
  int slots;              // ring slots
  size_t last_chunk = 0;  // bytes of the last chunk; 0: no shrinking, the last is what is left
};

struct StagingChunk {
  size_t offset = 0, length = 0;  // within the copy
  size_t ring_offset = 0;         // where in the ring it passes
  int slot = 0;                   // its completion marker: chunk index % slots
  // The latest earlier chunk that must be done (reached the device, or been copied out of the
  // ring) before this one may use its ring bytes: the latest that shares any of them, and at
  // least the one `slots` back, so no more than `slots` chunks are under way. -1: none.
  long after = -1;
  size_t first_piece = 0, pieces = 0;
};

struct StagingPiece {
  size_t chunk = 0;
  size_t offset = 0, length = 0;  // within the copy
};

struct StagingPlan {
  std::vector<StagingChunk> chunks;
  std::vector<StagingPiece> pieces;
  size_t ring_end = 0;  // where the next copy's first chunk goes
};

// Bytes of the ring for a shape: slots x max_chunk (rounded down to 4 KiB, at least 64 KiB).
size_t StagingRingBytes(const StagingShape& shape);

struct PlanOptions {
  size_t ring_start = 0;  // where in the ring the first chunk goes
  // The first chunk is cut for every thread, down to 16 KiB pieces (to the device, where nothing
  // moves until it is in the ring); otherwise every chunk in pieces of 64 KiB or more.
  bool fine_first = false;
  // Chunks only grow: doubling from first_chunk until what is left is no more than twice the
  // next one, which is then the last chunk (or equal chunks of at most max_chunk); last_chunk
  // is not used.
  bool grow_to_end = false;
};

// Cuts n bytes into chunks and pieces. Offsets of chunks and pieces are multiples of 4 KiB; no
// chunk is larger than max_chunk, the first no larger than first_chunk and, when last_chunk is
// set (and chunks do not grow to the end), the last no larger than last_chunk (each rounded
// down to 4 KiB, at least 64 KiB).
StagingPlan PlanStaging(size_t n, const StagingShape& shape, int threads,
                        const PlanOptions& options = {});

// A failed DMA call: `code` is the transport's own (a cudaError_t for CUDA), 0 for success.
struct TransportStatus {
  int code = 0;
  std::string call;
  bool ok() const { return code == 0; }
};

// The DMA half: a pinned ring of StagingRingBytes(shape) bytes and one queue of transfers, which
// run in the order issued. Issue and Wait are called from the thread that runs the copy or any
// team thread, concurrently for different chunks.
class StagingTransport {
 public:
  virtual ~StagingTransport() = default;
  virtual char* ring() = 0;
  // Starts moving chunk `c` between ring() + c.ring_offset and the device, in the job's
  // direction, and marks its completion on `c.slot`.
  virtual TransportStatus Issue(const StagingChunk& c) = 0;
  // Returns once the last transfer marked on slot `s` has finished.
  virtual TransportStatus Wait(int s) = 0;
  // Returns once every transfer issued has finished.
  virtual TransportStatus Finish() = 0;
};

enum class StagingDirection { kToDevice, kToHost };

// Who hands chunks to the DMA engine on the way to the device.
// - kAnyThread: whichever team thread finishes a chunk's last piece issues it (and every ready
//   chunk after it).
// - kCaller: the thread that asked for the copy issues every chunk, in order, the moment its
//   last piece is in the ring, and copies nothing itself, so an issue never waits for a thread
//   to finish its next piece; docs/transfers.md gives what it gained.
// - kAuto: kCaller below kCallerIssuesBelow, kAnyThread from there. From 64 MiB up it measured
//   the same within noise, and large copies are bound by the host's copy rate, so there the
//   caller copies too.
// Copies to the host always issue from whichever thread frees a chunk's ring bytes.
enum class IssueMode { kAuto, kCaller, kAnyThread };
constexpr size_t kCallerIssuesBelow = 64u << 20;

// Whether RunStaged has the caller issue a copy of n bytes (when it has more than one piece), and
// so plans it with chunks that grow to the end.
bool CallerIssues(StagingDirection direction, IssueMode issue, size_t n, int threads);

// The plan RunStaged follows for a copy of n bytes whose first chunk goes to `ring_start` in the
// ring: to the device the first chunk cut finely (PlanOptions::fine_first), and chunks that grow
// to the end where the caller issues (CallerIssues). Code that needs a staged copy's chunks without
// running it plans with this, so that it cannot cut the copy differently.
StagingPlan PlanStagedCopy(StagingDirection direction, IssueMode issue, size_t n,
                           const StagingShape& shape, int threads, size_t ring_start);

// Runs one staged copy of n bytes between `host` and the device behind `transport` on `team`
// (the calling thread takes part), and returns when the data has arrived or the first failure.
// `ring_pos` is where in the ring the copy starts, and is left where the next one should. One
// copy at a time per transport; copies on different transports may share the team at once.
TransportStatus RunStaged(CopyTeam& team, StagingTransport& transport, StagingDirection direction,
                          char* host, size_t n, const StagingShape& shape, bool streaming,
                          size_t* ring_pos, IssueMode issue = IssueMode::kAuto);

}  // namespace cm::core
