// What system memory a device can reach, and how: mapped pinned memory, managed memory (and
// whether the device uses it concurrently with the host), pageable memory through HMM or ATS,
// integrated memory; and NVML's addressing mode where the driver has it.
#pragma once

#include <napi.h>

#include <string>

namespace cm {

// Sets managedMemory, concurrentManagedAccess, pageableMemoryAccess,
// pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost and addressingMode
// ('none', 'hmm', 'ats', or null where NVML does not say) on a device's object.
void SetSharedMemoryFacts(Napi::Env env, Napi::Object o, int device, const std::string& pci_bus_id);

}  // namespace cm
