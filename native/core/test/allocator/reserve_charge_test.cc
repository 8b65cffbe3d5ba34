// ReserveCharge: a pool's (or the graph reserve's) charge follows the driver's reserve, is taken
// before an allocation, and never goes past the group's budget. Against a stand-in pool with a
// 32 MiB chunk and a release threshold, as the H200's driver showed them, whose free reserve may
// be in pieces that a new allocation cannot use. No Node, no GPU.
#include "core/allocator/reserve_charge.h"

#include <algorithm>
#include <vector>

#include "core/test/check.h"

using namespace cm::core;

constexpr uint64_t MiB = 1ull << 20;

// A group with a budget, and a pool that reserves in chunks of 32 MiB (or the allocation rounded
// to 2 MiB, if larger) and keeps up to `threshold` of free reserve at a synchronisation. `pieces`:
// its free reserve is in pieces, and every allocation grows it by the allocation in 32 MiB chunks.
constexpr uint64_t kPage = 2 * MiB;
struct World {
  uint64_t budget, charged = 0;
  uint64_t reserve = 0, used = 0, threshold = 0;
  bool pieces = false;
  ReserveOps ops;
  explicit World(uint64_t b) : budget(b) {
    ops.take = [this](uint64_t n) {
      if (n > budget - charged) return false;
      charged += n;
      return true;
    };
    ops.give = [this](uint64_t n) { charged -= n; };
    ops.reserved = [this](uint64_t* r) {
      *r = reserve;
      return true;
    };
  }
  void Trim() { reserve = used; }
  void Alloc(uint64_t n) {
    used += n;
    if (pieces)
      reserve += (n + kPoolChunk - 1) / kPoolChunk * kPoolChunk;
    else if (used > reserve)
      reserve +=
          std::max<uint64_t>(32 * MiB, (used - reserve + 2 * MiB - 1) / (2 * MiB) * (2 * MiB));
  }
  void Free(uint64_t n) { used -= n; }
  void Sync() { reserve = std::max(used, std::min(reserve, threshold)); }
};

