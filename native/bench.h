// Timing loops for the transfer and allocation benchmarks. They run in C++ so that the
// JavaScript call overhead stays out of every sample.
#pragma once

#include <napi.h>

namespace cm {
void InitBench(Napi::Env env, Napi::Object exports);
}
