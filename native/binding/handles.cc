#include "binding/handles.h"

#include "binding/errors.h"
#include "binding/instance.h"

namespace cm {

namespace {
struct HandleState : InstanceState {
  HandleTable table;
};
}  // namespace

HandleTable& Handles(Napi::Env env) { return GetInstance(env).State<HandleState>().table; }

Napi::Value WrapAllocation(Napi::Env env, Allocation* a) {
  Instance& inst = GetInstance(env);
  double h = Handles(env).Add(a, &a->slot);
  if (h < 0) {
    ReleaseAllocation(env, a);
    throw LibraryError(
        env, "ERR_TOO_MANY_BUFFERS",
        "too many buffers are live at once (16,777,216 in this thread); free some first");
  }
  a->tallied = true;
  tally::Change(inst.tally_id, KindOf(a), a->device, a->simulated, 1,
                static_cast<double>(a->bytes));
  return Napi::Number::New(env, h);
}

Allocation* UnwrapAllocation(Napi::Env env, Napi::Value v, const char* what, bool allow_released) {
  double h = -1;  // not a number: no handle
  if (napi_get_value_double(env, v, &h) != napi_ok) h = -1;
  return UnwrapHandle(env, h, what, allow_released);
}

Allocation* UnwrapHandle(Napi::Env env, double h, const char* what, bool allow_released) {
  bool stale = false;
  Allocation* a = Handles(env).Find(h, &stale);
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

bool DetachHostView(napi_env env, Allocation* a) noexcept {
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

bool HostViewAlive(napi_env env, Allocation* a) noexcept {
  napi_value ab = nullptr;
  return a->host_ref && napi_get_reference_value(env, a->host_ref, &ab) == napi_ok && ab != nullptr;
}

void ReleaseHostMemory(napi_env env, Allocation* a) noexcept {
  if (a->env_closing) {
    // The environment's cleanup: no JavaScript can reach the memory any more, and reading the
    // reference would make a handle where no handle scope may be open.
    if (a->host_ref) napi_delete_reference(env, a->host_ref);
    a->host_ref = nullptr;
    FreeHostMemory(a);
    return;
  }
  if (DetachHostView(env, a))
    FreeHostMemory(a);
  else
    a->host_free_deferred = true;  // moved to an ArrayBuffer still alive: its finalizer frees
}

void ReleaseAllocation(Napi::Env env, Allocation* a) noexcept {
  if (a->released) return;
  a->released = true;
  a->exported.reset();
  a->ops->release(env, a);
  if (a->external_bytes) {
    int64_t ignored;  // the C call: this runs in finalizers and teardown, where nothing may throw
    napi_adjust_external_memory(env, -a->external_bytes, &ignored);
    a->external_bytes = 0;
  }
  void* inst = nullptr;
  if (napi_get_instance_data(env, &inst) == napi_ok && inst) {
    static_cast<Instance*>(inst)->State<HandleState>().table.Remove(a, a->slot);
    if (a->tallied)
      tally::Change(static_cast<Instance*>(inst)->tally_id, KindOf(a), a->device, a->simulated, -1,
                    -static_cast<double>(a->bytes));
    a->tallied = false;
  }
  DropReference(a);  // the handle table's reference
}

void DropReference(Allocation* a) noexcept {
  if (--a->refs == 0) delete a;
}

}  // namespace cm
