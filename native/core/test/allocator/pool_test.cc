// The pool's counters, per-allocation alignment, initial pool, limit changed at run time,
// TensorFlow's collection rule, the out-of-memory sentence and honest limit rounding, on the
// simulated device. No Node, no GPU.
#include "core/allocator/pool.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "core/allocator/budget.h"
#include "core/allocator/policy.h"
#include "core/test/check.h"

using namespace cm::core;

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

static PoolOptions Growth(uint64_t limit, bool gc = true) {
  PoolOptions o;
  o.limit = limit;
  o.limit_source = "test";
  o.allow_growth = true;
  o.garbage_collection = gc;
  return o;
}

// RMM's statistics_mr_tests PeakAllocations, on the pool's counters: requested bytes peak at
// 100 then 150 MiB, while the blocks' own figures (whole unsplit chunks) may be larger.
static void TestCounters() {
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  Pool pool(&up, Growth(4 * GiB));
  OomInfo oom;
  std::vector<Pool::Chunk*> live;
  for (int i = 0; i < 10; ++i) live.push_back(pool.Allocate(10 * MiB, &oom));
  for (size_t i = 0; i < live.size(); ++i) {  // every other one
    pool.Free(live[i]);
    live.erase(live.begin() + i);
  }
  PoolCounters c = pool.Stats().counters;
  CHECK(c.requested_bytes.current == 50 * MiB && c.allocations.current == 5);
  CHECK(c.requested_bytes.peak == 100 * MiB && c.allocations.peak == 10);
  CHECK(c.requested_bytes.allocated == 100 * MiB && c.allocations.allocated == 10);
  CHECK(c.requested_bytes.freed == 50 * MiB && c.allocations.freed == 5);
  for (int i = 0; i < 10; ++i) live.push_back(pool.Allocate(10 * MiB, &oom));
  for (Pool::Chunk* p : live) pool.Free(p);
  c = pool.Stats().counters;
  CHECK(c.requested_bytes.current == 0 && c.allocations.current == 0);
  CHECK(c.requested_bytes.peak == 150 * MiB && c.allocations.peak == 15);
  CHECK(c.requested_bytes.allocated == 200 * MiB && c.allocations.allocated == 20);
  CHECK(c.allocated_bytes.peak >= c.requested_bytes.peak);
  CHECK(c.reserved_bytes.current == pool.Stats().pool_bytes &&
        c.segments.current == pool.Regions().size());
  CHECK(c.segments.allocated == pool.Stats().num_region_allocs);

  // Resets: peaks to the current values; totals, OOMs, retries and collected bytes to 0.
  Pool::Chunk* keep = pool.Allocate(MiB, &oom);
  CHECK(!pool.Allocate(8 * GiB, &oom));
  pool.ResetPeakStats();
  c = pool.Stats().counters;
  CHECK(c.requested_bytes.peak == MiB && c.allocations.peak == 1);
  CHECK(c.reserved_bytes.peak == c.reserved_bytes.current);
  CHECK(c.num_ooms == 1 && c.allocations.allocated == 21);
  pool.ResetAccumulatedStats();
  c = pool.Stats().counters;
  CHECK(c.num_ooms == 0 && c.allocations.allocated == 0 && c.allocations.freed == 0);
  CHECK(c.requested_bytes.allocated == 0 && c.segments.allocated == 0);
  CHECK(c.allocations.current == 1 && c.requested_bytes.current == MiB);  // current untouched
  pool.Free(keep);
  c = pool.Stats().counters;
  CHECK(c.allocations.freed == 1 && c.requested_bytes.freed == MiB);
  // emptyCache gives the regions back: segments freed, reserved bytes freed.
  uint64_t held = c.reserved_bytes.current;
  CHECK(pool.EmptyCache() == held);
  c = pool.Stats().counters;
  CHECK(c.reserved_bytes.current == 0 && c.reserved_bytes.freed == held && c.segments.current == 0);

  // The stream-ordered backend's budget keeps the same counters.
  Budget b(100 * MiB, "t");
  CHECK(b.Charge(10 * MiB) && b.Charge(20 * MiB));
  b.Release(10 * MiB);
  CHECK(b.Charge(300));
  b.Uncharge(300);  // could not be had: neither an allocation nor a free
  PoolStats s = b.Stats();
  CHECK(s.counters.requested_bytes.peak == 30 * MiB && s.counters.allocations.peak == 2);
  CHECK(s.counters.allocations.allocated == 2 && s.counters.allocations.freed == 1);
  CHECK(s.counters.allocated_bytes.current == 20 * MiB && s.num_allocs == 2 && s.num_frees == 1);
  b.ResetAccumulated();
  CHECK(b.Stats().num_allocs == 0 && b.Stats().counters.allocations.current == 1);
}

