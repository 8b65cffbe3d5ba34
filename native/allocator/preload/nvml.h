// NVML as a member is told it: nvmlDeviceGetMemoryInfo and _v2 answer the group's view of its
// device (core/allocator/tenant_view.h), the same figures cudaMemGetInfo gives the process; every
// other NVML call, and every other device, passes through untouched. NVML is reached two ways:
// by name, in a program linked with libnvidia-ml.so.1 (this library is loaded first), and by
// dlsym on the handle of a dlopened libnvidia-ml.so.1 (pynvml through ctypes, nvidia-smi, the
// addon), which the interposer's dlsym answers with the wrapper (NvmlSubstitute), as it does for
// the driver. The group's device is matched by uuid (nvmlDeviceGetUUID against GroupDevice()).
#pragma once

#include "allocator/preload/hooks.h"

namespace cm::preload {

#define CM_ID(id, symbol, params) k##id,
enum NvmlFn {
  CM_NVML_WRAPPED(CM_ID) kNvmlWrapped,
  kNvmlCalledFirst = kNvmlWrapped - 1,
  CM_NVML_CALLED(CM_ID) kNvmlCount
};
#undef CM_ID

// This library's wrapper of the NVML entry point `name` (null: not one it wraps).
void* NvmlWrapperNamed(const char* name);
// What dlsym hands out for `name`, where NVML's own dlsym answered `p`: the wrapper while the
// interposer is active (`p` kept as NVML's function, should its handle not be found by name),
// else `p`.
void* NvmlSubstitute(const char* name, void* p);

}  // namespace cm::preload

#define CM_NVML_DECLARE(id, symbol, params) CM_WRAPPER cm::preload::nvmlReturn_t symbol params;
namespace cm::preload {
CM_NVML_WRAPPED(CM_NVML_DECLARE)
}
#undef CM_NVML_DECLARE
