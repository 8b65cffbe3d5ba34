// The transfer benchmark's timing loops: copies in one direction and both, the raw pinned
// baseline, the staged path's two halves alone (the host's own memory copy, and its chunks moved
// from pinned memory) and the cost of cudaHostRegister.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "binding/exports.h"
#include "device/discovery.h"
#include "transfer/copy.h"
#include "transfer/staging.h"

namespace cm {

Napi::Float64Array ToFloat64Array(Napi::Env env, const std::vector<double>& v) {
  Napi::Float64Array a = Napi::Float64Array::New(env, v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = v[i];
  return a;
}

namespace {

// timeCopy: returns Float64Array of seconds per copy. 'events' issues cudaMemcpyAsync on a private
// stream with events around each copy (pinned and device memory); 'clock' times the library's
// synchronous copy with a steady clock (pageable memory, whatever path it takes).
Napi::Value TimeCopy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  Endpoint dst = ResolveEndpoint(env, info[0], "dst");
  Endpoint src = ResolveEndpoint(env, info[1], "src");
  size_t n = ReadSize(env, info[2], "bytes");
  int warmup = ReadInt(env, info[3], "warmup", 0, 1 << 20);
  int iters = ReadInt(env, info[4], "iterations", 1, 1 << 24);
  std::string timing = info[5].ToString().Utf8Value();
  Strategy strategy = ReadStrategy(env, info[6]);
  if (n > dst.length || n > src.length) ThrowRange(env, "bytes runs past a buffer");
  Instance& inst = GetInstance(env);
  std::vector<double> samples;
  samples.reserve(iters);
  Error err;
  int device = dst.where == Endpoint::kDevice ? dst.device : src.device;
  CM_TRY(err, cudaSetDevice(device), "cudaSetDevice");
  if (err) Fail(env, err);
  if (timing == "events") {
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    CM_TRY(err, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (!err) CM_TRY(err, cudaEventCreate(&start), "cudaEventCreate");
    if (!err) CM_TRY(err, cudaEventCreate(&stop), "cudaEventCreate");
    for (int i = 0; i < warmup + iters && !err; ++i) {
      CM_TRY(err, cudaEventRecord(start, stream), "cudaEventRecord");
      if (!err)
        CM_TRY(err, cudaMemcpyAsync(dst.ptr, src.ptr, n, cudaMemcpyDefault, stream),
               "cudaMemcpyAsync");
      if (!err) CM_TRY(err, cudaEventRecord(stop, stream), "cudaEventRecord");
      if (!err) CM_TRY(err, cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      if (!err) CM_TRY(err, cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (!err && i >= warmup) samples.push_back(ms / 1e3);
    }
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
  } else {
    for (int i = 0; i < warmup + iters && !err; ++i) {
      auto t0 = Clock::now();
      err = CopyRange(inst, dst, src, n, strategy, nullptr);
      auto t1 = Clock::now();
      if (!err && i >= warmup) samples.push_back(Seconds(t0, t1));
    }
  }
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

// timeBidirectional: returns Float64Array of seconds for both copies together. 'events': two
// streams, both copies in flight at once; 'clock': two host threads, each a synchronous library
// copy.
Napi::Value TimeBidirectional(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  Endpoint a_dst = ResolveEndpoint(env, info[0], "h2dDst");
  Endpoint a_src = ResolveEndpoint(env, info[1], "h2dSrc");
  Endpoint b_dst = ResolveEndpoint(env, info[2], "d2hDst");
  Endpoint b_src = ResolveEndpoint(env, info[3], "d2hSrc");
  size_t n = ReadSize(env, info[4], "bytes");
  int warmup = ReadInt(env, info[5], "warmup", 0, 1 << 20);
  int iters = ReadInt(env, info[6], "iterations", 1, 1 << 24);
  std::string timing = info[7].ToString().Utf8Value();
  // Two threads of the driver's pageable path unless told otherwise.
  Strategy strategy = info[8].IsUndefined() ? Strategy::kDriver : ReadStrategy(env, info[8]);
  Instance& inst = GetInstance(env);
  std::vector<double> samples;
  Error err;
  CM_TRY(err, cudaSetDevice(a_dst.device), "cudaSetDevice");
  if (timing == "events") {
    cudaStream_t s1 = nullptr, s2 = nullptr;
    cudaEvent_t start = nullptr, mid = nullptr, stop = nullptr;
    if (!err)
      CM_TRY(err, cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), "cudaStreamCreate");
    if (!err)
      CM_TRY(err, cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), "cudaStreamCreate");
    if (!err) CM_TRY(err, cudaEventCreate(&start), "cudaEventCreate");
    if (!err) CM_TRY(err, cudaEventCreate(&mid), "cudaEventCreate");
    if (!err) CM_TRY(err, cudaEventCreate(&stop), "cudaEventCreate");
    for (int i = 0; i < warmup + iters && !err; ++i) {
      CM_TRY(err, cudaEventRecord(start, s1), "cudaEventRecord");
      if (!err) CM_TRY(err, cudaStreamWaitEvent(s2, start, 0), "cudaStreamWaitEvent");
      if (!err)
        CM_TRY(err, cudaMemcpyAsync(a_dst.ptr, a_src.ptr, n, cudaMemcpyDefault, s1),
               "cudaMemcpyAsync");
      if (!err)
        CM_TRY(err, cudaMemcpyAsync(b_dst.ptr, b_src.ptr, n, cudaMemcpyDefault, s2),
               "cudaMemcpyAsync");
      if (!err) CM_TRY(err, cudaEventRecord(mid, s2), "cudaEventRecord");
      if (!err) CM_TRY(err, cudaStreamWaitEvent(s1, mid, 0), "cudaStreamWaitEvent");
      if (!err) CM_TRY(err, cudaEventRecord(stop, s1), "cudaEventRecord");
      if (!err) CM_TRY(err, cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      if (!err) CM_TRY(err, cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (!err && i >= warmup) samples.push_back(ms / 1e3);
    }
    for (cudaEvent_t e : {start, mid, stop})
      if (e) cudaEventDestroy(e);
    for (cudaStream_t s : {s1, s2})
      if (s) cudaStreamDestroy(s);
  } else {
    for (int i = 0; i < warmup + iters && !err; ++i) {
      Error other;
      auto t0 = Clock::now();
      std::thread t([&] {
        cudaSetDevice(b_src.device);
        other = CopyRange(inst, b_dst, b_src, n, strategy, nullptr);
      });
      err = CopyRange(inst, a_dst, a_src, n, strategy, nullptr);
      t.join();
      auto t1 = Clock::now();
      if (!err) err = other;
      if (!err && i >= warmup) samples.push_back(Seconds(t0, t1));
    }
  }
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

// timeRawPinned: the reference that pinned copies are held to: plain cudaMemcpy between
// cudaMallocHost and cudaMalloc memory, timed with a steady clock, with no library code in between.
Napi::Value TimeRawPinned(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  size_t n = ReadSize(env, info[0], "bytes");
  int warmup = ReadInt(env, info[1], "warmup", 0, 1 << 20);
  int iters = ReadInt(env, info[2], "iterations", 1, 1 << 24);
  bool h2d = info[3].ToString().Utf8Value() == "h2d";
  int device = ReadInt(env, info[4], "device", 0, 1 << 20);
  Error err;
  void *host = nullptr, *dev = nullptr;
  CM_TRY(err, cudaSetDevice(device), "cudaSetDevice");
  if (!err) CM_TRY(err, cudaMallocHost(&host, n), "cudaMallocHost");
  if (!err) CM_TRY(err, cudaMalloc(&dev, n), "cudaMalloc");
  if (!err) std::memset(host, 0x5a, n);
  std::vector<double> samples;
  for (int i = 0; i < warmup + iters && !err; ++i) {
    auto t0 = Clock::now();
    CM_TRY(err,
           h2d ? cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice)
               : cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost),
           "cudaMemcpy");
    auto t1 = Clock::now();
    if (!err && i >= warmup) samples.push_back(Seconds(t0, t1));
  }
  if (dev) cudaFree(dev);
  if (host) cudaFreeHost(host);
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

// timeHostCopy: returns seconds per copy: the host memory copy rate the staged path is bound by,
// measured with its own team of threads and store kind. 'h2d' copies pageable into pinned memory,
// 'd2h' back, 'bidir' both at once from two threads (pinned's first half into pageable's second
// half and the reverse), as the two directions of a bidirectional staged copy share the team.
Napi::Value TimeHostCopy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  Endpoint pageable = ResolveEndpoint(env, info[0], "pageable");
  Endpoint pinned = ResolveEndpoint(env, info[1], "pinned");
  size_t n = ReadSize(env, info[2], "bytes");
  int warmup = ReadInt(env, info[3], "warmup", 0, 1 << 20);
  int iters = ReadInt(env, info[4], "iterations", 1, 1 << 24);
  std::string direction = info[5].ToString().Utf8Value();
  bool bidir = direction == "bidir";
  size_t span = bidir ? 2 * n : n;  // bidir writes each buffer's second half
  if (span > pageable.length || span > pinned.length) ThrowRange(env, "bytes runs past a buffer");
  Instance& inst = GetInstance(env);
  std::shared_ptr<core::CopyTeam> team = GetStagingTeam(inst, pinned.device);
  Streaming mode;
  {
    StagingState& st = Staging(inst);
    std::lock_guard<std::mutex> lock(st.mutex);
    mode = StagingOptionsInForce(st).streaming;
  }
  // As a staged copy of n bytes would store: into pinned memory (h2d) and out of it (d2h).
  const bool streaming_in = StreamingFor(mode, false, n),
             streaming_out = StreamingFor(mode, true, n);
  std::vector<double> samples;
  for (int i = 0; i < warmup + iters; ++i) {
    auto t0 = Clock::now();
    if (bidir) {
      std::thread other([&] { team->Copy(pageable.ptr + n, pinned.ptr, n, streaming_out); });
      team->Copy(pinned.ptr + n, pageable.ptr, n, streaming_in);
      other.join();
    } else if (direction == "h2d") {
      team->Copy(pinned.ptr, pageable.ptr, n, streaming_in);
    } else {
      team->Copy(pageable.ptr, pinned.ptr, n, streaming_out);
    }
    auto t1 = Clock::now();
    if (i >= warmup) samples.push_back(Seconds(t0, t1));
  }
  return ToFloat64Array(env, samples);
}

// A private stream and one event per ring slot, freed however the loop ends (the stream drained
// first, so that nothing still moves into buffers the caller frees after a failure).
struct DmaQueue {
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> done;
  Error Make(int device, size_t slots) {
    Error err;
    CM_TRY(err, cudaSetDevice(device), "cudaSetDevice");
    if (!err)
      CM_TRY(err, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (size_t s = 0; s < slots && !err; ++s) {
      cudaEvent_t ev = nullptr;
      CM_TRY(err, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
      if (!err) done.push_back(ev);
    }
    return err;
  }
  ~DmaQueue() {
    if (stream) cudaStreamSynchronize(stream);
    for (cudaEvent_t ev : done) cudaEventDestroy(ev);
    if (stream) cudaStreamDestroy(stream);
    (void)cudaGetLastError();
  }
};

// timeStagedDma: returns seconds per copy: the staged path's DMA half alone, the most a staged
// copy of n bytes can reach, since every transfer costs the DMA engine time of its own. The
// device's staged engine for the direction plans the copy (StagingEngine::PlanFor); each chunk
// moves between pinned+offset and device+offset with cudaMemcpyAsync on a private stream, its
// slot's event recorded after it as CudaRing::Issue does, with no CPU copy between them. Timed
// with a steady clock from the first issue to the end of the stream's synchronization.
Napi::Value TimeStagedDma(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  Endpoint dev = ResolveEndpoint(env, info[0], "device");
  Endpoint pinned = ResolveEndpoint(env, info[1], "pinned");
  size_t n = ReadSize(env, info[2], "bytes");
  int warmup = ReadInt(env, info[3], "warmup", 0, 1 << 20);
  int iters = ReadInt(env, info[4], "iterations", 1, 1 << 24);
  std::string direction = ReadString(env, info[5], "direction");
  if (dev.where != Endpoint::kDevice) ThrowType(env, "device must be a DeviceBuffer");
  if (pinned.where != Endpoint::kPinned) ThrowType(env, "pinned must be a PinnedBuffer");
  if (direction != "h2d" && direction != "d2h")
    ThrowRange(env, "direction must be 'h2d' or 'd2h', got '" + direction + "'");
  if (n == 0) ThrowRange(env, "bytes must be at least 1");
  if (n > dev.length || n > pinned.length) ThrowRange(env, "bytes runs past a buffer");
  const bool to_host = direction == "d2h";
  Error err;
  std::shared_ptr<StagingEngine> engine =
      GetStagingEngine(GetInstance(env), dev.device, to_host, &err);
  if (!engine) Fail(env, err);
  const core::StagingPlan plan = engine->PlanFor(n);
  size_t slots = 0;
  for (const core::StagingChunk& c : plan.chunks)
    slots = std::max(slots, static_cast<size_t>(c.slot) + 1);
  std::vector<double> samples;
  {
    DmaQueue q;
    err = q.Make(dev.device, slots);
    for (int i = 0; i < warmup + iters && !err; ++i) {
      auto t0 = Clock::now();
      for (const core::StagingChunk& c : plan.chunks) {
        char* d = dev.ptr + c.offset;
        char* h = pinned.ptr + c.offset;
        CM_TRY(err,
               to_host ? cudaMemcpyAsync(h, d, c.length, cudaMemcpyDeviceToHost, q.stream)
                       : cudaMemcpyAsync(d, h, c.length, cudaMemcpyHostToDevice, q.stream),
               "cudaMemcpyAsync");
        if (!err) CM_TRY(err, cudaEventRecord(q.done[c.slot], q.stream), "cudaEventRecord");
        if (err) break;
      }
      if (!err) CM_TRY(err, cudaStreamSynchronize(q.stream), "cudaStreamSynchronize");
      auto t1 = Clock::now();
      if (!err && i >= warmup) samples.push_back(Seconds(t0, t1));
    }
  }
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

// timeHostRegister: returns seconds per cudaHostRegister+cudaHostUnregister
Napi::Value TimeHostRegister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  Endpoint e = ResolveEndpoint(env, info[0], "view");
  int iters = ReadInt(env, info[1], "iterations", 1, 1 << 20);
  std::vector<double> samples;
  Error err;
  for (int i = 0; i < iters && !err; ++i) {
    auto t0 = Clock::now();
    CM_TRY(err, cudaHostRegister(e.ptr, e.length, cudaHostRegisterDefault), "cudaHostRegister");
    auto t1 = Clock::now();
    if (!err) CM_TRY(err, cudaHostUnregister(e.ptr), "cudaHostUnregister");
    if (!err) samples.push_back(Seconds(t0, t1));
  }
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

}  // namespace

void InitBench(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"timeCopy", TimeCopy},
               {"timeBidirectional", TimeBidirectional},
               {"timeRawPinned", TimeRawPinned},
               {"timeHostCopy", TimeHostCopy},
               {"timeStagedDma", TimeStagedDma},
               {"timeHostRegister", TimeHostRegister},
           });
}

}  // namespace cm
