#include "transfer/copy.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "binding/promise_worker.h"
#include "device/discovery.h"
#include "device/peers.h"
#include "device/stream.h"
#include "memory/managed.h"
#include "transfer/peer_copy.h"
#include "transfer/pinned_memcpy.h"
#include "transfer/staging.h"

namespace cm {

namespace {

Endpoint EndpointOf(Napi::Env env, Allocation* a, const char* what) {
  Endpoint e;
  if (a->simulated) {
    throw LibraryError(
        env, "ERR_SIMULATED_MEMORY",
        std::string(what) +
            " lives on a simulated device, which has no memory behind its addresses");
  }
  e.alloc = a;
  e.ptr = static_cast<char*>(a->ptr);
  e.length = a->bytes;
  e.device = a->device;
  e.where = a->ops->managed     ? Endpoint::kManaged
            : a->ops->on_device ? Endpoint::kDevice
                                : Endpoint::kPinned;
  return e;
}

}  // namespace

Endpoint ResolveEndpoint(Napi::Env env, Napi::Value v, const char* what) {
  if (v.Type() == napi_number) return EndpointOf(env, UnwrapAllocation(env, v, what), what);
  Endpoint e;
  if (HostView(env, v, &e.ptr, &e.length)) return e;
  ThrowType(env, std::string(what) +
                     " must be a DeviceBuffer, PinnedBuffer, ArrayBuffer, SharedArrayBuffer or "
                     "ArrayBuffer view");
}

Strategy ReadStrategy(Napi::Env env, Napi::Value v) {
  if (Absent(v)) return Strategy::kAuto;
  std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (s == "auto") return Strategy::kAuto;
  if (s == "driver") return Strategy::kDriver;
  if (s == "staged") return Strategy::kStaged;
  if (s == "register") return Strategy::kRegister;
  if (s == "peer") return Strategy::kPeer;
  if (s == "host") return Strategy::kHost;
  ThrowRange(env, "strategy must be 'auto', 'driver', 'staged', 'register', 'peer' or 'host'");
}

namespace {

cudaMemcpyKind KindOf(const Endpoint& dst, const Endpoint& src) {
  bool d = dst.where == Endpoint::kDevice, s = src.where == Endpoint::kDevice;
  if (d && s) return cudaMemcpyDeviceToDevice;
  if (d) return cudaMemcpyHostToDevice;
  if (s) return cudaMemcpyDeviceToHost;
  return cudaMemcpyHostToHost;
}

// cudaMemcpy returns before the bytes have arrived in two cases (the runtime's API
// synchronization behaviour): from pageable memory to the device, once they are in the driver's
// staging buffer, and from device memory to device memory (cudaMemcpyDefault may be either).
// Only the legacy default stream is ordered after that; the library's own streams (staging
// engines, peer copies) and a caller's non-blocking Stream are not, so a copy issued on one of
// them right after could read the old bytes. In those cases the copy waits for the legacy stream
// before it returns: copy() returns when the data has arrived.
bool ReturnsBeforeArrival(cudaMemcpyKind kind, bool host_pinned) {
  return kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDefault ||
         (kind == cudaMemcpyHostToDevice && !host_pinned);
}

// `host_pinned`: the host side is page-locked (pinned or registered), where cudaMemcpy is
// synchronous both ways.
Error DriverCopy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream,
                 bool host_pinned = false) {
  Error err;
  if (stream) {
    CM_TRY(err, cudaMemcpyAsync(dst, src, n, kind, stream), "cudaMemcpyAsync");
    if (!err) CM_TRY(err, cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  } else {
    CM_TRY(err, host_pinned ? PinnedMemcpy(dst, src, n, kind) : cudaMemcpy(dst, src, n, kind),
           "cudaMemcpy");
    if (!err && ReturnsBeforeArrival(kind, host_pinned))
      CM_TRY(err, cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
  }
  return err;
}

// Page-locks the pages under [p, p+n) for the copy and unlocks them after.
Error RegisteredCopy(const Endpoint& dst, const Endpoint& src, size_t n, cudaMemcpyKind kind,
                     cudaStream_t stream) {
  char* host = kind == cudaMemcpyHostToDevice ? src.ptr : dst.ptr;
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* begin = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(host) / page * page);
  char* end =
      reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(host + n) + page - 1) / page * page);
  Error err;
  cudaError_t r = cudaHostRegister(begin, end - begin, cudaHostRegisterDefault);
  bool registered = r == cudaSuccess;
  if (!registered) (void)cudaGetLastError();  // e.g. already registered: copy as it is
  err = DriverCopy(dst.ptr, src.ptr, n, kind, stream, registered);
  if (registered) {
    cudaHostUnregister(begin);
    (void)cudaGetLastError();
  }
  return err;
}

}  // namespace

