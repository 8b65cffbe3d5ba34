// How an allocator's byte limit is chosen from its options and the device (TensorFlow's rules,
// DESIGN.md "Allocation policies"), kept apart from the pool so each can be tested alone.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/allocator/upstream.h"

namespace cm::core {

struct PolicyOptions {
  std::optional<double> memory_fraction;  // of total device memory, in (0, 1]; above 1: below
  std::optional<uint64_t> memory_limit;   // bytes
  // A limit above the device's memory (a fraction above 1, as TensorFlow's
  // per_process_gpu_memory_fraction allows with unified memory) is oversubscription: accepted
  // only for managed memory and when asked for, up to the device's memory plus `host_bytes`
  // (where known, else unbounded).
  bool managed = false;
  bool oversubscribe = false;
  uint64_t host_bytes = 0;
  // The platform's limit on this device (a MIG slice, an MPS client's pinned limit, a cgroup's
  // dmem.max, HAMi's), when there is one: a memoryFraction or memoryLimit above `platform_cap`
  // is refused, since the platform would fail the allocations past it anyway; the default limit
  // takes `platform_default` (the cap, or what the platform says is still free under it) when it
  // is the smaller.
  std::optional<uint64_t> platform_cap;
  std::string platform_cap_source;
  std::optional<uint64_t> platform_default;
  std::string platform_default_source;
};

// A limit above the device's memory that the options do not allow.
class OversubscriptionRefused : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct ResolvedLimit {
  uint64_t bytes = 0;
  std::string source;  // e.g. "memoryFraction 0.5 of 80.00 GiB total"
};

// Memory TensorFlow leaves to the driver, libraries and other processes when no limit is given:
// 225 MiB when less than 2 GiB is free, else by compute capability.
uint64_t DefaultReserve(uint64_t free_bytes, int cc_major);

// The limit for a share of `total` in [0, 1] (setMemoryFraction on a live allocator allows 0),
// rounded down to whole blocks; throws std::invalid_argument outside [0, 1].
ResolvedLimit FractionLimit(double fraction, uint64_t total);

// Throws std::invalid_argument (with a message naming the option) for conflicting or
// impossible options.
ResolvedLimit ResolveLimit(const PolicyOptions& options, const MemInfo& device, int cc_major,
                           int cc_minor);

// Expandable segments map whole granules: initialPoolBytes rounds up to them, and must then fit
// in the granules the limit allows (its last partial granule is never mapped). Returns the bytes
// mapped at creation; throws std::invalid_argument naming initialPoolBytes, the rounding and the
// most that can be mapped.
uint64_t ExpandableInitialBytes(uint64_t initial, uint64_t limit, const std::string& limit_source,
                                uint64_t granule);
// Throws std::invalid_argument when `bytes` (chosen by `what`, e.g. "memoryFraction 0.5 of 80.00
// GiB total") is above the platform's cap in `options`.
void CheckPlatformCap(const PolicyOptions& options, uint64_t bytes, const std::string& what);

}  // namespace cm::core
