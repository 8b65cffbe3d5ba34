// The raw CUDA calls that the benchmark's managed rows are measured against, timed in C++ in the
// same run: cudaMemPrefetchAsync to the device or the host, and cudaMemcpy from or into managed
// memory resident on the host (the pages migrate, or are copied, on first use by the copy).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "binding/exports.h"
#include "binding/handles.h"
#include "binding/instance.h"
#include "device/discovery.h"
#include "transfer/copy.h"

namespace cm {

namespace {

cudaMemLocation Where(bool device, int id) {
  cudaMemLocation l{};
  l.type = device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
  l.id = device ? id : 0;
  return l;
}

// The thread a handed-off prefetch runs on: each Run() wakes it, it runs the job, and Run()
// returns once it has said so; a condition variable each way, as a call that keeps the JavaScript
// thread free hands its work to a thread and its end back.
class HandOff {
 public:
  template <typename Job>
  explicit HandOff(Job job)
      : thread_([this, job] {
          std::unique_lock<std::mutex> lock(mutex_);
          for (;;) {
            wake_.wait(lock, [&] { return asked_ || quit_; });
            if (quit_) return;
            asked_ = false;
            lock.unlock();
            Error e = job();
            lock.lock();
            result_ = e;
            done_ = true;
            back_.notify_one();
          }
        }) {}
  ~HandOff() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  Error Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    asked_ = true;
    done_ = false;
    wake_.notify_one();
    back_.wait(lock, [&] { return done_; });
    return result_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_, back_;
  bool asked_ = false, done_ = false, quit_ = false;
  Error result_;
  std::thread thread_;  // last: started once the rest is set up
};

// timeRawManaged: returns seconds per call, each from the call to the end of its work (a stream
// synchronization), as the library's rows are timed. what: 'prefetch-h2d' | 'prefetch-d2h' |
// 'copy-h2d' | 'copy-d2h', and 'prefetch-h2d-handoff' | 'prefetch-d2h-handoff': the prefetch run
// on a second thread, handed to it and its end handed back (HandOff), the least a call that keeps
// the calling thread free pays on top of the raw one. Before each sample the pages are put where
// the measured call starts from (untimed): on the host, or on the device for a prefetch to the
// host. `managed` and `dev` (optional, buffer handles of at least `bytes`): the library's own
// managed memory, and for the copies its device memory too (both or neither), to time the raw
// calls on rather than on memory of their own. Where a page lies before a prefetch to the host
// (and so what the driver does to bring it back) changes between allocations, and a sample taken
// between the library's on the same memory sees its state. A prefetch leaves the contents as they
// were; a copy leaves its destination holding its source's bytes, as the library's copy does.
Napi::Value TimeRawManaged(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  const TimedRun run = ReadTimedRun(info, 0);
  const size_t n = run.bytes;
  const int warmup = run.warmup, iters = run.iterations;
  std::string what = info[3].ToString().Utf8Value();
  int device = ReadInt(env, info[4], "device", 0, 1 << 20);
  CheckDevice(env, device);
  static const char* const kWhat[] = {
      "prefetch-h2d", "prefetch-d2h",         "copy-h2d",
      "copy-d2h",     "prefetch-h2d-handoff", "prefetch-d2h-handoff"};
  if (std::find(std::begin(kWhat), std::end(kWhat), what) == std::end(kWhat))
    ThrowRange(env,
               "what must be 'prefetch-h2d', 'prefetch-d2h', 'copy-h2d', 'copy-d2h', "
               "'prefetch-h2d-handoff' or 'prefetch-d2h-handoff'");
  CheckRange(env, "bytes", n, size_t{1}, SIZE_MAX, "at least 1", Got::kLeftOut);
  bool prefetch = what.rfind("prefetch", 0) == 0;
  bool start_on_device = what.rfind("prefetch-d2h", 0) == 0;
  bool handoff = what.size() > 8 && what.compare(what.size() - 8, 8, "-handoff") == 0;
  // The caller's memory, where it gives some: a buffer of the kind asked for, on `device`, and
  // reached in its allocation's stream order (a stream-ordered allocator's block).
  auto given = [&](size_t i, Endpoint::Where kind, const char* name) -> void* {
    if (info.Length() <= i || Absent(info[i])) return nullptr;
    Endpoint e = ResolveEndpoint(env, info[i], name);
    if (e.where != kind || e.device != device)
      ThrowType(env, std::string(name) + " must be " +
                         (kind == Endpoint::kManaged ? "managed" : "device") +
                         " memory of device " + std::to_string(device));
    if (e.length < n)
      ThrowRange(env, std::string(name) + " has " + std::to_string(e.length) +
                          " bytes, fewer than bytes (" + std::to_string(n) + ")");
    BeforeUse(e.alloc, nullptr);
    return e.ptr;
  };
  void* const own_managed = given(5, Endpoint::kManaged, "managed");
  void* const own_dev = given(6, Endpoint::kDevice, "dev");
  // A copy between given memory and memory of its own would write bytes the caller never put
  // there into the caller's buffer.
  if (!prefetch && !own_managed != !own_dev)
    ThrowType(env, "a copy times on both managed and dev, or on neither");
  Error err;
  void *managed = own_managed, *dev = own_dev;
  cudaStream_t stream = nullptr;
  CM_TRY(err, cudaSetDevice(device), "cudaSetDevice");
  if (!err && !managed) {
    CM_TRY(err, cudaMallocManaged(&managed, n, cudaMemAttachGlobal), "cudaMallocManaged");
    if (!err) std::memset(managed, 0x5a, n);  // populated on the host
  }
  if (!err && !prefetch && !dev) CM_TRY(err, cudaMalloc(&dev, n), "cudaMalloc");
  if (!err)
    CM_TRY(err, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  // The whole buffer prefetched to the device (else the host), and the stream reached.
  auto prefetch_to = [&](bool to_device) {
    Error e;
    CM_TRY(e, cudaMemPrefetchAsync(managed, n, Where(to_device, device), 0, stream),
           "cudaMemPrefetchAsync");
    if (!e) CM_TRY(e, cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return e;
  };
  std::unique_ptr<HandOff> other;
  if (handoff && !err) {
    try {
      other = std::make_unique<HandOff>([&] {
        Error e;
        CM_TRY(e, cudaSetDevice(device), "cudaSetDevice");
        return e ? e : prefetch_to(!start_on_device);
      });
    } catch (const std::system_error& e) {  // no thread to be had: fail after the cleanup below
      err = Error{cudaErrorOperatingSystem, "std::thread", e.what()};
    }
  }
  // The hand-off thread's first CUDA call (its context made current) is not what a sample
  // measures: one untimed run first.
  if (other && !err) err = other->Run();
  std::vector<double> samples = TimeRuns(warmup, iters, &err, [&](double* seconds) {
    Error e = prefetch_to(start_on_device);
    if (e) return e;
    Clock::time_point t0 = Clock::now();
    if (other) {
      e = other->Run();
    } else if (prefetch) {
      e = prefetch_to(!start_on_device);
    } else {
      if (what == "copy-h2d")
        CM_TRY(e, cudaMemcpyAsync(dev, managed, n, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
      else
        CM_TRY(e, cudaMemcpyAsync(managed, dev, n, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
      if (!e) CM_TRY(e, cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    }
    *seconds = Seconds(t0, Clock::now());
    return e;
  });
  other.reset();
  if (stream) cudaStreamDestroy(stream);
  if (dev && dev != own_dev) cudaFree(dev);
  if (managed && managed != own_managed) cudaFree(managed);
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
