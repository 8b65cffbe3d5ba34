#include "core/allocator/upstream_contract.h"

#include <initializer_list>

namespace cm::core {

namespace {

std::string Bytes(uint64_t n) { return std::to_string(n) + " bytes"; }

std::string Failed(const std::string& what, const UpstreamStatus& s) {
  const char* kind = s.kind == UpstreamStatus::kOutOfMemory ? "out of memory" : "an error";
  return what + " failed as " + kind + " (" + s.call + ", code " + std::to_string(s.code) + ")";
}

// One run of the contract over one upstream: the broken rules, and the device's free memory at
// the start, which every step must come back to.
class Run {
 public:
  Run(Upstream& u, const ContractOptions& o) : u_(u), o_(o), start_(u.GetMemInfo()) {}

  void Expect(bool ok, const std::string& broken) {
    if (!ok) broken_.push_back(broken);
  }
  // Free memory is back where `before` had it (within the slack), after `what`.
  void Back(const MemInfo& before, const std::string& what) {
    const uint64_t now = u_.GetMemInfo().free;
    const uint64_t diff = now > before.free ? now - before.free : before.free - now;
    Expect(diff <= o_.slack, "after " + what + ", free memory is " + Bytes(now) + ", not the " +
                                 Bytes(before.free) + " before it");
  }
  // Free memory fell by `bytes` from `before` (exactly without slack, by at least bytes - slack).
  void Fell(const MemInfo& before, uint64_t bytes, const std::string& what) {
    const uint64_t now = u_.GetMemInfo().free;
    const uint64_t fell = before.free > now ? before.free - now : 0;
    const bool ok = o_.slack == 0 ? before.free >= now && fell == bytes : fell + o_.slack >= bytes;
    Expect(ok, "while " + what + " is held, free memory fell by " + Bytes(fell) + ", not " +
                   Bytes(bytes));
  }

  void Figures() {
    Expect(start_.total > 0, "the device's total is 0");
    Expect(start_.free <= start_.total, "free memory (" + Bytes(start_.free) +
                                            ") is above the total (" + Bytes(start_.total) + ")");
  }

  void Footprints() {
    uint64_t last = 0;
    for (uint64_t n :
         {uint64_t{1}, uint64_t{4095}, uint64_t{4096}, o_.small, o_.small + 1, o_.large}) {
      const uint64_t f = u_.Footprint(n);
      const std::string of = "Footprint(" + std::to_string(n) + ") = " + std::to_string(f);
      Expect(f >= n, of + " is below the request");
      Expect(u_.Footprint(f) == f,
             of + " is not whole: its own footprint is " + std::to_string(u_.Footprint(f)));
      Expect(f >= last,
             of + " is below the footprint of a smaller request (" + std::to_string(last) + ")");
      last = f;
    }
  }

  void Regions() {
    struct Region {
      uint64_t address, bytes;
    };
    std::vector<Region> held;
    uint64_t taken = 0;
    for (uint64_t n : {o_.small, o_.large, o_.small}) {
      uint64_t a = 0;
      const UpstreamStatus s = u_.Allocate(n, &a);
      if (s.kind != UpstreamStatus::kOk) {
        broken_.push_back(Failed("Allocate(" + std::to_string(n) + ")", s));
        continue;
      }
      Expect(a != 0, "Allocate(" + std::to_string(n) + ") gave address 0");
      for (const Region& r : held)
        Expect(a + n <= r.address || r.address + r.bytes <= a,
               "the region at " + std::to_string(a) + " overlaps the one at " +
                   std::to_string(r.address));
      held.push_back({a, n});
      taken += u_.Footprint(n);
    }
    Expect(u_.GetMemInfo().total == start_.total, "the total changed while regions were held");
    if (o_.resident) Fell(start_, taken, std::to_string(held.size()) + " regions");
    for (const Region& r : held) u_.Deallocate(r.address, r.bytes);
    Back(start_, "the regions were given back");
  }

