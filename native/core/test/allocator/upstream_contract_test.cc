// The upstream contract (core/allocator/upstream_contract.h) over the core's upstreams: the
// simulated device (with and without granules, partly used, managed) and a group's over it (alone
// and beside another member); and over broken upstreams, each of which it must catch. The CUDA
// device's run is test/allocator/upstream-contract.test.js, on a GPU. No Node, no GPU.
#include "core/allocator/upstream_contract.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "core/allocator/group_upstream.h"
#include "core/test/check.h"
#include "core/test/shared_dir.h"

using namespace cm::core;

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

// Whether the contract holds, printing what it found broken.
static bool Keeps(Upstream& u, const ContractOptions& o, const char* name) {
  std::vector<std::string> broken = CheckUpstreamContract(u, o);
  for (const std::string& b : broken) std::fprintf(stderr, "%s: %s\n", name, b.c_str());
  return broken.empty();
}

// Whether the contract finds a broken rule whose sentence contains `words`.
static bool Catches(Upstream& u, const ContractOptions& o, const std::string& words) {
  for (const std::string& b : CheckUpstreamContract(u, o))
    if (b.find(words) != std::string::npos) return true;
  return false;
}

static ContractOptions Limit(uint64_t limit) {
  ContractOptions o;
  o.limit = limit;
  return o;
}

// A simulated device with one fault, for the contract to catch.
class Broken final : public Upstream {
 public:
  enum Fault {
    kNone,
    kKeepsFreed,
    kOverlaps,
    kErrorWhenFull,
    kMapsHalf,
    kGrowsFootprint,
    kTooFree,
    kReclaims,  // not a fault: holds 14 MiB for the process and gives it back to try a request
    kHoldsAtRefusal,
  };
  explicit Broken(Fault f) : fault_(f), inner_(8 * GiB, 8 * GiB, 9, 0) {
    if (fault_ == kReclaims) (void)inner_.Allocate(held_, &held_at_);
  }
  UpstreamStatus Allocate(size_t bytes, uint64_t* address) override {
    UpstreamStatus s = inner_.Allocate(bytes, address);
    if (fault_ == kReclaims && s.kind == UpstreamStatus::kOutOfMemory && held_at_) {
      inner_.Deallocate(held_at_, held_);
      held_at_ = 0;
      s = inner_.Allocate(bytes, address);
    }
    if (fault_ == kHoldsAtRefusal && s.kind == UpstreamStatus::kOutOfMemory && !leak_at_)
      (void)inner_.Allocate(16 * MiB, &leak_at_);
    if (fault_ == kErrorWhenFull && s.kind == UpstreamStatus::kOutOfMemory)
      return {UpstreamStatus::kError, 999, "broken cudaMalloc"};
    if (fault_ == kOverlaps && s.kind == UpstreamStatus::kOk) {
      if (first_ == 0) first_ = *address;
      overlapped_[*address] = first_;
      *address = first_;
    }
    return s;
  }
  void Deallocate(uint64_t address, size_t bytes) noexcept override {
    if (fault_ == kKeepsFreed) return;
    if (fault_ == kOverlaps) {
      // Gives back one of the regions handed out at `address` (the real one behind it).
      for (auto it = overlapped_.begin(); it != overlapped_.end(); ++it)
        if (it->second == address) {
          inner_.Deallocate(it->first, bytes);
          overlapped_.erase(it);
          return;
        }
    }
    inner_.Deallocate(address, bytes);
  }
  MemInfo GetMemInfo() override {
    MemInfo m = inner_.GetMemInfo();
    if (fault_ == kTooFree) m.free = m.total + 1;
    return m;
  }
  int device() const override { return 0; }
  int ccMajor() const override { return 9; }
  int ccMinor() const override { return 0; }
  bool simulated() const override { return true; }
  uint64_t Footprint(uint64_t bytes) const override {
    return fault_ == kGrowsFootprint ? bytes + 1 : bytes;
  }
  uint64_t Granularity() const override { return inner_.Granularity(); }
  UpstreamStatus Reserve(uint64_t bytes, uint64_t* address) override {
    return inner_.Reserve(bytes, address);
  }
  void Unreserve(uint64_t address, uint64_t bytes) noexcept override {
    inner_.Unreserve(address, bytes);
  }
  // kMapsHalf: a map past free memory maps what fits and fails, leaving that mapped.
  UpstreamStatus Map(uint64_t address, uint64_t bytes) override {
    const uint64_t free = inner_.GetMemInfo().free;
    if (fault_ == kMapsHalf && bytes > free) {
      const uint64_t g = inner_.Granularity(), fits = free / g * g;
      if (fits > 0) (void)inner_.Map(address, fits);
      return {UpstreamStatus::kOutOfMemory, 2, "broken cuMemMap"};
    }
    return inner_.Map(address, bytes);
  }
  void Unmap(uint64_t address, uint64_t bytes) noexcept override { inner_.Unmap(address, bytes); }
  SimulatedUpstream& inner() { return inner_; }

 private:
  Fault fault_;
  SimulatedUpstream inner_;
  uint64_t first_ = 0;
  std::map<uint64_t, uint64_t> overlapped_;
  uint64_t held_ = 14 * MiB, held_at_ = 0, leak_at_ = 0;  // real address -> the address handed out
};

