// The records behind every buffer handle, and the table of numbers that stand for them.
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/cuda_api.h"
#include "core/binding/handle_table.h"
#include "core/memory/ipc_record.h"

namespace cm {

class StagingEngine;
class PoolBinding;
struct AsyncPool;
struct StreamRec;

// kPool: a block of a BFC allocator; kAsync: a block of CUDA's stream-ordered pool; kIpc: device
// memory of another process opened from an IPC handle; kSharedHost: a POSIX shared-memory file
// mapped and registered with CUDA (pinned memory that several processes see).
enum class MemKind : uint8_t { kDevice, kPinned, kRegistered, kPool, kAsync, kIpc, kSharedHost };

// What a buffer handle points at. Owned by the instance's handle table; a pinned buffer's
// ArrayBuffer holds a second reference, since views over it may outlive the handle, and an
// asynchronous copy holds one while it runs.
struct Allocation {
  MemKind kind = MemKind::kDevice;
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
  int64_t external_bytes = 0;  // reported to V8
  napi_ref host_ref =
      nullptr;  // pinned: weak ref to its ArrayBuffer; registered: strong ref to the view
  // Pinned and shared pinned memory is reachable from JavaScript through the backing store of
  // the external ArrayBuffer made for it, and that store can be moved to another ArrayBuffer
  // (transfer(), a web byte stream) where the library cannot see it. The memory is given back
  // only once no ArrayBuffer can reach it: store_gone says the store's finalizer has run;
  // host_free_deferred says free() found the store moved and left the memory to that finalizer.
  bool store_gone = false;
  bool host_free_deferred = false;
  bool env_closing = false;  // the environment is going away: no JavaScript can reach anything
  std::shared_ptr<PoolBinding> pool;
  void* block = nullptr;  // the pool's core::Pool::Chunk
  // kAsync: its pool; the stream it was allocated on (null: the legacy default stream), kept
  // alive by host_ref; an event marking the allocation on that stream until a use on another
  // stream has waited for it; and where free({ stream }) asked the free to be ordered.
  std::shared_ptr<AsyncPool> async_pool;
  StreamRec* stream = nullptr;
  cudaEvent_t ready = nullptr;
  bool free_on_stream = false;
  cudaStream_t free_stream = nullptr;
  // kAsync with an alignment above 256: what cudaMallocFromPoolAsync returned (ptr is raised
  // from it to the alignment), and the bytes charged to the budget, padding included.
  void* async_base = nullptr;
  size_t async_charged = 0;
  // Exported by IPC: its record, removed when the memory goes.
  std::unique_ptr<core::IpcExportRecord> ipc_export;
  // kIpc: the importer's slot in the exporter's record, and the base the handle opened (CUDA
  // counts the opens of one handle in a context; each is closed once).
  std::unique_ptr<core::IpcImportRecord> ipc_import;
  void* ipc_base = nullptr;
  // kSharedHost: the file, and whether this process created it (and removes it when freed).
  std::string shm_path;
  bool shm_owner = false;
};

// Buffer handles: see core/handle_table.h. The table also lists what an exiting environment (a
// worker thread) still holds, for its cleanup hook.
using HandleTable = core::HandleTable<Allocation>;

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
// Releases the memory (not the record). Never throws.
void ReleaseAllocation(Napi::Env env, Allocation* a) noexcept;
// Pinned and shared pinned memory: whether the buffer's own ArrayBuffer object still exists
// (attached or not), and the call that gives the memory back once nothing can reach it.
bool HostViewAlive(Napi::Env env, Allocation* a) noexcept;
void FreeHostMemory(Allocation* a) noexcept;
void DropReference(Allocation* a) noexcept;
void TrackExternal(Napi::Env env, Allocation* a, int64_t bytes);

}  // namespace cm
