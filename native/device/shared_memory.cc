#include "device/shared_memory.h"

#include "base/cuda_api.h"
#include "device/nvml.h"

namespace cm {

namespace {
bool Attribute(cudaDeviceAttr attr, int device) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, attr, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return v != 0;
}
}  // namespace

void SetSharedMemoryFacts(Napi::Env env, Napi::Object o, int device,
                          const std::string& pci_bus_id) {
  o.Set("managedMemory", Attribute(cudaDevAttrManagedMemory, device));
  o.Set("concurrentManagedAccess", Attribute(cudaDevAttrConcurrentManagedAccess, device));
  o.Set("pageableMemoryAccess", Attribute(cudaDevAttrPageableMemoryAccess, device));
  o.Set("pageableMemoryAccessUsesHostPageTables",
        Attribute(cudaDevAttrPageableMemoryAccessUsesHostPageTables, device));
  o.Set("directManagedMemAccessFromHost",
        Attribute(cudaDevAttrDirectManagedMemAccessFromHost, device));
  // NVML_DEVICE_ADDRESSING_MODE_NONE 0, _HMM 1, _ATS 2
  int mode = NvmlAddressingMode(pci_bus_id);
  const char* names[] = {"none", "hmm", "ats"};
  o.Set("addressingMode",
        mode >= 0 && mode <= 2 ? Napi::Value(Napi::String::New(env, names[mode])) : env.Null());
}

}  // namespace cm
