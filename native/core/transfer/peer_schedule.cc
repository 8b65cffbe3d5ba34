#include "core/transfer/peer_schedule.h"

#include <algorithm>

namespace cm::core {

std::vector<PeerStagedChunk> PlanHostStagedPeerCopy(size_t n, size_t bounce_bytes) {
  std::vector<PeerStagedChunk> chunks;
  if (n == 0 || bounce_bytes == 0) return chunks;
  chunks.reserve((n - 1) / bounce_bytes + 1);
  for (size_t off = 0, i = 0; off < n; off += bounce_bytes, ++i) {
    PeerStagedChunk c;
    c.offset = off;
    c.length = std::min(bounce_bytes, n - off);
    c.bounce = static_cast<int>(i % kPeerBounceBuffers);
    c.wait_drained = i >= static_cast<size_t>(kPeerBounceBuffers);
    chunks.push_back(c);
  }
  return chunks;
}

}  // namespace cm::core
