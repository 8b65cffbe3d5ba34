// The staged path for pageable host memory. cudaMemcpy from pageable memory moves one small
// bounce buffer at a time; this engine keeps a ring of large pinned chunks and a team of host
// threads, so the CPU copies chunk i+1 between the Node buffer and pinned memory while the DMA
// engine moves chunk i. Used by copy()/copyAsync() for pageable buffers (strategy "staged").
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

#include "common.h"

namespace cm {

// A fixed team of threads that split one memcpy between them; the calling thread takes a share.
class ParallelCopier {
 public:
  explicit ParallelCopier(int threads);
  ~ParallelCopier();
  // `streaming`: non-temporal stores (the destination is not read by this CPU soon).
  void Copy(void* dst, const void* src, size_t n, bool streaming);
  int threads() const { return threads_; }

 private:
  void Worker(int index);
  void CopyShare(int index, int parts);

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  bool stop_ = false;
  char* dst_ = nullptr;
  const char* src_ = nullptr;
  size_t n_ = 0;
  bool streaming_ = false;
};

struct StagingOptions {
  size_t chunk_bytes;
  int slots;
  int threads;
  bool streaming;  // non-temporal stores into and out of the ring
};

// The tuned defaults with the instance's configureStaging() settings applied. Call on the JS
// thread or under inst.staging_mutex.
StagingOptions StagingOptionsInForce(const Instance& inst);

class StagingEngine {
 public:
  // Allocates the pinned ring on `device`; check error() afterwards.
  StagingEngine(int device, StagingOptions options);
  ~StagingEngine();
  const Error& error() const { return error_; }
  const StagingOptions& options() const { return options_; }

  // Both block until the data has arrived. One transfer at a time per engine.
  Error HostToDevice(void* dst_device, const void* src_host, size_t n);
  Error DeviceToHost(void* dst_host, const void* src_device, size_t n);

 private:
  int device_;
  StagingOptions options_;
  Error error_;
  std::mutex mutex_;
  cudaStream_t stream_ = nullptr;
  std::vector<char*> slots_;
  std::vector<cudaEvent_t> done_;
  ParallelCopier copier_;
};

// The instance's engine for `device` and a direction, made with the instance's configuration on
// first use.
StagingEngine* GetStagingEngine(Instance& inst, int device, bool to_host, Error* err);

}  // namespace cm
