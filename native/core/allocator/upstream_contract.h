// The contract every Upstream keeps, written once and run over each implementation: the simulated
// device and a group's in the core's tests (native/core/test/allocator/upstream_contract_test.cc),
// the CUDA device through the addon on a GPU (test/allocator/upstream-contract.test.js). A pool's
// policies rely on nothing else an upstream does.
//
// What it checks: the device's figures (free within total); footprints (at least the request,
// whole, growing with the request); regions (disjoint, given back in full, the device's free
// memory down by at least their footprints while held); a refusal past what the upstream can give
// (out of memory, nothing held after it, and the next allocation that fits still works); and,
// where the upstream has granules, reservations, maps of runs of granules unmapped one granule at
// a time, and a map refused midway that leaves nothing of it mapped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/allocator/upstream.h"

namespace cm::core {

struct ContractOptions {
  // The sizes allocated (a small one that is not a whole page, a large one).
  uint64_t small = (2ull << 20) + 1, large = 64ull << 20;
  // The most the upstream gives at once: the device's free memory (the CUDA upstream's: its total,
  // see refusal_reclaims), or less under a budget. A request past it by more than the slack must be
  // refused as out of memory (left unchecked when 0, for managed memory, which may take more than
  // the device has).
  uint64_t limit = 0;
  // What else may move the device's free memory between two readings: 0 on a simulated device,
  // whose accounting is exact; on a GPU, the driver's own allocations.
  uint64_t slack = 0;
  // Whether a refused allocation may make the device give back memory it held for this process,
  // to try the request: a GPU's driver does (on an H200, after the whole test suite, free memory
  // rose by 14 MiB at each refusal past the free memory, and the request past it then succeeded).
  // Free memory may then rise at the refusal (never fall by more than the slack), and the later
  // steps come back to the risen figure: a refusal that leaves memory held is caught only where it
  // holds more than the device gave back. False on a simulated device, whose accounting is exact.
  bool refusal_reclaims = false;
  // Whether a region takes device memory when it is made; false for managed memory on a GPU, which
  // the driver places when it is first touched, so free memory is only checked to come back.
  bool resident = true;
  // Whether to map past the limit to see the map refused midway (a GPU's whole memory, granule by
  // granule, takes seconds; the simulated legs check it).
  bool map_refusal = true;
};

// Runs the contract; returns one sentence per broken rule (none when the upstream keeps it). Leaves
// the upstream as it found it: everything it takes it gives back, also after a broken rule.
std::vector<std::string> CheckUpstreamContract(Upstream& upstream, const ContractOptions& options);

}  // namespace cm::core
