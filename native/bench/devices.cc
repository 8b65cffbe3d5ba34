// Timing loops for several GPUs at once: every GPU's copies started together from their own
// threads (host-side contention for memory and PCIe shows up as a lower per-GPU rate), copies
// between GPUs, and the peer link's latency.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "binding/exports.h"
#include "device/discovery.h"
#include "transfer/copy.h"

namespace cm {

namespace {

// One copy repeated in step with the others. 'events': cudaMemcpyAsync (cudaMemcpyPeerAsync
// between two devices, driven by the source) on a stream of the job's own with events around it,
// the GPU's own view; 'clock': the library's copy (CopyRange) timed with a steady clock.
struct Job {
  Endpoint dst, src;
  size_t n = 0;
  bool events = true;
  Strategy strategy = Strategy::kAuto;
  int device = 0;
  std::vector<double> seconds;
  std::vector<Clock::time_point> ends;
  Error err;
};

void RunJob(Instance& inst, Job& job, int total, std::atomic<int>& go, std::atomic<int>& ready,
            std::atomic<int>& finished) {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  bool peer = job.dst.where == Endpoint::kDevice && job.src.where == Endpoint::kDevice &&
              job.dst.device != job.src.device;
  CM_TRY(job.err, cudaSetDevice(job.device), "cudaSetDevice");
  if (job.events) {
    if (!job.err)
      CM_TRY(job.err, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
             "cudaStreamCreate");
    if (!job.err) CM_TRY(job.err, cudaEventCreate(&start), "cudaEventCreate");
    if (!job.err) CM_TRY(job.err, cudaEventCreate(&stop), "cudaEventCreate");
  }
  ready.fetch_add(1);
  for (int it = 0; it < total; ++it) {
    while (go.load(std::memory_order_acquire) < it) std::this_thread::yield();
    auto t0 = Clock::now();
    double secs = 0;
    if (!job.err && job.events) {
      Error& e = job.err;
      CM_TRY(e, cudaEventRecord(start, stream), "cudaEventRecord");
      if (!e && peer)
        CM_TRY(e,
               cudaMemcpyPeerAsync(job.dst.ptr, job.dst.device, job.src.ptr, job.src.device, job.n,
                                   stream),
               "cudaMemcpyPeerAsync");
      else if (!e)
        CM_TRY(e, cudaMemcpyAsync(job.dst.ptr, job.src.ptr, job.n, cudaMemcpyDefault, stream),
               "cudaMemcpyAsync");
      if (!e) CM_TRY(e, cudaEventRecord(stop, stream), "cudaEventRecord");
      if (!e) CM_TRY(e, cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      if (!e) CM_TRY(e, cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      secs = ms / 1e3;
    } else if (!job.err) {
      job.err = CopyRange(inst, job.dst, job.src, job.n, job.strategy, nullptr);
      secs = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    job.seconds.push_back(secs);
    job.ends.push_back(Clock::now());
    finished.fetch_add(1, std::memory_order_acq_rel);
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (stream) cudaStreamDestroy(stream);
  (void)cudaGetLastError();
}

// timeTogether: returns { seconds: Float64Array[] (per job, per timed iteration), wall:
// Float64Array }: every job on a thread of its own, all released at once each iteration; `wall`
// runs from the release to the last job's end.
Napi::Value TimeTogether(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  if (!info[0].IsArray()) ThrowType(env, "jobs must be an array");
  Napi::Array list = info[0].As<Napi::Array>();
  int warmup = ReadInt(env, info[1], "warmup", 0, 1 << 20);
  int iters = ReadInt(env, info[2], "iterations", 1, 1 << 24);
  std::vector<Job> jobs(list.Length());
  if (jobs.empty() || jobs.size() > 64) ThrowRange(env, "jobs must hold from 1 to 64 copies");
  for (uint32_t i = 0; i < list.Length(); ++i) {
    Napi::Object o = list.Get(i).As<Napi::Object>();
    Job& j = jobs[i];
    j.dst = ResolveEndpoint(env, o.Get("dst"), "dst");
    j.src = ResolveEndpoint(env, o.Get("src"), "src");
    j.n = ReadSize(env, o.Get("bytes"), "bytes");
    if (j.n > j.dst.length || j.n > j.src.length) ThrowRange(env, "bytes runs past a buffer");
    j.events = o.Get("timing").ToString().Utf8Value() != "clock";
    j.strategy = ReadStrategy(env, o.Get("strategy"));
    if (j.events && (j.dst.where == Endpoint::kPageable || j.src.where == Endpoint::kPageable))
      ThrowRange(env, "timing 'events' needs pinned or device memory on both sides");
    j.device = j.src.where == Endpoint::kDevice ? j.src.device : j.dst.device;
  }
  Instance& inst = GetInstance(env);
  const int total = warmup + iters;
  std::atomic<int> go{-1}, ready{0}, finished{0};
  std::vector<std::thread> threads;
  for (Job& j : jobs)
    threads.emplace_back(RunJob, std::ref(inst), std::ref(j), total, std::ref(go), std::ref(ready),
                         std::ref(finished));
  const int n = static_cast<int>(jobs.size());
  while (ready.load() < n) std::this_thread::yield();
  std::vector<Clock::time_point> released;
  for (int it = 0; it < total; ++it) {
    released.push_back(Clock::now());
    go.store(it, std::memory_order_release);
    while (finished.load(std::memory_order_acquire) < n * (it + 1)) std::this_thread::yield();
  }
  for (auto& t : threads) t.join();
  for (Job& j : jobs)
    if (j.err) ThrowCuda(env, j.err.code, j.err.call, j.err.detail);
  Napi::Array seconds = Napi::Array::New(env, jobs.size());
  std::vector<double> wall;
  for (int it = warmup; it < total; ++it) {
    Clock::time_point last = released[it];
    for (Job& j : jobs) last = std::max(last, j.ends[it]);
    wall.push_back(std::chrono::duration<double>(last - released[it]).count());
  }
  for (size_t i = 0; i < jobs.size(); ++i)
    seconds.Set(static_cast<uint32_t>(i),
                ToFloat64Array(env, std::vector<double>(jobs[i].seconds.begin() + warmup,
                                                        jobs[i].seconds.end())));
  Napi::Object out = Napi::Object::New(env);
  out.Set("seconds", seconds);
  out.Set("wall", ToFloat64Array(env, wall));
  return out;
}

// timePeerLatency: returns seconds per copy: `count` 4-byte cudaMemcpyPeerAsync calls back to back
// between two events, divided by count (how p2pBandwidthLatencyTest reports latency: the link's,
// without a round trip to the host).
Napi::Value TimePeerLatency(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  Endpoint dst = ResolveEndpoint(env, info[0], "dst");
  Endpoint src = ResolveEndpoint(env, info[1], "src");
  int count = ReadInt(env, info[2], "count", 1, 1 << 20);
  int warmup = ReadInt(env, info[3], "warmup", 0, 1 << 20);
  int iters = ReadInt(env, info[4], "iterations", 1, 1 << 20);
  if (dst.where != Endpoint::kDevice || src.where != Endpoint::kDevice || dst.length < 4 ||
      src.length < 4)
    ThrowRange(env, "dst and src must be DeviceBuffers of at least 4 bytes");
  Error err;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  CM_TRY(err, cudaSetDevice(src.device), "cudaSetDevice");
  if (!err)
    CM_TRY(err, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (!err) CM_TRY(err, cudaEventCreate(&start), "cudaEventCreate");
  if (!err) CM_TRY(err, cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> samples;
  for (int i = 0; i < warmup + iters && !err; ++i) {
    CM_TRY(err, cudaEventRecord(start, stream), "cudaEventRecord");
    for (int k = 0; k < count && !err; ++k)
      CM_TRY(err, cudaMemcpyPeerAsync(dst.ptr, dst.device, src.ptr, src.device, 4, stream),
             "cudaMemcpyPeerAsync");
    if (!err) CM_TRY(err, cudaEventRecord(stop, stream), "cudaEventRecord");
    if (!err) CM_TRY(err, cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (!err) CM_TRY(err, cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (!err && i >= warmup) samples.push_back(ms / 1e3 / count);
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (stream) cudaStreamDestroy(stream);
  (void)cudaGetLastError();
  if (err) ThrowCuda(env, err.code, err.call, err.detail);
  return ToFloat64Array(env, samples);
}

}  // namespace

void InitBenchDevices(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"timeTogether", TimeTogether},
               {"timePeerLatency", TimePeerLatency},
           });
}

}  // namespace cm
