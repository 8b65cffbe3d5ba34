// CUDA IPC: exporting a DeviceBuffer (a cudaMalloc'd buffer, or a block of a BFC allocator as its
// region and offset) to other processes, and opening such a handle as a DeviceBuffer. Each export
// has a record in shared memory (core/memory/ipc_record.h) through which the exporter counts its
// importers and importers check the handle before the driver sees it.
#pragma once

#include <napi.h>

#include "binding/handles.h"

namespace cm {

void InitIpc(Napi::Env env, Napi::Object exports);

}  // namespace cm
