// Device memory (cudaMalloc), pinned host memory (cudaHostAlloc) and page-locked Node buffers
// (cudaHostRegister): allocation, explicit and finalizer-driven release.
#pragma once

#include <napi.h>

#include "binding/handles.h"

namespace cm {
void InitMemory(Napi::Env env, Napi::Object exports);
// Frees every allocation the environment still holds (its cleanup hook).
void ReleaseAllLive(Napi::Env env);
// Enters host memory in the handle table and wraps it in an external ArrayBuffer that keeps the
// record alive; returns [handle, arrayBuffer]. Throws ERR_EXTERNAL_BUFFERS_NOT_ALLOWED (having
// released the memory) where the runtime refuses external buffers.
Napi::Value ExposeHostMemory(Napi::Env env, Allocation* a);
}  // namespace cm
