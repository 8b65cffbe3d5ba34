// Tests of the host-topology core without a GPU: PCI bus ids as CUDA and NVML write them, CPU
// lists, NUMA plans read from a made-up sysfs tree, NVLink counts on made-up hosts, and the
// placement calls on this machine's own node 0 (the copy team pinned to CPUs is tested with the
// staging pipeline).
#include "core/device/topology.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "core/device/numa.h"
#include "core/test/check.h"

using namespace cm::core;

namespace {

void Write(const std::string& path, const std::string& text) {
  std::string dir = path.substr(0, path.rfind('/'));
  std::string cmd = "mkdir -p '" + dir + "'";
  CHECK(std::system(cmd.c_str()) == 0);
  std::ofstream(path) << text << "\n";
}

void TestPci() {
  PciAddress cuda = ParsePciBusId("0000:06:00.0");
  PciAddress nvml = ParsePciBusId("00000000:06:00.0");
  CHECK(cuda.ok && nvml.ok);
  CHECK(cuda == nvml);
  CHECK(cuda.bus == 6 && cuda.device == 0 && cuda.function == 0);
  CHECK(PciSysfsName(nvml) == "0000:06:00.0");
  PciAddress upper = ParsePciBusId("0000:C1:1F.7");
  CHECK(upper.ok && upper.bus == 0xc1 && upper.device == 0x1f && upper.function == 7);
  CHECK(PciSysfsName(upper) == "0000:c1:1f.7");
  CHECK(ParsePciBusId("06:00.0").ok);
  CHECK(!ParsePciBusId("").ok);
  CHECK(!ParsePciBusId("not a bus id").ok);
  CHECK(!ParsePciBusId("0000:06:00").ok);
  CHECK(!ParsePciBusId("0000:06:40.0").ok);  // device numbers stop at 0x1f
  CHECK(!(ParsePciBusId("0000:06:00.0") == ParsePciBusId("0000:07:00.0")));
  CHECK(!(PciAddress{} == PciAddress{}));  // unknown addresses never match
}

void TestCpuList() {
  std::vector<int> v;
  CHECK(ParseCpuList("0-3,8,10-11", &v));
  CHECK((v == std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  CHECK(ParseCpuList("5", &v) && v == std::vector<int>{5});
  CHECK(ParseCpuList("", &v) && v.empty());
  v = {42};
  CHECK(!ParseCpuList("3-1", &v) && v == std::vector<int>{42});
  CHECK(!ParseCpuList("a", &v));
  CHECK(!ParseCpuList("1,,2", &v));
  CHECK(!ParseCpuList("1-", &v));
  CHECK(!ParseCpuList("-1", &v));
  CHECK(!ParseCpuList("0-99999999", &v));
}

void TestPlans() {
  char tmpl[] = "/tmp/cm-sysfs-XXXXXX";
  std::string root = mkdtemp(tmpl);
  // Two nodes; GPU a on node 1, GPU b hidden (-1, as VMs write), GPU c absent from sysfs.
  Write(root + "/devices/system/node/online", "0-1");
  Write(root + "/devices/system/node/node0/cpulist", "0-15,32-47");
  Write(root + "/devices/system/node/node1/cpulist", "16-31,48-63");
  Write(root + "/bus/pci/devices/0000:c1:00.0/numa_node", "1");
  Write(root + "/bus/pci/devices/0000:06:00.0/numa_node", "-1");
  NumaPlan a = PlanNumaPlacement(root, "00000000:C1:00.0");
  CHECK(a.applies && a.node == 1 && a.host_nodes == 2);
  CHECK(a.cpus.size() == 32 && a.cpus.front() == 16 && a.cpus.back() == 63);
  NumaPlan b = PlanNumaPlacement(root, "0000:06:00.0");
  CHECK(!b.applies && b.node == -1 && b.host_nodes == 2);
  CHECK(b.reason.find("does not say") != std::string::npos);
  NumaPlan c = PlanNumaPlacement(root, "0000:07:00.0");
  CHECK(!c.applies && c.node == -1);
  NumaPlan bad = PlanNumaPlacement(root, "nonsense");
  CHECK(!bad.applies && bad.reason.find("could not be read") != std::string::npos);
  // One node: nothing to do, whatever the GPU says.
  Write(root + "/devices/system/node/online", "0");
  Write(root + "/bus/pci/devices/0000:c1:00.0/numa_node", "0");
  NumaPlan one = PlanNumaPlacement(root, "0000:c1:00.0");
  CHECK(!one.applies && one.host_nodes == 1 &&
        one.reason.find("one NUMA node") != std::string::npos);
  std::string cmd = "rm -rf '" + root + "'";
  CHECK(std::system(cmd.c_str()) == 0);
  // This machine's own sysfs: a plan is made without crashing whatever the host is.
  NumaPlan real = PlanNumaPlacement("/sys", "0000:00:00.0");
  CHECK(real.host_nodes >= 0);
}

void TestPlacementCalls() {
  // Node 0 exists on every Linux host; a page touched while it is preferred lands there.
  {
    ScopedPreferredNode prefer(0);
    size_t n = 1 << 20;
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    static_cast<char*>(p)[0] = 1;
    if (prefer.ok()) CHECK(NodeOfAddress(p) == 0);
    munmap(p, n);
  }
  ScopedPreferredNode out_of_range(1 << 20);
  CHECK(!out_of_range.ok());
  CHECK(NodeOfAddress(nullptr) == -1);
  // Pin a thread to the CPUs it may run on now, and see it stays runnable.
  cpu_set_t set;
  CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  bool pinned = false;
  std::thread t([&] { pinned = PinThread(0, {cpus.front()}) && sched_getcpu() == cpus.front(); });
  t.join();
  CHECK(pinned);
  CHECK(!PinThread(0, {}));
}

GpuLinks Gpu(const char* bus) { return GpuLinks{ParsePciBusId(bus), {}}; }
void Link(GpuLinks& from, const GpuLinks& to, int n, unsigned version = 0) {
  for (int i = 0; i < n; ++i) from.active.push_back(NvLinkEnd{to.self, false, version});
}

void TestNvLinks() {
  // Two GPUs joined by 18 links (the lent H200 pair, nvidia-smi NV18).
  std::vector<GpuLinks> two = {Gpu("0000:06:00.0"), Gpu("0000:07:00.0")};
  Link(two[0], two[1], 18);
  Link(two[1], two[0], 18);
  CHECK(NvLinksBetween(two, 0, 1).links == 18 && !NvLinksBetween(two, 0, 1).via_switch);
  CHECK(NvLinksBetween(two, 1, 0).links == 18);
  CHECK(NvLinksBetween(two, 0, 0).links == 0);
  CHECK(NvLinksBetween(two, 0, 5).links == 0);
  // Four GPUs, each pair of neighbours with 4 links and the diagonals with 2, as NVML writes
  // the remote ends with NVML's 8-digit domain.
  std::vector<GpuLinks> four = {Gpu("00000000:1a:00.0"), Gpu("00000000:1b:00.0"),
                                Gpu("00000000:3d:00.0"), Gpu("00000000:3e:00.0")};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      if (i != j) Link(four[i], four[j], (i ^ j) == 3 ? 2 : 4);
  CHECK(NvLinksBetween(four, 0, 1).links == 4);
  CHECK(NvLinksBetween(four, 0, 3).links == 2);
  CHECK(NvLinksBetween(four, 2, 1).links == 2);
  // Eight GPUs on NVSwitches: 18 links each to the switches; one GPU with two links down.
  std::vector<GpuLinks> eight;
  for (int i = 0; i < 8; ++i) {
    eight.push_back(Gpu(("0000:" + std::to_string(10 + i) + ":00.0").c_str()));
    for (int l = 0; l < (i == 5 ? 16 : 18); ++l)
      eight.back().active.push_back(NvLinkEnd{ParsePciBusId("0000:a0:00.0"), true});
  }
  CHECK(NvLinksBetween(eight, 0, 7).links == 18 && NvLinksBetween(eight, 0, 7).via_switch);
  CHECK(NvLinksBetween(eight, 5, 2).links == 16);
  // PCIe only: nothing.
  std::vector<GpuLinks> pcie = {Gpu("0000:01:00.0"), Gpu("0000:02:00.0")};
  CHECK(NvLinksBetween(pcie, 0, 1).links == 0 && !NvLinksBetween(pcie, 0, 1).via_switch);
  CHECK(NvLinksBetween(pcie, 0, 1).version == 0);
}

// The generation a pair's links report: the oldest of them, direct or through the switches.
void TestNvLinkVersions() {
  std::vector<GpuLinks> two = {Gpu("0000:06:00.0"), Gpu("0000:07:00.0")};
  Link(two[0], two[1], 17, 6);
  Link(two[0], two[1], 1, 4);  // one link trained at an older generation
  Link(two[1], two[0], 18, 6);
  CHECK(NvLinksBetween(two, 0, 1).version == 4 && NvLinksBetween(two, 1, 0).version == 6);
  std::vector<GpuLinks> unreported = {Gpu("0000:06:00.0"), Gpu("0000:07:00.0")};
  Link(unreported[0], unreported[1], 4);
  CHECK(NvLinksBetween(unreported, 0, 1).links == 4 &&
        NvLinksBetween(unreported, 0, 1).version == 0);
  std::vector<GpuLinks> switched;
  for (int i = 0; i < 2; ++i) {
    switched.push_back(Gpu(i ? "0000:0b:00.0" : "0000:0a:00.0"));
    for (int l = 0; l < 18; ++l)
      switched.back().active.push_back(NvLinkEnd{ParsePciBusId("0000:a0:00.0"), true, i ? 7u : 6u});
  }
  CHECK(NvLinksBetween(switched, 0, 1).version == 6 && NvLinksBetween(switched, 1, 0).version == 6);
}

void TestNvLinkRates() {
  // NVML and the architecture agree: NVML's generation.
  NvLinkRate h100 = NvLinkRateFor(6, 9, 0);
  CHECK(h100.generation == "4.0" && h100.gbps_per_link == 25 && h100.source == "reported by NVML");
  NvLinkRate b200 = NvLinkRateFor(7, 10, 0);
  CHECK(b200.generation == "5.0" && b200.gbps_per_link == 50 && b200.source == "reported by NVML");
  CHECK(NvLinkRateFor(1, 6, 0).gbps_per_link == 20 && NvLinkRateFor(2, 7, 0).generation == "2.0");
  // Hopper reported as 5.0: the architecture's 4.0, and the detail says NVML said otherwise.
  NvLinkRate misreported = NvLinkRateFor(7, 9, 0);
  CHECK(misreported.generation == "4.0" && misreported.gbps_per_link == 25);
  CHECK(misreported.source == "from compute capability 9.0 (NVML reported 5.0)");
  // No version from NVML: the architecture's, or 25 GB/s assumed for an architecture not known.
  NvLinkRate nothing = NvLinkRateFor(0, 10, 0);
  CHECK(nothing.generation == "5.0" && nothing.gbps_per_link == 50);
  CHECK(nothing.source == "from compute capability 10.0 (NVML reported no version)");
  NvLinkRate unknown = NvLinkRateFor(0, 12, 0);
  CHECK(unknown.generation.empty() && unknown.gbps_per_link == 25);
  CHECK(unknown.source ==
        "25 GB/s assumed: neither NVML nor compute capability 12.0 says the generation");
  NvLinkRate newer = NvLinkRateFor(9, 11, 0);
  CHECK(newer.generation.empty() && newer.gbps_per_link == 25);
  CHECK(newer.source ==
        "25 GB/s assumed: NVML reported an unknown version 9 for compute capability 11.0");
  // An architecture not in the table: NVML's word.
  NvLinkRate other = NvLinkRateFor(4, 8, 9);
  CHECK(other.generation == "3.0" && other.gbps_per_link == 25 &&
        other.source == "reported by NVML");
  // GA10x bridges: 3.0 as NVML says, at the bridges' rate.
  NvLinkRate bridge = NvLinkRateFor(4, 8, 6);
  CHECK(bridge.generation == "3.0" && bridge.gbps_per_link == 14.0625);
  CHECK(bridge.source == "reported by NVML, at the rate of compute capability 8.6");
}

}  // namespace

int main() {
  TestPci();
  TestCpuList();
  TestPlans();
  TestPlacementCalls();
  TestNvLinkVersions();
  TestNvLinkRates();
  TestNvLinks();
  if (failures)
    std::fprintf(stderr, "%d check(s) failed\n", failures);
  else
    std::printf("topology tests passed\n");
  return failures ? 1 : 0;
}
