// The transfer benchmark's timing loops: copies in one direction and both, the raw pinned
// baseline, the staged path's two halves alone (the host's own memory copy, and its chunks moved
// from pinned memory) and the cost of cudaHostRegister; and the floor of a copy() call.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "binding/exports.h"
#include "device/discovery.h"
#include "transfer/copy.h"
#include "transfer/pinned_memcpy.h"
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
  const TimedRun run = ReadTimedRun(info, 2);
  const size_t n = run.bytes;
  const int warmup = run.warmup, iters = run.iterations;
  std::string timing = info[5].ToString().Utf8Value();
  Strategy strategy = ReadStrategy(env, info[6]);
  if (n > dst.length || n > src.length) ThrowRange(env, "bytes runs past a buffer");
  Instance& inst = GetInstance(env);
  Error err;
  int device = dst.where == Endpoint::kDevice ? dst.device : src.device;
  CM_TRY(err, cudaSetDevice(device), "cudaSetDevice");
  if (err) Fail(env, err);
  std::vector<double> samples;
  if (timing == "events") {
    BenchStream q;
    err = q.Make(2);
    samples = TimeRuns(warmup, iters, &err, [&](double* seconds) {
      return q.Time(
          [&](cudaStream_t s) {
            Error e;
            CM_TRY(e, cudaMemcpyAsync(dst.ptr, src.ptr, n, cudaMemcpyDefault, s),
                   "cudaMemcpyAsync");
            return e;
          },
          seconds);
    });
  } else {
    samples = ClockRuns(warmup, iters, &err,
                        [&] { return CopyRange(inst, dst, src, n, strategy, nullptr); });
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
  const TimedRun run = ReadTimedRun(info, 4);
  const size_t n = run.bytes;
  const int warmup = run.warmup, iters = run.iterations;
  std::string timing = info[7].ToString().Utf8Value();
  // Two threads of the driver's pageable path unless told otherwise.
  Strategy strategy = info[8].IsUndefined() ? Strategy::kDriver : ReadStrategy(env, info[8]);
  Instance& inst = GetInstance(env);
  Error err;
  CM_TRY(err, cudaSetDevice(a_dst.device), "cudaSetDevice");
  std::vector<double> samples;
  if (timing == "events") {
    // Both copies between the timer's events: the second stream waits for the start, and the
    // timer's stream for the second stream's end (events[0] there).
    BenchStream timer, other;
    if (!err) err = timer.Make(2);
    if (!err) err = other.Make(1);
    samples = TimeRuns(warmup, iters, &err, [&](double* seconds) {
      return timer.Time(
          [&](cudaStream_t s1) {
            Error e;
            cudaStream_t s2 = other.stream;
            CM_TRY(e, cudaStreamWaitEvent(s2, timer.events[0], 0), "cudaStreamWaitEvent");
            if (!e)
              CM_TRY(e, cudaMemcpyAsync(a_dst.ptr, a_src.ptr, n, cudaMemcpyDefault, s1),
                     "cudaMemcpyAsync");
            if (!e)
              CM_TRY(e, cudaMemcpyAsync(b_dst.ptr, b_src.ptr, n, cudaMemcpyDefault, s2),
                     "cudaMemcpyAsync");
            if (!e) CM_TRY(e, cudaEventRecord(other.events[0], s2), "cudaEventRecord");
            if (!e) CM_TRY(e, cudaStreamWaitEvent(s1, other.events[0], 0), "cudaStreamWaitEvent");
            return e;
          },
          seconds);
    });
  } else {
    samples = ClockRuns(warmup, iters, &err, [&] {
      Error mine, theirs;
      std::thread t([&] {
        cudaSetDevice(b_src.device);
        theirs = CopyRange(inst, b_dst, b_src, n, strategy, nullptr);
      });
      mine = CopyRange(inst, a_dst, a_src, n, strategy, nullptr);
      t.join();
      return mine ? mine : theirs;
    });
  }
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

// timeRawPinned: the reference that pinned copies are held to: plain cudaMemcpy between
// cudaMallocHost and cudaMalloc memory, timed with a steady clock, with no library code in between.
Napi::Value TimeRawPinned(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  const TimedRun run = ReadTimedRun(info, 0);
  const size_t n = run.bytes;
  const int warmup = run.warmup, iters = run.iterations;
  bool h2d = info[3].ToString().Utf8Value() == "h2d";
  int device = ReadInt(env, info[4], "device", 0, 1 << 20);
  Error err;
  void *host = nullptr, *dev = nullptr;
  CM_TRY(err, cudaSetDevice(device), "cudaSetDevice");
  if (!err) CM_TRY(err, cudaMallocHost(&host, n), "cudaMallocHost");
  if (!err) CM_TRY(err, cudaMalloc(&dev, n), "cudaMalloc");
  if (!err) std::memset(host, 0x5a, n);
  std::vector<double> samples = ClockRuns(warmup, iters, &err, [&] {
    Error e;
    CM_TRY(e,
           h2d ? cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice)
               : cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost),
           "cudaMemcpy");
    return e;
  });
  if (dev) cudaFree(dev);
  if (host) cudaFreeHost(host);
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

