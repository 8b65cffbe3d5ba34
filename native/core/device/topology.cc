#include "core/device/topology.h"

#include <algorithm>

namespace cm::core {

namespace {

void KeepOldest(unsigned* oldest, unsigned version) {
  if (version && (!*oldest || version < *oldest)) *oldest = version;
}

}  // namespace

PairLinks NvLinksBetween(const std::vector<GpuLinks>& gpus, size_t a, size_t b) {
  PairLinks p;
  if (a >= gpus.size() || b >= gpus.size() || a == b) return p;
  int switch_a = 0, switch_b = 0;
  unsigned direct = 0, switched = 0;
  for (const NvLinkEnd& e : gpus[a].active) {
    if (e.to_switch) {
      ++switch_a;
      KeepOldest(&switched, e.version);
    } else if (e.remote == gpus[b].self) {
      ++p.links;
      KeepOldest(&direct, e.version);
    }
  }
  if (p.links) {
    p.version = direct;
    return p;
  }
  for (const NvLinkEnd& e : gpus[b].active)
    if (e.to_switch) {
      ++switch_b;
      KeepOldest(&switched, e.version);
    }
  if (switch_a && switch_b) {
    p.links = std::min(switch_a, switch_b);
    p.via_switch = true;
    p.version = switched;
  }
  return p;
}

namespace {

struct Generation {
  const char* name;
  double gbps;  // per link, one direction
};

// By nvmlNvlinkVersion_t. Per link and direction: NVLink 1.0 20 GB/s; 2.0 to 4.0 25 GB/s (V100's
// 6 links 300 GB/s both ways, A100's 12 600 GB/s, H100's 18 900 GB/s); 5.0 50 GB/s (B200's 18,
// 1.8 TB/s).
const Generation* ByNvml(unsigned v) {
  static const Generation table[] = {{"1.0", 20}, {"2.0", 25}, {"2.2", 25}, {"3.0", 25},
                                     {"3.1", 25}, {"4.0", 25}, {"5.0", 50}};
  return v >= 1 && v <= 7 ? &table[v - 1] : nullptr;
}

// The one generation an architecture has, where it has one. GA10x (8.6) bridges run 4 links at
// 112.5 GB/s both ways (NVIDIA's RTX A6000 and RTX 3090 figures): 14.0625 per link and direction.
const Generation* ByArchitecture(int major, int minor) {
  static const Generation pascal{"1.0", 20}, volta{"2.0", 25}, ampere{"3.0", 25},
      ga10x{"3.0", 14.0625}, hopper{"4.0", 25}, blackwell{"5.0", 50};
  if (major == 6 && minor == 0) return &pascal;
  if (major == 7 && minor == 0) return &volta;
  if (major == 8 && minor == 0) return &ampere;
  if (major == 8 && minor == 6) return &ga10x;
  if (major == 9) return &hopper;
  if (major == 10) return &blackwell;
  return nullptr;
}

}  // namespace

NvLinkRate NvLinkRateFor(unsigned nvml_version, int cc_major, int cc_minor) {
  const Generation* nvml = ByNvml(nvml_version);
  const Generation* arch = ByArchitecture(cc_major, cc_minor);
  const std::string cc =
      "compute capability " + std::to_string(cc_major) + "." + std::to_string(cc_minor);
  // The architecture's generation where it has one (the same as NVML's when they agree), else
  // NVML's; only the words say which agreed.
  const Generation* used = arch ? arch : nvml;
  const bool same_name = arch && nvml && std::string(nvml->name) == arch->name;
  NvLinkRate r;
  if (used) {
    r.generation = used->name;
    r.gbps_per_link = used->gbps;
  }
  if (nvml && (!arch || (same_name && nvml->gbps == arch->gbps))) {
    r.source = "reported by NVML";
  } else if (same_name) {
    r.source = "reported by NVML, at the rate of " + cc;
  } else if (arch) {
    r.source =
        "from " + cc +
        (nvml           ? std::string(" (NVML reported ") + nvml->name + ")"
         : nvml_version ? " (NVML reported an unknown version " + std::to_string(nvml_version) + ")"
                        : std::string(" (NVML reported no version)"));
  } else {
    r.source = nvml_version ? "25 GB/s assumed: NVML reported an unknown version " +
                                  std::to_string(nvml_version) + " for " + cc
                            : "25 GB/s assumed: neither NVML nor " + cc + " says the generation";
  }
  return r;
}

}  // namespace cm::core
