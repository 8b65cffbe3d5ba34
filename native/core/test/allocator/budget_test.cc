// Tests of the native core without Node and without a GPU; CI runs them under AddressSanitizer
// and UndefinedBehaviorSanitizer (scripts/core-tests.sh).
#include "core/allocator/budget.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <vector>

#include "core/allocator/policy.h"
#include "core/allocator/pool.h"
#include "core/test/check.h"

using namespace cm::core;

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

static void TestBudget() {
  Budget b(10 * MiB, "memoryLimit 10.00 MiB");
  CHECK(Budget::Round(1) == 256 && Budget::Round(256) == 256 && Budget::Round(257) == 512);
  CHECK(b.Charge(4 * MiB + 1));
  CHECK(b.in_use() == 4 * MiB + 256);
  CHECK(b.Charge(5 * MiB));
  CHECK(!b.Charge(MiB));  // 9 MiB + 256 in use: 1 MiB more would pass the limit
  CHECK(b.Charge(MiB - 256));
  CHECK(b.in_use() == 10 * MiB);
  CHECK(!b.Charge(1));
  PoolStats s = b.Stats();
  CHECK(s.num_allocs == 3 && s.num_ooms == 2 && s.bytes_in_use == 10 * MiB);
  CHECK(s.requested_bytes_in_use == 10 * MiB - 255);
  CHECK(s.largest_alloc_size == 5 * MiB);
  OomInfo o = b.Oom(MiB + 3);
  CHECK(o.rounded == MiB + 256 && o.limit == 10 * MiB && o.bytes_in_use == 10 * MiB);
  CHECK(o.limit_source == "memoryLimit 10.00 MiB");
  b.Release(5 * MiB);
  b.Uncharge(MiB - 256);  // memory that could not be had: neither an allocation nor a free
  s = b.Stats();
  CHECK(s.num_allocs == 2 && s.num_frees == 1 && b.live() == 1 && b.in_use() == 4 * MiB + 256);
  CHECK(s.peak_bytes_in_use == 10 * MiB);
  b.ResetPeak();
  CHECK(b.Stats().peak_bytes_in_use == 4 * MiB + 256);
  CHECK(!b.Charge(UINT64_MAX - 100));  // no overflow past the limit
  Budget zero(0, "memoryLimit 0 B");
  CHECK(!zero.Charge(1));
}

// Padding taken for an alignment is allocated, not requested: requestedBytes counts what the
// callers asked for, allocatedBytes and the limit what the blocks take.
static void TestPaddingIsNotRequested() {
  Budget b(10 * MiB, "memoryLimit 10.00 MiB");
  CHECK(b.Charge(1000, 1000 + 4096 - 256));  // 4 KiB aligned: 3840 bytes more, 4864 rounded
  CHECK(b.Charge(300));
  PoolStats s = b.Stats();
  CHECK(s.counters.requested_bytes.current == 1300 && s.requested_bytes_in_use == 1300);
  CHECK(s.counters.allocated_bytes.current == 4864 + 512 && s.bytes_in_use == 5376);
  CHECK(s.largest_alloc_size == 4864);
  CHECK(!b.Charge(1, 10 * MiB));  // the taken bytes are held to the limit
  b.Uncharge(1000, 1000 + 4096 - 256);
  b.Charge(1000, 1000 + 4096 - 256);
  b.Release(1000, 1000 + 4096 - 256);
  s = b.Stats();
  CHECK(s.counters.requested_bytes.current == 300 && s.counters.requested_bytes.allocated == 1300);
  CHECK(s.counters.requested_bytes.freed == 1000 && s.bytes_in_use == 512);
  CHECK(s.counters.allocated_bytes.freed == 4864 && s.num_allocs == 2 && s.num_frees == 1);
}

