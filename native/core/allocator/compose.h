// How createAllocator() puts an allocator together, without Node or a GPU: the device's upstream,
// wrapped in a group's upstream when the allocator joins a shared budget, and the pool's options
// with the limit resolved (a group member's default is the group budget, or the platform's default
// when that is smaller; otherwise ResolveLimit's rules) and the initial region and expandable
// segments checked against it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/allocator/group_upstream.h"
#include "core/allocator/ledger.h"
#include "core/allocator/policy.h"
#include "core/allocator/pool.h"
#include "core/allocator/upstream.h"

namespace cm::core {

// The group an allocator joins (createAllocator's `shared`): its ledger's folder and name, the
// device it is for (a uuid, or "simulated"), the budget (0: the group's) and where it came from,
// and the member's terms (request, own limit, wait: core/allocator/elastic.h).
struct GroupJoin {
  std::string dir, name, device;
  uint64_t budget = 0;
  std::string budget_source;
  int lock_timeout_ms = 0;
  MemberTerms terms;
};

struct AllocatorSpec {
  PolicyOptions policy;  // memoryFraction / memoryLimit / the platform's limits
  std::optional<GroupJoin> group;
  bool allow_growth = false;
  bool garbage_collection = true;
  uint64_t initial_bytes = 0;  // initialPoolBytes (0: none)
  bool expandable = false;
};

// What an option the upstream cannot do raises (expandable segments without virtual memory
// management): the binding reports it as ERR_NOT_SUPPORTED.
class NotSupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ComposedAllocator {
  std::unique_ptr<Upstream> upstream;  // the device's, or a GroupUpstream over it
  GroupUpstream* group = nullptr;      // the upstream, when it charges a group budget
  PoolOptions options;
};

// Checks an initial region (initialPoolBytes, either backend) against the pool's limit: a
// multiple of kMinBlock, at most `limit`. Throws std::invalid_argument naming the option and
// `limit_source` otherwise.
void CheckInitialBytes(uint64_t bytes, uint64_t limit, const std::string& limit_source);

// Composes an allocator over `device` (taken). Throws ShmError (joining or sizing the group's
// ledger), std::invalid_argument (conflicting or impossible limits, an initial region that is not
// a multiple of kMinBlock or above the limit; the message names the option) and NotSupported.
ComposedAllocator ComposeAllocator(std::unique_ptr<Upstream> device, const AllocatorSpec& spec);

}  // namespace cm::core
