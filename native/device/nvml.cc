#include "device/nvml.h"

#include <dlfcn.h>

#include <mutex>
#include <type_traits>

namespace cm {

const Nvml& LoadNvml() {
  static std::once_flag once;
  static Nvml nvml;  // process-wide: the library is process-wide, and this is read-only after
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY);
    if (!lib) return;
    auto find = [lib](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
    };
    int (*init)() = nullptr;
    find(&init, "nvmlInit_v2");
    find(&nvml.by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    find(&nvml.index, "nvmlDeviceGetIndex");
    find(&nvml.uuid, "nvmlDeviceGetUUID");
    find(&nvml.memory, "nvmlDeviceGetMemoryInfo");
    find(&nvml.by_uuid, "nvmlDeviceGetHandleByUUID");
    find(&nvml.compute_processes, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!nvml.compute_processes)
      find(&nvml.compute_processes, "nvmlDeviceGetComputeRunningProcesses_v2");
    find(&nvml.addressing_mode, "nvmlDeviceGetAddressingMode");
    find(&nvml.cur_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
    find(&nvml.max_gen, "nvmlDeviceGetMaxPcieLinkGeneration");
    find(&nvml.cur_width, "nvmlDeviceGetCurrPcieLinkWidth");
    find(&nvml.max_width, "nvmlDeviceGetMaxPcieLinkWidth");
    find(&nvml.link_state, "nvmlDeviceGetNvLinkState");
    find(&nvml.link_remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
    find(&nvml.link_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    find(&nvml.link_version, "nvmlDeviceGetNvLinkVersion");
    find(&nvml.mig_mode, "nvmlDeviceGetMigMode");
    find(&nvml.max_mig, "nvmlDeviceGetMaxMigDeviceCount");
    find(&nvml.mig_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
    find(&nvml.gpu_instance, "nvmlDeviceGetGpuInstanceId");
    find(&nvml.compute_instance, "nvmlDeviceGetComputeInstanceId");
    find(&nvml.clock, "nvmlDeviceGetClockInfo");
    find(&nvml.max_clock, "nvmlDeviceGetMaxClockInfo");
    find(&nvml.clock_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!nvml.clock_reasons) find(&nvml.clock_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    find(&nvml.driver_version, "nvmlSystemGetDriverVersion");
    nvml.ok = init && nvml.by_bus_id && init() == 0;
  });
  return nvml;
}

void* NvmlDevice(const Nvml& nvml, const std::string& pci_bus_id) {
  void* dev = nullptr;
  if (!nvml.ok || nvml.by_bus_id(pci_bus_id.c_str(), &dev) != 0) return nullptr;
  return dev;
}

}  // namespace cm
