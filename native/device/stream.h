// CUDA streams and events as disposable handles.
#pragma once

#include <napi.h>

#include "binding/instance.h"

namespace cm {

// A stream handle's record. dispose() marks it disposed at once (no new work may use it), but
// the CUDA stream is destroyed only once the asynchronous work queued with it has let go of the
// record (HoldStream/DropStream): a copyAsync on a pool thread never meets a destroyed, possibly
// reused, stream. `stream` is null once it was destroyed. The record itself goes with its last
// holder: the handle's finalizer or the last such work.
struct StreamRec {
  cudaStream_t stream = nullptr;
  int device = 0;
  int users = 0;             // work holding it (JS thread only)
  bool disposed = false;     // dispose() was called, or the handle was collected
  bool handle_gone = false;  // the handle was collected: the last user deletes the record
};

// Work that uses the stream off the JS thread holds it from when it is queued until it has
// settled. Both are called on the JS thread.
void HoldStream(StreamRec* r) noexcept;
void DropStream(StreamRec* r) noexcept;

cudaStream_t UnwrapStream(Napi::Env env, Napi::Value v);
// The record behind a live stream handle; throws a TypeError or ERR_DISPOSED otherwise.
StreamRec* UnwrapStreamRec(Napi::Env env, Napi::Value v);
void InitStreams(Napi::Env env, Napi::Object exports);
}  // namespace cm
