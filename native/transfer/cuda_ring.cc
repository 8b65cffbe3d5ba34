#include "transfer/cuda_ring.h"

namespace cm {

namespace {

core::TransportStatus Failed(cudaError_t r, const char* call) {
  (void)cudaGetLastError();
  return {static_cast<int>(r), call};
}

}  // namespace

void CreateSlotEvents(int slots, std::vector<cudaEvent_t>* done, Error* err) {
  for (int i = 0; i < slots && !*err; ++i) {
    cudaEvent_t ev = nullptr;
    CM_TRY(*err, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    if (!*err) done->push_back(ev);
  }
}

core::TransportStatus CudaEventRing::Issue(const core::StagingChunk& c) {
  cudaError_t r = UseDevice(device_);
  if (r != cudaSuccess) return Failed(r, "cudaSetDevice");
  char* dev = device_ptr_ + c.offset;
  char* ring = ring_ + c.ring_offset;
  r = to_device_ ? cudaMemcpyAsync(dev, ring, c.length, cudaMemcpyHostToDevice, stream_)
                 : cudaMemcpyAsync(ring, dev, c.length, cudaMemcpyDeviceToHost, stream_);
  if (r != cudaSuccess) return Failed(r, copy_call_);
  r = cudaEventRecord(done_[c.slot], stream_);
  return r == cudaSuccess ? core::TransportStatus{} : Failed(r, "cudaEventRecord");
}

core::TransportStatus CudaEventRing::Wait(int s) {
  cudaError_t r = cudaEventSynchronize(done_[s]);
  return r == cudaSuccess ? core::TransportStatus{} : Failed(r, "cudaEventSynchronize");
}

core::TransportStatus CudaEventRing::Finish() {
  cudaError_t r = cudaStreamSynchronize(stream_);
  return r == cudaSuccess ? core::TransportStatus{} : Failed(r, "cudaStreamSynchronize");
}

}  // namespace cm