bool BetweenDevices(const Endpoint& dst, const Endpoint& src, Strategy strategy) {
  return dst.where == Endpoint::kDevice && src.where == Endpoint::kDevice &&
         dst.device != src.device && strategy != Strategy::kDriver;
}

Error PeerRoute(Instance& inst, int dst_device, int src_device, Strategy strategy, bool* peer) {
  // Over the peer link where the pair allows it (both directions enabled, so either device may
  // drive the copy), else through pinned host memory.
  *peer = strategy != Strategy::kHost && EnablePeer(inst, dst_device, src_device) &&
          EnablePeer(inst, src_device, dst_device);
  if (strategy == Strategy::kPeer && !*peer)
    return Error{cudaErrorPeerAccessUnsupported, "cudaDeviceCanAccessPeer",
                 "device " + std::to_string(dst_device) + " and device " +
                     std::to_string(src_device) +
                     " cannot access each other's memory; use strategy 'host' or 'auto'"};
  return Error{};
}

Error CopyRange(Instance& inst, const Endpoint& dst, const Endpoint& src, size_t n,
                Strategy strategy, cudaStream_t stream) {
  Error err;
  if (n == 0) return err;
  if (dst.where == Endpoint::kManaged || src.where == Endpoint::kManaged) {
    // The driver knows where each managed page is, and migrates or copies as it needs.
    CM_TRY(err, UseDevice(dst.where == Endpoint::kManaged ? dst.device : src.device),
           "cudaSetDevice");
    if (err) return err;
    return DriverCopy(dst.ptr, src.ptr, n, cudaMemcpyDefault, stream);
  }
  cudaMemcpyKind kind = KindOf(dst, src);
  if (kind == cudaMemcpyHostToHost) {
    if (stream) CM_TRY(err, cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::memmove(dst.ptr, src.ptr, n);
    return err;
  }
  int device = dst.where == Endpoint::kDevice ? dst.device : src.device;
  CM_TRY(err, UseDevice(device), "cudaSetDevice");
  if (err) return err;
  if (kind == cudaMemcpyDeviceToDevice) {
    if (!BetweenDevices(dst, src, strategy))
      return DriverCopy(dst.ptr, src.ptr, n, dst.device == src.device ? kind : cudaMemcpyDefault,
                        stream);
    bool peer = false;
    err = PeerRoute(inst, dst.device, src.device, strategy, &peer);
    if (err) return err;
    if (peer) return PeerCopy(inst, dst.ptr, dst.device, src.ptr, src.device, n, stream);
    if (stream) CM_TRY(err, cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (err) return err;
    return HostStagedPeerCopy(inst, dst.ptr, dst.device, src.ptr, src.device, n);
  }
  const Endpoint& host = kind == cudaMemcpyHostToDevice ? src : dst;
  if (host.where == Endpoint::kPinned) return DriverCopy(dst.ptr, src.ptr, n, kind, stream, true);
  const bool chosen = strategy == Strategy::kAuto;
  if (chosen)
    strategy = n >= StagedThreshold(inst, kind == cudaMemcpyDeviceToHost) ? Strategy::kStaged
                                                                          : Strategy::kDriver;
  if (strategy == Strategy::kDriver) return DriverCopy(dst.ptr, src.ptr, n, kind, stream);
  if (strategy == Strategy::kRegister) return RegisteredCopy(dst, src, n, kind, stream);
  bool to_host = kind == cudaMemcpyDeviceToHost;
  std::shared_ptr<StagingEngine> engine = GetStagingEngine(inst, device, to_host, &err);
  if (!engine) {
    // The engine's stream, events and pinned ring are made on its first copy, and on a full
    // device they may not be had (cudaStreamCreateWithFlags fails for want of device memory).
    // Under 'auto' staging is only an optimisation: the copy goes the driver's way instead, and
    // a later copy tries the engine again. Asked for by name, the failure is the answer.
    if (chosen) return DriverCopy(dst.ptr, src.ptr, n, kind, stream);
    return err;
  }
  // Staged: ordered after earlier work on the caller's stream.
  if (stream) CM_TRY(err, cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (err) return err;
  return to_host ? engine->Copy(src.ptr, dst.ptr, n) : engine->Copy(dst.ptr, src.ptr, n);
}

namespace {

struct CopyArgs {
  Endpoint dst, src;
  size_t n = 0;
  Strategy strategy = Strategy::kAuto;
  cudaStream_t stream = nullptr;
  StreamRec* stream_rec = nullptr;  // the record behind `stream`, if one was given
};

// (dst, dstOffset, src, srcOffset, byteLength, strategy, stream?) — checked again here although
// the JS layer validates, so that no call can reach CUDA with a bad range.
// The checks on what was read, shared by copy() and copyHandles(): ranges, overlap, CUDA, and a
// stream-ordered block's allocation reached.
void CheckCopyArgs(Napi::Env env, CopyArgs& c, uint64_t dst_off, uint64_t src_off, uint64_t n) {
  if (dst_off > c.dst.length || n > c.dst.length - dst_off)
    ThrowRange(env, "dstOffset + byteLength (" + std::to_string(dst_off) + " + " +
                        std::to_string(n) + ") runs past the end of dst (" +
                        std::to_string(c.dst.length) + " bytes)");
  if (src_off > c.src.length || n > c.src.length - src_off)
    ThrowRange(env, "srcOffset + byteLength (" + std::to_string(src_off) + " + " +
                        std::to_string(n) + ") runs past the end of src (" +
                        std::to_string(c.src.length) + " bytes)");
  c.dst.ptr += dst_off;
  c.src.ptr += src_off;
  c.dst.length -= dst_off;
  c.src.length -= src_off;
  c.n = n;
  auto driven = [](const Endpoint& e) {
    return e.where == Endpoint::kDevice || e.where == Endpoint::kManaged;
  };
  if (driven(c.dst) && driven(c.src) && n > 0 && c.dst.ptr < c.src.ptr + n &&
      c.src.ptr < c.dst.ptr + n)
    ThrowRange(env, "the device-to-device ranges overlap (dst and src share " +
                        std::to_string(std::min(c.dst.ptr, c.src.ptr) + n -
                                       std::max(c.dst.ptr, c.src.ptr)) +
                        " bytes); cudaMemcpy does not support overlapping copies");
  if ((c.dst.where != Endpoint::kPageable || c.src.where != Endpoint::kPageable) && n > 0)
    RequireCuda(env);
  // A block of the stream-ordered pool allocated on another stream is usable here once that
  // stream has reached its allocation.
  BeforeUse(c.dst.alloc, c.stream);
  BeforeUse(c.src.alloc, c.stream);
}

CopyArgs ReadCopyArgs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CopyArgs c;
  c.dst = ResolveEndpoint(env, info[0], "dst");
  uint64_t dst_off = ReadSize(env, info[1], "dstOffset");
  c.src = ResolveEndpoint(env, info[2], "src");
  uint64_t src_off = ReadSize(env, info[3], "srcOffset");
  uint64_t n = ReadSize(env, info[4], "byteLength");
  c.strategy = ReadStrategy(env, info[5]);
  if (info.Length() > 6 && !Absent(info[6])) {
    c.stream_rec = UnwrapStreamRec(env, info[6]);
    c.stream = c.stream_rec->stream;
  }
  CheckCopyArgs(env, c, dst_off, src_off, n);
  return c;
}

void RunCopy(Napi::Env env, const CopyArgs& c) {
  Error err = CopyRange(GetInstance(env), c.dst, c.src, c.n, c.strategy, c.stream);
  if (err) ThrowCuda(env, err.code, err.call, err.detail);
}

Napi::Value Copy(const Napi::CallbackInfo& info) {
  RunCopy(info.Env(), ReadCopyArgs(info));
  return info.Env().Undefined();
}

constexpr size_t kCopyArgs = 3;

// What copyHandles() reads (dst handle, src handle, byte count), written by the JavaScript layer:
// made by copyArgs() on first use, per environment.
struct CopyArgsState : InstanceState {
  Napi::Reference<Napi::ArrayBuffer> args;
};

// copyArgs: returns the ArrayBuffer of kCopyArgs doubles that copyHandles() reads: made once per
// instance of the addon, and kept by it, so its memory stays where it is.
Napi::Value CopyArgsBuffer(const Napi::CallbackInfo& info) {
  CopyArgsState& st = GetInstance(info.Env()).State<CopyArgsState>();
  if (st.args.IsEmpty()) {
    Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(info.Env(), kCopyArgs * sizeof(double));
    st.args = Napi::Persistent(ab);
  }
  return st.args.Value();
}

// copyHandles: copy() between two buffer handles, whole ranges from offset 0, with no strategy or
// stream: the handles of dst and src and the byte count are read from copyArgs(), written there by
// the JavaScript layer just before. A Node-API call that reads five arguments cost more than the
// rest of the library's share of a 4 KiB copy on the H100 (docs/transfers.md). The same checks as
// copy() run on what is read.
Napi::Value CopyHandles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Instance& inst = GetInstance(env);
  CopyArgsState& st = inst.State<CopyArgsState>();
  if (st.args.IsEmpty()) ThrowType(env, "copyHandles() before copyArgs()");
  Napi::ArrayBuffer args = st.args.Value();
  // Transferred away (postMessage, structuredClone): nothing left to read.
  if (args.ByteLength() < kCopyArgs * sizeof(double))
    ThrowType(env, "the buffer of copyArgs() was detached; copyHandles() has nothing to read");
  const double* a = static_cast<const double*>(args.Data());
  const double n = a[2];
  if (!IsSafeSize(n)) ThrowRange(env, "byteLength must be an integer from 0 to 2^53-1");
  CopyArgs c;
  c.dst = EndpointOf(env, UnwrapHandle(env, a[0], "dst"), "dst");
  c.src = EndpointOf(env, UnwrapHandle(env, a[1], "src"), "src");
  CheckCopyArgs(env, c, 0, 0, static_cast<uint64_t>(n));
  RunCopy(env, c);
  return env.Undefined();
}

// Runs a copy on the libuv pool; holds the JS buffers (and so their memory) until it settles.
class CopyWorker : public PromiseWorker {
 public:
  // `queued`: the copy was already queued on the JS thread (a peer copy), and this waits for it;
  // `failed`: queuing it failed, and the promise rejects with that.
  CopyWorker(Napi::Env env, CopyArgs args, const std::vector<Napi::Value>& keep,
             cudaEvent_t queued = nullptr, Error failed = Error{})
      : PromiseWorker(env, "cuda-memory:copyAsync"),
        args_(args),
        inst_(&GetInstance(env)),
        err_(failed),
        queued_(queued) {
    // Views and streams stay reachable until the copy settles; handles are kept by `refs`.
    for (const Napi::Value& v : keep)
      if (v.IsObject()) keep_.push_back(Napi::Persistent(v.As<Napi::Object>()));
    // A free() while the copy runs is deferred until it settles (Allocation::pending).
    for (Allocation* a : {args_.dst.alloc, args_.src.alloc})
      if (a) {
        a->pending++;
        a->refs++;
      }
    // A dispose() of the stream meanwhile destroys it only once this copy has settled.
    if (args_.stream_rec) HoldStream(args_.stream_rec);
  }

  ~CopyWorker() override {
    if (queued_) cudaEventDestroy(queued_);  // never waited for: the environment went away
  }

 protected:
  void Work() override {
    if (err_) return;
    if (queued_) {
      CM_TRY(err_, cudaEventSynchronize(queued_), "cudaEventSynchronize");
      cudaEventDestroy(queued_);
      queued_ = nullptr;
      return;
    }
    err_ = CopyRange(*inst_, args_.dst, args_.src, args_.n, args_.strategy, args_.stream);
  }

  // Also runs when a worker thread exits with this copy in flight: the environment's cleanup
  // hook, which comes after, then frees what is no longer pending.
  void Release(Napi::Env env) noexcept override {
    for (Allocation* a : {args_.dst.alloc, args_.src.alloc}) {
      if (!a) continue;
      if (--a->pending == 0 && a->free_requested) ReleaseAllocation(env, a);
      DropReference(a);
    }
    if (args_.stream_rec) {
      DropStream(args_.stream_rec);
      args_.stream_rec = nullptr;
    }
  }

  Napi::Value Settlement(Napi::Env env, bool* reject) override {
    if (!err_) return env.Undefined();
    *reject = true;
    return MakeCudaError(env, err_.code, err_.call, err_.detail);
  }

 private:
  CopyArgs args_;
  Instance* inst_;
  Error err_;
  cudaEvent_t queued_;
  std::vector<Napi::ObjectReference> keep_;
};

Napi::Value CopyAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CopyArgs c = ReadCopyArgs(info);
  std::vector<Napi::Value> keep = {info[0], info[2]};
  if (info.Length() > 6) keep.push_back(info[6]);
  // A peer copy is queued here, on the JS thread, so that copies asked for together start
  // together (the two directions of a bidirectional transfer would otherwise each wait for a
  // pool thread); a pool thread only waits for it to finish.
  cudaEvent_t queued = nullptr;
  Error failed;
  if (c.n && BetweenDevices(c.dst, c.src, c.strategy)) {
    Instance& inst = GetInstance(env);
    bool peer = false;
    failed = PeerRoute(inst, c.dst.device, c.src.device, c.strategy, &peer);
    if (!failed && peer)
      failed = QueuePeerCopy(inst, c.dst.ptr, c.dst.device, c.src.ptr, c.src.device, c.n, c.stream,
                             &queued);
  }
  auto* w = new CopyWorker(env, c, keep, queued, failed);
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value Memset(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Endpoint e = ResolveEndpoint(env, info[0], "buffer");
  uint64_t off = ReadSize(env, info[1], "offset");
  uint64_t n = ReadSize(env, info[2], "byteLength");
  int value = ReadInt(env, info[3], "value", 0, 255);
  if (off > e.length || n > e.length - off)
    ThrowRange(env, "offset + byteLength (" + std::to_string(off) + " + " + std::to_string(n) +
                        ") runs past the end of the buffer (" + std::to_string(e.length) +
                        " bytes)");
  if (e.where == Endpoint::kManaged && n) {
    // cudaMemset reaches managed memory wherever it is, except memory attached to the host on a
    // device that cannot access it while the host does; that is set by the host once the
    // device is idle.
    if (!(e.alloc->flags & cudaMemAttachHost) || ConcurrentManagedAccess(e.device)) {
      cudaError_t err = cudaSetDevice(e.device);
      if (err == cudaSuccess) err = cudaMemset(e.ptr + off, value, n);
      if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
      if (err != cudaSuccess) ThrowCuda(env, err, "cudaMemset");
      return env.Undefined();
    }
    cudaError_t err = cudaSetDevice(e.device);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) ThrowCuda(env, err, "cudaDeviceSynchronize");
  }
  if (e.where != Endpoint::kDevice) {
    std::memset(e.ptr + off, value, n);
    return env.Undefined();
  }
  BeforeUse(e.alloc, nullptr);
  cudaError_t err = cudaSetDevice(e.device);
  if (err == cudaSuccess && n) err = cudaMemset(e.ptr + off, value, n);
  // cudaMemset may return before it finishes; make memset() synchronous like copy().
  if (err == cudaSuccess && n) err = cudaStreamSynchronize(nullptr);
  if (err != cudaSuccess) ThrowCuda(env, err, "cudaMemset");
  return env.Undefined();
}

// pinnedMemcpyEntries() -> { cuMemcpyHtoD, cuMemcpyDtoH, cuCtxGetCurrent }: whether the driver
// gave each entry point a synchronous pinned copy() goes through (PinnedMemcpy).
Napi::Value PinnedMemcpyEntriesValue(const Napi::CallbackInfo& info) {
  const PinnedMemcpyEntries found = PinnedMemcpyFound();
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("cuMemcpyHtoD", found.to_device);
  o.Set("cuMemcpyDtoH", found.to_host);
  o.Set("cuCtxGetCurrent", found.current);
  return o;
}

}  // namespace

void InitCopy(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"copy", Copy},
               {"copyArgs", CopyArgsBuffer},
               {"copyHandles", CopyHandles},
               {"copyAsync", CopyAsync},
               {"memset", Memset},
               {"pinnedMemcpyEntries", PinnedMemcpyEntriesValue},
           });
}

}  // namespace cm
