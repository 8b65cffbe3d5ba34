// Which devices may read and write memory that a device maps with CUDA's virtual memory calls.
// cudaDeviceEnablePeerAccess does not reach such mappings: each needs cuMemSetAccess for every
// device that is to use it. The owner always may; a peer may once peer access from it to the
// owner is on. Holds no lock: the caller keeps one instance under its own.
#pragma once

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

namespace cm::core {

class PeerGrants {
 public:
  // Records that `reader` may use `owner`'s mappings: true if that is new (false for the owner
  // itself or a pair already recorded).
  bool Grant(int reader, int owner);
  // Takes a grant back (the access could not be set on what was already mapped).
  void Revoke(int reader, int owner);
  // The devices a new mapping of `owner` must be made accessible to: the owner first, then its
  // readers in ascending order.
  std::vector<int> Readers(int owner) const;

 private:
  std::set<std::pair<int, int>> grants_;  // (owner, reader)
};

// One run of adjacent mappings: [address, address + bytes).
struct MappedRun {
  uint64_t address = 0, bytes = 0;
  bool operator==(const MappedRun& o) const { return address == o.address && bytes == o.bytes; }
};

// The runs that granules of `granule` bytes starting at `starts` (ascending) make, so that each
// run takes one cuMemSetAccess rather than one per granule.
std::vector<MappedRun> MappedRuns(const std::vector<uint64_t>& starts, uint64_t granule);

}  // namespace cm::core
