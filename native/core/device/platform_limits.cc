#include "core/device/platform_limits.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "core/device/numa.h"

namespace cm::core {

namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// The most any platform file is read: a cgroup's dmem files are a line per region, and
// mountinfo a line per mount (a busy Kubernetes node has thousands, well under this).
constexpr size_t kMaxFileBytes = 4 << 20;

// Reads a platform file whole. Only a regular file is read (procfs and cgroupfs files are
// regular, with a size of 0), opened without blocking, so that a FIFO or a device planted under
// the root cannot stop the caller, and at most kMaxFileBytes of it. False when the file is not
// there; false with a warning in `r` when it is there but is not read.
bool ReadFile(const std::string& path, std::string* out, PlatformReport* r) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    if (err != ENOENT && err != ENOTDIR)
      r->warnings.push_back(path + ": cannot be opened (" + std::strerror(err) + "); ignored");
    return false;
  }
  struct stat st {};
  std::string text;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!ok) r->warnings.push_back(path + ": not a regular file; ignored");
  char chunk[16384];
  while (ok) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      if (!ok) r->warnings.push_back(path + ": cannot be read; ignored");
      break;
    }
    if (text.size() + static_cast<size_t>(n) > kMaxFileBytes) {
      ok = false;
      r->warnings.push_back(path + ": longer than " + std::to_string(kMaxFileBytes) +
                            " bytes; ignored");
      break;
    }
    text.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  if (ok) *out = std::move(text);
  return ok;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

std::string Join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  bool sa = a.back() == '/', sb = b.front() == '/';
  if (sa && sb) return a + b.substr(1);
  if (!sa && !sb) return a + "/" + b;
  return a + b;
}

const char* Get(const EnvMap& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : it->second.c_str();
}

