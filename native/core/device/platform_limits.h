// The memory limits a shared GPU's platform puts on this process, read the way each platform
// presents them: an MPS client's environment (CUDA_MPS_PIPE_DIRECTORY and its control pipe,
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), the cgroup v2 device
// memory controller (dmem.max and dmem.current of the process's cgroup and its ancestors), and
// HAMi's CUDA_DEVICE_MEMORY_LIMIT(_<n>), and the schedulers' variables: Slurm's shards
// (SLURM_SHARDS_ON_NODE of CUDA_MEMORY_SLURM_SHARDS_PER_GPU) and gpumem (CUDA_MEMORY_SLURM_GPUMEM),
// KAI scheduler's GPU_PORTION (its share of each GPU) and the NVIDIA container toolkit's
// NVIDIA_GPU_MEMORY_LIMIT (MiB, or a size with its unit). MIG needs NVML and is read by the
// binding. Pure: files are read under a root the caller gives ("/" but for tests) and variables
// from a map, so the same code runs on fixture trees.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cm::core {

using EnvMap = std::map<std::string, std::string>;

// "1073741824", "1G", "1g", "1GB", "1GiB", "512M", "100K", "2T" -> bytes; K, M, G and T are
// powers of 1024 (as MPS and HAMi read them), a plain number is bytes. False for anything else
// (empty, negative, a fraction, an unknown suffix, past 2^64).
bool ParseMemorySize(const std::string& text, uint64_t* bytes);

// One limit that applies to a device.
struct PlatformLimit {
  std::string kind;  // "mps", "dmem", "hami", "slurm", "kai", "nvidia" (the binding adds "mig")
  uint64_t bytes = 0;
  std::string
      source;  // for people: where it was read, e.g. "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G"
  // What the platform says may still be charged against it now (dmem: the least of max - current
  // over the limiting cgroups); -1 when the platform does not say.
  int64_t headroom = -1;
};

struct MpsClientInfo {
  std::string pipe_directory;  // CUDA_MPS_PIPE_DIRECTORY, else the default /tmp/nvidia-mps
  bool pipe_directory_set = false;
  bool control_present = false;  // <pipe_directory>/control exists: a control daemon listens
  double active_thread_percentage = -1;  // -1: not set (or unreadable, with a warning)
  std::string pinned_limit;              // CUDA_MPS_PINNED_DEVICE_MEM_LIMIT as given, "" when unset
};

// One region of the dmem controller as this process's cgroup sees it.
struct DmemRegion {
  std::string name;  // e.g. "drm/0000:03:00.0/vram0"
  bool limited = false;
  // The smallest dmem.max on the way from the process's cgroup to the root; one of
  // kBeyondAnyDevice or more reads as "max".
  uint64_t max = 0;
  std::string limited_by;  // the cgroup (relative to the hierarchy's root) that sets it
  int64_t current = -1;    // dmem.current of the process's cgroup; -1 when not there
  // The least of (max - current) over the limiting cgroups: what the cgroup may still charge.
  int64_t headroom = -1;
};

struct DeviceRef {
  int index = 0;
  std::string pci_bus_id;    // "0000:03:00.0"; "" when unknown (a simulated device)
  std::string uuid;          // "GPU-…"; "" when unknown
  uint64_t total_bytes = 0;  // the device's memory; 0 when unknown
};

// 2^53 bytes (8 PiB): a limit this large is beyond any device, so it binds nothing whatever the
// device (and "no limit" may read as 2^64 - 1); below it every byte count is exact in a double.
constexpr uint64_t kBeyondAnyDevice = uint64_t{1} << 53;

struct DevicePlatformLimits {
  int index = 0;
  // In the order found; empty when none applies. A limit at or beyond the device's total_bytes
  // (or kBeyondAnyDevice when that is unknown) binds nothing and is left out.
  std::vector<PlatformLimit> limits;
};

struct PlatformReport {
  MpsClientInfo mps;
  std::string cgroup;      // the process's cgroup v2 path ("/kubepods/…"), "" when none
  std::string cgroup_dir;  // where it is on disk, "" when not found
  std::vector<DmemRegion> dmem;
  EnvMap variables;                   // the platform's variables present (MPS, HAMi, device plugin)
  std::vector<std::string> warnings;  // values that were present but could not be read
  std::vector<DevicePlatformLimits> devices;
};

// Reads everything under `root` (the file system's root: "/" but for tests) and `env`, and the
// limits of each device.
PlatformReport DetectPlatform(const std::string& root, const EnvMap& env,
                              const std::vector<DeviceRef>& devices);

// The smallest of `limits`, or nullptr when there is none.
const PlatformLimit* SmallestLimit(const std::vector<PlatformLimit>& limits);

}  // namespace cm::core
