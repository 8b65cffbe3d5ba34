// Tests of who may use a device's virtual-memory mappings: the owner always, peers once granted,
// each pair once; and the runs that adjacent granules make.
#include "core/device/peer_grants.h"

#include <cstdio>

#include "core/test/check.h"

using namespace cm::core;

namespace {

void TestGrants() {
  PeerGrants g;
  CHECK(g.Readers(0) == std::vector<int>{0});
  CHECK(!g.Grant(0, 0));  // the owner needs no grant
  CHECK(g.Readers(0) == std::vector<int>{0});
  CHECK(g.Grant(3, 0));
  CHECK(g.Grant(1, 0));
  CHECK(!g.Grant(1, 0));  // once per pair
  // Direction matters: 1 may use 0's mappings; 0 may not yet use 1's.
  CHECK((g.Readers(0) == std::vector<int>{0, 1, 3}));
  CHECK(g.Readers(1) == std::vector<int>{1});
  CHECK(g.Grant(0, 1));
  CHECK((g.Readers(1) == std::vector<int>{1, 0}));
  // Other owners' grants do not leak into a device's list.
  CHECK(g.Grant(5, 2));
  CHECK((g.Readers(0) == std::vector<int>{0, 1, 3}));
  CHECK((g.Readers(2) == std::vector<int>{2, 5}));
  g.Revoke(3, 0);
  CHECK((g.Readers(0) == std::vector<int>{0, 1}));
  CHECK(g.Grant(3, 0));  // a revoked grant can be made again
}

void TestRuns() {
  const uint64_t G = 2 << 20;
  CHECK(MappedRuns({}, G).empty());
  CHECK((MappedRuns({10 * G}, G) == std::vector<MappedRun>{{10 * G, G}}));
  // Two runs with a hole between them, and a run from a second reservation.
  std::vector<MappedRun> runs = MappedRuns({0, G, 2 * G, 4 * G, 5 * G, 100 * G}, G);
  CHECK((runs == std::vector<MappedRun>{{0, 3 * G}, {4 * G, 2 * G}, {100 * G, G}}));
}

}  // namespace

int main() {
  TestGrants();
  TestRuns();
  if (failures)
    std::fprintf(stderr, "%d check(s) failed\n", failures);
  else
    std::printf("peer grant tests passed\n");
  return failures ? 1 : 0;
}
