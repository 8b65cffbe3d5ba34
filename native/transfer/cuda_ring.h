// The DMA half of a staged pipeline on CUDA, one piece of code for the staged copies (staging.h)
// and the file transfers (files/engine.h): chunk c moves on one stream between its place in a
// pinned ring and device memory, and the event of its slot marks when it is done. Issue runs on
// the thread that asked for the transfer or on a team thread (core::IssueMode), so it sets that
// thread's device first.
#pragma once

#include <vector>

#include "binding/errors.h"
#include "core/transfer/staging_pipeline.h"

namespace cm {

// Creates one event per ring slot (timing off) on the current device, into *done; on a failure
// *err says which, and *done holds those made before it.
void CreateSlotEvents(int slots, std::vector<cudaEvent_t>* done, Error* err);

class CudaEventRing : public core::StagingTransport {
 public:
  // The ring, stream and slot events are the engine's, which outlives this. `copy_call` names the
  // cudaMemcpyAsync in its failure ("cudaMemcpyAsync (file)").
  CudaEventRing(int device, char* ring, cudaStream_t stream, const std::vector<cudaEvent_t>& done,
                char* device_ptr, bool to_device, const char* copy_call)
      : device_(device),
        ring_(ring),
        stream_(stream),
        done_(done),
        device_ptr_(device_ptr),
        to_device_(to_device),
        copy_call_(copy_call) {}
  char* ring() override { return ring_; }
  core::TransportStatus Issue(const core::StagingChunk& c) override;
  core::TransportStatus Wait(int s) override;
  core::TransportStatus Finish() override;

 private:
  int device_;
  char* ring_;
  cudaStream_t stream_;
  const std::vector<cudaEvent_t>& done_;
  char* device_ptr_;
  bool to_device_;
  const char* copy_call_;
};

}  // namespace cm
