#include "device/nvml.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
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

bool NvmlProcesses(const std::string& uuid, std::vector<GpuProcess>* out) {
  out->clear();
  const Nvml& nvml = LoadNvml();
  void* dev = nullptr;
  if (!nvml.ok || !nvml.by_uuid || !nvml.compute_processes || nvml.by_uuid(uuid.c_str(), &dev) != 0)
    return false;
  // The count can grow between the call that sizes the array and the one that fills it
  // (NVML_ERROR_INSUFFICIENT_SIZE, 7): a few tries with room to spare, then no answer.
  std::vector<NvmlProcessInfo> procs;
  unsigned count = 0;
  int rc = nvml.compute_processes(dev, &count, nullptr);
  for (int attempt = 0; rc == 7 && attempt < 4; ++attempt) {
    procs.resize(count + 16);
    count = static_cast<unsigned>(procs.size());
    rc = nvml.compute_processes(dev, &count, procs.data());
  }
  if (rc != 0) return false;
  for (unsigned i = 0; i < count && i < procs.size(); ++i) {
    GpuProcess p;
    p.pid = procs[i].pid;
    // NVML_VALUE_NOT_AVAILABLE is all ones.
    if (procs[i].used_gpu_memory <= static_cast<unsigned long long>(INT64_MAX))
      p.used_bytes = static_cast<int64_t>(procs[i].used_gpu_memory);
    out->push_back(p);
  }
  return true;
}

}  // namespace cm