// timeHostCopy: returns seconds per copy: the staged path's host half alone, the rate its host
// memory copy allows. Each direction runs a staged copy of n bytes as its device's engine would
// (StagingEngine::HostHalf: its plan, pieces, team and stores) through a ring in `pinned`, with
// no transfer: 'h2d' from `pageable` into the ring, 'd2h' out of it, 'bidir' both at once from
// two threads (the h2d half from pageable's first n bytes through pinned's first ring, the d2h
// half into its second n bytes out of the second ring), as the directions of a bidirectional
// staged copy share the team. `pinned` holds one ring per direction (configureStaging's ringBytes
// each), h2d's first.
// `check` (optional, n bytes a direction, laid out as pageable is): one more, untimed, pass with
// `check` standing for the device, the chunks moved between it and the ring by memcpy, so that
// the caller can compare what arrived.
Napi::Value TimeHostCopy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  Endpoint pageable = ResolveEndpoint(env, info[0], "pageable");
  Endpoint pinned = ResolveEndpoint(env, info[1], "pinned");
  const TimedRun run = ReadTimedRun(info, 2);
  const size_t n = run.bytes;
  const int warmup = run.warmup, iters = run.iterations;
  std::string direction = ReadString(env, info[5], "direction");
  if (direction != "h2d" && direction != "d2h" && direction != "bidir")
    ThrowRange(env, "direction must be 'h2d', 'd2h' or 'bidir', got '" + direction + "'");
  if (pinned.where != Endpoint::kPinned) ThrowType(env, "pinned must be a PinnedBuffer");
  const bool bidir = direction == "bidir";
  Endpoint check;
  if (info.Length() > 6 && !Absent(info[6])) check = ResolveEndpoint(env, info[6], "check");
  // The CPU copies both: host memory only.
  for (const Endpoint* e : {&pageable, &check})
    if (e->where != Endpoint::kPageable && e->where != Endpoint::kPinned)
      ThrowType(env, std::string(e == &pageable ? "pageable" : "check") + " must be host memory");
  Instance& inst = GetInstance(env);
  Error err;
  // The engines to copy as: h2d's first, then d2h's.
  std::vector<std::shared_ptr<StagingEngine>> engines;
  for (bool to_host : {false, true}) {
    if (bidir || (direction == "d2h") == to_host) {
      engines.push_back(GetStagingEngine(inst, pinned.device, to_host, &err));
      if (!engines.back()) Fail(env, err);
    }
  }
  const size_t span = engines.size() * n;
  if (span > pageable.length || (check.ptr && span > check.length))
    ThrowRange(env, "bytes runs past a buffer");
  // Each engine's ring after the one before it.
  std::vector<size_t> ring_at = {0};
  for (const auto& e : engines) ring_at.push_back(ring_at.back() + e->RingBytes());
  if (ring_at.back() > pinned.length)
    ThrowRange(env, "pinned must hold the staging ring" + std::string(bidir ? "s" : "") + " (" +
                        std::to_string(ring_at.back()) + " bytes)");
  std::vector<size_t> pos(engines.size(), 0);
  auto pass = [&](char* stand_in) {
    auto half = [&](size_t i) {
      engines[i]->HostHalf(pageable.ptr + i * n, n, pinned.ptr + ring_at[i],
                           stand_in ? stand_in + i * n : nullptr, &pos[i]);
    };
    if (!bidir) return half(0);
    std::thread other(half, 1);
    half(0);
    other.join();
  };
  Error none;  // a host copy cannot fail
  std::vector<double> samples = ClockRuns(warmup, iters, &none, [&] {
    pass(nullptr);
    return Error();
  });
  if (check.ptr) pass(check.ptr);
  return ToFloat64Array(env, samples);
}

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
  const TimedRun run = ReadTimedRun(info, 2);
  const size_t n = run.bytes;
  const int warmup = run.warmup, iters = run.iterations;
  std::string direction = ReadString(env, info[5], "direction");
  if (dev.where != Endpoint::kDevice) ThrowType(env, "device must be a DeviceBuffer");
  if (pinned.where != Endpoint::kPinned) ThrowType(env, "pinned must be a PinnedBuffer");
  if (direction != "h2d" && direction != "d2h")
    ThrowRange(env, "direction must be 'h2d' or 'd2h', got '" + direction + "'");
  CheckRange(env, "bytes", n, size_t{1}, SIZE_MAX, "at least 1", Got::kLeftOut);
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
    BenchStream q;
    CM_TRY(err, cudaSetDevice(dev.device), "cudaSetDevice");
    if (!err) err = q.Make(slots, false);
    samples = ClockRuns(warmup, iters, &err, [&] {
      Error e;
      for (const core::StagingChunk& c : plan.chunks) {
        char* d = dev.ptr + c.offset;
        char* h = pinned.ptr + c.offset;
        CM_TRY(e,
               to_host ? cudaMemcpyAsync(h, d, c.length, cudaMemcpyDeviceToHost, q.stream)
                       : cudaMemcpyAsync(d, h, c.length, cudaMemcpyHostToDevice, q.stream),
               "cudaMemcpyAsync");
        if (!e) CM_TRY(e, cudaEventRecord(q.events[c.slot], q.stream), "cudaEventRecord");
        if (e) return e;
      }
      CM_TRY(e, cudaStreamSynchronize(q.stream), "cudaStreamSynchronize");
      return e;
    });
  }
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

