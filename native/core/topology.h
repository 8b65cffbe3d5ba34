// NVLink counts between GPUs from what NVML reports per link: each active link's far end, a GPU
// (by PCI address) or an NVSwitch. Kept apart from NVML so that the counting is tested on
// made-up hosts.
#pragma once

#include <vector>

#include "numa.h"

namespace cm::core {

struct NvLinkEnd {
  PciAddress remote;  // the GPU at the other end, when it is one
  bool to_switch = false;
};

struct GpuLinks {
  PciAddress self;
  std::vector<NvLinkEnd> active;  // active links only
};

struct PairLinks {
  int links = 0;            // NVLinks that join the pair (as nvidia-smi topo's NV#)
  bool via_switch = false;  // through NVSwitches rather than GPU to GPU
};

// Direct links from gpus[a] to gpus[b]; with none, and both GPUs on NVSwitches, the lower of
// their switch link counts (every GPU on a switch fabric reaches every other at that width).
PairLinks NvLinksBetween(const std::vector<GpuLinks>& gpus, size_t a, size_t b);

}  // namespace cm::core
