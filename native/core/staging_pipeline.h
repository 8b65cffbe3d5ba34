// The staged path for pageable host memory, without CUDA: how a copy is cut into chunks (one DMA
// transfer each, through one slot of a pinned ring) and pieces (one thread's memcpy each), and the
// job that runs them on a CopyTeam so the CPU copies and the DMA engine overlap.
//
// Chunks grow from `first_chunk`, doubling, to `max_chunk`: the DMA engine (host-to-device) or
// the CPU (device-to-host) can start after a small first chunk instead of waiting for a whole
// slot, which is what makes copies of a few MiB fast; later chunks are large, so per-transfer
// costs vanish at 1 GiB. Each chunk is split into up to `threads` pieces of at least 64 KiB, and
// the whole team copies it, while earlier chunks are still moving on the DMA engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "copy_team.h"

namespace cm::core {

struct StagingShape {
  size_t first_chunk;  // bytes of the first chunk
  size_t max_chunk;    // bytes of one ring slot, the largest chunk
  int slots;           // ring slots
};

struct StagingChunk {
  size_t offset = 0, length = 0;  // within the copy
  int slot = 0;
  size_t first_piece = 0, pieces = 0;
};

struct StagingPiece {
  size_t chunk = 0;
  size_t offset = 0, length = 0;  // within the copy
};

struct StagingPlan {
  std::vector<StagingChunk> chunks;
  std::vector<StagingPiece> pieces;
};

// Cuts n bytes into chunks and pieces. Offsets of chunks and pieces are multiples of 4 KiB.
StagingPlan PlanStaging(size_t n, const StagingShape& shape, int threads);

// A failed DMA call: `code` is the transport's own (a cudaError_t for CUDA), 0 for success.
struct TransportStatus {
  int code = 0;
  std::string call;
  bool ok() const { return code == 0; }
};

// The DMA half: a ring of `slots` pinned buffers of max_chunk bytes and one queue of transfers.
// Issue and Wait are called from any team thread, concurrently for different chunks.
class StagingTransport {
 public:
  virtual ~StagingTransport() = default;
  virtual char* slot(int s) = 0;
  // Starts moving chunk `c` between its slot and the device, in the job's direction.
  virtual TransportStatus Issue(const StagingChunk& c) = 0;
  // Returns once the last transfer issued on slot `s` has finished.
  virtual TransportStatus Wait(int s) = 0;
  // Returns once every transfer issued has finished.
  virtual TransportStatus Finish() = 0;
};

enum class StagingDirection { kToDevice, kToHost };

// Runs one staged copy of n bytes between `host` and the device behind `transport` on `team`
// (the calling thread takes part), and returns when the data has arrived or the first failure.
// One copy at a time per transport; copies on different transports may share the team at once.
TransportStatus RunStaged(CopyTeam& team, StagingTransport& transport, StagingDirection direction,
                          char* host, size_t n, const StagingShape& shape, bool streaming);

}  // namespace cm::core
