#include "topology.h"

#include <algorithm>

namespace cm::core {

PairLinks NvLinksBetween(const std::vector<GpuLinks>& gpus, size_t a, size_t b) {
  PairLinks p;
  if (a >= gpus.size() || b >= gpus.size() || a == b) return p;
  int switch_a = 0, switch_b = 0;
  for (const NvLinkEnd& e : gpus[a].active) {
    if (e.to_switch)
      ++switch_a;
    else if (e.remote == gpus[b].self)
      ++p.links;
  }
  if (p.links) return p;
  for (const NvLinkEnd& e : gpus[b].active) switch_b += e.to_switch ? 1 : 0;
  if (switch_a && switch_b) {
    p.links = std::min(switch_a, switch_b);
    p.via_switch = true;
  }
  return p;
}

}  // namespace cm::core
