#include "core/device/peer_grants.h"

namespace cm::core {

bool PeerGrants::Grant(int reader, int owner) {
  if (reader == owner) return false;
  return grants_.emplace(owner, reader).second;
}

void PeerGrants::Revoke(int reader, int owner) { grants_.erase({owner, reader}); }

std::vector<int> PeerGrants::Readers(int owner) const {
  std::vector<int> out{owner};
  for (auto it = grants_.lower_bound({owner, -2147483647 - 1});
       it != grants_.end() && it->first == owner; ++it)
    out.push_back(it->second);
  return out;
}

std::vector<MappedRun> MappedRuns(const std::vector<uint64_t>& starts, uint64_t granule) {
  std::vector<MappedRun> runs;
  for (uint64_t s : starts) {
    if (!runs.empty() && runs.back().address + runs.back().bytes == s)
      runs.back().bytes += granule;
    else
      runs.push_back({s, granule});
  }
  return runs;
}

}  // namespace cm::core
