#include "transfer/peer_copy.h"

#include <map>
#include <mutex>

#include "binding/errors.h"
#include "core/transfer/peer_schedule.h"

namespace cm {

namespace {

constexpr size_t kBounceChunk = 32u << 20;

// The environment's peer streams and the pinned bounce buffers of host-staged copies, freed at
// its teardown.
struct PeerCopyState : InstanceState {
  std::mutex streams_mutex;
  std::map<int, cudaStream_t> streams;  // per device
  std::mutex bounce_mutex;              // one host-staged copy at a time
  void* bounce[core::kPeerBounceBuffers] = {};
  ~PeerCopyState() override {
    for (auto& [device, stream] : streams)
      if (stream) cudaStreamDestroy(stream);
    for (void* b : bounce)
      if (b) cudaFreeHost(b);
    (void)cudaGetLastError();
  }
};

// A non-blocking stream of the environment's on `device`, made once. A peer copy on a legacy
// default stream would order with the other device's legacy stream too, which serialises the
// two directions of a bidirectional transfer.
cudaStream_t PeerStream(Instance& inst, int device, Error* err) {
  PeerCopyState& st = inst.State<PeerCopyState>();
  std::lock_guard<std::mutex> lock(st.streams_mutex);
  cudaStream_t& s = st.streams[device];
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
  PeerCopyState& st = inst.State<PeerCopyState>();
  std::lock_guard<std::mutex> lock(st.bounce_mutex);
  Error err;
  for (int b = 0; b < core::kPeerBounceBuffers && !err; ++b)
    if (!st.bounce[b])
      CM_TRY(err, cudaHostAlloc(&st.bounce[b], kBounceChunk, cudaHostAllocPortable),
             "cudaHostAlloc");
  if (err) return err;
  cudaStream_t s_src = nullptr, s_dst = nullptr;
  cudaEvent_t copied_out[core::kPeerBounceBuffers] = {}, copied_in[core::kPeerBounceBuffers] = {};
  CM_TRY(err, cudaSetDevice(src_device), "cudaSetDevice");
  if (!err)
    CM_TRY(err, cudaStreamCreateWithFlags(&s_src, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int b = 0; b < core::kPeerBounceBuffers && !err; ++b)
    CM_TRY(err, cudaEventCreateWithFlags(&copied_out[b], cudaEventDisableTiming),
           "cudaEventCreate");
  if (!err) CM_TRY(err, cudaSetDevice(dst_device), "cudaSetDevice");
  if (!err)
    CM_TRY(err, cudaStreamCreateWithFlags(&s_dst, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int b = 0; b < core::kPeerBounceBuffers && !err; ++b)
    CM_TRY(err, cudaEventCreateWithFlags(&copied_in[b], cudaEventDisableTiming), "cudaEventCreate");
  for (const core::PeerStagedChunk& chunk : core::PlanHostStagedPeerCopy(n, kBounceChunk)) {
    if (err) break;
    const int b = chunk.bounce;
    const size_t off = chunk.offset, c = chunk.length;
    char* bounce = static_cast<char*>(st.bounce[b]);
    cudaSetDevice(src_device);
    if (chunk.wait_drained)
      CM_TRY(err, cudaStreamWaitEvent(s_src, copied_in[b], 0), "cudaStreamWaitEvent");
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
  for (int b = 0; b < core::kPeerBounceBuffers; ++b) {
    if (copied_out[b]) cudaEventDestroy(copied_out[b]);
    if (copied_in[b]) cudaEventDestroy(copied_in[b]);
  }
  if (s_src) cudaStreamDestroy(s_src);
  if (s_dst) cudaStreamDestroy(s_dst);
  (void)cudaGetLastError();
  return err;
}

}  // namespace cm
