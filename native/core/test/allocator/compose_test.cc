// Tests of how createAllocator() composes an allocator, without Node and without a GPU: the
// limit each combination of options resolves to, a group member's default of the group budget
// (or the platform's, when smaller),
// the initial region and expandable segments checked against the limit and the upstream, and
// the limit a member writes into the group's ledger.
#include "core/allocator/compose.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/allocator/ledger.h"
#include "core/test/check.h"
#include "core/test/shared_dir.h"

using namespace cm::core;

namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

std::unique_ptr<Upstream> Device(uint64_t total, uint64_t free, uint64_t granularity = 0) {
  auto up = std::make_unique<SimulatedUpstream>(total, free, 9, 0);
  up->SetGranularity(granularity);
  return up;
}

// The message of the std::invalid_argument (or NotSupported) `f` throws, "" if none.
std::string Refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return std::string("invalid: ") + e.what();
  } catch (const NotSupported& e) {
    return std::string("unsupported: ") + e.what();
  }
  return "";
}

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

void TestLimits() {
  // No option: ResolveLimit's default, from the device's free memory.
  AllocatorSpec none;
  ComposedAllocator a = ComposeAllocator(Device(80 * GiB, 80 * GiB), none);
  PolicyOptions defaults;
  ResolvedLimit expected = ResolveLimit(defaults, MemInfo{80 * GiB, 80 * GiB}, 9, 0);
  CHECK(a.options.limit == expected.bytes && a.options.limit_source == expected.source);
  CHECK(a.group == nullptr && a.upstream != nullptr);
  CHECK(a.options.garbage_collection && !a.options.allow_growth && !a.options.expandable);

  AllocatorSpec limited;
  limited.policy.memory_limit = 4 * GiB;
  limited.allow_growth = true;
  limited.garbage_collection = false;
  limited.initial_bytes = 256 * MiB;
  ComposedAllocator b = ComposeAllocator(Device(80 * GiB, 80 * GiB), limited);
  CHECK(b.options.limit == 4 * GiB && Has(b.options.limit_source, "memoryLimit"));
  CHECK(b.options.allow_growth && !b.options.garbage_collection);
  CHECK(b.options.initial_bytes == 256 * MiB);

  AllocatorSpec both;
  both.policy.memory_limit = GiB;
  both.policy.memory_fraction = 0.5;
  CHECK(Has(Refusal([&] { ComposeAllocator(Device(8 * GiB, 8 * GiB), both); }), "invalid: "));
}

void TestInitialBytes() {
  AllocatorSpec odd;
  odd.policy.memory_limit = GiB;
  odd.initial_bytes = 1000;
  CHECK(Refusal([&] { ComposeAllocator(Device(8 * GiB, 8 * GiB), odd); }) ==
        "invalid: initialPoolBytes must be a multiple of 256, got 1000");
  AllocatorSpec above;
  above.policy.memory_limit = GiB;
  above.initial_bytes = 2 * GiB;
  std::string m = Refusal([&] { ComposeAllocator(Device(8 * GiB, 8 * GiB), above); });
  CHECK(Has(m, "invalid: initialPoolBytes (2.00 GiB) is above the limit of 1.00 GiB"));
  CHECK(Has(m, "memoryLimit"));
  CHECK(Refusal([] { CheckInitialBytes(GiB, GiB, "x"); }) == "");
}

void TestExpandable() {
  AllocatorSpec spec;
  spec.policy.memory_limit = GiB;
  spec.expandable = true;
  std::string m = Refusal([&] { ComposeAllocator(Device(8 * GiB, 8 * GiB, 0), spec); });
  CHECK(Has(m,
            "unsupported: expandableSegments needs CUDA virtual memory management, and the "
            "simulated device was made without granules"));
  ComposedAllocator a = ComposeAllocator(Device(8 * GiB, 8 * GiB, 2 * MiB), spec);
  CHECK(a.options.expandable);
}

