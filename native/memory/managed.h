// Managed (unified) memory: cudaMallocManaged, paged between the host and the device by the
// driver, with prefetch, advice and range attributes; and the raw calls the benchmark times
// beside the library's own.
#pragma once

#include <napi.h>

#include "binding/handles.h"

namespace cm {

void InitManaged(Napi::Env env, Napi::Object exports);
// Whether the device reads and writes managed memory while the host does
// (cudaDevAttrConcurrentManagedAccess); false when it cannot be read.
bool ConcurrentManagedAccess(int device) noexcept;

}  // namespace cm
