// Managed memory on the simulated device: regions that spill past the device's memory into a
// host-memory size, and the oversubscription rule (a limit above the device's memory only for a
// managed allocator that asks for it). No Node, no GPU.
#include <string>
#include <vector>

#include "core/allocator/policy.h"
#include "core/allocator/pool.h"
#include "core/test/check.h"

using namespace cm::core;

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

static bool Refused(const PolicyOptions& o, const MemInfo& mi, const char* words) {
  try {
    ResolveLimit(o, mi, 9, 0);
  } catch (const OversubscriptionRefused& e) {
    return std::string(e.what()).find(words) != std::string::npos;
  }
  return false;
}

static void TestPolicy() {
  MemInfo mi{8 * GiB, 8 * GiB};
  PolicyOptions o;
  o.memory_fraction = 1.5;
  CHECK(Refused(o, mi, "only a managed allocator"));
  o.managed = true;
  CHECK(Refused(o, mi, "pass oversubscribe: true"));
  o.oversubscribe = true;
  ResolvedLimit l = ResolveLimit(o, mi, 9, 0);
  CHECK(l.bytes == 12 * GiB);
  CHECK(l.source.find("oversubscribed") != std::string::npos);
  o.host_bytes = 2 * GiB;  // 8 + 2 < 12
  CHECK(Refused(o, mi, "together"));
  o.host_bytes = 4 * GiB;
  CHECK(ResolveLimit(o, mi, 9, 0).bytes == 12 * GiB);

  PolicyOptions b;
  b.memory_limit = 9 * GiB;
  CHECK(Refused(b, mi, "only a managed allocator"));
  b.managed = true;
  CHECK(Refused(b, mi, "oversubscribe: true"));
  b.oversubscribe = true;
  CHECK(ResolveLimit(b, mi, 9, 0).bytes == 9 * GiB);
  // Within the device's memory nothing changes, asked for or not.
  PolicyOptions c;
  c.memory_fraction = 0.5;
  c.managed = true;
  CHECK(ResolveLimit(c, mi, 9, 0).bytes == 4 * GiB);
  c.memory_fraction = 1.0;
  CHECK(ResolveLimit(c, mi, 9, 0).bytes == 8 * GiB);
}

static void TestSimulatedManaged() {
  // Device memory first, then host memory; both come back.
  SimulatedUpstream up(8 * GiB, 8 * GiB, 9, 0);
  up.SetManaged(4 * GiB);
  CHECK(up.managed() && up.HostBytes() == 4 * GiB);
  uint64_t a = 0, b = 0, c = 0;
  CHECK(up.Allocate(6 * GiB, &a).kind == UpstreamStatus::kOk);
  CHECK(up.GetMemInfo().free == 2 * GiB && up.hostFree() == 4 * GiB);
  CHECK(up.Allocate(5 * GiB, &b).kind == UpstreamStatus::kOk);
  CHECK(up.GetMemInfo().free == 0 && up.hostFree() == 1 * GiB);
  CHECK(up.Allocate(2 * GiB, &c).kind == UpstreamStatus::kOutOfMemory);
  up.Deallocate(b, 5 * GiB);
  CHECK(up.GetMemInfo().free == 2 * GiB && up.hostFree() == 4 * GiB);
  up.Deallocate(a, 6 * GiB);
  CHECK(up.GetMemInfo().free == 8 * GiB && up.hostFree() == 4 * GiB);
  // Without managed memory the device alone counts.
  SimulatedUpstream plain(8 * GiB, 8 * GiB, 9, 0);
  CHECK(plain.Allocate(9 * GiB, &a).kind == UpstreamStatus::kOutOfMemory);
}

static void TestOversubscribedPool() {
  SimulatedUpstream up(8 * GiB, 8 * GiB, 9, 0);
  up.SetManaged(8 * GiB);
  PolicyOptions po;
  po.memory_fraction = 1.5;
  po.managed = po.oversubscribe = true;
  po.host_bytes = up.HostBytes();
  ResolvedLimit l = ResolveLimit(po, up.GetMemInfo(), 9, 0);
  PoolOptions o;
  o.limit = l.bytes;
  o.limit_source = l.source;
  o.allow_growth = true;
  Pool pool(&up, o);
  OomInfo oom;
  std::vector<Pool::Chunk*> live;
  for (int i = 0; i < 11; ++i) {  // 11 GiB: 8 on the device, 3 on the host
    Pool::Chunk* p = pool.Allocate(GiB, &oom);
    CHECK(p != nullptr);
    live.push_back(p);
  }
  CHECK(pool.Stats().bytes_in_use == 11 * GiB);
  CHECK(up.GetMemInfo().free == 0);
  CHECK(up.hostFree() < 8 * GiB && up.hostFree() >= 8 * GiB - (12 * GiB - 8 * GiB));
  // The limit binds at 12 GiB, not the device or the host.
  CHECK(pool.Allocate(2 * GiB, &oom) == nullptr);
  CHECK(oom.limit == 12 * GiB);
  Pool::Chunk* last = pool.Allocate(GiB - 256, &oom);
  CHECK(last != nullptr);
  live.push_back(last);
  for (Pool::Chunk* p : live) pool.Free(p);
  pool.EmptyCache();
  CHECK(up.GetMemInfo().free == 8 * GiB && up.hostFree() == 8 * GiB);

  // Preallocated: the whole oversubscribed limit is one region at creation.
  SimulatedUpstream up2(8 * GiB, 8 * GiB, 9, 0);
  up2.SetManaged(8 * GiB);
  PoolOptions pre = o;
  pre.allow_growth = false;
  Pool whole(&up2, pre);
  CHECK(whole.Stats().pool_bytes == 12 * GiB);
  CHECK(up2.GetMemInfo().free == 0 && up2.hostFree() == 4 * GiB);
  Pool::Chunk* big = whole.Allocate(10 * GiB, &oom);
  CHECK(big != nullptr);
  whole.Free(big);
}

int main() {
  TestPolicy();
  TestSimulatedManaged();
  TestOversubscribedPool();
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