void TestGroup(const std::string& dir) {
  AllocatorSpec spec;
  spec.group = GroupJoin{dir, "compose", "simulated", 3 * GiB, "budget 3.00 GiB", 1000, {}};
  // A member's default is the group budget, even with less free on the device now.
  ComposedAllocator a = ComposeAllocator(Device(8 * GiB, GiB), spec);
  CHECK(a.group != nullptr && a.upstream.get() == a.group);
  CHECK(a.options.limit == 3 * GiB);
  CHECK(a.options.limit_source == "the budget of group 'compose'");
  GroupSnapshot g = Ledger::Read(Ledger::PathFor(dir, "compose", "simulated"));
  CHECK(g.members.size() == 1);
  // ... capped by the device's total memory.
  AllocatorSpec small = spec;
  ComposedAllocator b = ComposeAllocator(Device(2 * GiB, 2 * GiB), small);
  CHECK(b.options.limit == 2 * GiB);
  // An explicit limit wins over the group budget.
  AllocatorSpec own = spec;
  own.policy.memory_limit = GiB;
  ComposedAllocator c = ComposeAllocator(Device(8 * GiB, 8 * GiB), own);
  CHECK(c.options.limit == GiB && Has(c.options.limit_source, "memoryLimit"));
  CHECK(Ledger::Read(Ledger::PathFor(dir, "compose", "simulated")).members.size() == 3);
  // The platform's default bounds a member's default when it is below the budget ...
  AllocatorSpec platform = spec;
  platform.policy.platform_cap = 2 * GiB;
  platform.policy.platform_cap_source = "MPS pinned limit";
  platform.policy.platform_default = 2 * GiB + 100;
  platform.policy.platform_default_source = "MPS pinned limit";
  ComposedAllocator d = ComposeAllocator(Device(8 * GiB, 8 * GiB), platform);
  CHECK(d.options.limit == 2 * GiB);  // whole blocks
  CHECK(d.options.limit_source ==
        "the platform's MPS pinned limit (below the budget of group 'compose')");
  // ... not when it is above it,
  platform.policy.platform_default = 5 * GiB;
  platform.policy.platform_cap = 5 * GiB;
  ComposedAllocator e = ComposeAllocator(Device(8 * GiB, 8 * GiB), platform);
  CHECK(e.options.limit == 3 * GiB && e.options.limit_source == "the budget of group 'compose'");
  // ... and an explicit limit above the platform's cap is refused, not cut.
  platform.policy.memory_limit = 6 * GiB;
  CHECK(Has(Refusal([&] { ComposeAllocator(Device(8 * GiB, 8 * GiB), platform); }),
            "memoryLimit (6.00 GiB) is above the platform's limit of 5.00 GiB"));
  // A bad group name is the ledger's ShmError.
  AllocatorSpec bad = spec;
  bad.group->name = "../escape";
  CHECK(ErrorCode([&] { ComposeAllocator(Device(8 * GiB, 8 * GiB), bad); }) != "");
}

// Whether a limit may exceed the device's memory comes from the upstream: a managed one, asked
// to oversubscribe, up to the device's and the host's memory together; a device upstream never.
void TestOversubscription() {
  auto managed = [](uint64_t host_bytes) {
    auto up = std::make_unique<SimulatedUpstream>(8 * GiB, 8 * GiB, 9, 0);
    up->SetManaged(host_bytes);
    return up;
  };
  AllocatorSpec over;
  over.policy.memory_limit = 12 * GiB;
  over.policy.oversubscribe = true;
  ComposedAllocator a = ComposeAllocator(managed(16 * GiB), over);
  CHECK(a.options.limit == 12 * GiB);
  CHECK(Has(a.options.limit_source, "oversubscribed"));
  CHECK(a.upstream->managed());
  bool refused = false;
  try {
    ComposeAllocator(Device(8 * GiB, 8 * GiB), over);
  } catch (const OversubscriptionRefused& e) {
    refused = Has(e.what(), "managed: true");
  }
  CHECK(refused);
  refused = false;
  try {
    ComposeAllocator(managed(2 * GiB), over);  // 12 GiB > 8 GiB + 2 GiB
  } catch (const OversubscriptionRefused& e) {
    refused = Has(e.what(), "together");
  }
  CHECK(refused);
  AllocatorSpec unasked = over;
  unasked.policy.oversubscribe = false;
  CHECK(Has(Refusal([&] { ComposeAllocator(managed(16 * GiB), unasked); }), "oversubscribe: true"));
}

}  // namespace

int main() {
  std::string dir = MakeSharedDir("cm-compose-test");
  TestLimits();
  TestInitialBytes();
  TestExpandable();
  TestGroup(dir);
  TestOversubscription();
  std::string cleanup = "rm -rf '" + dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