static void TestRecording() {
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  Pool pool(&up, {64 * MiB, "test", true, true});
  OomInfo oom;
  Pool::Chunk* before = pool.Allocate(1000, &oom);  // not recorded: id 0
  Recorder rec(100);
  pool.SetRecorder(&rec);
  Pool::Chunk* a = pool.Allocate(3 * MiB, &oom);  // a new 4 MiB region (growth doubled to fit)
  Pool::Chunk* b = pool.Allocate(1000, &oom);
  CHECK(Pool::BlockId(before) == 0 && Pool::BlockId(a) == 1 && Pool::BlockId(b) == 2);
  CHECK(!pool.Allocate(100 * MiB, &oom));
  pool.Free(a);
  pool.Free(before);  // allocated before recording: no event
  pool.Free(b);
  CHECK(pool.EmptyCache() > 0);
  pool.SetRecorder(nullptr);
  Pool::Chunk* c = pool.Allocate(10, &oom);
  CHECK(Pool::BlockId(c) == 0);
  pool.Free(c);
  const auto& e = rec.events();
  std::vector<TraceAction> want = {
      TraceAction::kRegionAlloc, TraceAction::kAlloc,      TraceAction::kAlloc,
      TraceAction::kOom,         TraceAction::kFree,       TraceAction::kFree,
      TraceAction::kRegionFree,  TraceAction::kRegionFree, TraceAction::kEmptyCache};
  CHECK(e.size() == want.size());
  for (size_t i = 0; i < e.size() && i < want.size(); ++i) CHECK(e[i].action == want[i]);
  if (e.size() == want.size()) {
    // 3 MiB in a 4 MiB region is not split off it (less than twice the request).
    CHECK(e[0].size == 4 * MiB && e[1].id == 1 && e[1].requested == 3 * MiB &&
          e[1].size == 4 * MiB && e[1].region == e[0].region && e[1].offset == 0);
    CHECK(e[3].requested == 100 * MiB && e[3].id == 0);
    CHECK(e[4].id == 1 && e[5].id == 2 && e[5].requested == 1000);
    CHECK(e[8].size == 6 * MiB);  // the 2 MiB and 4 MiB regions
    for (size_t i = 1; i < e.size(); ++i) CHECK(e[i].time_ns >= e[i - 1].time_ns);
  }
  CHECK(pool.Stats().num_region_allocs == 3);  // 2 MiB, 4 MiB, and one more for c after emptyCache
  Recorder small(2);
  pool.SetRecorder(&small);
  for (int i = 0; i < 3; ++i) pool.Free(pool.Allocate(256, &oom));
  CHECK(small.events().size() == 2 && small.dropped() > 0);
  pool.SetRecorder(nullptr);
}

static void TestBlocksAndGcCounters() {
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  Pool pool(&up, {8 * MiB, "test", true, true});
  OomInfo oom;
  Pool::Chunk* a = pool.Allocate(MiB, &oom);  // region of 2 MiB
  Pool::Chunk* b = pool.Allocate(512 * 1024, &oom);
  std::vector<RegionInfo> r = pool.Regions();
  CHECK(r.size() == 1);
  std::vector<BlockInfo> blocks = pool.Blocks(r[0].address);
  CHECK(blocks.size() == 3);
  if (blocks.size() == 3) {
    CHECK(blocks[0].offset == 0 && blocks[0].size == MiB && blocks[0].in_use &&
          blocks[0].requested == MiB);
    CHECK(blocks[1].offset == MiB && blocks[1].size == 512 * 1024 && blocks[1].in_use);
    CHECK(blocks[2].offset == MiB + 512 * 1024 && !blocks[2].in_use && blocks[2].requested == 0);
  }
  CHECK(pool.Blocks(12345).empty());
  pool.Free(a);
  pool.Free(b);
  // 2 MiB free in one region, 6 MiB left under the limit: 7 MiB needs the free region back.
  Pool::Chunk* big = pool.Allocate(7 * MiB, &oom);
  CHECK(big && pool.Stats().gc_released_bytes == 2 * MiB);
  pool.Free(big);
}

