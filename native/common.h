// Per-environment state, the native side of the JS error classes, and the records behind every
// buffer handle. Each addon instance (main thread or worker) has its own Instance; nothing lives
// in static globals.
#pragma once

#include <napi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda.h"

namespace cm {

class StagingEngine;
class PoolBinding;
struct AsyncPool;
struct StreamRec;

// kPool: a block of a BFC allocator; kAsync: a block of CUDA's stream-ordered pool.
enum class MemKind : uint8_t { kDevice, kPinned, kRegistered, kPool, kAsync };

// What a buffer handle points at. Owned by the instance's handle table; a pinned buffer's
// ArrayBuffer holds a second reference, since views over it may outlive the handle, and an
// asynchronous copy holds one while it runs.
struct Allocation {
  MemKind kind = MemKind::kDevice;
  bool released = false;  // the memory is gone (free(), finalizer, cleanup or forced close)
  bool simulated = false;
  int device = 0;
  int refs = 1;
  int pending = 0;    // asynchronous operations using it; free() waits for them
  uint32_t slot = 0;  // its place in the HandleTable
  bool free_requested = false;
  unsigned flags = 0;          // cudaHostAlloc / cudaHostRegister flags
  void* ptr = nullptr;         // device address, or host address for pinned and registered
  void* device_ptr = nullptr;  // mapped pinned memory as the GPU addresses it
  size_t bytes = 0;
  int64_t external_bytes = 0;  // reported to V8
  napi_ref host_ref =
      nullptr;  // pinned: weak ref to its ArrayBuffer; registered: strong ref to the view
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
};

// Buffer handles are plain numbers, slot + generation * 2^24, indexing this table. A number is
// far cheaper to make than an External with a finalizer (about 20 ns against 700 ns), which is
// what lets a pooled alloc+free cost well under a microsecond; the generation makes a stale or
// forged number fail the lookup instead of reaching another buffer. The table also lists what an
// exiting environment (a worker thread) still holds, for its cleanup hook.
class HandleTable {
 public:
  static constexpr double kSlotSpan = 16777216.0;  // 2^24 slots
  double Add(Allocation* a);
  // nullptr if `handle` is not a live handle; *stale is set when it was one once.
  Allocation* Find(double handle, bool* stale) const;
  void Remove(Allocation* a);
  std::vector<Allocation*> Live() const;
  size_t size() const { return live_; }

 private:
  struct Slot {
    Allocation* alloc = nullptr;
    uint32_t generation = 0;
  };
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  size_t live_ = 0;
};

struct CudaStatus {
  bool available = false;
  std::string reason;  // NOT_BUILT_WITH_CUDA, NO_DRIVER, INSUFFICIENT_DRIVER, NO_DEVICE, or ""
  std::string message;
  int device_count = 0;
  int driver_version = 0;
  int runtime_version = 0;
};

struct Instance {
  std::unique_ptr<CudaStatus> status;  // computed once, on first use
  Napi::FunctionReference cuda_error, oom_error, unavailable_error;
  HandleTable handles;
  std::mutex staging_mutex;
  // One per device and direction (key device * 2 + 1 for device-to-host), made on first use, so
  // that copies in the two directions overlap.
  std::map<int, std::unique_ptr<StagingEngine>> staging;
  struct StagingConfig {
    size_t chunk_bytes = 0;  // 0: the tuned default
    int slots = 0;
    int threads = 0;
    int streaming = -1;  // -1: default
  } staging_config;
  Instance();
  ~Instance();
};

Instance& GetInstance(Napi::Env env);

// Builds (not throws) the JS error objects, for use in async completions too.
Napi::Value MakeCudaError(Napi::Env env, cudaError_t err, const std::string& call,
                          const std::string& detail = "");
Napi::Value MakeUnavailableError(Napi::Env env, const std::string& reason,
                                 const std::string& message);
[[noreturn]] void ThrowCuda(Napi::Env env, cudaError_t err, const std::string& call,
                            const std::string& detail = "");
[[noreturn]] void ThrowValue(Napi::Env env, Napi::Value error);
[[noreturn]] void ThrowType(Napi::Env env, const std::string& message);
[[noreturn]] void ThrowRange(Napi::Env env, const std::string& message);
const CudaStatus& GetStatus(Napi::Env env);
// Throws CudaUnavailableError unless the build has CUDA and a device is usable.
void RequireCuda(Napi::Env env);
// Throws a RangeError unless 0 <= device < the device count.
void CheckDevice(Napi::Env env, int device);

// Enters the allocation in the handle table and returns its handle.
Napi::Value WrapAllocation(Napi::Env env, Allocation* a);
// Returns the allocation behind a handle; throws a TypeError naming `what` if it is not one,
// and a CudaError (ERR_BUFFER_FREED) if it was freed, unless allow_released.
Allocation* UnwrapAllocation(Napi::Env env, Napi::Value v, const char* what,
                             bool allow_released = false);
// Releases the memory (not the record). Never throws.
void ReleaseAllocation(Napi::Env env, Allocation* a) noexcept;
void DropReference(Allocation* a) noexcept;
void TrackExternal(Napi::Env env, Allocation* a, int64_t bytes);

// The bytes of a TypedArray or DataView (over an ArrayBuffer or a SharedArrayBuffer); false if
// `v` is neither.
bool HostView(Napi::Env env, Napi::Value v, char** data, size_t* length);

// Reads a non-negative safe integer (a Number or BigInt) naming `what` in the error.
uint64_t ReadSize(Napi::Env env, Napi::Value v, const char* what);
int ReadInt(Napi::Env env, Napi::Value v, const char* what, int lo, int hi);

struct Error {
  cudaError_t code = cudaSuccess;
  std::string call;
  std::string detail;
  explicit operator bool() const { return code != cudaSuccess; }
};

// Sets the calling thread's device, then runs `call`; returns the first failure.
#define CM_TRY(err_var, expr, name)        \
  do {                                     \
    cudaError_t _e = (expr);               \
    if (_e != cudaSuccess) {               \
      err_var = ::cm::Error{_e, name, ""}; \
      (void)cudaGetLastError();            \
    }                                      \
  } while (0)

}  // namespace cm
