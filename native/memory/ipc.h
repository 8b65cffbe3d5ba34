// CUDA IPC: exporting a DeviceBuffer (a cudaMalloc'd buffer, or a block of a BFC allocator as its
// region and offset) to other processes, and opening such a handle as a DeviceBuffer. Each export
// has a record in shared memory (core/memory/ipc_record.h) through which the exporter counts its
// importers and importers check the handle before the driver sees it.
#pragma once

#include <napi.h>

#include "binding/handles.h"

namespace cm {

void InitIpc(Napi::Env env, Napi::Object exports);
// The bytes from `p` to the end of the allocation that holds it (cuMemGetAddressRange, reached
// through the runtime so that the binary needs only the driver); false if it cannot be had.
bool AllocationBytes(void* p, uint64_t* bytes);
// cudaIpcOpenMemHandle of the 64 bytes at `handle` on `device`; throws CudaError when it fails.
void* OpenIpcHandle(Napi::Env env, const uint8_t* handle, int device);
// A buffer over `bytes` at `offset` in the memory `base` opened from the 64 bytes at `handle` on
// `device`: its release closes the handle (kIpcImportOps). With no record of the exporter's to
// hold a slot in, for a handle of a process that does not use this library.
Allocation* NewIpcImport(int device, void* base, uint64_t offset, uint64_t bytes,
                         const uint8_t* handle);
// Throws ERR_IPC_ALREADY_OPEN when a live import of this environment was opened from the same
// handle, offset and size: one descriptor gives one DeviceBuffer per process, as a handle of the
// library's own format does.
void RefuseIfOpen(Napi::Env env, const uint8_t* handle, uint64_t offset, uint64_t bytes);
// Memory shared with processes that do not use this library (native/memory/ipc_foreign.cc).
void InitForeignIpc(Napi::Env env, Napi::Object exports);

}  // namespace cm
