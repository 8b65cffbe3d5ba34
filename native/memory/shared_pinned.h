// Pinned host memory that several processes share: a file in a shared-memory file system
// (/dev/shm), mapped by each process and registered with CUDA in each (cudaHostRegister), so a
// producer and a consumer move data between their GPUs and one buffer at pinned speed, with no
// copy through JavaScript.
#pragma once

#include <napi.h>

namespace cm {

void InitSharedHost(Napi::Env env, Napi::Object exports);

}  // namespace cm
