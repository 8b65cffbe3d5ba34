// Tests of the platform-limit readers without a GPU: sizes as MPS and HAMi write them, and the
// fixture trees of test/fixtures/platform (a Kubernetes pod's nested cgroups with dmem limits, a
// cgroup namespace whose mount point has a space in it, an MPS client's pipe directory, a host
// with cgroup v1 only).
#include "core/device/platform_limits.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/test/check.h"

using namespace cm::core;

namespace {

std::string Fixture(const char* name) {
  std::string here = __FILE__;  // <repo>/native/core/test/device/platform_limits_test.cc
  return here.substr(0, here.rfind("/native/")) + "/test/fixtures/platform/" + name;
}

const DeviceRef kDev0{0, "0000:03:00.0", "GPU-aaaaaaaa-0000-0000-0000-000000000000"};
const DeviceRef kDev1{1, "00000000:04:00.0", "GPU-bbbbbbbb-0000-0000-0000-000000000000"};

void TestSizes() {
  uint64_t b = 0;
  CHECK(ParseMemorySize("1073741824", &b) && b == 1073741824ull);
  CHECK(ParseMemorySize("1G", &b) && b == 1ull << 30);
  CHECK(ParseMemorySize("1g", &b) && b == 1ull << 30);
  CHECK(ParseMemorySize("2GiB", &b) && b == 2ull << 30);
  CHECK(ParseMemorySize("512MB", &b) && b == 512ull << 20);
  CHECK(ParseMemorySize("3000m", &b) && b == 3000ull << 20);
  CHECK(ParseMemorySize(" 100K ", &b) && b == 100ull << 10);
  CHECK(ParseMemorySize("1T", &b) && b == 1ull << 40);
  CHECK(ParseMemorySize("0", &b) && b == 0);
  b = 7;
  CHECK(!ParseMemorySize("", &b) && b == 7);
  CHECK(!ParseMemorySize("G", &b));
  CHECK(!ParseMemorySize("-1G", &b));
  CHECK(!ParseMemorySize("1.5G", &b));
  CHECK(!ParseMemorySize("1X", &b));
  CHECK(!ParseMemorySize("99999999999999999999", &b));
  CHECK(!ParseMemorySize("17179869184G", &b));  // 2^64 bytes
}

void TestMps() {
  EnvMap env{{"CUDA_MPS_PIPE_DIRECTORY", "/run/mps-pipes"},
             {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,1=2048M"},
             {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25"},
             {"HOME", "/root"}};
  PlatformReport r = DetectPlatform(Fixture("mps"), env, {kDev0, kDev1});
  CHECK(r.mps.pipe_directory == "/run/mps-pipes" && r.mps.pipe_directory_set);
  CHECK(r.mps.control_present);
  CHECK(r.mps.active_thread_percentage == 25);
  CHECK(r.mps.pinned_limit == "0=1G,1=2048M");
  CHECK(r.variables.count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == 1 &&
        r.variables.count("HOME") == 0);
  CHECK(r.devices.size() == 2);
  CHECK(r.devices[0].limits.size() == 1 && r.devices[0].limits[0].kind == "mps" &&
        r.devices[0].limits[0].bytes == 1ull << 30 && r.devices[0].limits[0].headroom == -1);
  CHECK(r.devices[1].limits.size() == 1 && r.devices[1].limits[0].bytes == 2ull << 30);
  CHECK(r.devices[0].limits[0].source.find("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT 0=") == 0);
  CHECK(r.warnings.empty());
  CHECK(r.cgroup == "/user.slice/user-1000.slice/session-1.scope" && r.dmem.empty());

  // One size for every device; the default pipe directory; no daemon there.
  PlatformReport plain =
      DetectPlatform(Fixture("none"), {{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "4G"}}, {kDev0, kDev1});
  CHECK(!plain.mps.pipe_directory_set && plain.mps.pipe_directory == "/tmp/nvidia-mps");
  CHECK(!plain.mps.control_present);
  CHECK(plain.devices[0].limits.size() == 1 && plain.devices[0].limits[0].bytes == 4ull << 30);
  CHECK(plain.devices[1].limits.size() == 1 && plain.devices[1].limits[0].bytes == 4ull << 30);
  CHECK(plain.devices[0].limits[0].source.find("no MPS control pipe") != std::string::npos);
  PlatformReport dflt = DetectPlatform(Fixture("mps"), {}, {kDev0});
  CHECK(dflt.mps.control_present && dflt.devices[0].limits.empty());

  // By uuid; an unreadable entry is a warning and the rest still applies.
  PlatformReport mixed = DetectPlatform(
      Fixture("none"),
      {{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "GPU-BBBBBBBB-0000-0000-0000-000000000000=3G,0=lots"},
       {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "150"}},
      {kDev0, kDev1});
  CHECK(mixed.devices[0].limits.empty());
  CHECK(mixed.devices[1].limits.size() == 1 && mixed.devices[1].limits[0].bytes == 3ull << 30);
  CHECK(mixed.warnings.size() == 2);
  CHECK(mixed.mps.active_thread_percentage == -1);
}

void TestDmemNested() {
  PlatformReport r = DetectPlatform(Fixture("dmem-k8s"), {}, {kDev0, kDev1});
  CHECK(r.cgroup == "/kubepods.slice/pod1/ctr");
  CHECK(r.cgroup_dir == Fixture("dmem-k8s") + "/sys/fs/cgroup/kubepods.slice/pod1/ctr");
  CHECK(r.dmem.size() == 2);
  const DmemRegion& v0 = r.dmem[0];
  CHECK(v0.name == "drm/0000:03:00.0/vram0");
  CHECK(v0.limited && v0.max == 4294967296ull && v0.limited_by == "/kubepods.slice/pod1");
  CHECK(v0.current == 1073741824);
  // pod1: 4 GiB - 3 GiB; kubepods.slice: 8 GiB - 7.5 GiB, the tighter.
  CHECK(v0.headroom == 536870912);
  CHECK(!r.dmem[1].limited && r.dmem[1].current == 0);
  CHECK(r.devices[0].limits.size() == 1 && r.devices[0].limits[0].kind == "dmem" &&
        r.devices[0].limits[0].bytes == 4294967296ull &&
        r.devices[0].limits[0].headroom == 536870912);
  CHECK(r.devices[0].limits[0].source.find("/kubepods.slice/pod1") != std::string::npos);
  CHECK(r.devices[1].limits.empty());
  CHECK(r.warnings.empty());
  // A device without a PCI address (simulated) matches no region.
  PlatformReport sim = DetectPlatform(Fixture("dmem-k8s"), {}, {{0, "", ""}});
  CHECK(sim.devices[0].limits.empty());
}

void TestDmemNamespace() {
  PlatformReport r = DetectPlatform(Fixture("namespace"), {}, {kDev0});
  CHECK(r.cgroup == "/");
  CHECK(r.cgroup_dir == Fixture("namespace") + "/sys/fs/cgroup v2");
  CHECK(r.devices[0].limits.size() == 1 && r.devices[0].limits[0].bytes == 2147483648ull &&
        r.devices[0].limits[0].headroom == 1610612736);
  CHECK(r.warnings.size() == 1 && r.warnings[0].find("drm/card1/vram0") != std::string::npos);
}

void TestHamiAndSmallest() {
  EnvMap env{{"CUDA_DEVICE_MEMORY_LIMIT", "6g"},
             {"CUDA_DEVICE_MEMORY_LIMIT_1", "3000m"},
             {"CUDA_DEVICE_SM_LIMIT", "50"},
             {"LD_PRELOAD", "/usr/local/vgpu/libvgpu.so"},
             {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=8G"}};
  PlatformReport r = DetectPlatform(Fixture("dmem-k8s"), env, {kDev0, kDev1});
  CHECK(r.variables.count("LD_PRELOAD") == 1 && r.variables.count("CUDA_DEVICE_SM_LIMIT") == 1);
  // Device 0: MPS 8 GiB, dmem 4 GiB, HAMi 6 GiB.
  CHECK(r.devices[0].limits.size() == 3);
  const PlatformLimit* s0 = SmallestLimit(r.devices[0].limits);
  CHECK(s0 && s0->kind == "dmem" && s0->bytes == 4294967296ull);
  // Device 1: HAMi's own variable wins over the shared one.
  CHECK(r.devices[1].limits.size() == 1 && r.devices[1].limits[0].kind == "hami" &&
        r.devices[1].limits[0].bytes == 3000ull << 20 &&
        r.devices[1].limits[0].source == "CUDA_DEVICE_MEMORY_LIMIT_1=3000m (HAMi)");
  CHECK(SmallestLimit({}) == nullptr);
  PlatformReport bad =
      DetectPlatform(Fixture("none"), {{"CUDA_DEVICE_MEMORY_LIMIT", "six"}}, {kDev0});
  CHECK(bad.devices[0].limits.empty() && bad.warnings.size() == 1);
  CHECK(bad.cgroup.empty() && bad.cgroup_dir.empty());
  PlatformReport nothing = DetectPlatform(Fixture("no-such-root"), {}, {kDev0});
  CHECK(nothing.devices[0].limits.empty() && nothing.warnings.empty() &&
        !nothing.mps.control_present);
}

// The schedulers' variables: Slurm's shards and gpumem (as the task prolog exports them), KAI's
// share of the GPU and the NVIDIA container toolkit's MiB; each hostile value a warning, and
// ignored.
void TestSchedulers() {
  const uint64_t GiB = 1ull << 30;
  DeviceRef d = kDev0;
  d.total_bytes = 8 * GiB;
  EnvMap env{{"SLURM_SHARDS_ON_NODE", "2"}, {"CUDA_MEMORY_SLURM_SHARDS_PER_GPU", "8"}};
  PlatformReport r = DetectPlatform(Fixture("none"), env, {d});
  CHECK(r.warnings.empty() && r.variables.count("SLURM_SHARDS_ON_NODE") == 1);
  CHECK(r.devices[0].limits.size() == 1 && r.devices[0].limits[0].kind == "slurm" &&
        r.devices[0].limits[0].bytes == 2 * GiB &&
        r.devices[0].limits[0].source == "SLURM_SHARDS_ON_NODE=2 of 8 shards per GPU (Slurm)");
  // Exact past 2^32 and rounded down: 3 of 7 shards of an H200 (150110011392 bytes).
  DeviceRef h200 = kDev0;
  h200.total_bytes = 150110011392ull;
  PlatformReport h = DetectPlatform(
      Fixture("none"), {{"SLURM_SHARDS_ON_NODE", "3"}, {"CUDA_MEMORY_SLURM_SHARDS_PER_GPU", "7"}},
      {h200});
  CHECK(h.devices[0].limits.size() == 1 && h.devices[0].limits[0].bytes == 150110011392ull * 3 / 7);
  EnvMap all{{"CUDA_MEMORY_SLURM_GPUMEM", "3221225472"},
             {"GPU_PORTION", "0.50"},
             {"NVIDIA_GPU_MEMORY_LIMIT", "5G"}};
  PlatformReport a = DetectPlatform(Fixture("none"), all, {d});
  CHECK(a.warnings.empty() && a.devices[0].limits.size() == 3);
  CHECK(a.devices[0].limits[0].kind == "slurm" && a.devices[0].limits[0].bytes == 3 * GiB);
  CHECK(a.devices[0].limits[1].kind == "kai" && a.devices[0].limits[1].bytes == 4 * GiB &&
        a.devices[0].limits[1].source == "GPU_PORTION=0.50 of the GPU (KAI scheduler)");
  CHECK(a.variables.count("GPU_PORTION") == 1);
  // KAI's share read exactly, rounded down: 0.33 of an H200; a whole GPU (1, 1.00) binds nothing.
  PlatformReport k = DetectPlatform(Fixture("none"), {{"GPU_PORTION", " 0.33 "}}, {h200});
  CHECK(k.warnings.empty() && k.devices[0].limits.size() == 1 &&
        k.devices[0].limits[0].bytes == 150110011392ull * 33 / 100);
  for (const char* whole : {"1", "1.00"})
    CHECK(DetectPlatform(Fixture("none"), {{"GPU_PORTION", whole}}, {d}).devices[0].limits.empty());
  // Its share needs the device's memory.
  CHECK(DetectPlatform(Fixture("none"), {{"GPU_PORTION", "0.5"}}, {kDev0}).warnings.size() == 1);
  CHECK(a.devices[0].limits[2].kind == "nvidia" && a.devices[0].limits[2].bytes == 5 * GiB);
  CHECK(SmallestLimit(a.devices[0].limits)->kind == "slurm");
  // At or beyond the device: binds nothing, as every platform's limit.
  CHECK(DetectPlatform(Fixture("none"), {{"NVIDIA_GPU_MEMORY_LIMIT", "8192"}}, {d})
            .devices[0]
            .limits.empty());
  // Hostile values: each one warning, no limit.
  for (const EnvMap& e : {
           EnvMap{{"SLURM_SHARDS_ON_NODE", "2"}},  // no shards per GPU
           EnvMap{{"SLURM_SHARDS_ON_NODE", "two"}, {"CUDA_MEMORY_SLURM_SHARDS_PER_GPU", "8"}},
           EnvMap{{"SLURM_SHARDS_ON_NODE", "0"}, {"CUDA_MEMORY_SLURM_SHARDS_PER_GPU", "8"}},
           EnvMap{{"SLURM_SHARDS_ON_NODE", "9"}, {"CUDA_MEMORY_SLURM_SHARDS_PER_GPU", "8"}},
           EnvMap{{"SLURM_SHARDS_ON_NODE", "2"}, {"CUDA_MEMORY_SLURM_SHARDS_PER_GPU", "0"}},
           EnvMap{{"SLURM_SHARDS_ON_NODE", "-2"}, {"CUDA_MEMORY_SLURM_SHARDS_PER_GPU", "8"}},
           EnvMap{{"SLURM_SHARDS_ON_NODE", "99999999999999999999999"},
                  {"CUDA_MEMORY_SLURM_SHARDS_PER_GPU", "8"}},
           EnvMap{{"CUDA_MEMORY_SLURM_GPUMEM", "3G"}},
           EnvMap{{"CUDA_MEMORY_SLURM_GPUMEM", "0"}},
           EnvMap{{"GPU_PORTION", "-0.5"}},
           EnvMap{{"GPU_PORTION", "0"}},
           EnvMap{{"GPU_PORTION", "0.00"}},
           EnvMap{{"GPU_PORTION", "1.5"}},
           EnvMap{{"GPU_PORTION", "2"}},
           EnvMap{{"GPU_PORTION", "NaN"}},
           EnvMap{{"GPU_PORTION", ".5"}},
           EnvMap{{"GPU_PORTION", "0."}},
           EnvMap{{"GPU_PORTION", "0.5.1"}},
           EnvMap{{"GPU_PORTION", "1e-1"}},
           EnvMap{{"GPU_PORTION", "0.0000000001"}},
           EnvMap{{"GPU_PORTION", "999999999999999999999"}},
           EnvMap{{"NVIDIA_GPU_MEMORY_LIMIT", "lots"}},
           EnvMap{{"NVIDIA_GPU_MEMORY_LIMIT", "18446744073709551615"}},  // MiB past 2^64 bytes
       }) {
    PlatformReport b = DetectPlatform(Fixture("none"), e, {d});
    CHECK(b.devices[0].limits.empty() && b.warnings.size() == 1);
  }
  // Shards seen on two GPUs are not said per GPU; a device of unknown size has no share.
  PlatformReport two = DetectPlatform(Fixture("none"), env, {d, kDev1});
  CHECK(two.devices[0].limits.empty() && two.devices[1].limits.empty() &&
        two.warnings.size() == 1 && two.warnings[0].find("2 GPUs") != std::string::npos);
  PlatformReport unknown = DetectPlatform(Fixture("none"), env, {kDev0});
  CHECK(unknown.devices[0].limits.empty() && unknown.warnings.size() == 1);
}

// Limits at or beyond the device's size bind nothing: 2^64 - 1 (how "no limit" can read) and
// 2^53 (8192T) whatever the device, the device's own size when it is known.
void TestBeyondTheDevice() {
  const uint64_t GiB = 1ull << 30;
  EnvMap env{{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "18446744073709551615"},
             {"CUDA_DEVICE_MEMORY_LIMIT", "8192T"}};
  PlatformReport r = DetectPlatform(Fixture("dmem-huge"), env, {kDev0, kDev1});
  CHECK(r.warnings.empty());
  CHECK(r.dmem.size() == 2);
  // 03:00.0: no limit in the job, 80 GiB at the top; 04:00.0: 2^53, no limit.
  CHECK(r.dmem[0].limited && r.dmem[0].max == 80 * GiB && r.dmem[0].limited_by == "/");
  CHECK(r.dmem[0].current == static_cast<int64_t>(GiB));
  CHECK(!r.dmem[1].limited);
  CHECK(r.devices[0].limits.size() == 1 && r.devices[0].limits[0].kind == "dmem" &&
        r.devices[0].limits[0].bytes == 80 * GiB);
  CHECK(r.devices[1].limits.empty());
  // On an 80 GiB device the 80 GiB limit binds nothing; on a 94 GiB one it binds.
  DeviceRef small = kDev0, large = kDev0;
  small.total_bytes = 80 * GiB;
  large.total_bytes = 94 * GiB;
  CHECK(DetectPlatform(Fixture("dmem-huge"), env, {small}).devices[0].limits.empty());
  PlatformReport l = DetectPlatform(Fixture("dmem-huge"), env, {large});
  CHECK(l.devices[0].limits.size() == 1 && l.devices[0].limits[0].bytes == 80 * GiB);
  // Each platform's variable, one at a time, at 2^53 and above.
  for (const EnvMap& e : {EnvMap{{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=8192T"}},
                          EnvMap{{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "9007199254740992"}},
                          EnvMap{{"CUDA_DEVICE_MEMORY_LIMIT_0", "16383T"}}}) {
    PlatformReport x = DetectPlatform(Fixture("none"), e, {kDev0});
    CHECK(x.devices[0].limits.empty() && x.warnings.empty());
  }
  // Just below 2^53, on a device of unknown size, still binds.
  PlatformReport below = DetectPlatform(
      Fixture("none"), {{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "9007199254740991"}}, {kDev0});
  CHECK(below.devices[0].limits.size() == 1 &&
        below.devices[0].limits[0].bytes == kBeyondAnyDevice - 1);
}

// The cgroup is placed under a mount by path components: /a/bc is not under a mount of /a/b
// (whose c/dmem.max is another cgroup's), but is under the mount of /a.
void TestCgroupUnderMountRoot() {
  PlatformReport r = DetectPlatform(Fixture("prefix"), {}, {kDev0});
  CHECK(r.cgroup == "/a/bc");
  CHECK(r.cgroup_dir == Fixture("prefix") + "/mnt/a/bc");
  CHECK(r.devices[0].limits.size() == 1 && r.devices[0].limits[0].bytes == 3ull << 30);
}

// A FIFO (or anything but a regular file) where a platform file should be is reported, not read:
// a blocking open of a FIFO would wait for a writer forever.
void TestNotRegularFiles() {
  char tmpl[] = "/tmp/cm-platform-XXXXXX";
  std::string root = ::mkdtemp(tmpl);
  std::string self = root + "/proc/self";
  CHECK(::mkdir((root + "/proc").c_str(), 0700) == 0 && ::mkdir(self.c_str(), 0700) == 0);
  CHECK(::mkfifo((self + "/cgroup").c_str(), 0600) == 0);
  PlatformReport r = DetectPlatform(root, {}, {kDev0});
  CHECK(r.cgroup.empty() && r.warnings.size() == 1 &&
        r.warnings[0] == self + "/cgroup: not a regular file; ignored");
  // The cgroup's dmem.max a FIFO and its dmem.current a directory.
  CHECK(::unlink((self + "/cgroup").c_str()) == 0);
  std::FILE* f = std::fopen((self + "/cgroup").c_str(), "w");
  std::fputs("0::/\n", f);
  std::fclose(f);
  f = std::fopen((self + "/mountinfo").c_str(), "w");
  std::fputs("35 24 0:30 / /cg rw - cgroup2 cgroup2 rw\n", f);
  std::fclose(f);
  CHECK(::mkdir((root + "/cg").c_str(), 0700) == 0);
  CHECK(::mkfifo((root + "/cg/dmem.max").c_str(), 0600) == 0);
  CHECK(::mkdir((root + "/cg/dmem.current").c_str(), 0700) == 0);
  PlatformReport d = DetectPlatform(root, {}, {kDev0});
  CHECK(d.cgroup_dir == root + "/cg" && d.dmem.empty() && d.warnings.size() == 2);
  // A file past the bound is not read.
  CHECK(::unlink((root + "/cg/dmem.max").c_str()) == 0);
  f = std::fopen((root + "/cg/dmem.max").c_str(), "w");
  std::string line = "drm/0000:03:00.0/vram0 1073741824\n";
  for (size_t n = 0; n <= (4u << 20) / line.size(); ++n) std::fputs(line.c_str(), f);
  std::fclose(f);
  PlatformReport big = DetectPlatform(root, {}, {kDev0});
  CHECK(big.devices[0].limits.empty());
  bool said = false;
  for (const std::string& w : big.warnings)
    said |= w.find("dmem.max: longer than") != std::string::npos;
  CHECK(said);
  std::string rm = "rm -rf '" + root + "'";
  CHECK(std::system(rm.c_str()) == 0);
}

}  // namespace

int main() {
  TestSizes();
  TestMps();
  TestDmemNested();
  TestDmemNamespace();
  TestHamiAndSmallest();
  TestSchedulers();
  TestBeyondTheDevice();
  TestCgroupUnderMountRoot();
  TestNotRegularFiles();
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