static void TestGrowthSequence() {
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  Pool pool(&up, {4 * GiB, "test", true, true});
  CHECK(pool.Stats().pool_bytes == 0);
  OomInfo oom;
  Pool::Chunk* a = pool.Allocate(1024, &oom);
  CHECK(a && pool.Stats().pool_bytes == 2 * MiB);
  CHECK(pool.Allocate(2 * MiB, &oom));
  CHECK(pool.Stats().pool_bytes == 6 * MiB);
  CHECK(pool.Allocate(100 * MiB, &oom));
  CHECK(pool.Regions().back().size == 128 * MiB);
  pool.Free(a);
  // The 100 MiB block is not split off its 128 MiB region (TensorFlow's rule: less than twice
  // the request and a remainder under 128 MiB), so it counts whole.
  CHECK(pool.Stats().bytes_in_use == 2 * MiB + 128 * MiB);
}

// The sizes of PyTorch's sentence, at each boundary of its format_size: `<=` boundaries, no
// TiB, two decimals rounded as printf rounds (a tie to even).
static void TestPyTorchSizes() {
  const struct {
    uint64_t bytes;
    const char* text;
  } table[] = {
      {0, "0 bytes"},
      {1, "1 bytes"},
      {1023, "1023 bytes"},
      {1024, "1024 bytes"},
      {1025, "1.00 KiB"},
      {1152, "1.12 KiB"},  // 1.125: a tie, to even
      {1536, "1.50 KiB"},
      {MiB - 1, "1024.00 KiB"},
      {MiB, "1024.00 KiB"},
      {MiB + 1, "1.00 MiB"},
      {20 * MiB, "20.00 MiB"},
      {GiB, "1024.00 MiB"},
      {GiB + 1, "1.00 GiB"},
      {3 * GiB / 2, "1.50 GiB"},
      {1024 * GiB, "1024.00 GiB"},
      {8000 * GiB, "8000.00 GiB"},
  };
  for (const auto& row : table) {
    std::string got = FormatSizeAsPyTorch(row.bytes);
    if (got != row.text)
      std::fprintf(stderr, "%llu: %s\n", (unsigned long long)row.bytes, got.c_str());
    CHECK(got == row.text);
  }
}

static void TestPreallocateAndOom() {
  SimulatedUpstream up(16 * GiB, 16 * GiB, 8, 0);
  Pool pool(&up, {GiB, "memoryLimit 1.00 GiB", false, true});
  CHECK(pool.Stats().pool_bytes == GiB && up.GetMemInfo().free == 15 * GiB);
  OomInfo oom;
  CHECK(pool.Allocate(GiB + 1, &oom) == nullptr);
  CHECK(oom.requested == GiB + 1 && oom.rounded == GiB + 256 && oom.limit == GiB);
  CHECK(oom.Message().rfind("CUDA out of memory. Tried to allocate 1.00 GiB. Simulated GPU 0 has "
                            "a total capacity of 16.00 GiB of which 15.00 GiB is free. Of the "
                            "allocated memory 0 bytes is allocated by this allocator, and 1024.00 "
                            "MiB is reserved by it but unallocated.",
                            0) == 0);
  CHECK(pool.Stats().num_ooms == 1 && pool.Stats().bytes_in_use == 0);
  // A preallocation the device cannot give is an error at creation.
  SimulatedUpstream small(16 * GiB, 512 * MiB, 8, 0);
  bool threw = false;
  try {
    Pool p(&small, {GiB, "x", false, true});
  } catch (const OomInfo&) {
    threw = true;
  }
  CHECK(threw && small.liveAllocations() == 0);
}

static void TestBackoff() {
  // The device refuses the full 2 MiB region twice; the pool backs off in 0.9x steps.
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  Pool pool(&up, {GiB, "t", true, true});
  up.FailNext(2);
  OomInfo oom;
  CHECK(pool.Allocate(1024, &oom));
  CHECK(pool.Stats().pool_bytes ==
        RoundBytes(static_cast<size_t>(RoundBytes(static_cast<size_t>(2 * MiB * 0.9)) * 0.9)));
}

