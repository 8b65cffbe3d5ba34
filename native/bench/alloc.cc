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
  std::vector<double> samples;
  for (int i = 0; i < iters && !err; ++i) {
    void* p = nullptr;
    auto t0 = Clock::now();
    if (device_mem) {
      CM_TRY(err, cudaMalloc(&p, n), "cudaMalloc");
      if (!err) CM_TRY(err, cudaFree(p), "cudaFree");
    } else {
      CM_TRY(err, cudaMallocHost(&p, n), "cudaMallocHost");
      if (!err) CM_TRY(err, cudaFreeHost(p), "cudaFreeHost");
    }
    auto t1 = Clock::now();
    if (!err) samples.push_back(Seconds(t0, t1));
  }
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