// XLA's RespectsRequestedAlignment and StressAllocFree, on the simulated device.
static void TestAlignment() {
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  Pool pool(&up, Growth(GiB));
  OomInfo oom;
  Pool::Chunk* filler = pool.Allocate(256, &oom);  // moves the next free address off 512
  for (size_t align = 32; align <= 4096; align *= 2) {
    std::vector<Pool::Chunk*> got;
    for (int i = 0; i < 8; ++i) {
      Pool::Chunk* c = pool.Allocate(256, &oom, align);
      CHECK(c && Pool::Address(c) % align == 0);
      got.push_back(c);
    }
    for (Pool::Chunk* c : got) pool.Free(c);
  }
  // The padding before an aligned block is a free block that serves later requests, and frees
  // coalesce it back: the region ends as one free chunk.
  Pool::Chunk* a = pool.Allocate(1000, &oom, 1 << 20);
  CHECK(a && Pool::Address(a) % (1 << 20) == 0);
  uint64_t region = Pool::RegionOf(a);
  std::vector<BlockInfo> blocks = pool.Blocks(region);
  CHECK(blocks.size() == 4);
  if (blocks.size() == 4)  // filler, the padding (free), a, the rest (free)
    CHECK(blocks[0].in_use && !blocks[1].in_use && blocks[1].offset == 256 &&
          blocks[1].size == MiB - 256 && blocks[2].in_use && blocks[2].offset == MiB &&
          !blocks[3].in_use);
  Pool::Chunk* fill = pool.Allocate(MiB - 1024, &oom);  // best fit: the rest after a
  Pool::Chunk* pad = pool.Allocate(MiB - 256, &oom);    // exactly the padding
  CHECK(fill && pad && Pool::Address(pad) == region + 256);
  pool.Free(pad);
  pool.Free(fill);
  pool.Free(a);
  pool.Free(filler);
  for (const RegionInfo& r : pool.Regions()) CHECK(r.chunks == 1 && r.bytes_in_use == 0);

  // Randomized: sizes and alignments shuffled, blocks never overlap, all aligned, all coalesce.
  std::mt19937 rng(42);
  const size_t aligns[] = {64, 256, 512, 1024, 4096, 65536};
  const size_t sizes[] = {1, 128, 256, 700, 1024, 4096, 8192, 3 << 20};
  for (int iter = 0; iter < 20; ++iter) {
    std::vector<Pool::Chunk*> live;
    for (int i = 0; i < 200; ++i) {
      size_t al = aligns[rng() % 6], sz = sizes[rng() % 8];
      Pool::Chunk* c = pool.Allocate(sz, &oom, al);
      CHECK(c && Pool::Address(c) % al == 0 && Pool::BlockSize(c) >= sz);
      if (c) live.push_back(c);
    }
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (Pool::Chunk* c : live) spans.push_back({Pool::Address(c), Pool::BlockSize(c)});
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      CHECK(spans[i - 1].first + spans[i - 1].second <= spans[i].first);
    std::shuffle(live.begin(), live.end(), rng);
    for (Pool::Chunk* c : live) pool.Free(c);
  }
  for (const RegionInfo& r : pool.Regions()) CHECK(r.chunks == 1 && r.bytes_in_use == 0);
  CHECK(pool.Stats().bytes_in_use == 0 && pool.Stats().counters.allocations.current == 0);

  // An aligned request the limit cannot hold with its worst-case padding is refused whole.
  Pool tight(&up, Growth(4 * MiB));
  CHECK(!tight.Allocate(4 * MiB - 256, &oom, 4096) && oom.alignment == 4096);
  CHECK(oom.Message().find("aligned to 4.00 KiB") != std::string::npos);
}

