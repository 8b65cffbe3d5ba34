// Where a GPU sits among the host's NUMA nodes, and the Linux calls that put memory and threads
// there: read from sysfs (the GPU's numa_node, each node's cpulist), applied with set_mempolicy
// and thread affinity, checked with get_mempolicy. No CUDA and no libnuma: the syscalls are made
// directly, so nothing extra is needed at build or run time.
#pragma once

#include <string>
#include <vector>

namespace cm::core {

// A PCI address; CUDA writes "0000:06:00.0" (4-digit domain), NVML "00000000:06:00.0".
struct PciAddress {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  bool ok = false;
  bool operator==(const PciAddress& o) const {
    return ok && o.ok && domain == o.domain && bus == o.bus && device == o.device &&
           function == o.function;
  }
};
PciAddress ParsePciBusId(const std::string& text);
// The directory name sysfs uses: "0000:06:00.0" (lower case).
std::string PciSysfsName(const PciAddress& a);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; false (and `out` untouched) for anything else. An empty
// list is valid and empty.
bool ParseCpuList(const std::string& text, std::vector<int>* out);

// Where staging memory and threads for a GPU should go. `node` is -1 when sysfs does not say (a
// VM often hides it); `applies` is false on a host of one node, where placement changes nothing.
struct NumaPlan {
  int node = -1;
  int host_nodes = 0;
  std::vector<int> cpus;  // the node's CPUs, empty when unknown
  bool applies = false;
  std::string reason;  // why placement does or does not apply, for people
};
// Reads `<sysfs_root>/bus/pci/devices/<bus id>/numa_node` and
// `<sysfs_root>/devices/system/node/{online,node<N>/cpulist}`; sysfs_root is "/sys" but for tests.
NumaPlan PlanNumaPlacement(const std::string& sysfs_root, const std::string& pci_bus_id);

// While alive, the calling thread's new pages prefer `node` (MPOL_PREFERRED); the thread's
// earlier policy is put back after. ok() is false when the kernel refused (no NUMA support, or a
// seccomp filter).
class ScopedPreferredNode {
 public:
  explicit ScopedPreferredNode(int node);
  ~ScopedPreferredNode();
  ScopedPreferredNode(const ScopedPreferredNode&) = delete;
  ScopedPreferredNode& operator=(const ScopedPreferredNode&) = delete;
  bool ok() const { return ok_; }

 private:
  bool ok_ = false;
  bool saved_ = false;
  int old_mode_ = 0;
  unsigned long old_mask_[16] = {};
};

// The node of the page at `p` (get_mempolicy MPOL_F_NODE|MPOL_F_ADDR), -1 when unknown. The page
// must be resident.
int NodeOfAddress(const void* p);

// Restricts a thread (0: the calling one) to `cpus`; false if the kernel refused. `thread` is a
// pthread_t.
bool PinThread(unsigned long thread, const std::vector<int>& cpus);

// The CPUs this process may run on (its affinity mask, as a container's cpuset or taskset leaves
// it); the online CPUs if the kernel does not say, and at least 1.
int UsableCpus();

}  // namespace cm::core
