// The allocator benchmark's baseline: cudaMalloc+cudaFree (or cudaMallocHost+cudaFreeHost) pairs
// timed in C++, which pooled allocation is measured against.
#include <vector>

#include "bench/bench.h"
#include "binding/exports.h"
#include "device/discovery.h"

namespace cm {

namespace {

// timeRawAlloc: returns seconds per alloc+free pair
Napi::Value TimeRawAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  bool device_mem = info[0].ToString().Utf8Value() == "device";
  size_t n = ReadSize(env, info[1], "bytes");
  int iters = ReadInt(env, info[2], "iterations", 1, 1 << 24);
  int device = ReadInt(env, info[3], "device", 0, 1 << 20);
  Error err;
  CM_TRY(err, cudaSetDevice(device), "cudaSetDevice");
  std::vector<double> samples = ClockRuns(0, iters, &err, [&] {
    Error e;
    void* p = nullptr;
    if (device_mem) {
      CM_TRY(e, cudaMalloc(&p, n), "cudaMalloc");
      if (!e) CM_TRY(e, cudaFree(p), "cudaFree");
    } else {
      CM_TRY(e, cudaMallocHost(&p, n), "cudaMallocHost");
      if (!e) CM_TRY(e, cudaFreeHost(p), "cudaFreeHost");
    }
    return e;
  });
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

}  // namespace

void InitAllocBench(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"timeRawAlloc", TimeRawAlloc},
           });
}

}  // namespace cm
