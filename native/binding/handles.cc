#include "binding/handles.h"

#include <sys/mman.h>
#include <unistd.h>

#include "allocator/allocator.h"
#include "allocator/stream_ordered.h"
#include "binding/instance.h"
#include "memory/ipc.h"

namespace cm {

Napi::Value WrapAllocation(Napi::Env env, Allocation* a) {
  double h = GetInstance(env).handles.Add(a, &a->slot);
  if (h < 0) {
    ReleaseAllocation(env, a);
    throw LibraryError(
        env, "ERR_TOO_MANY_BUFFERS",
        "too many buffers are live at once (16,777,216 in this thread); free some first");
  }
  return Napi::Number::New(env, h);
}

Allocation* UnwrapAllocation(Napi::Env env, Napi::Value v, const char* what, bool allow_released) {
  double h = -1;  // not a number: no handle
  if (napi_get_value_double(env, v, &h) != napi_ok) h = -1;
  return UnwrapHandle(env, h, what, allow_released);
}

Allocation* UnwrapHandle(Napi::Env env, double h, const char* what, bool allow_released) {
  bool stale = false;
  Allocation* a = GetInstance(env).handles.Find(h, &stale);
  if (a && !a->free_requested) return a;
  if (!a && !stale) ThrowType(env, std::string(what) + " must be a buffer handle of this library");
  // Freed: its slot moved on, or free() waits for an asynchronous copy to finish.
  if (allow_released) return nullptr;
  Napi::Value err = MakeCudaError(env, cudaErrorInvalidValue, what);
  Napi::Object o = err.As<Napi::Object>();
  o.Set("message", std::string(what) + " was freed and can no longer be used");
  o.Set("code", "ERR_BUFFER_FREED");
  ThrowValue(env, err);
}

void TrackExternal(Napi::Env env, Allocation* a, int64_t bytes) {
  a->external_bytes = bytes;
  if (bytes) Napi::MemoryManagement::AdjustExternalMemory(env, bytes);
}

// Detaching empties every view, so a kept Uint8Array cannot reach freed memory. Returns true
// when no ArrayBuffer can reach the memory any more: its own ArrayBuffer still held the store and
// is detached now, or the store has already been given back. False: the store was moved to an
// ArrayBuffer the library cannot see (transfer(), a web byte stream), which keeps using it.
bool DetachHostView(Napi::Env env, Allocation* a) noexcept {
  bool unreachable = a->store_gone;
  if (a->host_ref) {
    napi_value ab;
    if (napi_get_reference_value(env, a->host_ref, &ab) == napi_ok && ab != nullptr) {
      bool detached = true;
      napi_is_detached_arraybuffer(env, ab, &detached);
      if (!detached && napi_detach_arraybuffer(env, ab) == napi_ok) unreachable = true;
    }
    napi_delete_reference(env, a->host_ref);
    a->host_ref = nullptr;
  }
  return unreachable;
}

bool HostViewAlive(Napi::Env env, Allocation* a) noexcept {
  napi_value ab = nullptr;
  return a->host_ref && napi_get_reference_value(env, a->host_ref, &ab) == napi_ok && ab != nullptr;
}

void FreeHostMemory(Allocation* a) noexcept {
  if (a->kind == MemKind::kPinned) {
    cudaFreeHost(a->ptr);
  } else if (a->kind == MemKind::kSharedHost) {
    cudaHostUnregister(a->ptr);
    munmap(a->ptr, a->bytes);
    if (a->shm_owner) unlink(a->shm_path.c_str());
  }
  (void)cudaGetLastError();
}

void ReleaseAllocation(Napi::Env env, Allocation* a) noexcept {
  if (a->released) return;
  a->released = true;
  // An exported buffer's record goes first, so that no process opens memory being freed.
  a->ipc_export.reset();
  // Freeing while the runtime unloads at process exit may report an error; it is harmless.
  switch (a->kind) {
    case MemKind::kDevice:
      cudaSetDevice(a->device);
      cudaFree(a->ptr);
      break;
    case MemKind::kPinned:
    case MemKind::kSharedHost:
      // Moved to an ArrayBuffer still alive: its store's finalizer gives the memory back.
      if (DetachHostView(env, a) || a->env_closing)
        FreeHostMemory(a);
      else
        a->host_free_deferred = true;
      break;
    case MemKind::kIpc:
      ReleaseIpcImport(a);
      break;
    case MemKind::kRegistered:
      cudaHostUnregister(a->ptr);
      if (a->host_ref) {
        napi_delete_reference(env, a->host_ref);
        a->host_ref = nullptr;
      }
      break;
    case MemKind::kPool:
      ReleasePoolBlock(a);
      break;
    case MemKind::kAsync:
      ReleaseAsyncBlock(env, a);
      break;
  }
  if (a->kind != MemKind::kPool) (void)cudaGetLastError();
  if (a->external_bytes) {
    int64_t ignored;  // the C call: this runs in finalizers and teardown, where nothing may throw
    napi_adjust_external_memory(env, -a->external_bytes, &ignored);
    a->external_bytes = 0;
  }
  void* inst = nullptr;
  if (napi_get_instance_data(env, &inst) == napi_ok && inst)
    static_cast<Instance*>(inst)->handles.Remove(a, a->slot);
  DropReference(a);  // the handle table's reference
}

void DropReference(Allocation* a) noexcept {
  if (--a->refs == 0) delete a;
}

}  // namespace cm
