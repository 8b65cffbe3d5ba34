// Timing loops for the transfer and allocation benchmarks. They run in C++ so that the
// JavaScript call overhead stays out of every sample.
#pragma once

#include <napi.h>

#include <chrono>
#include <vector>

#include "binding/errors.h"

namespace cm {
// Samples (seconds) as the Float64Array every timing function returns.
Napi::Float64Array ToFloat64Array(Napi::Env env, const std::vector<double>& v);
using Clock = std::chrono::steady_clock;
inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
// Throws a failed timing loop's CUDA error into JavaScript.
[[noreturn]] inline void Fail(Napi::Env env, const Error& e) {
  ThrowCuda(env, e.code, e.call, e.detail);
}
// The transfer benchmark's loops (bench/transfer.cc).
void InitBench(Napi::Env env, Napi::Object exports);
// The allocator benchmark's baseline (bench/alloc.cc).
void InitAllocBench(Napi::Env env, Napi::Object exports);
// Several GPUs at once, and between GPUs (bench/devices.cc).
void InitBenchDevices(Napi::Env env, Napi::Object exports);
// The raw managed-memory calls the managed rows are measured against (bench/managed.cc).
void InitManagedBench(Napi::Env env, Napi::Object exports);
}  // namespace cm
