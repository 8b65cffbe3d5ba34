// A synchronous copy between page-locked host memory and device memory, through the driver's
// cuMemcpyHtoD / cuMemcpyDtoH where it gives them, with cudaMemcpy's result.
#pragma once

#include <cstddef>

#include "base/cuda_api.h"

namespace cm {

// Copies n bytes as cudaMemcpy(dst, src, n, kind) does, for kind cudaMemcpyHostToDevice or
// cudaMemcpyDeviceToHost with the host side page-locked (pinned or registered): on the legacy
// default stream, returning once the bytes have arrived. The driver's entry point skips the
// runtime's own layer (about 0.1-0.2 µs of a 4 KiB copy of 7-8 µs on an H100 host). On a thread
// with no context current yet the copy goes to cudaMemcpy, which binds the device's primary
// context; where the driver call fails, the copy is made again by cudaMemcpy and its result is
// returned, so errors read as the runtime's. Any other kind goes to cudaMemcpy. Thread-safe.
cudaError_t PinnedMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind);

// Which of the driver's entry points PinnedMemcpy found: where one is missing, every copy it would
// make goes to cudaMemcpy, correct but slower, and nothing else tells.
struct PinnedMemcpyEntries {
  bool to_device = false;  // cuMemcpyHtoD
  bool to_host = false;    // cuMemcpyDtoH
  bool current = false;    // cuCtxGetCurrent
};
PinnedMemcpyEntries PinnedMemcpyFound();

}  // namespace cm
