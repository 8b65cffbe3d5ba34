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
#include "transfer/staging.h"

namespace cm {

namespace {

// One copy repeated in step with the others. 'events': cudaMemcpyAsync (cudaMemcpyPeerAsync
// between two devices, driven by the source) on a stream of the job's own with events around it,
// the GPU's own view; 'clock': the library's copy (CopyRange) timed with a steady clock;
// 'hostcopy': the staged path's host half alone (StagingEngine::HostHalf), the pinned side's
// GPU's engine copying between the pageable buffer and a ring in the pinned one as a staged copy
// would, with no transfer, timed with a steady clock (GPUs at once share the host's memory here).
struct Job {
  enum Kind { kEvents, kClock, kHostCopy };
  Endpoint dst, src;
  size_t n = 0;
  Kind kind = kEvents;
  Strategy strategy = Strategy::kAuto;
  std::shared_ptr<StagingEngine> engine;  // a hostcopy job's
  int device = 0;
  std::vector<double> seconds;
  std::vector<Clock::time_point> ends;
  Error err;
};

// The job's one copy, timed. `engine`: a hostcopy job's, with where its ring starts.
Error RunOnce(Instance& inst, Job& job, BenchStream& q, StagingEngine* engine, size_t* ring_pos,
              bool peer, double* seconds) {
  if (job.kind == Job::kEvents)
    return q.Time(
        [&](cudaStream_t s) {
          Error e;
          if (peer)
            CM_TRY(e,
                   cudaMemcpyPeerAsync(job.dst.ptr, job.dst.device, job.src.ptr, job.src.device,
                                       job.n, s),
                   "cudaMemcpyPeerAsync");
          else
            CM_TRY(e, cudaMemcpyAsync(job.dst.ptr, job.src.ptr, job.n, cudaMemcpyDefault, s),
                   "cudaMemcpyAsync");
          return e;
        },
        seconds);
  Clock::time_point t0 = Clock::now();
  Error e;
  if (engine) {
    const bool to_host = job.dst.where == Endpoint::kPageable;
    char* host = to_host ? job.dst.ptr : job.src.ptr;
    char* ring = to_host ? job.src.ptr : job.dst.ptr;
    engine->HostHalf(host, job.n, ring, nullptr, ring_pos);
  } else {
    e = CopyRange(inst, job.dst, job.src, job.n, job.strategy, nullptr);
  }
  *seconds = Seconds(t0, Clock::now());
  return e;
}

void RunJob(Instance& inst, Job& job, int total, std::atomic<int>& go, std::atomic<int>& ready,
            std::atomic<int>& finished) {
  BenchStream q;
  bool peer = job.dst.where == Endpoint::kDevice && job.src.where == Endpoint::kDevice &&
              job.dst.device != job.src.device;
  size_t ring_pos = 0;
  CM_TRY(job.err, cudaSetDevice(job.device), "cudaSetDevice");
  if (!job.err && job.kind == Job::kEvents) job.err = q.Make(2);
  ready.fetch_add(1);
  for (int it = 0; it < total; ++it) {
    while (go.load(std::memory_order_acquire) < it) std::this_thread::yield();
    double secs = 0;
    if (!job.err) job.err = RunOnce(inst, job, q, job.engine.get(), &ring_pos, peer, &secs);
    job.seconds.push_back(secs);
    job.ends.push_back(Clock::now());
    finished.fetch_add(1, std::memory_order_acq_rel);
  }
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
    std::string timing = o.Get("timing").ToString().Utf8Value();
    j.kind = timing == "clock" ? Job::kClock : timing == "hostcopy" ? Job::kHostCopy : Job::kEvents;
    j.strategy = ReadStrategy(env, o.Get("strategy"));
    if (j.kind == Job::kEvents &&
        (j.dst.where == Endpoint::kPageable || j.src.where == Endpoint::kPageable))
      ThrowRange(env, "timing 'events' needs pinned or device memory on both sides");
    if (j.kind == Job::kHostCopy &&
        !((j.dst.where == Endpoint::kPinned && j.src.where == Endpoint::kPageable) ||
          (j.dst.where == Endpoint::kPageable && j.src.where == Endpoint::kPinned)))
      ThrowRange(env,
                 "timing 'hostcopy' needs a PinnedBuffer on one side and pageable memory on "
                 "the other");
    // The GPU the job drives: a copy's device side, a host copy's pinned side.
    Endpoint::Where own = j.kind == Job::kHostCopy ? Endpoint::kPinned : Endpoint::kDevice;
    j.device = j.src.where == own ? j.src.device : j.dst.device;
    // Both sides hold the n bytes, but a host copy's PinnedBuffer, which only holds its ring.
    auto holds = [&](const Endpoint& e) {
      return (j.kind == Job::kHostCopy && e.where == Endpoint::kPinned) || j.n <= e.length;
    };
    if (!holds(j.dst) || !holds(j.src)) ThrowRange(env, "bytes runs past a buffer");
    if (j.kind == Job::kHostCopy) {
      Error err;
      j.engine =
          GetStagingEngine(GetInstance(env), j.device, j.dst.where == Endpoint::kPageable, &err);
      if (!j.engine) Fail(env, err);
      const size_t ring = j.engine->RingBytes();
      if ((j.src.where == Endpoint::kPinned ? j.src : j.dst).length < ring)
        ThrowRange(env, "a 'hostcopy' job's PinnedBuffer must hold the staging ring (" +
                            std::to_string(ring) + " bytes)");
    }
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
  BenchStream q;
  CM_TRY(err, cudaSetDevice(src.device), "cudaSetDevice");
  if (!err) err = q.Make(2);
  std::vector<double> samples = TimeRuns(warmup, iters, &err, [&](double* seconds) {
    Error e = q.Time(
        [&](cudaStream_t s) {
          Error copy;
          for (int k = 0; k < count && !copy; ++k)
            CM_TRY(copy, cudaMemcpyPeerAsync(dst.ptr, dst.device, src.ptr, src.device, 4, s),
                   "cudaMemcpyPeerAsync");
          return copy;
        },
        seconds);
    *seconds /= count;
    return e;
  });
  if (err) Fail(env, err);
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
