// CUDA streams and events as disposable handles.
#pragma once

#include <napi.h>

#include "common.h"

namespace cm {

// A stream handle's record; `stream` is null once the stream was disposed.
struct StreamRec {
  cudaStream_t stream = nullptr;
  int device = 0;
};

cudaStream_t UnwrapStream(Napi::Env env, Napi::Value v);
// The record behind a live stream handle; throws a TypeError or ERR_DISPOSED otherwise.
StreamRec* UnwrapStreamRec(Napi::Env env, Napi::Value v);
void InitStreams(Napi::Env env, Napi::Object exports);
}  // namespace cm
