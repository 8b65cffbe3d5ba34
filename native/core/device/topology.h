// NVLink counts between GPUs from what NVML reports per link: each active link's far end, a GPU
// (by PCI address) or an NVSwitch. Kept apart from NVML so that the counting is tested on
// made-up hosts.
#pragma once

#include <string>
#include <vector>

#include "core/device/numa.h"

namespace cm::core {

struct NvLinkEnd {
  PciAddress remote;  // the GPU at the other end, when it is one
  bool to_switch = false;
  unsigned version = 0;  // nvmlDeviceGetNvLinkVersion: nvmlNvlinkVersion_t, 0 when not reported
};

struct GpuLinks {
  PciAddress self;
  std::vector<NvLinkEnd> active;  // active links only
};

struct PairLinks {
  int links = 0;            // NVLinks that join the pair (as nvidia-smi topo's NV#)
  bool via_switch = false;  // through NVSwitches rather than GPU to GPU
  unsigned version = 0;     // the oldest NVML version among those links; 0 when none reported
};

// Direct links from gpus[a] to gpus[b]; with none, and both GPUs on NVSwitches, the lower of
// their switch link counts (every GPU on a switch fabric reaches every other at that width).
PairLinks NvLinksBetween(const std::vector<GpuLinks>& gpus, size_t a, size_t b);

// The NVLink generation of a pair and its rate per link in one direction, for the doctor's least
// peer copy rate. NVML says the generation (nvmlNvlinkVersion_t: 1 is 1.0, 2 is 2.0, 3 is 2.2, 4
// is 3.0, 5 is 3.1, 6 is 4.0, 7 is 5.0). Where the GPU's architecture has one generation only
// (compute capability 6.0: 1.0; 7.0: 2.0; 8.0: 3.0; 8.6: 3.0 over bridges; 9.x: 4.0; 10.x: 5.0)
// and NVML says another, the architecture's is used: some drivers report 5.0 on Hopper, and
// drivers from before the enumeration answered plain numbers. With neither, 25 GB/s is assumed.
struct NvLinkRate {
  std::string generation;  // "4.0"; empty when unknown
  double gbps_per_link = 25;
  // For people, after the generation: "reported by NVML", "from compute capability 9.0 (NVML
  // reported 5.0)", "25 GB/s assumed: ..."
  std::string source;
};
NvLinkRate NvLinkRateFor(unsigned nvml_version, int cc_major, int cc_minor);

}  // namespace cm::core
