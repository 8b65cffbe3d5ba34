// The 'async' backend of createAllocator(): blocks from a CUDA memory pool, stream-ordered
// (cudaMallocFromPoolAsync / cudaFreeAsync), under the allocator's own limit and statistics
// (core::Budget), since the pool itself has no hard cap; behind the allocator Backend interface
// (backend.h).
#pragma once

#include <napi.h>

#include <memory>
#include <vector>

#include "allocator/backend.h"
#include "binding/instance.h"
#include "core/allocator/budget.h"
#include "device/stream.h"

namespace cm {

class AsyncBackend final : public Backend {
 public:
  AsyncBackend(uint64_t limit, std::string source) : budget(limit, std::move(source)) {}
  ~AsyncBackend() override;
  Napi::Value Alloc(Napi::Env env, const BackendRef& self, uint64_t bytes, size_t alignment,
                    Napi::Value stream) override;
  Napi::Object Stats(Napi::Env env) override;
  // The driver's pool keeps its reservation to itself: no regions of the allocator's own.
  Napi::Array Regions(Napi::Env env) override { return Napi::Array::New(env); }
  Napi::Object Info(Napi::Env env) override;
  void ResetPeak() override;
  void ResetAccumulated() override { budget.ResetAccumulated(); }
  uint64_t SetFraction(Napi::Env env, Napi::Value fraction) override;
  uint64_t EmptyCache() override;
  uint64_t Close(Napi::Env env, bool force) override;
  void CountLive(std::vector<LiveRow>* rows) override;

  int device = 0;
  cudaMemPool_t pool = nullptr;
  bool own = true;  // a pool of our own, not the device's default pool
  bool allow_growth = false;
  // Blocks a forced close found busy (an asynchronous copy still using them): the pool is
  // trimmed and destroyed once the last of them is released, since the copy may still touch them.
  uint64_t deferred = 0;
  uint64_t initial_bytes = 0;  // reserved at creation and kept through synchronizations
  int cc_major = 0, cc_minor = 0;
  core::Budget budget;
  std::vector<cudaEvent_t> idle_events;  // for marking allocations made on a user stream
  cudaEvent_t order = nullptr;           // orders a free on another stream after the allocation's
};

// A block of an AsyncBackend: its backend; the stream it was allocated on (null: the legacy default
// stream), kept alive by host_ref; an event marking the allocation on that stream until a use on
// another stream has waited for it; and where free({ stream }) asked the free to be ordered.
// With an alignment above 256, `base` is what cudaMallocFromPoolAsync returned (ptr is raised
// from it to the alignment); `charged` is the bytes charged to the budget, padding included.
struct AsyncAllocation : Allocation {
  using Allocation::Allocation;
  std::shared_ptr<AsyncBackend> pool;
  StreamRec* stream = nullptr;
  cudaEvent_t ready = nullptr;
  bool free_on_stream = false;
  cudaStream_t free_stream = nullptr;
  void* base = nullptr;
  size_t charged = 0;
};

}  // namespace cm
