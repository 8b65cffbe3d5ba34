// CUDA IPC: exporting a DeviceBuffer (a cudaMalloc'd buffer, or a block of a BFC allocator as its
// region and offset) to other processes, and opening such a handle as a DeviceBuffer. Each export
// has a record in shared memory (core/memory/ipc_record.h) through which the exporter counts its
// importers and importers check the handle before the driver sees it.
#pragma once

#include <napi.h>

#include "binding/handles.h"
#include "core/memory/ipc_record.h"

namespace cm {

void InitIpc(Napi::Env env, Napi::Object exports);
// The bytes from `p` to the end of the allocation that holds it (cuMemGetAddressRange, reached
// through the runtime so that the binary needs only the driver); false if it cannot be had.
bool AllocationBytes(void* p, uint64_t* bytes);
// cudaIpcOpenMemHandle of the 64 bytes at `handle` on `device`; throws CudaError when it fails.
void* OpenIpcHandle(Napi::Env env, const uint8_t* handle, int device);
// A buffer over the range `opening` names in the memory `base` that its handle opened on
// `device`: its release closes the handle (kIpcImportOps).
Allocation* NewIpcImport(int device, void* base, core::IpcOpening opening);
// Throws ERR_IPC_ALREADY_OPEN, naming the buffer, when a live import of this environment has the
// memory `wanted` names open (core::SameOpening): one buffer per memory in a thread, however the
// descriptor that asks was written and in whichever format. Before anything is opened.
void RefuseIfOpen(Napi::Env env, const core::IpcOpening& wanted);
// Memory shared with processes that do not use this library (native/memory/ipc_foreign.cc).
void InitForeignIpc(Napi::Env env, Napi::Object exports);

}  // namespace cm
