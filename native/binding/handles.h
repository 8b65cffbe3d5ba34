// The records behind every buffer handle, and the table of numbers that stand for them.
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/cuda_api.h"
#include "core/binding/handle_table.h"

namespace cm {

struct Allocation;

// What a buffer's kind does, set by the concern that made the buffer (memory/, allocator/), so
// that the handle layer releases, orders and exports buffers without knowing their kinds. One
// static table per kind.
struct BufferOps {
  // The memory is device memory (copies address it on its device), not host memory.
  bool on_device = false;
  // Frees the memory (not the record). Never throws: it runs from finalizers and the cleanup
  // hook too. Called once, with a->released already set.
  void (*release)(napi_env env, Allocation* a) noexcept = nullptr;
  // Before `a` is used on `stream` (null: the legacy default stream), orders that use after the
  // allocation where the kind needs it. Null: nothing to order.
  void (*before_use)(Allocation* a, cudaStream_t stream) = nullptr;
  // Where another process opens the buffer by IPC: the base of the CUDA allocation it lies in
  // and its offset there. Throws ERR_NOT_SUPPORTED, with the kind's reason, where the kind
  // cannot be shared. Null: not device memory, so not exportable.
  void (*export_range)(Napi::Env env, Allocation* a, void** base, uint64_t* offset) = nullptr;
  // Host memory behind an external ArrayBuffer (pinned, shared pinned): gives the memory back
  // once no ArrayBuffer can reach it (see ReleaseHostMemory). Never throws.
  void (*free_host)(Allocation* a) noexcept = nullptr;
  // The memory is managed: the driver pages it between the host and the devices, so copies leave
  // the direction to it (cudaMemcpyDefault) and host code may touch it.
  bool managed = false;
  // free({ stream }) of a kind freed in stream order (a stream-ordered allocator's block): marks
  // `a` to be freed in `stream`'s order, after the work queued there, when it is released. Null:
  // free({ stream }) waits for the stream, then releases.
  void (*free_on)(Allocation* a, cudaStream_t stream) = nullptr;
  // What the buffer is, as leak reports name it ("device", "pinned", "allocator-block", ...).
  const char* kind = "buffer";
};

// What an export keeps while the buffer lives (the IPC record of memory/ipc.cc); it goes first
// when the buffer is released, so that no process opens memory being freed.
class BufferExport {
 public:
  virtual ~BufferExport() = default;
};

// What a buffer handle points at. Owned by the instance's handle table; a pinned buffer's
// ArrayBuffer holds a second reference, since views over it may outlive the handle, and an
// asynchronous copy holds one while it runs. A kind with more to keep derives from it.
struct Allocation {
  explicit Allocation(const BufferOps* ops) : ops(ops) {}
  virtual ~Allocation() = default;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  const BufferOps* ops;
  bool released = false;  // the memory is gone (free(), finalizer, cleanup or forced close)
  bool simulated = false;
  int device = 0;
  int refs = 1;
  int pending = 0;  // asynchronous operations using it; free() waits for them
  uint32_t slot = core::HandleTable<Allocation>::kNoSlot;  // its place in the HandleTable
  bool free_requested = false;
  unsigned flags = 0;          // cudaHostAlloc / cudaHostRegister flags
  void* ptr = nullptr;         // device address, or host address for pinned and registered
  void* device_ptr = nullptr;  // mapped pinned memory as the GPU addresses it
  size_t bytes = 0;
  int64_t external_bytes = 0;   // reported to V8
  napi_ref host_ref = nullptr;  // host memory: a reference to its ArrayBuffer or view
  // Pinned and shared pinned memory is reachable from JavaScript through the backing store of
  // the external ArrayBuffer made for it, and that store can be moved to another ArrayBuffer
  // (transfer(), a web byte stream) where the library cannot see it. The memory is given back
  // only once no ArrayBuffer can reach it: store_gone says the store's finalizer has run;
  // host_free_deferred says free() found the store moved and left the memory to that finalizer.
  bool store_gone = false;
  bool host_free_deferred = false;
  bool env_closing = false;  // the environment is going away: no JavaScript can reach anything
  bool tallied = false;      // counted in the process-wide tally while in the handle table
  std::unique_ptr<BufferExport> exported;
};

// What the buffer is, as leak reports name it.
inline const char* KindOf(const Allocation* a) { return a->ops->kind ? a->ops->kind : "buffer"; }

// Buffer handles: see core/binding/handle_table.h. The table also lists what an exiting environment
// (a worker thread) still holds, for its cleanup hook.
using HandleTable = core::HandleTable<Allocation>;
// This environment's table (a slot of its Instance).
HandleTable& Handles(Napi::Env env);

// Enters the allocation in the handle table and returns its handle. With 2^24 buffers live
// already, releases the allocation and throws a RangeError (ERR_TOO_MANY_BUFFERS).
Napi::Value WrapAllocation(Napi::Env env, Allocation* a);
// Returns the allocation behind a handle; throws a TypeError naming `what` if it is not one,
// and a CudaError (ERR_BUFFER_FREED) if it was freed, unless allow_released.
Allocation* UnwrapAllocation(Napi::Env env, Napi::Value v, const char* what,
                             bool allow_released = false);
// The same for a handle already read as a number.
Allocation* UnwrapHandle(Napi::Env env, double handle, const char* what,
                         bool allow_released = false);
// Releases the memory (not the record) through its kind's ops. Never throws.
void ReleaseAllocation(Napi::Env env, Allocation* a) noexcept;
// Before `a` is used on `stream`: its kind's before_use, if any.
inline void BeforeUse(Allocation* a, cudaStream_t stream) {
  if (a && a->ops->before_use) a->ops->before_use(a, stream);
}
// Detaches the ArrayBuffer that host_ref refers to (emptying every view over it, so a kept
// Uint8Array cannot reach freed memory) and drops the reference. Never throws. Returns true when
// no ArrayBuffer can reach the memory any more: its own ArrayBuffer still held the store and is
// detached now, or the store was already given back. False: the store was moved to an
// ArrayBuffer the library cannot see (transfer(), a web byte stream), which keeps using it.
bool DetachHostView(napi_env env, Allocation* a) noexcept;
// Whether the buffer's own ArrayBuffer object still exists (attached or not).
bool HostViewAlive(napi_env env, Allocation* a) noexcept;
// The release of pinned and shared pinned memory: gives the memory back now (free_host) where
// nothing can reach it, else leaves it to the finalizer of the store that moved away.
void ReleaseHostMemory(napi_env env, Allocation* a) noexcept;
inline void FreeHostMemory(Allocation* a) noexcept { a->ops->free_host(a); }
void DropReference(Allocation* a) noexcept;
// A forced close: releases every live allocation `owned` selects, except one an asynchronous
// operation still uses (pending), which is only marked freed (ERR_BUFFER_FREED to its user) and
// released when that operation settles, as free() does. Returns how many were left so.
template <typename Owned>
uint64_t ReleaseOrDefer(Napi::Env env, const std::vector<Allocation*>& live, Owned owned) {
  uint64_t deferred = 0;
  for (Allocation* a : live) {
    if (!owned(a)) continue;
    if (a->pending > 0) {
      a->free_requested = true;
      ++deferred;
    } else {
      ReleaseAllocation(env, a);
    }
  }
  return deferred;
}
void TrackExternal(Napi::Env env, Allocation* a, int64_t bytes);

}  // namespace cm
