// The stream-ordered backend of createAllocator({ backend: 'async' }): blocks from a CUDA memory
// pool (cudaMallocFromPoolAsync / cudaFreeAsync), under the allocator's own limit and
// statistics (core::Budget), since the pool itself has no hard cap.
#pragma once

#include <napi.h>

#include <memory>
#include <vector>

#include "binding/instance.h"
#include "core/allocator/budget.h"
#include "device/streams.h"

namespace cm {

struct AsyncPool {
  int device = 0;
  cudaMemPool_t pool = nullptr;
  bool own = true;  // a pool of our own, not the device's default pool
  bool allow_growth = false;
  bool closed = false;
  // Blocks a forced close found busy (an asynchronous copy still using them): the pool is
  // trimmed and destroyed once the last of them is released, since the copy may still touch them.
  uint64_t deferred = 0;
  uint64_t initial_bytes = 0;  // reserved at creation and kept through synchronizations
  int cc_major = 0, cc_minor = 0;
  core::Budget budget;
  std::vector<cudaEvent_t> idle_events;  // for marking allocations made on a user stream
  cudaEvent_t order = nullptr;           // orders a free on another stream after the allocation's
  AsyncPool(uint64_t limit, std::string source) : budget(limit, std::move(source)) {}
  ~AsyncPool();
};

// A block of an AsyncPool: its pool; the stream it was allocated on (null: the legacy default
// stream), kept alive by host_ref; an event marking the allocation on that stream until a use on
// another stream has waited for it; and where free({ stream }) asked the free to be ordered.
// With an alignment above 256, `base` is what cudaMallocFromPoolAsync returned (ptr is raised
// from it to the alignment); `charged` is the bytes charged to the budget, padding included.
struct AsyncAllocation : Allocation {
  using Allocation::Allocation;
  std::shared_ptr<AsyncPool> pool;
  StreamRec* stream = nullptr;
  cudaEvent_t ready = nullptr;
  bool free_on_stream = false;
  cudaStream_t free_stream = nullptr;
  void* base = nullptr;
  size_t charged = 0;
};
// The bytes the pool holds from the device now (what its stats call poolBytes).
uint64_t AsyncPoolBytes(const AsyncPool& p);
// Whether `v` is a handle of this backend. The allocator* exports (allocator.cc) pick the backend
// by the handle and call the functions below, which take the same arguments.
bool IsAsyncAllocator(Napi::Value v);
namespace async_backend {
Napi::Value Create(const Napi::CallbackInfo& info);  // createAllocator({ backend: 'async', ... })
Napi::Value Alloc(const Napi::CallbackInfo& info);
Napi::Value Stats(const Napi::CallbackInfo& info);
Napi::Value Info(const Napi::CallbackInfo& info);
Napi::Value ResetPeak(const Napi::CallbackInfo& info);
Napi::Value ResetAccumulated(const Napi::CallbackInfo& info);
Napi::Value SetFraction(const Napi::CallbackInfo& info);
Napi::Value EmptyCache(const Napi::CallbackInfo& info);
Napi::Value Close(const Napi::CallbackInfo& info);
}  // namespace async_backend
// freeOn(), which orders a stream-ordered block's free on a stream.
void InitStreamOrdered(Napi::Env env, Napi::Object exports);

}  // namespace cm
