// CUDA streams and events as disposable handles.
#pragma once

#include <napi.h>

#include "common.h"

namespace cm {
cudaStream_t UnwrapStream(Napi::Env env, Napi::Value v);
void InitStreams(Napi::Env env, Napi::Object exports);
}  // namespace cm
