// Timing loops for the transfer and allocation benchmarks. They run in C++ so that the
// JavaScript call overhead stays out of every sample.
#pragma once

#include <napi.h>

#include <chrono>
#include <vector>

#include "binding/args.h"
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

// The size and loop counts every timing function takes, as three arguments from info[at]: bytes,
// warm-up iterations, timed iterations.
struct TimedRun {
  size_t bytes;
  int warmup;
  int iterations;
};
inline TimedRun ReadTimedRun(const Napi::CallbackInfo& info, size_t at) {
  Napi::Env env = info.Env();
  TimedRun r;
  r.bytes = ReadSize(env, info[at], "bytes");
  r.warmup = ReadInt(env, info[at + 1], "warmup", 0, 1 << 20);
  r.iterations = ReadInt(env, info[at + 2], "iterations", 1, 1 << 24);
  return r;
}

// The loop every timing function shares: `step(&seconds)` runs one iteration and says how long it
// took. The first `warmup` iterations are left out of the samples; the first failure ends the loop
// and is left in *err.
template <typename Step>
std::vector<double> TimeRuns(int warmup, int iterations, Error* err, Step step) {
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i < warmup + iterations && !*err; ++i) {
    double seconds = 0;
    Error e = step(&seconds);
    if (e)
      *err = e;
    else if (i >= warmup)
      samples.push_back(seconds);
  }
  return samples;
}

// TimeRuns of `work()`, each timed with a steady clock around it.
template <typename Work>
std::vector<double> ClockRuns(int warmup, int iterations, Error* err, Work work) {
  return TimeRuns(warmup, iterations, err, [&](double* seconds) {
    Clock::time_point t0 = Clock::now();
    Error e = work();
    *seconds = Seconds(t0, Clock::now());
    return e;
  });
}

// A private non-blocking stream on the calling thread's device, with events of its own; all are
// released however the loop ends, the stream drained first so that nothing still moves into
// buffers the caller frees after a failure.
struct BenchStream {
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> events;
  // `timing`: events that can be timed (Time() needs two).
  Error Make(size_t event_count, bool timing = true) {
    Error err;
    CM_TRY(err, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (size_t i = 0; i < event_count && !err; ++i) {
      cudaEvent_t ev = nullptr;
      CM_TRY(err, cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming),
             "cudaEventCreate");
      if (!err) events.push_back(ev);
    }
    return err;
  }
  // What `issue(stream)` enqueues, timed by the GPU between events[0] and events[1].
  template <typename Issue>
  Error Time(Issue issue, double* seconds) {
    Error err;
    CM_TRY(err, cudaEventRecord(events[0], stream), "cudaEventRecord");
    if (!err) err = issue(stream);
    if (!err) CM_TRY(err, cudaEventRecord(events[1], stream), "cudaEventRecord");
    if (!err) CM_TRY(err, cudaEventSynchronize(events[1]), "cudaEventSynchronize");
    float ms = 0;
    if (!err) CM_TRY(err, cudaEventElapsedTime(&ms, events[0], events[1]), "cudaEventElapsedTime");
    *seconds = ms / 1e3;
    return err;
  }
  ~BenchStream() {
    if (stream) cudaStreamSynchronize(stream);
    for (cudaEvent_t ev : events) cudaEventDestroy(ev);
    if (stream) cudaStreamDestroy(stream);
    (void)cudaGetLastError();
  }
};
// The transfer benchmark's loops (bench/transfer.cc).
void InitBench(Napi::Env env, Napi::Object exports);
// The allocator benchmark's baseline (bench/alloc.cc).
void InitAllocBench(Napi::Env env, Napi::Object exports);
// Several GPUs at once, and between GPUs (bench/devices.cc).
void InitBenchDevices(Napi::Env env, Napi::Object exports);
// The raw managed-memory calls the managed rows are measured against (bench/managed.cc).
void InitManagedBench(Napi::Env env, Napi::Object exports);
}  // namespace cm
