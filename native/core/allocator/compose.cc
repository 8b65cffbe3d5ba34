#include "core/allocator/compose.h"

#include <algorithm>
#include <utility>

#include "core/allocator/ledger.h"

namespace cm::core {

namespace {

// A group member may, by default, use up to the whole group budget; the device's free memory at
// this moment (which the default limit would come from) does not matter. The platform's default
// still bounds it: past that the platform fails the allocations whatever the budget says.
ResolvedLimit LimitOf(const AllocatorSpec& spec, Upstream& up, GroupUpstream* group) {
  MemInfo mi = up.GetMemInfo();
  if (group && !spec.policy.memory_fraction && !spec.policy.memory_limit) {
    const PolicyOptions& p = spec.policy;
    std::string group_budget = "the budget of group '" + group->ledger().name() + "'";
    uint64_t budget = std::min<uint64_t>(group->ledger().budget(), mi.total);
    if (p.platform_default && *p.platform_default < budget)
      return {*p.platform_default / kMinBlock * kMinBlock,
              "the platform's " + p.platform_default_source + " (below " + group_budget + ")"};
    return {budget, group_budget};
  }
  // Whether the limit may oversubscribe the device, and by how much, depends on the memory the
  // upstream takes (managed memory spills into the host's).
  PolicyOptions policy = spec.policy;
  policy.managed = up.managed();
  policy.host_bytes = up.HostBytes();
  return ResolveLimit(policy, mi, up.ccMajor(), up.ccMinor());
}

}  // namespace

void CheckInitialBytes(uint64_t bytes, uint64_t limit, const std::string& limit_source) {
  if (bytes % kMinBlock)
    throw std::invalid_argument("initialPoolBytes must be a multiple of 256, got " +
                                std::to_string(bytes));
  if (bytes > limit)
    throw std::invalid_argument("initialPoolBytes (" + FormatBytes(bytes) +
                                ") is above the limit of " + FormatBytes(limit) + " (" +
                                limit_source + "): the limit is the pool's maximum size");
}

ComposedAllocator ComposeAllocator(std::unique_ptr<Upstream> device, const AllocatorSpec& spec) {
  ComposedAllocator out;
  out.upstream = std::move(device);
  if (spec.group) {
    const GroupJoin& g = *spec.group;
    std::unique_ptr<Ledger> ledger(Ledger::Join(g.dir, g.name, g.device, g.budget, g.budget_source,
                                                0, g.lock_timeout_ms, g.terms));
    auto up = std::make_unique<GroupUpstream>(std::move(out.upstream), std::move(ledger));
    out.group = up.get();
    out.upstream = std::move(up);
  }
  ResolvedLimit limit = LimitOf(spec, *out.upstream, out.group);
  PoolOptions& po = out.options;
  po.limit = limit.bytes;
  po.limit_source = limit.source;
  po.allow_growth = spec.allow_growth;
  po.garbage_collection = spec.garbage_collection;
  CheckInitialBytes(spec.initial_bytes, po.limit, po.limit_source);
  po.initial_bytes = spec.initial_bytes;
  po.expandable = spec.expandable;
  if (po.expandable && out.upstream->Granularity() == 0)
    throw NotSupported("expandableSegments needs CUDA virtual memory management, and " +
                       out.upstream->Why() + "; use allowGrowth without it");
  // A segment maps whole granules: initialPoolBytes is rounded up to them, and refused where
  // that does not fit under the limit.
  if (po.expandable)
    po.initial_bytes = ExpandableInitialBytes(po.initial_bytes, po.limit, po.limit_source,
                                              out.upstream->Granularity());
  if (out.group) out.group->ledger().SetLimit(po.limit);
  return out;
}

}  // namespace cm::core
