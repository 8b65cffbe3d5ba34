// The stream-ordered backend of createAllocator({ backend: 'async' }): blocks from a CUDA memory
// pool (cudaMallocFromPoolAsync / cudaFreeAsync), under the allocator's own limit and
// statistics (core::Budget), since the pool itself has no hard cap.
#pragma once

#include <napi.h>

#include <memory>
#include <vector>

#include "binding/instance.h"
#include "core/allocator/budget.h"

namespace cm {

struct AsyncPool {
  int device = 0;
  cudaMemPool_t pool = nullptr;
  bool own = true;  // a pool of our own, not the device's default pool
  bool allow_growth = false;
  bool closed = false;
  uint64_t initial_bytes = 0;  // reserved at creation and kept through synchronizations
  int cc_major = 0, cc_minor = 0;
  core::Budget budget;
  std::vector<cudaEvent_t> idle_events;  // for marking allocations made on a user stream
  cudaEvent_t order = nullptr;           // orders a free on another stream after the allocation's
  AsyncPool(uint64_t limit, std::string source) : budget(limit, std::move(source)) {}
  ~AsyncPool();
};

// Frees a block in stream order (its allocation stream, or the one free({ stream }) named).
// Never throws: it runs from finalizers and the cleanup hook too.
void ReleaseAsyncBlock(napi_env env, Allocation* a) noexcept;
// Before `a` is used on `stream` (null: the legacy default stream): if it was allocated on
// another stream, waits until that stream has reached the allocation. No-op for other memory.
void AwaitAllocation(Allocation* a, cudaStream_t stream);
void InitStreamOrdered(Napi::Env env, Napi::Object exports);

}  // namespace cm
