// The platform's limits as JavaScript sees them: platformLimits() over the pure readers of
// core/device/platform_limits.h, and a MIG instance's identity and memory from NVML (looked up at
// run time, like the rest of the library's NVML use).
#pragma once

#include <napi.h>

#include <string>

namespace cm {

// What NVML says of CUDA device `device` (at `pci_bus_id`, with CUDA's `uuid`) under MIG:
// null without NVML or on a GPU without MIG, else { enabled, instance, uuid, gpuInstanceId,
// computeInstanceId, memoryBytes, parentMemoryBytes, parentUuid }.
Napi::Value MigObject(Napi::Env env, const std::string& pci_bus_id, const std::string& uuid);
void InitPlatform(Napi::Env env, Napi::Object exports);

}  // namespace cm
