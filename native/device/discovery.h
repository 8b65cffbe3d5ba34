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

struct PcieLink {
  bool known = false;
  unsigned current_gen = 0, max_gen = 0, current_width = 0, max_width = 0;
};
// Reads the link of the GPU at this PCI bus id through NVML, if NVML is present.
PcieLink ReadPcieLink(const std::string& pci_bus_id);
// NVML's index of the GPU (nvidia-smi's numbering, which CUDA_VISIBLE_DEVICES does not change);
// -1 without NVML.
int NvmlIndex(const std::string& pci_bus_id);
// NVML's addressing mode of the GPU (0 none, 1 HMM, 2 ATS); -1 where NVML or the call (drivers
// from 580 on) is missing.
int NvmlAddressingMode(const std::string& pci_bus_id);
// The GPU's active NVLinks and what each reaches; false when NVML cannot say (no NVML, or a
// driver without the NVLink queries), with `out->active` empty.
bool ReadNvLinks(const std::string& pci_bus_id, core::GpuLinks* out);

struct GpuProcess {
  unsigned pid = 0;         // in NVML's pid namespace: the host's
  int64_t used_bytes = -1;  // -1 where NVML cannot tell (some vGPU and Windows drivers)
};
// The compute processes NVML lists on the GPU of `uuid` ("GPU-..."), with the device memory each
// uses (its CUDA context and every allocation, by any API); false where NVML cannot answer (no
// NVML, no such GPU, a driver without the query), with `out` empty.
bool NvmlProcesses(const std::string& uuid, std::vector<GpuProcess>* out);

}  // namespace cm