// Counts what the pool asks of the device, and can refuse everything.
class CountingUpstream final : public Upstream {
 public:
  explicit CountingUpstream(Upstream* inner) : inner_(inner) {}
  UpstreamStatus Allocate(size_t bytes, uint64_t* address) override {
    ++calls;
    return inner_->Allocate(bytes, address);
  }
  void Deallocate(uint64_t address, size_t bytes) noexcept override {
    inner_->Deallocate(address, bytes);
  }
  MemInfo GetMemInfo() override { return inner_->GetMemInfo(); }
  int device() const override { return 0; }
  int ccMajor() const override { return 9; }
  int ccMinor() const override { return 0; }
  bool simulated() const override { return true; }
  int calls = 0;

 private:
  Upstream* inner_;
};

// Every request on a device that cannot serve it ends in out of memory after a bounded number of
// device calls. 0.9x of a size up to 2,304 bytes rounds back up to the same size, where a back-off
// loop that only shrinks by 0.9x would spin forever (TensorFlow's BFC test
// ExtendTerminatesWhenSubAllocatorAlwaysFails guards against the same).
static void TestExtendTerminates() {
  for (size_t step_from : {size_t{256}, size_t{2304}, size_t{2560}, size_t{2 * MiB}, size_t{GiB}})
    for (size_t request : {size_t{256}, size_t{512}, size_t{2048}, size_t{2304}}) {
      if (request > step_from) continue;
      size_t bytes = step_from;
      int steps = 0;
      while (bytes > request) {
        size_t next = BackoffStep(bytes, request);
        CHECK(next < bytes && next >= request && next % kMinBlock == 0);
        bytes = next;
        ++steps;
      }
      CHECK(bytes == request && steps <= 200);
    }
  // allowGrowth, a 1 GiB limit, 1,000 bytes free: every size from 1 byte to 4 KiB. The back-off
  // ends at the request itself, so up to 768 bytes (three blocks) still fits.
  int wrong = 0;
  for (size_t request = 1; request <= 4096; ++request) {
    SimulatedUpstream device(80 * GiB, 1000, 9, 0);
    CountingUpstream counting(&device);
    Pool pool(&counting, {GiB, "t", true, true});
    OomInfo oom;
    bool fits = RoundBytes(request) <= 1000;
    Pool::Chunk* c = pool.Allocate(request, &oom);
    if ((c != nullptr) != fits || counting.calls <= 0 || counting.calls > 200) ++wrong;
    if (c) {
      uint64_t region = pool.Stats().pool_bytes;  // the first step that fits: 768 bytes
      if (region < RoundBytes(request) || region > 1000) ++wrong;
      pool.Free(c);
    } else if (oom.rounded != RoundBytes(request) || oom.device_free != 1000 ||
               pool.Stats().num_ooms != 1 || pool.Stats().pool_bytes != 0) {
      ++wrong;
    }
  }
  CHECK(wrong == 0);
  // The same with garbage collection off, and with a region size grown large before the device
  // filled up: the back-off starts from 1 GiB.
  {
    SimulatedUpstream device(80 * GiB, 80 * GiB, 9, 0);
    CountingUpstream counting(&device);
    Pool pool(&counting, {64 * GiB, "t", true, false});
    OomInfo oom;
    Pool::Chunk* big = pool.Allocate(GiB, &oom);
    CHECK(big != nullptr);
    device.FailNext(1 << 30);
    counting.calls = 0;
    CHECK(pool.Allocate(GiB, &oom) == nullptr);  // no room left in the region
    CHECK(counting.calls > 0 && counting.calls <= 200);
    pool.Free(big);
  }
  // Preallocation of 2,048 bytes on a device with nothing free: creation fails at once.
  {
    SimulatedUpstream device(80 * GiB, 0, 9, 0);
    CountingUpstream counting(&device);
    bool threw = false;
    try {
      Pool pool(&counting, {2048, "memoryLimit 2.00 KiB", false, true});
    } catch (const OomInfo& o) {
      threw = o.rounded == 2048;
    }
    CHECK(threw && counting.calls == 1);
  }
  // The shape of RMM's PoolTest.ForceGrowth: a pool of at most 8,192 bytes over a device with
  // 6,000 free.
  {
    SimulatedUpstream device(80 * GiB, 6000, 9, 0);
    Pool pool(&device, {8192, "t", true, true});
    OomInfo oom;
    CHECK(pool.Allocate(1000, &oom) != nullptr);  // backs off to a 5,888-byte region
    CHECK(pool.Stats().pool_bytes == 5888);
    // 4,000 bytes take the whole 4,864-byte rest: TensorFlow splits a chunk only when it is at
    // least twice the request.
    Pool::Chunk* b = pool.Allocate(4000, &oom);
    CHECK(b != nullptr);
    CHECK(pool.Allocate(500, &oom) == nullptr);  // 112 bytes left on the device
    CHECK(pool.Allocate(2000, &oom) == nullptr);
    CHECK(pool.Stats().num_ooms == 2 && pool.Stats().pool_bytes == 5888);
    pool.Free(b);
    CHECK(pool.Allocate(500, &oom) != nullptr);
  }
}

