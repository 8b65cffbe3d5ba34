#include "common.h"

#include <cmath>
#include <vector>

#include "allocator.h"
#include "discovery.h"
#include "staging.h"
#include "stream_ordered.h"

namespace cm {

Instance::Instance() = default;
Instance::~Instance() = default;

Instance& GetInstance(Napi::Env env) { return *env.GetInstanceData<Instance>(); }

const CudaStatus& GetStatus(Napi::Env env) {
  Instance& inst = GetInstance(env);
  if (!inst.status) inst.status = std::make_unique<CudaStatus>(ComputeStatus());
  return *inst.status;
}

Napi::Value MakeCudaError(Napi::Env env, cudaError_t err, const std::string& call,
                          const std::string& detail) {
  Instance& inst = GetInstance(env);
  std::string name = cudaGetErrorName(err);
  std::string message = call + " failed: " + name + " (" + cudaGetErrorString(err) + ")";
  if (!detail.empty()) message += "; " + detail;
  Napi::Object props = Napi::Object::New(env);
  props.Set("code", name);
  props.Set("cudaCode", static_cast<double>(err));
  props.Set("call", call);
  if (inst.cuda_error.IsEmpty()) return Napi::Error::New(env, message).Value();
  return inst.cuda_error.New({Napi::String::New(env, message), props});
}

Napi::Value MakeUnavailableError(Napi::Env env, const std::string& reason,
                                 const std::string& message) {
  Instance& inst = GetInstance(env);
  if (inst.unavailable_error.IsEmpty()) return Napi::Error::New(env, message).Value();
  return inst.unavailable_error.New(
      {Napi::String::New(env, reason), Napi::String::New(env, message)});
}

void ThrowValue(Napi::Env env, Napi::Value error) { throw Napi::Error(env, error); }

void ThrowCuda(Napi::Env env, cudaError_t err, const std::string& call, const std::string& detail) {
  ThrowValue(env, MakeCudaError(env, err, call, detail));
}

void ThrowType(Napi::Env env, const std::string& message) {
  throw Napi::TypeError::New(env, message);
}

void ThrowRange(Napi::Env env, const std::string& message) {
  throw Napi::RangeError::New(env, message);
}

void RequireCuda(Napi::Env env) {
  const CudaStatus& st = GetStatus(env);
  if (!st.available) ThrowValue(env, MakeUnavailableError(env, st.reason, st.message));
}

void CheckDevice(Napi::Env env, int device) {
  RequireCuda(env);
  int count = GetStatus(env).device_count;
  if (device < 0 || device >= count)
    ThrowRange(env, "device must be an integer from 0 to " + std::to_string(count - 1) +
                        " (this machine has " + std::to_string(count) + " CUDA device" +
                        (count == 1 ? "" : "s") + "), got " + std::to_string(device));
}

double HandleTable::Add(Allocation* a) {
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot].alloc = a;
  a->slot = slot;
  ++live_;
  return slot + kSlotSpan * slots_[slot].generation;
}

Allocation* HandleTable::Find(double handle, bool* stale) const {
  *stale = false;
  if (!(handle >= 0) || handle != std::floor(handle) || handle > 9007199254740991.0) return nullptr;
  uint64_t h = static_cast<uint64_t>(handle);
  uint64_t slot = h % static_cast<uint64_t>(kSlotSpan);
  uint64_t generation = h / static_cast<uint64_t>(kSlotSpan);
  if (slot >= slots_.size()) return nullptr;
  const Slot& s = slots_[slot];
  if (s.generation == generation && s.alloc) return s.alloc;
  *stale = generation < s.generation;
  return nullptr;
}

void HandleTable::Remove(Allocation* a) {
  Slot& s = slots_[a->slot];
  if (s.alloc != a) return;
  s.alloc = nullptr;
  s.generation++;
  free_.push_back(a->slot);
  --live_;
}

std::vector<Allocation*> HandleTable::Live() const {
  std::vector<Allocation*> out;
  for (const Slot& s : slots_)
    if (s.alloc) out.push_back(s.alloc);
  return out;
}

Napi::Value WrapAllocation(Napi::Env env, Allocation* a) {
  return Napi::Number::New(env, GetInstance(env).handles.Add(a));
}

Allocation* UnwrapAllocation(Napi::Env env, Napi::Value v, const char* what, bool allow_released) {
  bool stale = false;
  Allocation* a = v.IsNumber()
                      ? GetInstance(env).handles.Find(v.As<Napi::Number>().DoubleValue(), &stale)
                      : nullptr;
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

void ReleaseAllocation(Napi::Env env, Allocation* a) noexcept {
  if (a->released) return;
  a->released = true;
  // Freeing while the runtime unloads at process exit may report an error; it is harmless.
  switch (a->kind) {
    case MemKind::kDevice:
      cudaSetDevice(a->device);
      cudaFree(a->ptr);
      break;
    case MemKind::kPinned: {
      if (a->host_ref) {
        napi_value ab;
        // Detaching empties every view, so a kept Uint8Array cannot reach freed memory.
        if (napi_get_reference_value(env, a->host_ref, &ab) == napi_ok && ab != nullptr)
          napi_detach_arraybuffer(env, ab);
        napi_delete_reference(env, a->host_ref);
        a->host_ref = nullptr;
      }
      cudaFreeHost(a->ptr);
      break;
    }
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
    static_cast<Instance*>(inst)->handles.Remove(a);
  DropReference(a);  // the handle table's reference
}

void DropReference(Allocation* a) noexcept {
  if (--a->refs == 0) delete a;
}

bool HostView(Napi::Env env, Napi::Value v, char** data, size_t* length) {
  void* p = nullptr;
  napi_value ab;
  size_t offset = 0;
  // The data pointers Node-API returns already include the view's offset, and, unlike
  // ArrayBuffer(), these calls accept views over SharedArrayBuffers.
  if (v.IsTypedArray()) {
    napi_typedarray_type type;
    size_t count = 0;
    if (napi_get_typedarray_info(env, v, &type, &count, &p, &ab, &offset) != napi_ok) return false;
    *length = v.As<Napi::TypedArray>().ByteLength();
  } else if (v.IsDataView()) {
    if (napi_get_dataview_info(env, v, length, &p, &ab, &offset) != napi_ok) return false;
  } else {
    return false;
  }
  *data = static_cast<char*>(p);
  return true;
}

uint64_t ReadSize(Napi::Env env, Napi::Value v, const char* what) {
  constexpr double kMaxSafe = 9007199254740991.0;
  if (v.IsBigInt()) {
    bool lossless = false;
    uint64_t n = v.As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless) ThrowRange(env, std::string(what) + " must be a non-negative 64-bit integer");
    return n;
  }
  if (!v.IsNumber()) ThrowType(env, std::string(what) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d < 0 || d != std::floor(d) || d > kMaxSafe)
    ThrowRange(
        env, std::string(what) + " must be a non-negative safe integer, got " + std::to_string(d));
  return static_cast<uint64_t>(d);
}

int ReadInt(Napi::Env env, Napi::Value v, const char* what, int lo, int hi) {
  if (!v.IsNumber()) ThrowType(env, std::string(what) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d) || d < lo || d > hi)
    ThrowRange(env, std::string(what) + " must be an integer from " + std::to_string(lo) + " to " +
                        std::to_string(hi) + ", got " + std::to_string(d));
  return static_cast<int>(d);
}

}  // namespace cm
