#include "device/discovery.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "binding/exports.h"
#include "device/nvml.h"
#include "device/platform.h"
#include "device/shared_memory.h"

namespace cm {

std::string FormatUuid(const cudaUUID_t& id) {
  char uuid[64];
  const unsigned char* u = reinterpret_cast<const unsigned char*>(id.bytes);
  std::snprintf(uuid, sizeof uuid,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return uuid;
}

std::string DeviceUuid(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return FormatUuid(p.uuid);
}

namespace {
CudaStatus ComputeStatus() {
  CudaStatus st;
#ifdef CUDA_MEMORY_NO_CUDA
  st.reason = "NOT_BUILT_WITH_CUDA";
  st.message =
      "cuda-memory was built without a CUDA toolkit (CUDA_MEMORY_NO_CUDA was set or none was "
      "found); reinstall with the toolkit in CUDA_PATH, CUDA_HOME or /usr/local/cuda";
  return st;
#else
  cudaRuntimeGetVersion(&st.runtime_version);
  // The statically linked runtime loads the driver itself; look first, to say which is missing.
  void* libcuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!libcuda) libcuda = dlopen("libcuda.so.1", RTLD_LAZY);
  if (!libcuda) {
    st.reason = "NO_DRIVER";
    st.message = "no NVIDIA driver: libcuda.so.1 could not be loaded";
    return st;
  }
  dlclose(libcuda);
  cudaDriverGetVersion(&st.driver_version);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  char text[256];
  if (err == cudaErrorInsufficientDriver ||
      (st.driver_version > 0 && st.driver_version < st.runtime_version / 1000 * 1000)) {
    st.reason = "INSUFFICIENT_DRIVER";
    std::snprintf(text, sizeof text,
                  "the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d runtime this "
                  "addon was built with",
                  st.driver_version / 1000, st.driver_version % 1000 / 10,
                  st.runtime_version / 1000, st.runtime_version % 1000 / 10);
    st.message = text;
    return st;
  }
  if (err != cudaSuccess || count == 0) {
    st.reason = "NO_DEVICE";
    st.message =
        std::string("no usable CUDA device: ") +
        (err != cudaSuccess ? std::string("cudaGetDeviceCount failed with ") +
                                  cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")"
                            : "the driver reports none");
    return st;
  }
  st.available = true;
  st.device_count = count;
  std::snprintf(text, sizeof text, "%d CUDA device%s, driver %d.%d, runtime %d.%d", count,
                count == 1 ? "" : "s", st.driver_version / 1000, st.driver_version % 1000 / 10,
                st.runtime_version / 1000, st.runtime_version % 1000 / 10);
  st.message = text;
  return st;
#endif
}

struct StatusState : InstanceState {
  CudaStatus status = ComputeStatus();
};
}  // namespace

const CudaStatus& GetStatus(Napi::Env env) { return GetInstance(env).State<StatusState>().status; }

void RequireCuda(Napi::Env env) {
  const CudaStatus& st = GetStatus(env);
  if (!st.available) ThrowValue(env, MakeUnavailableError(env, st.reason, st.message));
}

void CheckDevice(Napi::Env env, int device) {
  RequireCuda(env);
  int count = GetStatus(env).device_count;
  if (device < 0 || device >= count)
    ThrowRange(env, "device must be an integer from 0 to " + std::to_string(count - 1) +
                        " (this machine has " + std::to_string(count) + " CUDA device" +
                        (count == 1 ? "" : "s") + "), got " + std::to_string(device));
}

namespace {

// Without NVML's remote-type query, the far end's PCI class says: NVSwitches are bridges (0x0680).
bool IsSwitchBySysfs(const core::PciAddress& a) {
  std::FILE* f =
      std::fopen(("/sys/bus/pci/devices/" + core::PciSysfsName(a) + "/class").c_str(), "r");
  if (!f) return false;
  char text[32] = "";
  bool bridge = std::fgets(text, sizeof text, f) && std::strncmp(text, "0x0680", 6) == 0;
  std::fclose(f);
  return bridge;
}

Napi::Value Status(const Napi::CallbackInfo& info) {
  const CudaStatus& st = GetStatus(info.Env());
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("available", st.available);
  o.Set("reason", st.reason.empty() ? info.Env().Null() : Napi::String::New(info.Env(), st.reason));
  o.Set("message", st.message);
  o.Set("deviceCount", st.device_count);
  o.Set("driverVersion", st.driver_version);
  o.Set("runtimeVersion", st.runtime_version);
#ifdef CUDA_MEMORY_NO_CUDA
  o.Set("builtWithCuda", false);
#else
  o.Set("builtWithCuda", true);
#endif
  return o;
}

Napi::Value Devices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  int count = GetStatus(env).device_count;
  Napi::Array out = Napi::Array::New(env, count);
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    cudaError_t err = cudaGetDeviceProperties(&p, d);
    if (err != cudaSuccess) ThrowCuda(env, err, "cudaGetDeviceProperties");
    char bus[32] = {0};
    err = cudaDeviceGetPCIBusId(bus, sizeof bus, d);
    if (err != cudaSuccess) ThrowCuda(env, err, "cudaDeviceGetPCIBusId");
    std::string uuid = FormatUuid(p.uuid);
    Napi::Object o = Napi::Object::New(env);
    o.Set("index", d);
    o.Set("name", p.name);
    o.Set("uuid", uuid);
    o.Set("totalMemory", static_cast<double>(p.totalGlobalMem));
    o.Set("computeCapability", std::to_string(p.major) + "." + std::to_string(p.minor));
    o.Set("computeCapabilityMajor", p.major);
    o.Set("computeCapabilityMinor", p.minor);
    o.Set("pciBusId", bus);
    o.Set("multiProcessorCount", p.multiProcessorCount);
    o.Set("asyncEngineCount", p.asyncEngineCount);
    o.Set("canMapHostMemory", p.canMapHostMemory != 0);
    o.Set("integrated", p.integrated != 0);
    SetSharedMemoryFacts(env, o, d, bus);
    int nvml_index = NvmlIndex(bus);
    o.Set("nvmlIndex",
          nvml_index >= 0 ? Napi::Value(Napi::Number::New(env, nvml_index)) : env.Null());
    o.Set("mig", MigObject(env, bus, uuid));
    PcieLink link = ReadPcieLink(bus);
    if (link.known) {
      Napi::Object l = Napi::Object::New(env);
      l.Set("currentGeneration", link.current_gen);
      l.Set("maxGeneration", link.max_gen);
      l.Set("currentWidth", link.current_width);
      l.Set("maxWidth", link.max_width);
      o.Set("pcie", l);
    } else {
      o.Set("pcie", env.Null());
    }
    out.Set(d, o);
  }
  return out;
}

