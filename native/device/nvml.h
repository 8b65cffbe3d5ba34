// NVML, looked up at run time: never a build or load dependency. One process-wide table of the
// entry points the library calls (signatures and structs from nvml.h, NVML API version 2+); each
// is null where the driver's NVML lacks it, so every caller checks the ones it uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device/topology.h"

namespace cm {

struct NvmlPciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};

struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total, free, used;
};

struct NvmlProcessInfo {  // nvmlProcessInfo_t (v2 and v3 of the process queries)
  unsigned pid;
  unsigned long long used_gpu_memory;  // NVML_VALUE_NOT_AVAILABLE (all ones) where unknown
  unsigned gpu_instance_id, compute_instance_id;
};

struct Nvml {
  bool ok = false;  // nvmlInit_v2 succeeded and devices can be found by PCI bus id
  int (*by_bus_id)(const char*, void**) = nullptr;
  int (*by_uuid)(const char*, void**) = nullptr;
  int (*index)(void*, unsigned*) = nullptr;
  int (*uuid)(void*, char*, unsigned) = nullptr;
  int (*memory)(void*, NvmlMemory*) = nullptr;
  // The compute processes on a device and the memory each uses (_v3, else _v2: one struct)
  int (*compute_processes)(void*, unsigned*, NvmlProcessInfo*) = nullptr;
  int (*addressing_mode)(void*, unsigned*) = nullptr;  // nvmlDeviceAddressingMode_t; 580 on
  // PCIe
  int (*cur_gen)(void*, unsigned*) = nullptr;
  int (*max_gen)(void*, unsigned*) = nullptr;
  int (*cur_width)(void*, unsigned*) = nullptr;
  int (*max_width)(void*, unsigned*) = nullptr;
  // NVLink (older drivers lack the remote-type query)
  int (*link_state)(void*, unsigned, int*) = nullptr;
  int (*link_remote_type)(void*, unsigned, int*) = nullptr;
  int (*link_remote_pci)(void*, unsigned, NvmlPciInfo*) = nullptr;
  int (*link_version)(void*, unsigned, unsigned*) = nullptr;
  // MIG
  int (*mig_mode)(void*, unsigned*, unsigned*) = nullptr;
  int (*max_mig)(void*, unsigned*) = nullptr;
  int (*mig_by_index)(void*, unsigned, void**) = nullptr;
  int (*gpu_instance)(void*, unsigned*) = nullptr;
  int (*compute_instance)(void*, unsigned*) = nullptr;
  // Clocks (nvmlClockType_t: 1 SM, 2 memory), the reasons they are held down (a bit mask of
  // nvmlClocksEventReason*, named ThrottleReasons before driver 535), and the driver's version.
  int (*clock)(void*, int, unsigned*) = nullptr;
  int (*max_clock)(void*, int, unsigned*) = nullptr;
  int (*clock_reasons)(void*, unsigned long long*) = nullptr;
  int (*driver_version)(char*, unsigned) = nullptr;
};

// Loads and initialises NVML once per process; read-only after.
const Nvml& LoadNvml();
// The NVML handle of the device at `pci_bus_id`, or null (no NVML, or no such device).
void* NvmlDevice(const Nvml& nvml, const std::string& pci_bus_id);

// The queries the library makes through it; each says so where NVML or the call is missing.

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
