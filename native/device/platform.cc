#include "device/platform.h"

#include <sys/xattr.h>

#include <cctype>
#include <cerrno>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "binding/instance.h"
#include "core/device/platform_limits.h"
#include "device/nvml.h"

namespace cm {

namespace {

// The hex digits of a uuid, whatever its prefix ("GPU-", "MIG-") and dashes.
std::string UuidHex(const std::string& uuid) {
  size_t dash = uuid.find('-');
  std::string body = dash != std::string::npos && dash <= 4 ? uuid.substr(dash + 1) : uuid;
  std::string out;
  for (char c : body)
    if (std::isxdigit(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string NvmlUuid(const Nvml& n, void* dev) {
  char text[96] = "";
  return n.uuid(dev, text, sizeof text) == 0 ? std::string(text) : std::string();
}

core::EnvMap ReadEnv(Napi::Env env, Napi::Value v) {
  core::EnvMap out;
  if (!v.IsObject()) ThrowType(env, "env must be an object of strings");
  Napi::Object o = v.As<Napi::Object>();
  Napi::Array keys = o.GetPropertyNames();
  for (uint32_t i = 0; i < keys.Length(); ++i) {
    std::string k = keys.Get(i).As<Napi::String>().Utf8Value();
    Napi::Value val = o.Get(k);
    if (val.IsString()) out[k] = val.As<Napi::String>().Utf8Value();
  }
  return out;
}

Napi::Object LimitObject(Napi::Env env, const core::PlatformLimit& l) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("kind", l.kind);
  o.Set("bytes", static_cast<double>(l.bytes));
  o.Set("source", l.source);
  o.Set("headroomBytes", l.headroom >= 0
                             ? Napi::Value(Napi::Number::New(env, static_cast<double>(l.headroom)))
                             : env.Null());
  return o;
}

// platformLimits: returns the report of DetectPlatform.
Napi::Value PlatformLimits(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string root = ReadString(env, info[0], "root");
  core::EnvMap vars = ReadEnv(env, info[1]);
  if (!info[2].IsArray()) ThrowType(env, "devices must be an array");
  Napi::Array list = info[2].As<Napi::Array>();
  std::vector<core::DeviceRef> devices;
  for (uint32_t i = 0; i < list.Length(); ++i) {
    if (!list.Get(i).IsObject()) ThrowType(env, "devices[] must be objects");
    Napi::Object d = list.Get(i).As<Napi::Object>();
    core::DeviceRef ref;
    ref.index = ReadInt(env, d.Get("index"), "devices[].index", 0, 1 << 20);
    if (d.Get("pciBusId").IsString()) ref.pci_bus_id = d.Get("pciBusId").As<Napi::String>();
    if (d.Get("uuid").IsString()) ref.uuid = d.Get("uuid").As<Napi::String>();
    if (!d.Get("totalMemory").IsUndefined())
      ref.total_bytes = ReadSize(env, d.Get("totalMemory"), "devices[].totalMemory");
    devices.push_back(ref);
  }
  core::PlatformReport r = core::DetectPlatform(root, vars, devices);
  Napi::Object o = Napi::Object::New(env);
  Napi::Object mps = Napi::Object::New(env);
  mps.Set("pipeDirectory", r.mps.pipe_directory);
  mps.Set("pipeDirectoryFromEnv", r.mps.pipe_directory_set);
  mps.Set("controlPipe", r.mps.control_present);
  mps.Set("activeThreadPercentage",
          r.mps.active_thread_percentage >= 0
              ? Napi::Value(Napi::Number::New(env, r.mps.active_thread_percentage))
              : env.Null());
  mps.Set("pinnedDeviceMemLimit",
          r.mps.pinned_limit.empty() ? env.Null() : Napi::String::New(env, r.mps.pinned_limit));
  o.Set("mps", mps);
  Napi::Object cg = Napi::Object::New(env);
  cg.Set("path", r.cgroup.empty() ? env.Null() : Napi::String::New(env, r.cgroup));
  cg.Set("dir", r.cgroup_dir.empty() ? env.Null() : Napi::String::New(env, r.cgroup_dir));
  Napi::Array dmem = Napi::Array::New(env, r.dmem.size());
  for (size_t i = 0; i < r.dmem.size(); ++i) {
    const core::DmemRegion& reg = r.dmem[i];
    Napi::Object x = Napi::Object::New(env);
    x.Set("region", reg.name);
    x.Set("maxBytes", reg.limited
                          ? Napi::Value(Napi::Number::New(env, static_cast<double>(reg.max)))
                          : env.Null());
    x.Set("limitedBy",
          reg.limited ? Napi::Value(Napi::String::New(env, reg.limited_by)) : env.Null());
    x.Set("currentBytes",
          reg.current >= 0 ? Napi::Value(Napi::Number::New(env, static_cast<double>(reg.current)))
                           : env.Null());
    x.Set("headroomBytes",
          reg.headroom >= 0 ? Napi::Value(Napi::Number::New(env, static_cast<double>(reg.headroom)))
                            : env.Null());
    dmem.Set(i, x);
  }
  cg.Set("dmem", dmem);
  o.Set("cgroup", cg);
  Napi::Object vars_out = Napi::Object::New(env);
  for (const auto& [k, v] : r.variables)
    if (k != "cgroup2 mount") vars_out.Set(k, v);
  o.Set("variables", vars_out);
  Napi::Array warnings = Napi::Array::New(env, r.warnings.size());
  for (size_t i = 0; i < r.warnings.size(); ++i) warnings.Set(i, r.warnings[i]);
  o.Set("warnings", warnings);
  Napi::Array devs = Napi::Array::New(env, r.devices.size());
  for (size_t i = 0; i < r.devices.size(); ++i) {
    Napi::Object d = Napi::Object::New(env);
    d.Set("index", r.devices[i].index);
    Napi::Array limits = Napi::Array::New(env, r.devices[i].limits.size());
    for (size_t j = 0; j < r.devices[i].limits.size(); ++j)
      limits.Set(j, LimitObject(env, r.devices[i].limits[j]));
    d.Set("limits", limits);
    devs.Set(i, d);
  }
  o.Set("devices", devs);
  return o;
}

}  // namespace

Napi::Value MigObject(Napi::Env env, const std::string& pci_bus_id, const std::string& uuid) {
  const Nvml& n = LoadNvml();
  void* parent = nullptr;
  if (!n.ok || !n.mig_mode || !n.uuid || !n.memory || n.by_bus_id(pci_bus_id.c_str(), &parent) != 0)
    return env.Null();
  unsigned current = 0, pending = 0;
  // NVML_ERROR_NOT_SUPPORTED on GPUs without MIG: nothing to say.
  if (n.mig_mode(parent, &current, &pending) != 0) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("enabled", current == 1);
  std::string parent_uuid = NvmlUuid(n, parent);
  NvmlMemory parent_mem{};
  bool parent_known = n.memory(parent, &parent_mem) == 0;
  o.Set("parentUuid", parent_uuid);
  o.Set("parentMemoryBytes",
        parent_known ? Napi::Value(Napi::Number::New(env, static_cast<double>(parent_mem.total)))
                     : env.Null());
  // With MIG on, a CUDA device whose uuid is not the GPU's own is one of its instances.
  bool instance = current == 1 && !uuid.empty() && UuidHex(uuid) != UuidHex(parent_uuid);
  o.Set("instance", instance);
  Napi::Value mig_uuid = env.Null(), gi = env.Null(), ci = env.Null(), mem = env.Null();
  if (instance && n.max_mig && n.mig_by_index) {
    unsigned count = 0;
    if (n.max_mig(parent, &count) != 0) count = 0;
    for (unsigned i = 0; i < count; ++i) {
      void* mig = nullptr;
      if (n.mig_by_index(parent, i, &mig) != 0 || !mig) continue;
      std::string u = NvmlUuid(n, mig);
      if (UuidHex(u) != UuidHex(uuid)) continue;
      mig_uuid = Napi::String::New(env, u);
      unsigned id = 0;
      if (n.gpu_instance && n.gpu_instance(mig, &id) == 0) gi = Napi::Number::New(env, id);
      if (n.compute_instance && n.compute_instance(mig, &id) == 0) ci = Napi::Number::New(env, id);
      NvmlMemory m{};
      if (n.memory(mig, &m) == 0) mem = Napi::Number::New(env, static_cast<double>(m.total));
      break;
    }
  }
  o.Set("uuid", mig_uuid);
  o.Set("gpuInstanceId", gi);
  o.Set("computeInstanceId", ci);
  o.Set("memoryBytes", mem);
  return o;
}

namespace {

// fileCapabilities: whether a file carries file capabilities (setcap(8): the security.capability
// extended attribute, which Node cannot read), true or false; null where it cannot be told (the
// file cannot be reached). A file system without extended attributes has no capabilities either.
Napi::Value FileCapabilities(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  ssize_t n = getxattr(path.c_str(), "security.capability", nullptr, 0);
  if (n >= 0) return Napi::Boolean::New(env, n > 0);
  if (errno == ENODATA || errno == ENOTSUP) return Napi::Boolean::New(env, false);
  return env.Null();
}

}  // namespace

void InitPlatform(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"platformLimits", PlatformLimits},
               {"fileCapabilities", FileCapabilities},
           });
}

}  // namespace cm
