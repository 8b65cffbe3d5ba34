// Tests of the host-staged peer copy's schedule: every byte passes once, in order, through the
// bounce buffers in turn, and no buffer is refilled before its previous chunk has drained. A
// simulated run copies through two small buffers and checks the bytes that arrive.
#include "core/transfer/peer_schedule.h"

#include <cstring>
#include <vector>

#include "core/test/check.h"

using namespace cm::core;

namespace {

void CheckCovers(const std::vector<PeerStagedChunk>& chunks, size_t n, size_t bounce) {
  size_t next = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const PeerStagedChunk& c = chunks[i];
    CHECK(c.offset == next);
    CHECK(c.length > 0 && c.length <= bounce);
    CHECK(c.bounce == static_cast<int>(i % kPeerBounceBuffers));
    CHECK(c.wait_drained == (i >= static_cast<size_t>(kPeerBounceBuffers)));
    next += c.length;
  }
  CHECK(next == n);
}

// Runs the schedule as the GPU code does, one buffer holding at most one chunk that has not
// drained yet: a chunk that refills a buffer without waiting would overwrite bytes not delivered.
void CheckSimulatedCopy(size_t n, size_t bounce) {
  std::vector<char> src(n), dst(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<char>(i * 131 + 7);
  std::vector<std::vector<char>> buffers(kPeerBounceBuffers, std::vector<char>(bounce));
  std::vector<const PeerStagedChunk*> pending(kPeerBounceBuffers, nullptr);
  auto drain = [&](int b) {
    if (!pending[b]) return;
    std::memcpy(dst.data() + pending[b]->offset, buffers[b].data(), pending[b]->length);
    pending[b] = nullptr;
  };
  std::vector<PeerStagedChunk> chunks = PlanHostStagedPeerCopy(n, bounce);
  for (const PeerStagedChunk& c : chunks) {
    if (c.wait_drained) drain(c.bounce);
    CHECK(pending[c.bounce] == nullptr);  // refilled only once drained
    std::memcpy(buffers[c.bounce].data(), src.data() + c.offset, c.length);
    pending[c.bounce] = &c;
  }
  for (int b = 0; b < kPeerBounceBuffers; ++b) drain(b);
  CHECK(dst == src);
}

}  // namespace

int main() {
  CHECK(PlanHostStagedPeerCopy(0, 64).empty());
  CHECK(PlanHostStagedPeerCopy(100, 0).empty());

  std::vector<PeerStagedChunk> one = PlanHostStagedPeerCopy(10, 64);
  CHECK(one.size() == 1);
  CHECK(one.size() == 1 && one[0].length == 10 && one[0].bounce == 0 && !one[0].wait_drained);

  std::vector<PeerStagedChunk> exact = PlanHostStagedPeerCopy(128, 64);
  CHECK(exact.size() == 2);
  CheckCovers(exact, 128, 64);

  std::vector<PeerStagedChunk> many = PlanHostStagedPeerCopy(3 * 64 + 5, 64);
  CHECK(many.size() == 4);
  CHECK(many.size() == 4 && many[3].length == 5 && many[3].bounce == 1 && many[3].wait_drained);
  CheckCovers(many, 3 * 64 + 5, 64);

  for (size_t n : {1u, 63u, 64u, 65u, 1000u, 4096u})
    for (size_t bounce : {1u, 7u, 64u, 5000u}) {
      CheckCovers(PlanHostStagedPeerCopy(n, bounce), n, bounce);
      CheckSimulatedCopy(n, bounce);
    }

  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