// RMM's initial_pool_size: one region of exactly that size at creation, growth past it.
static void TestInitialPool() {
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  PoolOptions o = Growth(GiB);
  o.initial_bytes = 1000192;
  Pool pool(&up, o);
  CHECK(pool.Stats().pool_bytes == 1000192 && pool.Regions().size() == 1);
  OomInfo oom;
  Pool::Chunk* a = pool.Allocate(1000, &oom);
  CHECK(a && pool.Regions().size() == 1);  // served from the initial region
  Pool::Chunk* b = pool.Allocate(2 * MiB, &oom);
  CHECK(b && pool.Regions().size() == 2);  // growth past it
  pool.Free(a);
  pool.Free(b);
  // Initial equal to the limit (RMM's InitialAndMaxPoolSizeEqual).
  o.limit = o.initial_bytes;
  Pool same(&up, o);
  CHECK(same.Allocate(1000, &oom) && same.Stats().pool_bytes == 1000192);
  // A device that cannot give the initial region: an error at creation, nothing held.
  SimulatedUpstream small(GiB, 10 * MiB, 9, 0);
  PoolOptions big = Growth(GiB);
  big.initial_bytes = 20 * MiB;
  bool threw = false;
  try {
    Pool p(&small, big);
  } catch (const OomInfo& e) {
    threw = e.requested == 20 * MiB;
  }
  CHECK(threw && small.liveAllocations() == 0);
}

