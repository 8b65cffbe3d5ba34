// What a member is told about its group's device by NVML, beside what cudaMemGetInfo tells it
// (GroupMemInfo): NVML's figures also give the memory in use, and a program that reads them
// (nvidia-smi, pynvml, a GPU picker) takes free + used = total for granted.
#pragma once

#include <cstdint>

#include "core/allocator/upstream.h"  // MemInfo

namespace cm::core {

struct TenantMemory {
  uint64_t total, free, used;
};

// NVML's figures for a device whose view GroupMemInfo gave as `group`: the same total and free,
// free cut to the total (a device whose free figure is above its total gives the total), and used
// = total - free. So free + used = total always holds and nothing underflows, whatever the charge:
// used is the group's charge less this process's own unused grants, or more where the device has
// less free than the budget leaves (memory taken outside the group); a charge above a lowered
// budget leaves free at what the process still holds unused, and used at the rest of the total.
TenantMemory TenantFigures(MemInfo group);

}  // namespace cm::core
