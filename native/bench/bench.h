// Timing loops for the transfer and allocation benchmarks. They run in C++ so that the
// JavaScript call overhead stays out of every sample.
#pragma once

#include <napi.h>

#include <vector>

namespace cm {
// Samples (seconds) as the Float64Array every timing function returns.
Napi::Float64Array ToFloat64Array(Napi::Env env, const std::vector<double>& v);
void InitBench(Napi::Env env, Napi::Object exports);
// Several GPUs at once, and between GPUs (bench/devices.cc).
void InitBenchDevices(Napi::Env env, Napi::Object exports);
// The raw managed-memory calls the managed rows are measured against (bench/managed.cc).
void InitManagedBench(Napi::Env env, Napi::Object exports);
}  // namespace cm
