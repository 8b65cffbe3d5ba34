// The host-staged copy between two devices, without CUDA: for pairs that cannot reach each other
// (or when asked), the bytes go device-to-host into a pinned bounce buffer and host-to-device out
// of it, in chunks of at most one buffer. Two buffers are taken in turn, so the device-to-host copy
// of one chunk overlaps the host-to-device copy of the chunk before; a buffer is filled again only
// once its previous chunk has reached the destination.
#pragma once

#include <cstddef>
#include <vector>

namespace cm::core {

constexpr int kPeerBounceBuffers = 2;

struct PeerStagedChunk {
  size_t offset = 0, length = 0;  // within the copy
  int bounce = 0;                 // which bounce buffer it passes through
  // Whether the buffer's previous chunk must have reached the destination before this chunk's
  // device-to-host copy may start.
  bool wait_drained = false;
};

// The chunks of an n-byte copy through kPeerBounceBuffers buffers of `bounce_bytes` each (> 0), in
// the order they are issued; none for n == 0.
std::vector<PeerStagedChunk> PlanHostStagedPeerCopy(size_t n, size_t bounce_bytes);

}  // namespace cm::core