// timeHostRegister: returns seconds per cudaHostRegister of the whole view (each followed by an
// untimed cudaHostUnregister)
Napi::Value TimeHostRegister(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  Endpoint view = ResolveEndpoint(env, info[0], "view");
  int iters = ReadInt(env, info[1], "iterations", 1, 1 << 20);
  Error err;
  std::vector<double> samples = TimeRuns(0, iters, &err, [&](double* seconds) {
    Error e;
    Clock::time_point t0 = Clock::now();
    CM_TRY(e, cudaHostRegister(view.ptr, view.length, cudaHostRegisterDefault), "cudaHostRegister");
    *seconds = Seconds(t0, Clock::now());
    if (!e) CM_TRY(e, cudaHostUnregister(view.ptr), "cudaHostUnregister");
    return e;
  });
  if (err) Fail(env, err);
  return ToFloat64Array(env, samples);
}

// The least a copy() called from JavaScript can cost: an addon call that reads no argument and
// runs one copy between page-locked memory and device memory of its own, the way the library
// copies (its device made current where it is not, then PinnedMemcpy), with nothing else.
// pinnedCallFloorSetup makes that memory (and frees it with bytes 0); pinnedCallFloor copies. The
// benchmark times the calls from JavaScript beside copy() and cudaMemcpy from C++: what copy()
// costs above it is the library's own.
struct CallFloorState : InstanceState {
  void* host = nullptr;
  void* device_memory = nullptr;
  size_t bytes = 0;
  bool h2d = true;
  int device = 0;
  void Release() noexcept {
    if (device_memory) cudaFree(device_memory);
    if (host) cudaFreeHost(host);
    device_memory = host = nullptr;
    bytes = 0;
  }
  ~CallFloorState() override { Release(); }
};

constexpr uint64_t kCallFloorMaxBytes = uint64_t{1} << 20;

// pinnedCallFloorSetup(bytes, direction, device): bytes up to 1 MiB (0 frees), 'h2d' or 'd2h'
Napi::Value PinnedCallFloorSetup(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CallFloorState& st = GetInstance(env).State<CallFloorState>();
  uint64_t bytes = ReadSize(env, info[0], "bytes");
  CheckRange(env, "bytes", bytes, uint64_t{0}, kCallFloorMaxBytes, "at most 1 MiB (1048576)",
             Got::kLeftOut);
  if (bytes == 0) {
    st.Release();
    return env.Undefined();
  }
  std::string direction = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
  if (direction != "h2d" && direction != "d2h") ThrowRange(env, "direction must be 'h2d' or 'd2h'");
  int device = ReadInt(env, info[2], "device", 0, 1 << 20);
  CheckDevice(env, device);
  st.Release();
  Error err;
  CM_TRY(err, cudaSetDevice(device), "cudaSetDevice");
  if (!err) CM_TRY(err, cudaMallocHost(&st.host, bytes), "cudaMallocHost");
  if (!err) CM_TRY(err, cudaMalloc(&st.device_memory, bytes), "cudaMalloc");
  if (!err) std::memset(st.host, 0x5a, bytes);
  if (err) {
    st.Release();
    Fail(env, err);
  }
  st.bytes = bytes;
  st.h2d = direction == "h2d";
  st.device = device;
  return env.Undefined();
}

// pinnedCallFloor(): one copy of what pinnedCallFloorSetup made
Napi::Value PinnedCallFloor(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CallFloorState& st = GetInstance(env).State<CallFloorState>();
  if (st.bytes == 0) ThrowType(env, "pinnedCallFloor() before pinnedCallFloorSetup()");
  cudaError_t e = UseDevice(st.device);
  if (e != cudaSuccess) ThrowCuda(env, e, "cudaSetDevice");
  e = st.h2d ? PinnedMemcpy(st.device_memory, st.host, st.bytes, cudaMemcpyHostToDevice)
             : PinnedMemcpy(st.host, st.device_memory, st.bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) ThrowCuda(env, e, "cudaMemcpy");
  return env.Undefined();
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
               {"pinnedCallFloorSetup", PinnedCallFloorSetup},
               {"pinnedCallFloor", PinnedCallFloor},
           });
}

}  // namespace cm
