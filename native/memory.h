// Device memory (cudaMalloc), pinned host memory (cudaHostAlloc) and page-locked Node buffers
// (cudaHostRegister): allocation, explicit and finalizer-driven release.
#pragma once

#include <napi.h>

namespace cm {
void InitMemory(Napi::Env env, Napi::Object exports);
// Frees every allocation the environment still holds (its cleanup hook).
void ReleaseAllLive(Napi::Env env);
}  // namespace cm