// PyTorch's set_per_process_memory_fraction on a live pool, 0 included.
static void TestLiveLimit() {
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  Pool pool(&up, Growth(GiB));
  OomInfo oom;
  Pool::Chunk* first = pool.Allocate(MiB, &oom);  // a 2 MiB region, half free
  Pool::Chunk* a = pool.Allocate(100 * MiB, &oom);
  CHECK(first && a);
  uint64_t held = pool.Stats().pool_bytes;
  pool.SetLimit(0, "memoryFraction 0");
  CHECK(pool.Stats().bytes_limit == 0 && pool.Stats().pool_bytes == held);  // frees nothing
  CHECK(!pool.Allocate(held, &oom));                                        // no new region
  CHECK(oom.limit == 0 && oom.limit_source == "memoryFraction 0");
  // A free block already in the pool is still handed out.
  Pool::Chunk* small = pool.Allocate(MiB, &oom);
  CHECK(small != nullptr);
  pool.Free(small);
  pool.SetLimit(10 * MiB, "lowered");
  CHECK(!pool.Allocate(held, &oom));  // the pool holds more than the limit: no region
  pool.Free(a);
  pool.Free(first);
  // Above the 10 MiB limit whatever is released: collection keeps the free regions.
  Pool::Chunk* b = pool.Allocate(held + MiB, &oom);
  CHECK(!b && pool.Stats().pool_bytes == held);
  pool.SetLimit(2 * held, "raised");
  b = pool.Allocate(held + MiB, &oom);
  CHECK(b && pool.Stats().bytes_limit == 2 * held);
  pool.Free(b);
  pool.SetLimit(1000031, "odd");
  CHECK(pool.Stats().bytes_limit == 999936);

  // The policy: fraction limits, 0 allowed at run time, rounding said.
  ResolvedLimit z = FractionLimit(0, 80 * GiB);
  CHECK(z.bytes == 0);
  bool threw = false;
  try {
    FractionLimit(1.5, GiB);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
  ResolvedLimit odd = FractionLimit(0.3, 1000000007);
  CHECK(odd.bytes == 300000000 &&
        odd.source.find("300000002 bytes rounded down to 300000000") != std::string::npos);
  PolicyOptions po;
  po.memory_limit = 1000031;
  ResolvedLimit l = ResolveLimit(po, {GiB, GiB}, 9, 0);
  CHECK(l.bytes == 999936 &&
        l.source.find("1000031 bytes rounded down to 999936 (a multiple of 256)") !=
            std::string::npos);
  po.memory_limit = 1000192;
  l = ResolveLimit(po, {GiB, GiB}, 9, 0);
  CHECK(l.bytes == 1000192 && l.source.find("rounded") == std::string::npos);
}

// A platform limit (MIG, MPS, dmem, HAMi): the default takes it when smaller; an explicit limit
// above its cap is refused with a message naming it, never cut.
static void TestPlatformLimit() {
  PolicyOptions po;
  po.platform_cap = 4 * GiB;
  po.platform_cap_source = "cgroup dmem.max drm/0000:03:00.0/vram0 4294967296 bytes in /pod";
  po.platform_default = 3 * GiB + 100;
  po.platform_default_source = "dmem headroom";
  ResolvedLimit l = ResolveLimit(po, {80 * GiB, 80 * GiB}, 9, 0);
  CHECK(l.bytes == 3 * GiB);  // rounded down to whole blocks
  CHECK(l.source.find("the platform's dmem headroom (below the ") == 0);
  CHECK(l.source.find("rounded down") != std::string::npos);
  // Larger than the default: the default stands.
  po.platform_default = 79 * GiB;
  l = ResolveLimit(po, {80 * GiB, 80 * GiB}, 9, 0);
  CHECK(l.bytes == 80 * GiB - 1800 * MiB && l.source.find("default:") == 0);
  po.memory_limit = 4 * GiB;
  CHECK(ResolveLimit(po, {80 * GiB, 80 * GiB}, 9, 0).bytes == 4 * GiB);
  po.memory_limit = 4 * GiB + 256;
  std::string why;
  try {
    ResolveLimit(po, {80 * GiB, 80 * GiB}, 9, 0);
  } catch (const std::invalid_argument& e) {
    why = e.what();
  }
  CHECK(why.find("memoryLimit (4.00 GiB) is above the platform's limit of 4.00 GiB") == 0);
  CHECK(why.find("dmem.max drm/0000:03:00.0/vram0") != std::string::npos);
  po.memory_limit.reset();
  po.memory_fraction = 0.5;
  why.clear();
  try {
    ResolveLimit(po, {80 * GiB, 80 * GiB}, 9, 0);
  } catch (const std::invalid_argument& e) {
    why = e.what();
  }
  CHECK(why.find("memoryFraction 0.5 of 80.00 GiB total (40.00 GiB) is above") == 0);
  po.memory_fraction = 0.05;
  CHECK(ResolveLimit(po, {80 * GiB, 80 * GiB}, 9, 0).bytes == 4096 * MiB);
}

// TensorFlow's DeallocateFreeRegions: free regions go back only when that makes room.
static void TestCollectionRule() {
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  Pool pool(&up, Growth(512 * MiB));
  OomInfo oom;
  std::vector<Pool::Chunk*> live;
  for (int i = 0; i < 128; ++i) live.push_back(pool.Allocate(4 * MiB, &oom));
  CHECK(pool.Stats().pool_bytes == 512 * MiB && pool.Regions().size() > 1);
  for (int i = 0; i < 127; ++i) pool.Free(live[i]);
  size_t regions = pool.Regions().size();
  uint64_t held = pool.Stats().pool_bytes;
  // 508 MiB cannot fit even with every free region back: nothing is released.
  CHECK(!pool.Allocate(512 * MiB - 4 * MiB, &oom));
  CHECK(pool.Regions().size() == regions && pool.Stats().pool_bytes == held);
  CHECK(pool.Stats().gc_released_bytes == 0 && pool.Stats().counters.num_alloc_retries == 0);
  // A request larger than any free block that fits once the free regions are back: they go,
  // and it succeeds.
  uint64_t free_regions = 0;
  for (const RegionInfo& r : pool.Regions())
    if (r.bytes_in_use == 0) free_regions += r.size;
  CHECK(pool.Stats().largest_free_block < free_regions);
  Pool::Chunk* fits = pool.Allocate(free_regions, &oom);
  CHECK(fits && pool.Stats().gc_released_bytes == free_regions);
  CHECK(pool.Stats().counters.num_alloc_retries == 1);
  pool.Free(fits);
  pool.Free(live[127]);
}

static PoolOptions Expandable(uint64_t limit) {
  PoolOptions o = Growth(limit);
  o.expandable = true;
  return o;
}

// Expandable segments on the simulated device (2 MiB granules, as the H100's).
static void TestExpandable() {
  OomInfo oom;
  {
    // TensorFlow's VirtualAllocatorPromotesReuse: what fails with regions (TestCollectionRule)
    // succeeds in one segment, as the freed blocks coalesce into one.
    SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
    Pool pool(&up, Expandable(512 * MiB));
    std::vector<Pool::Chunk*> live;
    for (int i = 0; i < 128; ++i) live.push_back(pool.Allocate(4 * MiB, &oom));
    CHECK(pool.Regions().size() == 1 && pool.Stats().pool_bytes == 512 * MiB);
    for (int i = 0; i < 127; ++i) pool.Free(live[i]);
    Pool::Chunk* big = pool.Allocate(512 * MiB - 4 * MiB, &oom);
    CHECK(big && pool.Regions().size() == 1 && pool.Stats().pool_bytes == 512 * MiB);
    CHECK(pool.reserved_range() == 80 * GiB && pool.granularity() == 2 * MiB);
    pool.Free(big);
    pool.Free(live[127]);
    CHECK(pool.EmptyCache() == 512 * MiB && up.mappedBytes() == 0);
    CHECK(pool.Regions().empty() && pool.Stats().counters.segments.current == 0);
  }
  {
    // Growth in granules at the end; the free end merges with what is mapped next.
    SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
    Pool pool(&up, Expandable(GiB));
    Pool::Chunk* a = pool.Allocate(1024, &oom);
    CHECK(a && pool.Stats().pool_bytes == 2 * MiB && up.mappedBytes() == 2 * MiB);
    Pool::Chunk* b = pool.Allocate(5 * MiB, &oom);  // 2 MiB - 1 KiB free at the end: 4 MiB more
    CHECK(b && pool.Stats().pool_bytes == 6 * MiB && Pool::Address(b) == Pool::Address(a) + 1024);
    // Less than 1 MiB would be left after it: the whole free end is handed out.
    CHECK(Pool::BlockSize(b) == 6 * MiB - 1024);
    std::vector<RegionInfo> r = pool.Regions();
    CHECK(r.size() == 1 && r[0].size == 6 * MiB && r[0].chunks == 2);
    Pool::Chunk* d = pool.Allocate(MiB, &oom);  // 2 MiB more; the 1 MiB after it is split off
    CHECK(d && Pool::BlockSize(d) == MiB && pool.Regions()[0].chunks == 4);
    pool.Free(d);
    // emptyCache unmaps the whole granules of the free end only.
    pool.Free(b);
    CHECK(pool.EmptyCache() == 6 * MiB && pool.Stats().pool_bytes == 2 * MiB);
    CHECK(pool.Blocks(Pool::RegionOf(a)).size() == 2);
    pool.Free(a);
    CHECK(pool.EmptyCache() == 2 * MiB && pool.Regions().empty() && up.mappedBytes() == 0);
    // Nothing mapped is held past the limit, in whole granules: 5 MiB allows two.
    pool.SetLimit(5 * MiB, "five");
    Pool::Chunk* c = pool.Allocate(4 * MiB, &oom);
    CHECK(c && pool.Stats().pool_bytes == 4 * MiB);
    CHECK(!pool.Allocate(1024, &oom) && oom.limit == 5 * MiB);
    pool.Free(c);
  }
  {
    // A full device refuses the mapping: the request fails and the pool is as it was.
    SimulatedUpstream up(80 * GiB, 3 * MiB, 9, 0);
    Pool pool(&up, Expandable(GiB));
    Pool::Chunk* a = pool.Allocate(MiB, &oom);
    CHECK(a && !pool.Allocate(2 * MiB, &oom) && pool.Stats().pool_bytes == 2 * MiB);
    CHECK(pool.Stats().num_ooms == 1 && up.mappedBytes() == 2 * MiB);
    pool.Free(a);
  }
  {
    // Recording: each mapping is a region event at its place in the segment.
    SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
    Pool pool(&up, Expandable(GiB));
    Recorder rec(100);
    pool.SetRecorder(&rec);
    Pool::Chunk* a = pool.Allocate(3 * MiB, &oom);
    pool.Free(a);
    pool.EmptyCache();
    pool.SetRecorder(nullptr);
    const auto& e = rec.events();
    CHECK(e.size() == 5 && e[0].action == TraceAction::kRegionAlloc && e[0].size == 4 * MiB &&
          e[3].action == TraceAction::kRegionFree && e[3].size == 4 * MiB);
  }
  {
    // An initial pool maps at creation; alignment works across the segment; everything goes back.
    SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
    PoolOptions o = Expandable(64 * GiB);
    o.initial_bytes = 64 * MiB;
    {
      Pool pool(&up, o);
      CHECK(up.mappedBytes() == 64 * MiB && up.reservations() == 1);
      std::mt19937 rng(7);
      std::vector<Pool::Chunk*> live;
      for (int i = 0; i < 2000; ++i) {
        if (!live.empty() && rng() % 3 == 0) {
          size_t k = rng() % live.size();
          pool.Free(live[k]);
          live.erase(live.begin() + k);
        } else {
          size_t al = size_t{256} << (rng() % 6);
          Pool::Chunk* c = pool.Allocate(1 + rng() % (8 * MiB), &oom, al);
          CHECK(c && Pool::Address(c) % al == 0);
          if (c) live.push_back(c);
        }
      }
      CHECK(pool.Regions().size() == 1);
      uint64_t inuse = 0;
      for (const BlockInfo& b : pool.Blocks(pool.Regions()[0].address))
        inuse += b.in_use ? b.size : 0;
      CHECK(inuse == pool.Stats().bytes_in_use);
    }  // destroyed with live blocks: all unmapped, the range given back
    CHECK(up.mappedBytes() == 0 && up.reservations() == 0);
  }
  {
    // An upstream without granules cannot have expandable segments.
    SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
    up.SetGranularity(0);
    bool threw = false;
    try {
      Pool pool(&up, Expandable(GiB));
    } catch (const UpstreamError&) {
      threw = true;
    }
    CHECK(threw);
  }
}

// The simulated device keeps mapped memory as ranges: a call costs the same whatever the number
// of granules it covers (per granule, 2^52 bytes in 2 MiB granules took minutes and gigabytes).
static void TestSimulatedMappingIsPerRange() {
  OomInfo oom;
  {
    SimulatedUpstream up(1ull << 53, 1ull << 53, 9, 0);
    Pool pool(&up, Expandable(1ull << 53));
    Pool::Chunk* huge = pool.Allocate(1ull << 52, &oom);
    CHECK(huge && up.mappedBytes() == 1ull << 52);
    pool.Free(huge);
    CHECK(pool.EmptyCache() == 1ull << 52 && up.mappedBytes() == 0);
  }
  {
    SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
    up.SetGranularity(256);
    PoolOptions o = Expandable(80 * GiB);
    o.initial_bytes = GiB;
    Pool pool(&up, o);
    CHECK(up.mappedBytes() == GiB && pool.Stats().pool_bytes == GiB);
  }
  {
    // Unmapping cuts ranges: the middle of one, across two, and what was never mapped.
    SimulatedUpstream up(GiB, GiB, 9, 0);
    uint64_t base = 0;
    CHECK(up.Reserve(GiB, &base).kind == UpstreamStatus::kOk);
    CHECK(up.Map(base, 8 * MiB).kind == UpstreamStatus::kOk);
    CHECK(up.Map(base + 8 * MiB, 8 * MiB).kind == UpstreamStatus::kOk);
    CHECK(up.Map(base + 32 * MiB, 4 * MiB).kind == UpstreamStatus::kOk);
    CHECK(up.mappedBytes() == 20 * MiB && up.GetMemInfo().free == GiB - 20 * MiB);
    up.Unmap(base + 2 * MiB, 2 * MiB);
    CHECK(up.mappedBytes() == 18 * MiB);
    up.Unmap(base + 14 * MiB, 20 * MiB);  // 2 MiB of the first range, 2 MiB of the last
    CHECK(up.mappedBytes() == 14 * MiB);
    up.Unmap(base + 100 * MiB, 2 * MiB);
    CHECK(up.mappedBytes() == 14 * MiB);
    up.Unmap(base, GiB);
    CHECK(up.mappedBytes() == 0 && up.GetMemInfo().free == GiB);
  }
}

// initialPoolBytes in an expandable segment: rounded up to granules, and held to the granules
// the limit allows.
static void TestExpandableInitialBytes() {
  CHECK(ExpandableInitialBytes(0, 3 * MiB, "l", 2 * MiB) == 0);
  CHECK(ExpandableInitialBytes(2 * MiB, 3 * MiB, "l", 2 * MiB) == 2 * MiB);
  CHECK(ExpandableInitialBytes(256, 3 * MiB, "l", 2 * MiB) == 2 * MiB);
  CHECK(ExpandableInitialBytes(4 * MiB, 4 * MiB, "l", 2 * MiB) == 4 * MiB);
  std::string said;
  try {
    ExpandableInitialBytes(3 * MiB, 3 * MiB, "memoryLimit 3.00 MiB", 2 * MiB);
  } catch (const std::invalid_argument& e) {
    said = e.what();
  }
  CHECK(said ==
        "initialPoolBytes (3.00 MiB) rounds up to whole 2.00 MiB granules, 4.00 MiB, which is more "
        "than expandable segments can map under the limit of 3.00 MiB (memoryLimit 3.00 MiB): at "
        "most 2.00 MiB, whole granules of 2.00 MiB");
  said.clear();
  try {
    ExpandableInitialBytes(4 * MiB, 3 * MiB, "l", 2 * MiB);
  } catch (const std::invalid_argument& e) {
    said = e.what();
  }
  CHECK(said.find("initialPoolBytes (4.00 MiB) is more than") == 0);
  // What it returns maps: a pool made with it does not fail.
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  PoolOptions o = Expandable(3 * MiB);
  o.initial_bytes = ExpandableInitialBytes(MiB, o.limit, "l", up.Granularity());
  Pool pool(&up, o);
  CHECK(pool.Stats().pool_bytes == 2 * MiB);
}

int main() {
  TestExpandableInitialBytes();
  TestSimulatedMappingIsPerRange();
  TestExpandable();
  TestCounters();
  TestAlignment();
  TestInitialPool();
  TestLiveLimit();
  TestCollectionRule();
  TestPlatformLimit();
  std::printf("pool features: %s (%d failure%s)\n", failures ? "FAILED" : "passed", failures,
              failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
