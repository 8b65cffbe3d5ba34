// The host program's driver as the interposer sees it: its real functions (hooks.h), and the
// questions the wrappers ask it about devices, contexts and streams. Nothing here charges.
#pragma once

#include <atomic>
#include <string>

#include "allocator/preload/hooks.h"

namespace cm::preload {

// glibc's dlsym (the exported dlsym is the interposer's own).
using DlsymFn = void* (*)(void*, const char*);
DlsymFn RealDlsym();

// Fills `out[i]` with the address of `names[i]`, for `count` names: in the library `soname` if
// the program has it loaded, else in whatever comes after this library (the driver's and NVML's
// tables alike). `keep_open`: the library's handle is kept, so that the addresses stay valid even
// if the program closes its own; else the program's reference keeps it loaded. False where no name
// was found (not loaded yet: the caller tries again at its next call).
bool ResolveTable(const char* soname, const char* const names[], int count,
                  std::atomic<void*> out[], bool keep_open);

// Looks up the driver's functions once the driver is loaded: in libcuda.so.1 if the program has
// it loaded, else in whatever comes after this library. False while no driver is found (tried
// again at the next call).
bool Resolve();

// Whether the interposer does anything: a group or a trace is set.
bool Active();

// The group's device key: CUDA_MEMORY_GROUP_DEVICE, else the uuid of the process's device 0 (as
// cuDeviceGetUuid_v2 gives it, the call the library's devices() reads too), "simulated" for the
// library's simulated devices. Empty while the driver cannot say.
const std::string& GroupDevice();
// Whether allocations on device `dev` are the group's (charged and recorded).
bool Tracked(CUdevice dev);
// The uuid of `dev`, as nvidia-smi -L prints it ("" when the driver cannot say).
std::string UuidOf(CUdevice dev);

CUdevice CurrentDevice();    // -1 when there is none
CUcontext CurrentContext();  // null when there is none
// The device of a context (-1 when the driver cannot say).
CUdevice DeviceOfContext(CUcontext context);
// The device of a stream: the current device for the special streams, else its context's.
CUdevice DeviceOfStream(CUstream stream);
// Whether the primary context of `dev` is active.
bool PrimaryActive(CUdevice dev);
// The primary context of `dev` while it is active, without changing its count (null otherwise).
CUcontext PrimaryContext(CUdevice dev);
// The driver's page for device memory on `dev` (core::kDevicePage where it cannot say).
uint64_t DevicePage(CUdevice dev);

}  // namespace cm::preload
