#include "device/discovery.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "core/device/uuid.h"
#include "device/nvml.h"
#include "device/platform.h"
#include "device/shared_memory.h"

namespace cm {

std::string FormatUuid(const cudaUUID_t& id) {
  return core::GpuUuid(reinterpret_cast<const unsigned char*>(id.bytes));
}

namespace {

// A device's uuid as the driver names it: cuDeviceGetUuid_v2 (the entry point "cuDeviceGetUuid"
// at CUDA 12.0's ABI), which gives a MIG instance its own uuid, as the interposer and
// scripts/cuda_memory_ipc.py read it; the ledgers, IPC records and descriptors key devices by it,
// so every side must read the same. "" where the driver does not say.
std::string DriverUuid(int device) {
  using Get = int (*)(int* dev, int ordinal);
  using GetUuid = int (*)(cudaUUID_t * uuid, int dev);
  static const Get get = DriverEntryPoint<Get>("cuDeviceGet");
  static const GetUuid get_uuid = DriverEntryPoint<GetUuid>("cuDeviceGetUuid");
  int dev = 0;
  cudaUUID_t u{};
  if (!get || !get_uuid || get(&dev, device) != 0 || get_uuid(&u, dev) != 0) return "";
  return FormatUuid(u);
}

// The driver's uuid, else the runtime's (the properties, already read).
std::string UuidOf(int device, const cudaDeviceProp& p) {
  std::string u = DriverUuid(device);
  return u.empty() ? FormatUuid(p.uuid) : u;
}

}  // namespace

std::string DeviceUuid(int device) {
  std::string u = DriverUuid(device);
  if (!u.empty()) return u;
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
  const std::string expected = "an integer from 0 to " + std::to_string(count - 1) +
                               " (this machine has " + std::to_string(count) + " CUDA device" +
                               (count == 1 ? "" : "s") + ")";
  CheckRange(env, "device", device, 0, count - 1, expected.c_str());
}

namespace {

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
    std::string uuid = UuidOf(d, p);
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

// [{ pid, usedBytes }] (usedBytes null where NVML cannot tell).
Napi::Array ProcessList(Napi::Env env, const std::vector<GpuProcess>& procs) {
  Napi::Array out = Napi::Array::New(env, procs.size());
  for (size_t i = 0; i < procs.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("pid", static_cast<double>(procs[i].pid));
    o.Set("usedBytes", procs[i].used_bytes < 0
                           ? env.Null()
                           : Napi::Number::New(env, static_cast<double>(procs[i].used_bytes)));
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

// nvmlState: returns { driverVersion, smClockMHz, smClockMaxMHz, memoryClockMHz,
// memoryClockMaxMHz, clocksEventReasons, processes: [{ pid, usedBytes }] } with null for what
// NVML does not answer, or null when NVML does not know the device. Needs no CUDA context: the
// leak checks and the doctor's causes read it without touching the device.
Napi::Value NvmlState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) ThrowType(env, "pciBusId must be a string");
  const Nvml& nvml = LoadNvml();
  void* dev = NvmlDevice(nvml, info[0].As<Napi::String>().Utf8Value());
  if (!dev) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  char version[96] = {0};
  o.Set("driverVersion", nvml.driver_version && nvml.driver_version(version, sizeof version) == 0
                             ? Napi::Value(Napi::String::New(env, version))
                             : env.Null());
  auto clock = [&](int (*fn)(void*, int, unsigned*), int type) -> Napi::Value {
    unsigned mhz = 0;
    if (!fn || fn(dev, type, &mhz) != 0) return env.Null();
    return Napi::Number::New(env, mhz);
  };
  o.Set("smClockMHz", clock(nvml.clock, 1));
  o.Set("smClockMaxMHz", clock(nvml.max_clock, 1));
  o.Set("memoryClockMHz", clock(nvml.clock, 2));
  o.Set("memoryClockMaxMHz", clock(nvml.max_clock, 2));
  unsigned long long reasons = 0;
  o.Set("clocksEventReasons",
        nvml.clock_reasons && nvml.clock_reasons(dev, &reasons) == 0
            ? Napi::Value(Napi::Number::New(env, static_cast<double>(reasons)))
            : env.Null());
  char uuid[96] = {0};
  std::vector<GpuProcess> procs;
  if (nvml.uuid && nvml.uuid(dev, uuid, sizeof uuid) == 0 && NvmlProcesses(uuid, &procs)) {
    o.Set("processes", ProcessList(env, procs));
  } else {
    o.Set("processes", env.Null());
  }
  return o;
}

}  // namespace

namespace {

// deviceProcesses: returns [{ pid, usedBytes }] (usedBytes null where NVML cannot tell), or null
// where NVML cannot answer.
Napi::Value DeviceProcesses(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<GpuProcess> procs;
  if (!NvmlProcesses(ReadString(env, info[0], "uuid"), &procs)) return env.Null();
  return ProcessList(env, procs);
}

}  // namespace

void InitDiscovery(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"status", Status},
               {"devices", Devices},
               {"memGetInfo", MemGetInfo},
               {"deviceProcesses", DeviceProcesses},
               {"nvmlState", NvmlState},
           });
}

}  // namespace cm
