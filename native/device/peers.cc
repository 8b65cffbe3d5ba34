#include "device/peers.h"

#include <algorithm>
#include <vector>

#include "device/discovery.h"

namespace cm {

namespace {
constexpr size_t kBounceChunk = 32u << 20;
}

bool EnablePeer(Instance& inst, int from, int to) {
  std::lock_guard<std::mutex> lock(inst.peer_mutex);
  auto key = std::make_pair(from, to);
  auto it = inst.peer_enabled.find(key);
  if (it != inst.peer_enabled.end()) return it->second;
  int can = 0;
  bool on = false;
  if (cudaDeviceCanAccessPeer(&can, from, to) == cudaSuccess && can) {
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(from);
    cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
    // Peer access belongs to the process's context, so another instance may have enabled it.
    on = err == cudaSuccess || err == cudaErrorPeerAccessAlreadyEnabled;
    cudaSetDevice(current);
  }
  (void)cudaGetLastError();
  inst.peer_enabled[key] = on;
  return on;
}

namespace {
// A non-blocking stream of the instance's on `device`, made once. A peer copy on a legacy
// default stream would order with the other device's legacy stream too, which serialises the
// two directions of a bidirectional transfer.
cudaStream_t PeerStream(Instance& inst, int device, Error* err) {
  std::lock_guard<std::mutex> lock(inst.peer_mutex);
  cudaStream_t& s = inst.peer_streams[device];
  if (!s) CM_TRY(*err, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}
}  // namespace

Error QueuePeerCopy(Instance& inst, char* dst, int dst_device, const char* src, int src_device,
                    size_t n, cudaStream_t after, cudaEvent_t* done) {
  // The source device drives the copy, on a stream of its own; a caller's stream (on either
  // device) is joined both ways with events, so the copy comes after the stream's earlier work and
  // what the caller queues there next comes after the copy.
  Error err;
  CM_TRY(err, UseDevice(src_device), "cudaSetDevice");
  cudaStream_t s = err ? nullptr : PeerStream(inst, src_device, &err);
  cudaEvent_t before = nullptr;
  if (!err && after) {
    // An event is recorded on a stream of its own device: make it on the caller's stream's.
    int after_device = src_device;
    CM_TRY(err, cudaStreamGetDevice(after, &after_device), "cudaStreamGetDevice");
    if (!err) CM_TRY(err, UseDevice(after_device), "cudaSetDevice");
    if (!err)
      CM_TRY(err, cudaEventCreateWithFlags(&before, cudaEventDisableTiming), "cudaEventCreate");
    if (!err) CM_TRY(err, cudaEventRecord(before, after), "cudaEventRecord");
    if (!err) CM_TRY(err, UseDevice(src_device), "cudaSetDevice");
    if (!err) CM_TRY(err, cudaStreamWaitEvent(s, before, 0), "cudaStreamWaitEvent");
  }
  if (!err)
    CM_TRY(err, cudaMemcpyPeerAsync(dst, dst_device, src, src_device, n, s), "cudaMemcpyPeerAsync");
  if (!err && (done || after)) {
    cudaEvent_t ev = nullptr;
    CM_TRY(err, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    if (!err) CM_TRY(err, cudaEventRecord(ev, s), "cudaEventRecord");
    if (!err && after) CM_TRY(err, cudaStreamWaitEvent(after, ev, 0), "cudaStreamWaitEvent");
    if (!err && done)
      *done = ev;
    else if (ev)
      cudaEventDestroy(ev);  // released by CUDA once recorded work completes
  }
  if (before) cudaEventDestroy(before);
  (void)cudaGetLastError();
  return err;
}

Error PeerCopy(Instance& inst, char* dst, int dst_device, const char* src, int src_device, size_t n,
               cudaStream_t after) {
  // copy() returns only once the bytes are there (cudaMemcpyPeer may return before a
  // device-to-device copy is done).
  cudaEvent_t done = nullptr;
  Error err = QueuePeerCopy(inst, dst, dst_device, src, src_device, n, after, &done);
  if (!err) CM_TRY(err, cudaEventSynchronize(done), "cudaEventSynchronize");
  if (done) cudaEventDestroy(done);
  return err;
}

Error HostStagedPeerCopy(Instance& inst, char* dst, int dst_device, const char* src, int src_device,
                         size_t n) {
  std::lock_guard<std::mutex> lock(inst.peer_staging_mutex);
  Error err;
  for (int b = 0; b < 2 && !err; ++b)
    if (!inst.peer_bounce[b])
      CM_TRY(err, cudaHostAlloc(&inst.peer_bounce[b], kBounceChunk, cudaHostAllocPortable),
             "cudaHostAlloc");
  if (err) return err;
  cudaStream_t s_src = nullptr, s_dst = nullptr;
  cudaEvent_t copied_out[2] = {nullptr, nullptr}, copied_in[2] = {nullptr, nullptr};
  CM_TRY(err, cudaSetDevice(src_device), "cudaSetDevice");
  if (!err)
    CM_TRY(err, cudaStreamCreateWithFlags(&s_src, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int b = 0; b < 2 && !err; ++b)
    CM_TRY(err, cudaEventCreateWithFlags(&copied_out[b], cudaEventDisableTiming),
           "cudaEventCreate");
  if (!err) CM_TRY(err, cudaSetDevice(dst_device), "cudaSetDevice");
  if (!err)
    CM_TRY(err, cudaStreamCreateWithFlags(&s_dst, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int b = 0; b < 2 && !err; ++b)
    CM_TRY(err, cudaEventCreateWithFlags(&copied_in[b], cudaEventDisableTiming), "cudaEventCreate");
  for (size_t off = 0, i = 0; off < n && !err; off += kBounceChunk, ++i) {
    int b = static_cast<int>(i % 2);
    size_t c = std::min(kBounceChunk, n - off);
    char* bounce = static_cast<char*>(inst.peer_bounce[b]);
    // A bounce buffer is refilled only once its last chunk has reached the destination.
    cudaSetDevice(src_device);
    if (i >= 2) CM_TRY(err, cudaStreamWaitEvent(s_src, copied_in[b], 0), "cudaStreamWaitEvent");
    if (!err)
      CM_TRY(err, cudaMemcpyAsync(bounce, src + off, c, cudaMemcpyDeviceToHost, s_src),
             "cudaMemcpyAsync");
    if (!err) CM_TRY(err, cudaEventRecord(copied_out[b], s_src), "cudaEventRecord");
    cudaSetDevice(dst_device);
    if (!err) CM_TRY(err, cudaStreamWaitEvent(s_dst, copied_out[b], 0), "cudaStreamWaitEvent");
    if (!err)
      CM_TRY(err, cudaMemcpyAsync(dst + off, bounce, c, cudaMemcpyHostToDevice, s_dst),
             "cudaMemcpyAsync");
    if (!err) CM_TRY(err, cudaEventRecord(copied_in[b], s_dst), "cudaEventRecord");
  }
  if (s_src) cudaStreamSynchronize(s_src);
  if (s_dst && !err)
    CM_TRY(err, cudaStreamSynchronize(s_dst), "cudaStreamSynchronize");
  else if (s_dst)
    cudaStreamSynchronize(s_dst);
  for (int b = 0; b < 2; ++b) {
    if (copied_out[b]) cudaEventDestroy(copied_out[b]);
    if (copied_in[b]) cudaEventDestroy(copied_in[b]);
  }
  if (s_src) cudaStreamDestroy(s_src);
  if (s_dst) cudaStreamDestroy(s_dst);
  (void)cudaGetLastError();
  return err;
}

void ReleasePeerStaging(Instance& inst) noexcept {
  for (auto& [device, stream] : inst.peer_streams)
    if (stream) cudaStreamDestroy(stream);
  inst.peer_streams.clear();
  for (void*& b : inst.peer_bounce)
    if (b) {
      cudaFreeHost(b);
      b = nullptr;
    }
  (void)cudaGetLastError();
}

namespace {

// The NVLinks of every device, read once per call of peerAccess().
std::vector<core::GpuLinks> AllNvLinks(int count, bool* known) {
  std::vector<core::GpuLinks> all(count);
  *known = count > 0;
  for (int d = 0; d < count; ++d) {
    char bus[32] = "";
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, d) != cudaSuccess) (void)cudaGetLastError();
    *known = ReadNvLinks(bus, &all[d]) && *known;
  }
  return all;
}

// The generation and per-link rate of a pair's NVLinks (core::NvLinkRateFor): the lower of the
// two GPUs' answers, should their architectures differ.
Napi::Value PairRate(Napi::Env env, const core::PairLinks& pair, int from, int to) {
  core::NvLinkRate rate;
  bool first = true;
  for (int d : {from, to}) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess)
      (void)cudaGetLastError();
    core::NvLinkRate r = core::NvLinkRateFor(pair.version, major, minor);
    if (first || r.gbps_per_link < rate.gbps_per_link) rate = r;
    first = false;
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("generation",
        rate.generation.empty() ? env.Null() : Napi::String::New(env, rate.generation));
  o.Set("gbpsPerLink", rate.gbps_per_link);
  o.Set("source", rate.source);
  return o;
}

// peerAccess() -> [{ from, to, canAccess, enabled, performanceRank, nativeAtomics, linkType,
// nvlinks, viaNvSwitch, nvlinkRate }] for every ordered pair of devices. The link comes from NVML
// ('unknown' and null without it).
Napi::Value PeerAccess(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  Instance& inst = GetInstance(env);
  int count = GetStatus(env).device_count;
  bool links_known = false;
  std::vector<core::GpuLinks> links = AllNvLinks(count, &links_known);
  Napi::Array out = Napi::Array::New(env);
  uint32_t k = 0;
  for (int from = 0; from < count; ++from)
    for (int to = 0; to < count; ++to) {
      if (from == to) continue;
      int can = 0, rank = 0, atomics = 0;
      cudaDeviceCanAccessPeer(&can, from, to);
      cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, from, to);
      cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, from, to);
      (void)cudaGetLastError();
      bool enabled;
      {
        std::lock_guard<std::mutex> lock(inst.peer_mutex);
        auto it = inst.peer_enabled.find({from, to});
        enabled = it != inst.peer_enabled.end() && it->second;
      }
      Napi::Object o = Napi::Object::New(env);
      o.Set("from", from);
      o.Set("to", to);
      o.Set("canAccess", can != 0);
      o.Set("enabled", enabled);
      o.Set("performanceRank", rank);
      o.Set("nativeAtomics", atomics != 0);
      core::PairLinks pair = core::NvLinksBetween(links, from, to);
      o.Set("linkType", !links_known ? "unknown" : pair.links ? "nvlink" : "pcie");
      o.Set("nvlinks", links_known ? Napi::Value(Napi::Number::New(env, pair.links)) : env.Null());
      o.Set("viaNvSwitch", pair.via_switch);
      o.Set("nvlinkRate", pair.links ? PairRate(env, pair, from, to) : env.Null());
      out.Set(k++, o);
    }
  return out;
}

// enablePeerAccess(from, to) -> whether access from `from` to `to` is on
Napi::Value EnablePeerJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int from = ReadInt(env, info[0], "from", 0, 1 << 20);
  int to = ReadInt(env, info[1], "to", 0, 1 << 20);
  CheckDevice(env, from);
  CheckDevice(env, to);
  return Napi::Boolean::New(env, from != to && EnablePeer(GetInstance(env), from, to));
}

}  // namespace

void InitPeer(Napi::Env env, Napi::Object exports) {
  exports.Set("peerAccess", Napi::Function::New(env, PeerAccess, "peerAccess"));
  exports.Set("enablePeerAccess", Napi::Function::New(env, EnablePeerJs, "enablePeerAccess"));
}

}  // namespace cm
