#include "core/device/numa.h"

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace cm::core {

namespace {
// From <linux/mempolicy.h>; not every libc ships the header, and libnuma is not a dependency.
constexpr int kMpolDefault = 0;
constexpr int kMpolPreferred = 1;
constexpr int kMpolFNode = 1 << 0;
constexpr int kMpolFAddr = 1 << 1;
constexpr unsigned long kMaskBits = 16 * 8 * sizeof(unsigned long);

bool ReadLine(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::getline(f, *out);
  while (!out->empty() && (out->back() == '\n' || out->back() == ' ' || out->back() == '\r'))
    out->pop_back();
  return true;
}

bool ParseHex(const std::string& s, unsigned* out) {
  if (s.empty() || s.size() > 8) return false;
  char* end = nullptr;
  unsigned long v = std::strtoul(s.c_str(), &end, 16);
  if (*end) return false;
  *out = static_cast<unsigned>(v);
  return true;
}
}  // namespace

PciAddress ParsePciBusId(const std::string& text) {
  // domain:bus:device.function, the domain optional (some tools print "06:00.0").
  PciAddress a;
  std::string s = text;
  size_t dot = s.rfind('.');
  if (dot == std::string::npos) return a;
  std::string fn = s.substr(dot + 1);
  s = s.substr(0, dot);
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.size() == 2) parts.insert(parts.begin(), "0");
  if (parts.size() != 3) return a;
  if (!ParseHex(parts[0], &a.domain) || !ParseHex(parts[1], &a.bus) ||
      !ParseHex(parts[2], &a.device) || !ParseHex(fn, &a.function))
    return a;
  a.ok = a.bus < 256 && a.device < 32 && a.function < 8 && parts[1].size() <= 2 &&
         parts[2].size() <= 2 && fn.size() == 1;
  return a;
}

std::string PciSysfsName(const PciAddress& a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", a.domain, a.bus, a.device, a.function);
  return buf;
}

bool ParseCpuList(const std::string& text, std::vector<int>* out) {
  std::vector<int> cpus;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) return false;
    size_t dash = item.find('-');
    char* end = nullptr;
    long lo = std::strtol(item.c_str(), &end, 10);
    if (end == item.c_str() || lo < 0) return false;
    long hi = lo;
    if (dash != std::string::npos) {
      if (end != item.c_str() + dash) return false;
      const char* rest = item.c_str() + dash + 1;
      hi = std::strtol(rest, &end, 10);
      if (end == rest || *end || hi < lo) return false;
    } else if (*end) {
      return false;
    }
    if (hi > 1 << 16) return false;
    for (long c = lo; c <= hi; ++c) cpus.push_back(static_cast<int>(c));
  }
  *out = std::move(cpus);
  return true;
}

NumaPlan PlanNumaPlacement(const std::string& sysfs_root, const std::string& pci_bus_id) {
  NumaPlan plan;
  std::string online;
  std::vector<int> nodes;
  if (ReadLine(sysfs_root + "/devices/system/node/online", &online) && ParseCpuList(online, &nodes))
    plan.host_nodes = static_cast<int>(nodes.size());
  PciAddress a = ParsePciBusId(pci_bus_id);
  std::string node_text;
  if (!a.ok) {
    plan.reason = "the PCI bus id '" + pci_bus_id + "' could not be read";
    return plan;
  }
  if (ReadLine(sysfs_root + "/bus/pci/devices/" + PciSysfsName(a) + "/numa_node", &node_text)) {
    char* end = nullptr;
    long n = std::strtol(node_text.c_str(), &end, 10);
    if (end != node_text.c_str() && !*end) plan.node = static_cast<int>(n);
  }
  if (plan.node >= 0) {
    std::string cpulist;
    if (ReadLine(sysfs_root + "/devices/system/node/node" + std::to_string(plan.node) + "/cpulist",
                 &cpulist))
      ParseCpuList(cpulist, &plan.cpus);
  }
  if (plan.host_nodes <= 1) {
    plan.reason = plan.host_nodes == 1 ? "the host has one NUMA node: nothing to place"
                                       : "the host's NUMA nodes could not be read";
  } else if (plan.node < 0) {
    plan.reason = "the host has " + std::to_string(plan.host_nodes) +
                  " NUMA nodes but sysfs does not say which one the GPU is on";
  } else if (plan.cpus.empty()) {
    plan.reason = "node " + std::to_string(plan.node) + " lists no CPUs";
  } else {
    plan.applies = true;
    plan.reason = "node " + std::to_string(plan.node) + " of " + std::to_string(plan.host_nodes);
  }
  return plan;
}

ScopedPreferredNode::ScopedPreferredNode(int node) {
  if (node < 0 || static_cast<unsigned long>(node) >= kMaskBits) return;
  saved_ = syscall(SYS_get_mempolicy, &old_mode_, old_mask_, kMaskBits, nullptr, 0) == 0;
  unsigned long mask[16] = {};
  mask[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
  ok_ = syscall(SYS_set_mempolicy, kMpolPreferred, mask, kMaskBits) == 0;
}

ScopedPreferredNode::~ScopedPreferredNode() {
  if (!ok_) return;
  if (!saved_ || syscall(SYS_set_mempolicy, old_mode_, old_mask_, kMaskBits) != 0)
    syscall(SYS_set_mempolicy, kMpolDefault, nullptr, 0);
}

int NodeOfAddress(const void* p) {
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0, const_cast<void*>(p),
              kMpolFNode | kMpolFAddr) != 0)
    return -1;
  return node;
}

bool PinThread(unsigned long thread, const std::vector<int>& cpus) {
  if (cpus.empty()) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c < CPU_SETSIZE) CPU_SET(c, &set);
  pthread_t t = thread ? static_cast<pthread_t>(thread) : pthread_self();
  return pthread_setaffinity_np(t, sizeof set, &set) == 0;
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

}  // namespace cm::core