bool ParseUint(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// mountinfo writes a space, tab, newline and backslash in a path as \040, \011, \012, \134.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 2])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 3]))) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// `path` below `base`, compared by components ("/a/bc" is not below "/a/b"), as "/rest"; false
// when it is not below, or when either names "." or "..", which no path of the kernel's does.
bool RelativeTo(const std::string& path, const std::string& base, std::string* rest) {
  std::vector<std::string> p, b;
  for (const std::string& c : Split(path, '/'))
    if (!c.empty()) p.push_back(c);
  for (const std::string& c : Split(base, '/'))
    if (!c.empty()) b.push_back(c);
  for (const std::vector<std::string>* v : {&p, &b})
    for (const std::string& c : *v)
      if (c == "." || c == "..") return false;
  if (b.size() > p.size() || !std::equal(b.begin(), b.end(), p.begin())) return false;
  rest->clear();
  for (size_t i = b.size(); i < p.size(); ++i) *rest += "/" + p[i];
  if (rest->empty()) *rest = "/";
  return true;
}

// The process's cgroup v2 path and the directory it is in, from /proc/self/cgroup ("0::<path>")
// and the cgroup2 mount in /proc/self/mountinfo. In a cgroup namespace the mount's root is the
// namespace's root, and the path is relative to it.
void FindCgroup(const std::string& root, PlatformReport* r) {
  std::string text;
  if (!ReadFile(Join(root, "proc/self/cgroup"), &text, r)) return;
  for (const std::string& line : Split(text, '\n'))
    if (line.rfind("0::", 0) == 0) r->cgroup = Trim(line.substr(3));
  if (r->cgroup.empty()) return;
  if (!ReadFile(Join(root, "proc/self/mountinfo"), &text, r)) return;
  for (const std::string& line : Split(text, '\n')) {
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::vector<std::string> after = Split(line.substr(dash + 3), ' ');
    if (after.empty() || after[0] != "cgroup2") continue;
    std::vector<std::string> f = Split(line.substr(0, dash), ' ');
    if (f.size() < 5) continue;
    std::string mount_root = Unescape(f[3]), mount_point = Unescape(f[4]);
    std::string rel;
    if (!RelativeTo(r->cgroup, mount_root, &rel)) {
      if (r->cgroup != "/") continue;  // a mount of another part of the hierarchy
      rel = "/";
    }
    r->cgroup_dir = Join(Join(root, mount_point), rel);
    while (r->cgroup_dir.size() > 1 && r->cgroup_dir.back() == '/') r->cgroup_dir.pop_back();
    r->variables["cgroup2 mount"] = mount_point;
    return;
  }
}

// A nested-keyed dmem file: "<region> <bytes|max>" per line.
std::map<std::string, std::string> ReadKeyed(const std::string& path, PlatformReport* r) {
  std::map<std::string, std::string> out;
  std::string text;
  if (!ReadFile(path, &text, r)) return out;
  for (const std::string& line : Split(text, '\n')) {
    std::string t = Trim(line);
    size_t sp = t.find_last_of(" \t");
    if (t.empty() || sp == std::string::npos) continue;
    out[Trim(t.substr(0, sp))] = Trim(t.substr(sp + 1));
  }
  return out;
}

// dmem.max is hierarchical: a cgroup may take no more than the least of its own and its
// ancestors' limits, and each ancestor's charge counts its descendants', so the headroom is the
// least of (max - current) over every limiting level.
void ReadDmem(const std::string& root, PlatformReport* r) {
  if (r->cgroup_dir.empty()) return;
  std::string top = Join(root, r->variables["cgroup2 mount"]);
  while (top.size() > 1 && top.back() == '/') top.pop_back();
  std::map<std::string, DmemRegion> regions;
  std::string dir = r->cgroup_dir;
  bool leaf = true;
  while (true) {
    auto max = ReadKeyed(Join(dir, "dmem.max"), r);
    auto current = ReadKeyed(Join(dir, "dmem.current"), r);
    std::string rel = dir.size() > top.size() ? dir.substr(top.size()) : "/";
    for (const auto& [name, value] : current) {
      DmemRegion& reg = regions[name];
      reg.name = name;
      uint64_t used = 0;
      if (leaf && ParseUint(value, &used) && used < kBeyondAnyDevice)
        reg.current = static_cast<int64_t>(used);
    }
    for (const auto& [name, value] : max) {
      DmemRegion& reg = regions[name];
      reg.name = name;
      if (value == "max") continue;
      uint64_t bytes = 0;
      if (!ParseUint(value, &bytes)) {
        r->warnings.push_back(Join(dir, "dmem.max") + ": region " + name + " has limit '" + value +
                              "', not a number of bytes or 'max'; ignored");
        continue;
      }
      if (bytes >= kBeyondAnyDevice) continue;  // no limit, as 2^64 - 1 can read
      uint64_t used = 0;
      auto c = current.find(name);
      bool has_used = c != current.end() && ParseUint(c->second, &used);
      int64_t room = has_used ? static_cast<int64_t>(bytes > used ? bytes - used : 0) : -1;
      if (!reg.limited || bytes < reg.max) {
        reg.max = bytes;
        reg.limited_by = rel;
      }
      reg.limited = true;
      if (room >= 0 && (reg.headroom < 0 || room < reg.headroom)) reg.headroom = room;
    }
    leaf = false;
    if (dir.size() <= top.size()) break;
    size_t slash = dir.find_last_of('/');
    if (slash == std::string::npos || slash < top.size()) break;
    dir = slash == 0 ? "/" : dir.substr(0, slash);
    if (dir.size() < top.size()) break;
  }
  for (auto& [name, reg] : regions) r->dmem.push_back(reg);
}

// The PCI device a dmem region belongs to: "drm/0000:03:00.0/vram0" -> 0000:03:00.0.
PciAddress RegionPci(const std::string& name) {
  std::vector<std::string> parts = Split(name, '/');
  for (const std::string& p : parts) {
    PciAddress a = ParsePciBusId(p);
    if (a.ok) return a;
  }
  return {};
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool ParseMemorySize(const std::string& text, uint64_t* bytes) {
  std::string t = Trim(text);
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  uint64_t n = 0;
  if (!ParseUint(t.substr(0, digits), &n)) return false;
  std::string unit = Lower(Trim(t.substr(digits)));
  int shift = 0;
  if (unit.empty() || unit == "b")
    shift = 0;
  else if (unit == "k" || unit == "kb" || unit == "kib")
    shift = 10;
  else if (unit == "m" || unit == "mb" || unit == "mib")
    shift = 20;
  else if (unit == "g" || unit == "gb" || unit == "gib")
    shift = 30;
  else if (unit == "t" || unit == "tb" || unit == "tib")
    shift = 40;
  else
    return false;
  if (shift && n > (UINT64_MAX >> shift)) return false;
  *bytes = n << shift;
  return true;
}

const PlatformLimit* SmallestLimit(const std::vector<PlatformLimit>& limits) {
  const PlatformLimit* best = nullptr;
  for (const PlatformLimit& l : limits)
    if (!best || l.bytes < best->bytes) best = &l;
  return best;
}

namespace {

// The steps of DetectPlatform.

// The variables of the platforms read here (MPS, HAMi, the NVIDIA device plugin), for the report.
void CollectVariables(const EnvMap& env, PlatformReport* r) {
  for (const auto& [key, value] : env) {
    bool platform = key.rfind("CUDA_MPS_", 0) == 0 || key.rfind("CUDA_DEVICE_MEMORY_", 0) == 0 ||
                    key == "CUDA_DEVICE_SM_LIMIT" || key == "CUDA_OVERSUBSCRIBE" ||
                    key == "NVIDIA_VISIBLE_DEVICES" || key == "NVIDIA_MIG_CONFIG_DEVICES" ||
                    key == "GPU_CORE_UTILIZATION_POLICY" || key == "SLURM_SHARDS_ON_NODE" ||
                    key.rfind("CUDA_MEMORY_SLURM_", 0) == 0 || key == "GPU_PORTION" ||
                    key == "NVIDIA_GPU_MEMORY_LIMIT" ||
                    (key == "LD_PRELOAD" && value.find("libvgpu") != std::string::npos);
    if (platform) r->variables[key] = value;
  }
}

// MPS: a client connects through the control daemon's pipe in the pipe directory.
void ReadMpsClient(const std::string& root, const EnvMap& env, PlatformReport* r) {
  const char* pipe = Get(env, "CUDA_MPS_PIPE_DIRECTORY");
  r->mps.pipe_directory_set = pipe != nullptr && *pipe;
  r->mps.pipe_directory = r->mps.pipe_directory_set ? pipe : "/tmp/nvidia-mps";
  struct stat st {};
  r->mps.control_present =
      ::stat(Join(Join(root, r->mps.pipe_directory), "control").c_str(), &st) == 0;
  if (const char* p = Get(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")) {
    char* end = nullptr;
    double v = std::strtod(p, &end);
    if (end != p && *end == '\0' && v > 0 && v <= 100)
      r->mps.active_thread_percentage = v;
    else
      r->warnings.push_back(std::string("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='") + p +
                            "' is not a number in (0, 100]; ignored");
  }
  if (const char* pinned = Get(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"))
    r->mps.pinned_limit = pinned;
}

// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, interpreted.
struct MpsPinnedLimits {
  std::map<std::string, uint64_t> by_key;  // lower-case ordinal or GPU uuid -> bytes
  bool all = false;
  uint64_t all_bytes = 0;
};

// "0=1G,1=2G" per device (an ordinal as the client counts them, or a GPU uuid), or one size
// for every device.
MpsPinnedLimits ParseMpsPinnedLimits(const std::string& pinned, PlatformReport* r) {
  MpsPinnedLimits mps;
  if (pinned.empty()) return mps;
  for (const std::string& item : Split(pinned, ',')) {
    std::string t = Trim(item);
    if (t.empty()) continue;
    size_t eq = t.find('=');
    uint64_t bytes = 0;
    if (eq == std::string::npos) {
      if (ParseMemorySize(t, &bytes)) {
        mps.all = true;
        mps.all_bytes = bytes;
        continue;
      }
    } else if (ParseMemorySize(t.substr(eq + 1), &bytes) && eq > 0) {
      mps.by_key[Lower(Trim(t.substr(0, eq)))] = bytes;
      continue;
    }
    r->warnings.push_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '" + t +
                          "' is neither <device>=<size> nor <size> (sizes like 1073741824, "
                          "512M, 2G); ignored");
  }
  return mps;
}

// The MPS limit of device `d`: its ordinal's, else its uuid's, else the one for every device.
void AddMpsLimit(const DeviceRef& d, const MpsPinnedLimits& mps, const MpsClientInfo& client,
                 std::vector<PlatformLimit>* found) {
  std::string ordinal = std::to_string(d.index);
  auto by_ordinal = mps.by_key.find(ordinal);
  auto by_uuid = d.uuid.empty() ? mps.by_key.end() : mps.by_key.find(Lower(d.uuid));
  std::string note = client.control_present
                         ? ""
                         : " (no MPS control pipe in " + client.pipe_directory +
                               ": it binds only once this process is an MPS client)";
  if (by_ordinal != mps.by_key.end())
    found->push_back({"mps", by_ordinal->second,
                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT " + ordinal + "=" +
                          std::to_string(by_ordinal->second) + " bytes" + note});
  else if (by_uuid != mps.by_key.end())
    found->push_back({"mps", by_uuid->second,
                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT " + d.uuid + "=" +
                          std::to_string(by_uuid->second) + " bytes" + note});
  else if (mps.all)
    found->push_back({"mps", mps.all_bytes,
                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT " + std::to_string(mps.all_bytes) +
                          " bytes for every device" + note});
}

// The dmem limits of the regions on device `d`'s PCI address.
void AddDmemLimits(const DeviceRef& d, const std::vector<DmemRegion>& dmem,
                   std::vector<PlatformLimit>* found) {
  PciAddress pci = ParsePciBusId(d.pci_bus_id);
  for (const DmemRegion& reg : dmem) {
    if (!reg.limited || !pci.ok || !(RegionPci(reg.name) == pci)) continue;
    found->push_back({"dmem", reg.max,
                      "cgroup dmem.max " + reg.name + " " + std::to_string(reg.max) + " bytes in " +
                          (reg.limited_by.empty() ? "/" : reg.limited_by),
                      reg.headroom});
  }
}

// HAMi: CUDA_DEVICE_MEMORY_LIMIT_<n> for device n, else CUDA_DEVICE_MEMORY_LIMIT for all.
void AddHamiLimit(const DeviceRef& d, const EnvMap& env, std::vector<PlatformLimit>* found,
                  PlatformReport* r) {
  std::string own = "CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(d.index);
  const char* hami = Get(env, own.c_str());
  std::string hami_name = own;
  if (!hami) {
    hami = Get(env, "CUDA_DEVICE_MEMORY_LIMIT");
    hami_name = "CUDA_DEVICE_MEMORY_LIMIT";
  }
  if (!hami || !*hami) return;
  uint64_t bytes = 0;
  if (ParseMemorySize(hami, &bytes) && bytes > 0)
    found->push_back({"hami", bytes, hami_name + "=" + hami + " (HAMi)"});
  else
    r->warnings.push_back(hami_name + "='" + hami +
                          "' is not a size (1073741824, 1024m, 1g); ignored");
}

// A share n/of (0 < n <= of) of the device's memory as a limit of `kind`, from `source`; a
// warning naming `given` where the device's memory is not known.
void AddShareLimit(const char* kind, const DeviceRef& d, uint64_t n, uint64_t of,
                   const std::string& given, const std::string& source,
                   std::vector<PlatformLimit>* found, PlatformReport* r) {
  if (!d.total_bytes) {
    r->warnings.push_back(given + ": the device's memory is not known; ignored");
    return;
  }
  found->push_back({kind,
                    static_cast<uint64_t>(static_cast<unsigned __int128>(d.total_bytes) * n / of),
                    source});
}

// A decimal share of a whole ("0.50", "1", at most two whole digits and nine after the point) as
// n/of exactly, in (0, 1]; else false.
bool ParseDecimalShare(const std::string& t, uint64_t* n, uint64_t* of) {
  const size_t dot = t.find('.');
  const std::string whole = t.substr(0, dot);
  const std::string frac = dot == std::string::npos ? "" : t.substr(dot + 1);
  uint64_t w = 0, f = 0;
  if (whole.empty() || whole.size() > 2 || !ParseUint(whole, &w)) return false;
  if (dot != std::string::npos && (frac.empty() || frac.size() > 9 || !ParseUint(frac, &f)))
    return false;
  *of = 1;
  for (size_t i = 0; i < frac.size(); ++i) *of *= 10;
  *n = w * *of + f;
  return *n > 0 && *n <= *of;
}

// KAI scheduler's GPU_PORTION: the share of each GPU it gave the container, written "%.2f"
// ("0.50"; a `gpu-memory` request becomes that memory over the node's GPU memory label, so
// rounded to a hundredth), read exactly, times the device's memory. KAI sets no variable in
// bytes (KAI-Scheduler pkg/binder/common: GPU_PORTION, and its deprecated twin RUNAI_NUM_OF_GPUS).
void AddKaiLimit(const DeviceRef& d, const EnvMap& env, std::vector<PlatformLimit>* found,
                 PlatformReport* r) {
  const char* v = Get(env, "GPU_PORTION");
  if (!v || !*v) return;
  const std::string given = std::string("GPU_PORTION=") + v;
  uint64_t n = 0, of = 0;
  if (!ParseDecimalShare(Trim(v), &n, &of))
    r->warnings.push_back(given + " is not a share of a GPU (above 0, at most 1); ignored");
  else
    AddShareLimit("kai", d, n, of, given, given + " of the GPU (KAI scheduler)", found, r);
}

// A limit in MiB as the NVIDIA container toolkit writes it ("20480"), or a size with its
// unit ("20G"): kind `kind`, from variable `name`, for every device the process sees.
void AddMibLimit(const char* kind, const char* name, const char* who, const EnvMap& env,
                 std::vector<PlatformLimit>* found, PlatformReport* r) {
  const char* v = Get(env, name);
  if (!v || !*v) return;
  std::string t = Trim(v);
  uint64_t n = 0, bytes = 0;
  bool ok = false;
  if (ParseUint(t, &n)) {
    ok = n <= (UINT64_MAX >> 20);
    bytes = n << 20;
  } else {
    ok = ParseMemorySize(t, &bytes);
  }
  if (ok && bytes > 0)
    found->push_back({kind, bytes, std::string(name) + "=" + v + " (" + who + ")"});
  else
    r->warnings.push_back(std::string(name) + "='" + v +
                          "' is not a size (a number of MiB, or 20G); ignored");
}

// A whole number from 1 to 2^20 (a count of shards), else false.
bool ParseCount(const char* text, uint64_t* out) {
  return text && ParseUint(Trim(text), out) && *out >= 1 && *out <= (1u << 20);
}

// Slurm's shards: SLURM_SHARDS_ON_NODE of the GPU's CUDA_MEMORY_SLURM_SHARDS_PER_GPU (gres.conf's
// Count for it, which Slurm does not give the job; `cuda-memory slurm task-prolog` exports it) is
// that part of the device's memory, where the job sees one GPU (shards spread over several are
// not said per GPU). The job's counted gpumem GRES, which Slurm does not give the job either, is
// CUDA_MEMORY_SLURM_GPUMEM (bytes), exported by the same hook.
void AddSlurmLimits(const DeviceRef& d, const EnvMap& env, size_t devices,
                    std::vector<PlatformLimit>* found, PlatformReport* r) {
  if (const char* on = Get(env, "SLURM_SHARDS_ON_NODE")) {
    const char* per = Get(env, "CUDA_MEMORY_SLURM_SHARDS_PER_GPU");
    uint64_t n = 0, of = 0;
    std::string given = std::string("SLURM_SHARDS_ON_NODE=") + on;
    if (!ParseCount(on, &n))
      r->warnings.push_back(given + " is not a count of shards (1 to 1048576); ignored");
    else if (!per)
      r->warnings.push_back(given +
                            ": the shards per GPU are not known (the job's task prolog, "
                            "cuda-memory slurm task-prolog, exports "
                            "CUDA_MEMORY_SLURM_SHARDS_PER_GPU); ignored");
    else if (!ParseCount(per, &of) || n > of)
      r->warnings.push_back(given + " of CUDA_MEMORY_SLURM_SHARDS_PER_GPU=" + per +
                            " is not a share of a GPU; ignored");
    else if (devices != 1)
      r->warnings.push_back(given + ": the shards may be spread over the " +
                            std::to_string(devices) + " GPUs this process sees; ignored");
    else
      AddShareLimit("slurm", d, n, of, given,
                    given + " of " + std::to_string(of) + " shards per GPU (Slurm)", found, r);
  }
  if (const char* g = Get(env, "CUDA_MEMORY_SLURM_GPUMEM")) {
    uint64_t bytes = 0;
    if (ParseUint(Trim(g), &bytes) && bytes > 0)
      found->push_back(
          {"slurm", bytes, std::string("CUDA_MEMORY_SLURM_GPUMEM=") + g + " bytes (Slurm gpumem)"});
    else
      r->warnings.push_back(std::string("CUDA_MEMORY_SLURM_GPUMEM='") + g +
                            "' is not a number of bytes; ignored");
  }
}

// The limits of device `d` in the order MPS, dmem, HAMi, Slurm, KAI, the NVIDIA container
// toolkit, less those that bind nothing.
DevicePlatformLimits LimitsOf(const DeviceRef& d, const EnvMap& env, const MpsPinnedLimits& mps,
                              size_t devices, PlatformReport* r) {
  std::vector<PlatformLimit> found;
  AddMpsLimit(d, mps, r->mps, &found);
  AddDmemLimits(d, r->dmem, &found);
  AddHamiLimit(d, env, &found, r);
  AddSlurmLimits(d, env, devices, &found, r);
  AddKaiLimit(d, env, &found, r);
  AddMibLimit("nvidia", "NVIDIA_GPU_MEMORY_LIMIT", "NVIDIA container toolkit", env, &found, r);
  DevicePlatformLimits out;
  out.index = d.index;
  // A limit at or beyond the device's size binds nothing ("no limit" may read as 2^64 - 1).
  uint64_t binds_below =
      d.total_bytes ? std::min(d.total_bytes, kBeyondAnyDevice) : kBeyondAnyDevice;
  for (PlatformLimit& l : found)
    if (l.bytes < binds_below) out.limits.push_back(std::move(l));
  return out;
}

// Unreadable dmem regions say so once, whatever the devices; every warning is said once.
void FinishWarnings(PlatformReport* r) {
  for (const DmemRegion& reg : r->dmem)
    if (reg.limited && !RegionPci(reg.name).ok)
      r->warnings.push_back("dmem region " + reg.name +
                            " names no PCI device, so no GPU could be matched to its limit");
  std::sort(r->warnings.begin(), r->warnings.end());
  r->warnings.erase(std::unique(r->warnings.begin(), r->warnings.end()), r->warnings.end());
}

}  // namespace

PlatformReport DetectPlatform(const std::string& root, const EnvMap& env,
                              const std::vector<DeviceRef>& devices) {
  PlatformReport r;
  CollectVariables(env, &r);
  ReadMpsClient(root, env, &r);
  MpsPinnedLimits mps = ParseMpsPinnedLimits(r.mps.pinned_limit, &r);
  FindCgroup(root, &r);
  ReadDmem(root, &r);
  for (const DeviceRef& d : devices) r.devices.push_back(LimitsOf(d, env, mps, devices.size(), &r));
  FinishWarnings(&r);
  return r;
}

}  // namespace cm::core