Napi::Value MemGetInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int device = ReadInt(env, info[0], "device", 0, 1 << 20);
  CheckDevice(env, device);
  size_t free_b = 0, total_b = 0;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMemGetInfo(&free_b, &total_b);
  if (err != cudaSuccess) ThrowCuda(env, err, "cudaMemGetInfo");
  Napi::Object o = Napi::Object::New(env);
  o.Set("free", static_cast<double>(free_b));
  o.Set("total", static_cast<double>(total_b));
  return o;
}

}  // namespace

PcieLink ReadPcieLink(const std::string& pci_bus_id) {
  PcieLink link;
  const Nvml& nvml = LoadNvml();
  void* dev = NvmlDevice(nvml, pci_bus_id);
  if (!dev) return link;
  if (!nvml.cur_gen || !nvml.max_gen || !nvml.cur_width || !nvml.max_width) return link;
  link.known = nvml.cur_gen(dev, &link.current_gen) == 0 && nvml.max_gen(dev, &link.max_gen) == 0 &&
               nvml.cur_width(dev, &link.current_width) == 0 &&
               nvml.max_width(dev, &link.max_width) == 0;
  return link;
}

int NvmlAddressingMode(const std::string& pci_bus_id) {
  const Nvml& nvml = LoadNvml();
  void* dev = NvmlDevice(nvml, pci_bus_id);
  // Version 1 of the struct: its size, with the version in the top byte (NVML_STRUCT_VERSION).
  unsigned mode[2] = {static_cast<unsigned>(sizeof mode) | (1u << 24), 0};
  if (!dev || !nvml.addressing_mode || nvml.addressing_mode(dev, mode) != 0) return -1;
  return static_cast<int>(mode[1]);
}

int NvmlIndex(const std::string& pci_bus_id) {
  const Nvml& nvml = LoadNvml();
  void* dev = NvmlDevice(nvml, pci_bus_id);
  unsigned index = 0;
  if (!dev || !nvml.index || nvml.index(dev, &index) != 0) return -1;
  return static_cast<int>(index);
}

bool ReadNvLinks(const std::string& pci_bus_id, core::GpuLinks* out) {
  out->self = core::ParsePciBusId(pci_bus_id);
  out->active.clear();
  const Nvml& nvml = LoadNvml();
  void* dev = NvmlDevice(nvml, pci_bus_id);
  if (!dev || !nvml.link_state || !nvml.link_remote_pci) return false;
  // NVML_NVLINK_MAX_LINKS is 18 from Hopper on; a link number past a GPU's last answers an error.
  for (unsigned link = 0; link < 18; ++link) {
    int active = 0;
    if (nvml.link_state(dev, link, &active) != 0 || active != 1) continue;
    NvmlPciInfo pci{};
    if (nvml.link_remote_pci(dev, link, &pci) != 0) continue;
    core::NvLinkEnd end;
    end.remote = core::ParsePciBusId(pci.bus_id[0] ? pci.bus_id : pci.bus_id_legacy);
    int type = -1;  // NVML_NVLINK_DEVICE_TYPE_GPU 0, _IBMNPU 1, _SWITCH 2
    if (nvml.link_remote_type && nvml.link_remote_type(dev, link, &type) == 0)
      end.to_switch = type == 2;
    else
      end.to_switch = end.remote.ok && IsSwitchBySysfs(end.remote);
    unsigned version = 0;  // nvmlNvlinkVersion_t
    if (nvml.link_version && nvml.link_version(dev, link, &version) == 0) end.version = version;
    out->active.push_back(end);
  }
  return true;
}

void InitDiscovery(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"status", Status},
               {"devices", Devices},
               {"memGetInfo", MemGetInfo},
           });
}

}  // namespace cm