  void Refusal() {
    if (o_.limit == 0) return;
    // Past the limit by more than the slack, what else may move the device's figures meanwhile.
    const uint64_t past = o_.limit + o_.slack + o_.small;
    uint64_t a = 0;
    UpstreamStatus s = u_.Allocate(past, &a);
    if (s.kind == UpstreamStatus::kOk) {
      broken_.push_back("Allocate(" + std::to_string(past) + "), past the limit of " +
                        Bytes(o_.limit) + ", succeeded");
      u_.Deallocate(a, past);
    } else {
      Expect(s.kind == UpstreamStatus::kOutOfMemory,
             Failed("Allocate past the limit", s) + ", not as out of memory");
    }
    if (o_.refusal_reclaims) {
      // Free memory may have risen (what the device gave back to try the request), never fallen;
      // the risen figure is the one the later steps come back to.
      const uint64_t now = u_.GetMemInfo().free;
      Expect(now + o_.slack >= start_.free, "after a refused allocation, free memory is " +
                                                Bytes(now) + ", below the " + Bytes(start_.free) +
                                                " before it");
      if (now > start_.free) start_.free = now;
    } else {
      Back(start_, "a refused allocation");
    }
    s = u_.Allocate(o_.small, &a);
    if (s.kind == UpstreamStatus::kOk)
      u_.Deallocate(a, o_.small);
    else
      broken_.push_back(Failed("Allocate(" + std::to_string(o_.small) + ") after a refusal", s));
  }

  void Granules() {
    const uint64_t g = u_.Granularity();
    if (g == 0) {
      Expect(!u_.Why().empty(), "an upstream without granules does not say why");
      uint64_t a = 0;
      const UpstreamStatus s = u_.Reserve(4ull << 20, &a);
      Expect(s.kind != UpstreamStatus::kOk, "Reserve succeeded on an upstream without granules");
      if (s.kind == UpstreamStatus::kOk) u_.Unreserve(a, 4ull << 20);
      return;
    }
    Maps(g);
    if (o_.map_refusal && o_.limit > 0) MapRefusal(g);
  }

  std::vector<std::string> Result() {
    Back(start_, "the contract");
    return broken_;
  }

 private:
  // Two maps into a reservation of four granules; the second, of two granules, is unmapped one
  // granule at a time.
  void Maps(uint64_t g) {
    uint64_t base = 0;
    UpstreamStatus s = u_.Reserve(4 * g, &base);
    if (s.kind != UpstreamStatus::kOk) {
      broken_.push_back(Failed("Reserve of four granules", s));
      return;
    }
    Expect(base % g == 0, "a reservation at " + std::to_string(base) +
                              " is not aligned to the granularity (" + Bytes(g) + ")");
    const MemInfo before = u_.GetMemInfo();
    s = u_.Map(base, g);
    const bool first = s.kind == UpstreamStatus::kOk;
    if (!first) broken_.push_back(Failed("Map of one granule", s));
    s = u_.Map(base + 2 * g, 2 * g);
    const bool second = s.kind == UpstreamStatus::kOk;
    if (!second) broken_.push_back(Failed("Map of two granules", s));
    Fell(before, (first ? g : 0) + (second ? 2 * g : 0), "mapped granules");
    if (second) {
      const MemInfo mapped = u_.GetMemInfo();
      u_.Unmap(base + 2 * g, g);
      const uint64_t now = u_.GetMemInfo().free;
      const uint64_t rose = now > mapped.free ? now - mapped.free : 0;
      Expect(o_.slack == 0 ? rose == g : rose + o_.slack >= g,
             "unmapping one granule of a two-granule map gave back " + Bytes(rose) + ", not " +
                 Bytes(g));
      u_.Unmap(base + 3 * g, g);
    }
    if (first) u_.Unmap(base, g);
    Back(before, "the granules were unmapped");
    u_.Unreserve(base, 4 * g);
  }

  // A map of whole granules past the limit is refused, and nothing of it stays mapped.
  void MapRefusal(uint64_t g) {
    const uint64_t n = (o_.limit / g + 1) * g;
    uint64_t base = 0;
    UpstreamStatus s = u_.Reserve(n, &base);
    if (s.kind != UpstreamStatus::kOk) {
      broken_.push_back(Failed("Reserve of " + Bytes(n) + " (past the limit)", s));
      return;
    }
    const MemInfo before = u_.GetMemInfo();
    s = u_.Map(base, n);
    if (s.kind == UpstreamStatus::kOk) {
      broken_.push_back("Map of " + Bytes(n) + ", past the limit of " + Bytes(o_.limit) +
                        ", succeeded");
      u_.Unmap(base, n);
    } else {
      Expect(s.kind == UpstreamStatus::kOutOfMemory,
             Failed("Map past the limit", s) + ", not as out of memory");
    }
    Back(before, "a refused map");
    u_.Unreserve(base, n);
  }

  Upstream& u_;
  const ContractOptions& o_;
  MemInfo start_;  // risen at a refusal only where options.refusal_reclaims allows it
  std::vector<std::string> broken_;
};

}  // namespace

std::vector<std::string> CheckUpstreamContract(Upstream& upstream, const ContractOptions& options) {
  Run run(upstream, options);
  run.Figures();
  run.Footprints();
  run.Regions();
  run.Refusal();
  run.Granules();
  return run.Result();
}

}  // namespace cm::core