static void TestPolicy() {
  CHECK(DefaultReserve(GiB, 9) == 225 * MiB);
  CHECK(DefaultReserve(8 * GiB, 6) == 500 * MiB);
  CHECK(DefaultReserve(8 * GiB, 7) == 1050 * MiB);
  CHECK(DefaultReserve(8 * GiB, 8) == 1536 * MiB);
  CHECK(DefaultReserve(8 * GiB, 9) == 1800 * MiB);
  PolicyOptions o;
  o.memory_fraction = 0.5;
  CHECK(ResolveLimit(o, {10 * GiB, 80 * GiB}, 9, 0).bytes == 40 * GiB);
  o.memory_limit = GiB;
  bool threw = false;
  try {
    ResolveLimit(o, {10 * GiB, 80 * GiB}, 9, 0);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
}

static void TestRandomized() {
  SimulatedUpstream up(80 * GiB, 80 * GiB, 9, 0);
  Pool pool(&up, {256 * MiB, "t", true, true});
  std::mt19937_64 rng(42);
  struct Live {
    Pool::Chunk* c;
    uint64_t addr;
    size_t size;
  };
  std::vector<Live> live;
  for (int step = 0; step < 200000; ++step) {
    if (live.empty() || rng() % 100 < 52) {
      size_t r = rng() % 100;
      size_t bytes = 1 + (r < 70 ? rng() % 65536 : r < 97 ? rng() % (4 * MiB) : rng() % (64 * MiB));
      OomInfo oom;
      Pool::Chunk* c = pool.Allocate(bytes, &oom);
      if (c) live.push_back({c, Pool::Address(c), Pool::BlockSize(c)});
    } else {
      size_t i = rng() % live.size();
      pool.Free(live[i].c);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 1000 == 0) {
      std::map<uint64_t, size_t> sorted;
      uint64_t in_use = 0;
      for (const Live& l : live) {
        sorted[l.addr] = l.size;
        in_use += l.size;
      }
      uint64_t end = 0;
      for (auto& [a, s] : sorted) {
        CHECK(a >= end);
        end = a + s;
      }
      PoolStats st = pool.Stats();
      CHECK(st.bytes_in_use == in_use);
      CHECK(st.pool_bytes <= 256 * MiB);
    }
  }
  for (const Live& l : live) pool.Free(l.c);
  for (const RegionInfo& r : pool.Regions()) CHECK(r.chunks == 1 && r.bytes_in_use == 0);
  CHECK(pool.EmptyCache() > 0 && pool.Stats().pool_bytes == 0 && up.liveAllocations() == 0);
}

int main() {
  TestPyTorchSizes();
  TestPaddingIsNotRequested();
  TestBudget();
  TestRecording();
  TestBlocksAndGcCounters();
  TestGrowthSequence();
  TestPreallocateAndOom();
  TestBackoff();
  TestExtendTerminates();
  TestPolicy();
  TestRandomized();
  std::printf("core tests: %s (%d failure%s)\n", failures ? "FAILED" : "passed", failures,
              failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
