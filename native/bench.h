// Timing loops for the transfer and allocation benchmarks. They run in C++ so that the
// JavaScript call overhead stays out of every sample.
#pragma once

#include <napi.h>

namespace cm {
void InitBench(Napi::Env env, Napi::Object exports);
// Several GPUs at once, and between GPUs (bench_devices.cc).
void InitBenchDevices(Napi::Env env, Napi::Object exports);
}  // namespace cm