int main() {
  {
    // A small allocation may take a whole chunk: charged for it before (32 MiB), trued after.
    World w(256 * MiB);
    ReserveCharge c;
    CHECK(c.Prepare(4096, kPage, kPoolChunk, w.ops) && w.charged == 32 * MiB);
    w.Alloc(4096);
    CHECK(c.Done(true, 4096, w.ops));
    CHECK(c.live() == 4096 && c.charged() == 32 * MiB && w.charged == 32 * MiB);
    // Freed without a synchronisation: the pool keeps it, and so does the charge.
    w.Free(4096);
    c.Freed(4096, w.ops);
    CHECK(w.charged == 32 * MiB);
    // Synchronised with threshold 0: the reserve goes, and the charge with it at the next look.
    w.Sync();
    CHECK(c.Refresh(w.ops) && w.charged == 0 && c.charged() == 0);
  }
  {
    // RMM's async resource: the threshold raised, a whole peak kept reserved and charged.
    World w(2048 * MiB);
    w.threshold = UINT64_MAX;
    ReserveCharge c;
    CHECK(c.Prepare(1024 * MiB, kPage, kPoolChunk, w.ops));
    w.Alloc(1024 * MiB);
    CHECK(c.Done(true, 1024 * MiB, w.ops) && w.charged == 1024 * MiB);
    w.Free(1024 * MiB);
    c.Freed(1024 * MiB, w.ops);
    w.Sync();
    CHECK(c.Refresh(w.ops) && w.charged == 1024 * MiB);  // still reserved: still charged
    // Served from the reserve: charged until the driver answers for the growth it might have
    // needed, then trued back to the reserve.
    CHECK(c.Prepare(512 * MiB, kPage, kPoolChunk, w.ops) && w.charged == 1536 * MiB);
    w.Alloc(512 * MiB);
    CHECK(c.Done(true, 512 * MiB, w.ops) && w.charged == 1024 * MiB);
    // Near the budget the reserve plus that growth does not fit: refused until a trim gives the
    // free reserve back, then only what the live allocations need beside it is charged.
    w.budget = 1536 * MiB;
    CHECK(!c.Prepare(1024 * MiB, kPage, kPoolChunk, w.ops) && w.charged == 1024 * MiB);
    w.Trim();
    CHECK(c.Refresh(w.ops) && w.charged == 512 * MiB);
    CHECK(c.Prepare(1024 * MiB, kPage, kPoolChunk, w.ops) && w.charged == 1536 * MiB);
    w.Alloc(1024 * MiB);
    CHECK(c.Done(true, 1024 * MiB, w.ops) && w.charged == 1536 * MiB && w.reserve == 1536 * MiB);
    // Past the budget: refused, nothing more charged.
    CHECK(!c.Prepare(2 * MiB, kPage, kPoolChunk, w.ops) && w.charged == 1536 * MiB);
    // Freed, then trimmed (cuMemPoolTrimTo): the charge follows the reserve at the next look.
    w.Free(1024 * MiB);
    c.Freed(1024 * MiB, w.ops);
    CHECK(w.charged == 1536 * MiB);
    w.Trim();
    CHECK(c.Refresh(w.ops) && w.charged == 512 * MiB && c.live() == 512 * MiB);
    // The charge never falls below the live allocations, whatever the reserve says.
    w.reserve = 0;
    CHECK(c.Refresh(w.ops) && w.charged == 512 * MiB);
  }
  {
    // A free reserve in pieces (PyTorch's cudaMallocAsync backend on an H200 under 3 GiB: 373 MiB
    // free, 394 asked, the pool grew by 416): every allocation grows the pool by itself in chunks.
    // Charged before, the pool never holds more than its charge, and the charge never more than
    // the budget, over a churn with the caller's trim on refusal.
    World w(256 * MiB);
    w.threshold = UINT64_MAX;
    w.pieces = true;
    ReserveCharge c;
    std::vector<uint64_t> live;
    uint64_t seed = 7, granted = 0, refused = 0, most = 0;
    auto next = [&seed] {
      return (seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 33;
    };
    for (int step = 0; step < 2000; ++step) {
      if (!live.empty() && next() % 100 < 45) {
        size_t i = next() % live.size();
        w.Free(live[i]);
        c.Freed(live[i], w.ops);
        live.erase(live.begin() + static_cast<long>(i));
        if (next() % 4 == 0) w.Sync();
        continue;
      }
      uint64_t n = (1 + next() % 96) * MiB;
      bool ok = c.Prepare(n, kPage, kPoolChunk, w.ops);
      if (!ok) {
        w.Trim();
        ok = c.Refresh(w.ops) && c.Prepare(n, kPage, kPoolChunk, w.ops);
      }
      if (!ok) {
        ++refused;
        continue;
      }
      w.Alloc(n);
      most = std::max(most, w.reserve);
      CHECK(w.reserve <= w.charged && w.charged <= w.budget);
      CHECK(c.Done(true, n, w.ops));
      live.push_back(n);
      ++granted;
    }
    CHECK(granted > 500 && refused > 50 && most <= w.budget && most > w.budget - 64 * MiB);
    // Without the growth charged first, the pool outgrows its charge at once.
    World old(256 * MiB);
    old.threshold = UINT64_MAX;
    old.pieces = true;
    ReserveCharge o;
    CHECK(o.Prepare(200 * MiB, kPage, 0, old.ops));
    old.Alloc(200 * MiB);
    CHECK(o.Done(true, 200 * MiB, old.ops));
    old.Free(200 * MiB);
    o.Freed(200 * MiB, old.ops);
    CHECK(o.Prepare(100 * MiB, kPage, 0, old.ops) && old.charged == 224 * MiB);
    old.Alloc(100 * MiB);
    CHECK(old.reserve == 352 * MiB && old.reserve > old.budget);
  }
  {
    // The reserve grows by more than the chunks of the allocation: Done says so; the caller
    // frees, and the charge follows the reserve back down.
    World w(64 * MiB);
    ReserveCharge c;
    CHECK(c.Prepare(4096, kPage, kPoolChunk, w.ops) && w.charged == 32 * MiB);
    w.used += 4096;
    w.reserve += 96 * MiB;
    CHECK(!c.Done(true, 4096, w.ops));
    CHECK(w.charged <= w.budget);
    w.Free(4096);
    w.Trim();
    c.Freed(4096, w.ops);
    CHECK(w.charged == 0 && c.charged() == 0 && c.live() == 0);
  }
  {
    // A small allocation whose chunk the budget cannot afford is refused before the pool may
    // take it.
    World w(16 * MiB);
    ReserveCharge c;
    CHECK(!c.Prepare(4096, kPage, kPoolChunk, w.ops) && w.charged == 0);
  }
  {
    // A reserve the trim cannot give back (freed memory in pieces between live blocks): charged
    // as far as the group affords, and the pool may take nothing more until all of it is.
    World w(40 * MiB);
    ReserveCharge c;
    CHECK(c.Prepare(10 * MiB, kPage, kPoolChunk, w.ops));
    w.Alloc(10 * MiB);
    CHECK(c.Done(true, 10 * MiB, w.ops) && w.charged == 32 * MiB);  // a 32 MiB chunk
    w.reserve = 48 * MiB;  // the driver grew the pool meanwhile, and cannot trim it back
    CHECK(!c.Refresh(w.ops) && w.charged == 32 * MiB);
    // Under-charged: the next allocation, however small, must first charge the whole reserve.
    CHECK(!c.Prepare(MiB, kPage, kPoolChunk, w.ops) && w.charged == 32 * MiB);
    w.budget = 96 * MiB;  // another member left room: the reserve and a chunk beyond it
    CHECK(c.Prepare(MiB, kPage, kPoolChunk, w.ops) && w.charged == 80 * MiB);
  }
  {
    // A failed allocation gives back what was charged for it.
    World w(64 * MiB);
    ReserveCharge c;
    CHECK(c.Prepare(10 * MiB, kPage, kPoolChunk, w.ops) && w.charged == 32 * MiB);
    CHECK(c.Done(false, 10 * MiB, w.ops) && w.charged == 0);
  }
  {
    // The graph reserve: nothing live, the exec's bound charged before a launch, trued after.
    World w(512 * MiB);
    ReserveCharge g;
    CHECK(g.Prepare(256 * MiB, 1, 0, w.ops) && w.charged == 256 * MiB);
    w.reserve = 200 * MiB;  // the launch reused some
    CHECK(g.Done(true, 0, w.ops) && w.charged == 200 * MiB);
    w.reserve = 0;  // cudaDeviceGraphMemTrim
    CHECK(g.Refresh(w.ops) && w.charged == 0);
    // GiveBackUnused: everything beyond the live allocations.
    CHECK(g.Prepare(8 * MiB, 1, 0, w.ops) && w.charged == 8 * MiB);
    g.GiveBackUnused(w.ops);
    CHECK(w.charged == 0);
  }
  {
    // A reserve the driver cannot report (a pool gone with its context): nothing beyond the
    // allocations still live in it, once the driver has answered.
    World w(64 * MiB);
    w.ops.reserved = [](uint64_t*) { return false; };
    ReserveCharge c;
    CHECK(c.Prepare(3 * MiB, kPage, kPoolChunk, w.ops) && w.charged == 32 * MiB);
    CHECK(c.Done(true, 3 * MiB, w.ops) && w.charged == 3 * MiB);
    c.Freed(3 * MiB, w.ops);
    CHECK(w.charged == 0);
  }
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
