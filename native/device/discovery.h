// What CUDA can be used here: status(), devices(), memGetInfo(), with the PCIe link read from
// NVML when the driver's NVML library can be loaded at run time.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "binding/instance.h"
#include "core/device/topology.h"

namespace cm {

struct CudaStatus {
  bool available = false;
  std::string reason;  // NOT_BUILT_WITH_CUDA, NO_DRIVER, INSUFFICIENT_DRIVER, NO_DEVICE, or ""
  std::string message;
  int device_count = 0;
  int driver_version = 0;
  int runtime_version = 0;
};

// The environment's CUDA status, read once, on first use; every GPU call checks it first.
const CudaStatus& GetStatus(Napi::Env env);
// Throws CudaUnavailableError unless the build has CUDA and a device is usable.
void RequireCuda(Napi::Env env);
// Throws a RangeError unless 0 <= device < the device count.
void CheckDevice(Napi::Env env, int device);
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it; "" if it cannot be read.
std::string FormatUuid(const cudaUUID_t& id);
// A device's uuid as devices() gives it: the driver's (cuDeviceGetUuid_v2, a MIG instance's own on
// a MIG device, as the interposer reads it), else the runtime's properties'; "" if neither says.
std::string DeviceUuid(int device);
void InitDiscovery(Napi::Env env, Napi::Object exports);

}  // namespace cm
