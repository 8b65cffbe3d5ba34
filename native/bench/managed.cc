// The raw CUDA calls that the benchmark's managed rows are measured against, timed in C++ in the
// same run: cudaMemPrefetchAsync to the device or the host, and cudaMemcpy from or into managed
// memory resident on the host (the pages migrate, or are copied, on first use by the copy).
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "binding/exports.h"
#include "binding/instance.h"
#include "device/discovery.h"

namespace cm {

namespace {

cudaMemLocation Where(bool device, int id) {
  cudaMemLocation l{};
  l.type = device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  l.id = device ? id : 0;
  return l;
}

// timeRawManaged: returns seconds per call, each from the call to the end of its work (a stream
// synchronization), as the library's rows are timed. what: 'prefetch-h2d' | 'prefetch-d2h' |
// 'copy-h2d' | 'copy-d2h'. Before each sample the pages are put where the measured call starts from
// (untimed): on the host, or on the device for 'prefetch-d2h'.
Napi::Value TimeRawManaged(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  size_t n = ReadSize(env, info[0], "bytes");
  int warmup = ReadInt(env, info[1], "warmup", 0, 1 << 20);
  int iters = ReadInt(env, info[2], "iterations", 1, 1 << 24);
  std::string what = info[3].ToString().Utf8Value();
  int device = ReadInt(env, info[4], "device", 0, 1 << 20);
  CheckDevice(env, device);
  if (what != "prefetch-h2d" && what != "prefetch-d2h" && what != "copy-h2d" && what != "copy-d2h")
    ThrowRange(env, "what must be 'prefetch-h2d', 'prefetch-d2h', 'copy-h2d' or 'copy-d2h'");
  if (n == 0) ThrowRange(env, "bytes must be at least 1");
  bool prefetch = what.rfind("prefetch", 0) == 0;
  bool start_on_device = what == "prefetch-d2h";
  Error err;
  void *managed = nullptr, *dev = nullptr;
  cudaStream_t stream = nullptr;
  CM_TRY(err, cudaSetDevice(device), "cudaSetDevice");
  if (!err) CM_TRY(err, cudaMallocManaged(&managed, n, cudaMemAttachGlobal), "cudaMallocManaged");
  if (!err && !prefetch) CM_TRY(err, cudaMalloc(&dev, n), "cudaMalloc");
  if (!err)
    CM_TRY(err, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (!err) std::memset(managed, 0x5a, n);  // populated on the host
  std::vector<double> samples = TimeRuns(warmup, iters, &err, [&](double* seconds) {
    Error e;
    CM_TRY(e, cudaMemPrefetchAsync(managed, n, Where(start_on_device, device), 0, stream),
           "cudaMemPrefetchAsync");
    if (!e) CM_TRY(e, cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (e) return e;
    Clock::time_point t0 = Clock::now();
    if (prefetch)
      CM_TRY(e, cudaMemPrefetchAsync(managed, n, Where(!start_on_device, device), 0, stream),
             "cudaMemPrefetchAsync");
    else if (what == "copy-h2d")
      CM_TRY(e, cudaMemcpyAsync(dev, managed, n, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
    else
      CM_TRY(e, cudaMemcpyAsync(managed, dev, n, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
    if (!e) CM_TRY(e, cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    *seconds = Seconds(t0, Clock::now());
    return e;
  });
  if (stream) cudaStreamDestroy(stream);
  if (dev) cudaFree(dev);
  if (managed) cudaFree(managed);
  (void)cudaGetLastError();
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

}  // namespace

void InitManagedBench(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"timeRawManaged", TimeRawManaged},
           });
}

}  // namespace cm