int main() {
  // The simulated device: whole, partly used, without granules, managed (no limit: it may take
  // more than the device has).
  {
    SimulatedUpstream whole(8 * GiB, 8 * GiB, 9, 0);
    CHECK(Keeps(whole, Limit(8 * GiB), "simulated"));
    CHECK(whole.liveAllocations() == 0 && whole.mappedBytes() == 0 && whole.reservations() == 0);
    SimulatedUpstream used(8 * GiB, 3 * GiB, 8, 0);
    CHECK(Keeps(used, Limit(3 * GiB), "simulated, partly used"));
    SimulatedUpstream flat(8 * GiB, 8 * GiB, 6, 0);
    flat.SetGranularity(0);
    CHECK(Keeps(flat, Limit(8 * GiB), "simulated without granules"));
    SimulatedUpstream managed(8 * GiB, 8 * GiB, 9, 0);
    managed.SetManaged(16 * GiB);
    CHECK(Keeps(managed, ContractOptions{}, "simulated managed"));
  }

  // A group's upstream: the budget is the limit; alone, and with another member holding part of
  // it. Every charge comes back.
  std::string dir = MakeSharedDir("cm-contract");
  {
    auto inner = std::make_unique<SimulatedUpstream>(8 * GiB, 8 * GiB, 9, 0);
    GroupUpstream group(std::move(inner), std::unique_ptr<Ledger>(Ledger::Join(
                                              dir, "c", "simulated", GiB, "limit", 0)));
    CHECK(Keeps(group, Limit(GiB), "group"));
    CHECK(group.refused());  // the refusals past the budget were the group's
    CHECK(group.ledger().Snapshot().charged == 0);

    std::unique_ptr<Ledger> other(Ledger::Join(dir, "c", "simulated", 0, "", 0));
    GroupRefusal r;
    CHECK(other->Charge(700 * MiB, &r));
    group.ClearRefusal();
    CHECK(Keeps(group, Limit(GiB - 700 * MiB), "group beside another member"));
    CHECK(group.refused() && group.ledger().Snapshot().charged == 700 * MiB);
    other->Release(700 * MiB);
  }
  {
    // A budget above the device's free memory: the device refuses first.
    auto inner = std::make_unique<SimulatedUpstream>(8 * GiB, 2 * GiB, 9, 0);
    GroupUpstream group(std::move(inner), std::unique_ptr<Ledger>(Ledger::Join(
                                              dir, "d", "simulated", 4 * GiB, "limit", 0)));
    CHECK(Keeps(group, Limit(2 * GiB), "group above the device"));
    CHECK(!group.refused() && group.ledger().Snapshot().charged == 0);
  }

  // The contract catches each broken rule (and passes the same upstream unbroken).
  {
    Broken none(Broken::kNone);
    CHECK(Keeps(none, Limit(8 * GiB), "broken: none"));
    Broken keeps(Broken::kKeepsFreed);
    CHECK(Catches(keeps, Limit(8 * GiB), "after the regions were given back"));
    Broken overlaps(Broken::kOverlaps);
    CHECK(Catches(overlaps, Limit(8 * GiB), "overlaps the one at"));
    Broken error(Broken::kErrorWhenFull);
    CHECK(Catches(error, Limit(8 * GiB), "not as out of memory"));
    Broken half(Broken::kMapsHalf);
    CHECK(Catches(half, Limit(8 * GiB), "after a refused map"));
    half.inner().Unmap(0, UINT64_MAX);  // what the broken map left
    Broken grows(Broken::kGrowsFootprint);
    CHECK(Catches(grows, Limit(8 * GiB), "is not whole"));
    Broken too(Broken::kTooFree);
    CHECK(Catches(too, Limit(8 * GiB), "is above the total"));
    // A limit the upstream does not keep: the device gives more than the caller says it may.
    SimulatedUpstream roomy(8 * GiB, 8 * GiB, 9, 0);
    CHECK(Catches(roomy, Limit(GiB), "past the limit of 1073741824 bytes, succeeded"));
  }

  // A device that gives back memory it held for the process to try a request that does not fit,
  // as a GPU's driver does. Asked past its free memory, the request then succeeds; asked past its
  // whole memory, as the addon asks a GPU, it is refused, free memory rises, and the contract holds
  // only where refusal_reclaims allows the rise.
  {
    Broken reclaims(Broken::kReclaims);
    CHECK(Catches(reclaims, Limit(8 * GiB - 14 * MiB), "succeeded"));
    Broken again(Broken::kReclaims);
    CHECK(Catches(again, Limit(8 * GiB), "after a refused allocation, free memory is"));
    Broken allowed(Broken::kReclaims);
    ContractOptions o = Limit(8 * GiB);
    o.refusal_reclaims = true;
    CHECK(Keeps(allowed, o, "reclaims, allowed"));
    CHECK(allowed.inner().GetMemInfo().free == 8 * GiB);
    // The rise allowed, a refusal that leaves memory held is still caught, and so are regions not
    // given back.
    Broken holds(Broken::kHoldsAtRefusal);
    CHECK(Catches(holds, o, "after a refused allocation, free memory is"));
    Broken keeps(Broken::kKeepsFreed);
    CHECK(Catches(keeps, o, "after the regions were given back"));
  }

  std::string cmd = "rm -rf " + dir;
  CHECK(std::system(cmd.c_str()) == 0);
  std::printf("upstream contract tests: %s (%d failures)\n", failures ? "FAILED" : "passed",
              failures);
  return failures ? 1 : 0;
}
