// GrantedCharge: a member charges the ledger in grants, never past the budget, and gives back what
// it holds beyond two grants. With a real ledger in a folder of its own; no Node, no GPU.
#include "core/allocator/grants.h"

#include <memory>
#include <string>
#include <vector>

#include "core/test/check.h"
#include "core/test/shared_dir.h"

using namespace cm::core;

constexpr uint64_t MiB = 1ull << 20;

static uint64_t Charged(const std::string& path) { return Ledger::Read(path).charged; }

int main() {
  std::string dir = MakeSharedDir("cm-grants");
  std::string path = Ledger::PathFor(dir, "g", "simulated");

  CHECK(GrantedCharge::GrantFor(2048 * MiB) == MiB);
  CHECK(GrantedCharge::GrantFor(128 * MiB) == 64 * 1024);
  CHECK(GrantedCharge::GrantFor(1ull << 40) == 64 * MiB);  // at most 64 MiB
  CHECK(GrantedCharge::GrantFor(100) == 0);

  {
    std::unique_ptr<Ledger> l(Ledger::Join(dir, "g", "simulated", 2048 * MiB, "limit", 0));
    GrantedCharge g(GrantedCharge::GrantFor(l->budget()));
    GroupRefusal r;
    // The first allocation charges itself and a grant.
    CHECK(g.Take(*l, 3 * MiB, &r));
    CHECK(g.used() == 3 * MiB && g.held() == 4 * MiB && Charged(path) == 4 * MiB);
    // One that fits in the grant charges nothing more.
    CHECK(g.Take(*l, MiB / 2, &r));
    CHECK(g.held() == 4 * MiB && Charged(path) == 4 * MiB);
    // Freed: kept while the spare is at most two grants.
    g.Give(*l, MiB);
    CHECK(g.used() == 5 * MiB / 2 && g.held() == 4 * MiB && Charged(path) == 4 * MiB);
    // More spare than two grants: back down to one, unless the ledger is to be left alone now;
    // then at the next Give.
    CHECK(g.Take(*l, 20 * MiB, &r));
    g.Give(*l, 10 * MiB, false);
    CHECK(g.held() - g.used() == 11 * MiB && Charged(path) == g.held());
    g.Give(*l, 10 * MiB);
    CHECK(g.held() - g.used() == MiB && Charged(path) == g.held());
    // The whole budget is usable: the grant is dropped when it does not fit, never the request.
    uint64_t rest = 2048 * MiB - g.used();
    CHECK(g.Take(*l, rest, &r));
    CHECK(g.used() == 2048 * MiB && Charged(path) == 2048 * MiB);
    // One byte more is refused, with the shortfall as the request.
    CHECK(!g.Take(*l, 1, &r));
    CHECK(r.requested == 1 && r.group.charged == 2048 * MiB);
    CHECK(g.used() == 2048 * MiB);
    g.Give(*l, 2048 * MiB);
    CHECK(g.used() == 0 && g.held() == MiB && Charged(path) == MiB);
  }

  {
    // Two members: one's spare grant is its own, and the other cannot use it.
    std::unique_ptr<Ledger> a(Ledger::Join(dir, "two", "simulated", 16 * MiB, "limit", 0));
    std::unique_ptr<Ledger> b(Ledger::Join(dir, "two", "simulated", 0, "", 0));
    GrantedCharge ga(GrantedCharge::GrantFor(a->budget())),
        gb(GrantedCharge::GrantFor(b->budget()));
    GroupRefusal r;
    CHECK(ga.grant() == 8 * 1024);
    CHECK(ga.Take(*a, 8 * MiB, &r));
    CHECK(!gb.Take(*b, 8 * MiB, &r));  // a holds 8 MiB and a grant
    CHECK(gb.Take(*b, 8 * MiB - ga.grant(), &r));
    CHECK(Ledger::Read(Ledger::PathFor(dir, "two", "simulated")).charged == 16 * MiB);
    // What cuMemGetInfo tells each: nothing left to b; a has its spare grant.
    GroupSnapshot g = a->Snapshot();
    MemInfo device{60 * MiB, 80 * MiB};
    MemInfo seen_a = GroupMemInfo(device, g.budget, g.charged, ga.spare());
    MemInfo seen_b = GroupMemInfo(device, g.budget, g.charged, gb.spare());
    CHECK(seen_a.total == 16 * MiB && seen_a.free == ga.grant());
    CHECK(seen_b.total == 16 * MiB && seen_b.free == gb.spare());
  }

  {
    // Idle members cannot starve the group: 40 members of a 128 MiB group each allocated and
    // freed, and what they hold unused leaves another member half of the budget and more.
    std::vector<std::unique_ptr<Ledger>> idle;
    std::vector<GrantedCharge> grants;
    GroupRefusal r;
    for (int i = 0; i < 40; ++i) {
      idle.emplace_back(Ledger::Join(dir, "idle", "simulated", 128 * MiB, "limit", 0));
      grants.emplace_back(GrantedCharge::GrantFor(128 * MiB));
      CHECK(grants.back().Take(*idle.back(), MiB + i * 4096, &r));
      grants.back().Give(*idle.back(), MiB + i * 4096);
    }
    uint64_t held = Ledger::Read(Ledger::PathFor(dir, "idle", "simulated")).charged;
    CHECK(held <= 40 * 2 * GrantedCharge::GrantFor(128 * MiB));
    CHECK(held <= 128 * MiB / 16);
    std::unique_ptr<Ledger> other(Ledger::Join(dir, "idle", "simulated", 0, "", 0));
    GrantedCharge g(GrantedCharge::GrantFor(other->budget()));
    CHECK(g.Take(*other, 64 * MiB, &r));
    CHECK(g.Take(*other, 128 * MiB - 64 * MiB - held, &r));
  }

  // GroupMemInfo: the budget caps the total and the free memory; the device caps both in turn.
  {
    MemInfo device{60 * MiB, 80 * MiB};
    CHECK(GroupMemInfo(device, 20 * MiB, 0, 0).free == 20 * MiB);
    CHECK(GroupMemInfo(device, 20 * MiB, 0, 0).total == 20 * MiB);
    CHECK(GroupMemInfo(device, 20 * MiB, 15 * MiB, 0).free == 5 * MiB);
    CHECK(GroupMemInfo(device, 20 * MiB, 15 * MiB, 2 * MiB).free == 7 * MiB);
    // Above the device: the device's figures.
    CHECK(GroupMemInfo(device, 100 * MiB, 0, 0).free == 60 * MiB);
    CHECK(GroupMemInfo(device, 100 * MiB, 0, 0).total == 80 * MiB);
    // A group charged past its budget (a budget lowered under it) leaves nothing but the spare.
    CHECK(GroupMemInfo(device, 20 * MiB, 30 * MiB, 0).free == 0);
    CHECK(GroupMemInfo(device, 20 * MiB, 30 * MiB, MiB).free == MiB);
    // No sum overflows.
    CHECK(GroupMemInfo({UINT64_MAX, UINT64_MAX}, UINT64_MAX, 0, UINT64_MAX).free == UINT64_MAX);
    CHECK(GroupMemInfo(device, 20 * MiB, 0, UINT64_MAX).free == 20 * MiB);
  }
  std::string cmd = "rm -rf " + dir;
  (void)!system(cmd.c_str());
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
