#include "memory/buffers.h"

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "binding/exports.h"
#include "binding/instance.h"
#include "device/discovery.h"
#include "device/stream.h"

namespace cm {

namespace {

// Freeing while the runtime unloads at process exit may report an error; it is harmless.
const BufferOps kDeviceOps{
    /*on_device=*/true,
    /*release=*/
    [](napi_env, Allocation* a) noexcept {
      cudaSetDevice(a->device);
      cudaFree(a->ptr);
      (void)cudaGetLastError();
    },
    /*before_use=*/nullptr,
    /*export_range=*/
    [](Napi::Env, Allocation* a, void** base, uint64_t* offset) {
      *base = a->ptr;
      *offset = 0;
    },
};

const BufferOps kPinnedOps{
    /*on_device=*/false,
    /*release=*/ReleaseHostMemory,
    /*before_use=*/nullptr,
    /*export_range=*/nullptr,
    /*free_host=*/
    [](Allocation* a) noexcept {
      cudaFreeHost(a->ptr);
      (void)cudaGetLastError();
    },
};

const BufferOps kRegisteredOps{
    /*on_device=*/false,
    /*release=*/
    [](napi_env env, Allocation* a) noexcept {
      cudaHostUnregister(a->ptr);
      (void)cudaGetLastError();
      if (a->host_ref) {
        napi_delete_reference(env, a->host_ref);
        a->host_ref = nullptr;
      }
    },
};

Napi::Value DeviceAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t bytes = ReadSize(env, info[0], "bytes");
  int device = ReadInt(env, info[1], "device", 0, 1 << 20);
  if (bytes == 0) ThrowRange(env, "bytes must be at least 1, got 0");
  CheckDevice(env, device);
  void* ptr = nullptr;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMalloc(&ptr, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) {
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      (void)cudaGetLastError();
      Instance& inst = GetInstance(env);
      Napi::Object d = Napi::Object::New(env);
      d.Set("requestedBytes", static_cast<double>(bytes));
      d.Set("device", device);
      d.Set("deviceFree", static_cast<double>(free_b));
      d.Set("deviceTotal", static_cast<double>(total_b));
      d.Set("call", "cudaMalloc");
      ThrowValue(env, inst.oom_error.New({d}));
    }
    ThrowCuda(env, err, "cudaMalloc");
  }
  Allocation* a = new Allocation(&kDeviceOps);
  a->device = device;
  a->ptr = ptr;
  a->bytes = bytes;
  Napi::Value h = WrapAllocation(env, a);
  // Device bytes are not host bytes, but reporting them makes V8 collect forgotten buffers
  // before the device fills; cap the hint so huge buffers do not force constant collections.
  TrackExternal(env, a, static_cast<int64_t>(std::min<uint64_t>(bytes, 64u << 20)));
  return h;
}

// Runs once no ArrayBuffer holds the memory's backing store, wherever it was moved.
void FinalizePinnedStore(Napi::Env env, void*, Allocation* a) {
  a->store_gone = true;
  if (a->host_free_deferred) {
    a->host_free_deferred = false;
    FreeHostMemory(a);
  } else if (!a->released && !HostViewAlive(env, a)) {
    // The buffer's own ArrayBuffer was collected, and with it the PinnedBuffer that holds it: the
    // user forgot it. While the PinnedBuffer lives (its bytes moved away and dropped), copies by
    // handle still use the memory, and its free() gives it back.
    if (a->pending == 0)
      ReleaseAllocation(env, a);
    else
      a->free_requested = true;  // the last pending operation releases it
  }
  DropReference(a);
}

}  // namespace

Napi::Value ExposeHostMemory(Napi::Env env, Allocation* a) {
  Napi::Value h = WrapAllocation(env, a);
  a->refs = 2;  // the handle and the ArrayBuffer
  napi_value ab;
  napi_status s = napi_create_external_arraybuffer(
      env, a->ptr, a->bytes,
      [](napi_env e, void* data, void* hint) {
        FinalizePinnedStore(Napi::Env(e), data, static_cast<Allocation*>(hint));
      },
      a, &ab);
  if (s != napi_ok) {
    // Runtimes that refuse external buffers (Electron's V8 sandbox) get no pinned view rather
    // than a silent copy; the JS layer falls back to registering a V8-owned buffer.
    a->refs = 1;
    ReleaseAllocation(env, a);
    throw LibraryError(env, "ERR_EXTERNAL_BUFFERS_NOT_ALLOWED",
                       "external ArrayBuffers are not allowed in this runtime");
  }
  napi_create_reference(env, ab, 0, &a->host_ref);
  TrackExternal(env, a, static_cast<int64_t>(a->bytes));
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, h);
  out.Set(1u, Napi::Value(env, ab));
  return out;
}

namespace {

// pinnedAlloc: returns [handle, arrayBuffer]
Napi::Value PinnedAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t bytes = ReadSize(env, info[0], "bytes");
  unsigned flags = static_cast<unsigned>(ReadInt(env, info[1], "flags", 0, 7));
  int device = ReadInt(env, info[2], "device", 0, 1 << 20);
  if (bytes == 0) ThrowRange(env, "bytes must be at least 1, got 0");
  CheckDevice(env, device);
  void* ptr = nullptr;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaHostAlloc(&ptr, bytes, flags);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ThrowCuda(env, err, "cudaHostAlloc",
              "could not pin " + std::to_string(bytes) + " bytes of host memory");
  }
  Allocation* a = new Allocation(&kPinnedOps);
  a->device = device;
  a->ptr = ptr;
  a->bytes = bytes;
  a->flags = flags;
  if (flags & cudaHostAllocMapped) {
    err = cudaHostGetDevicePointer(&a->device_ptr, ptr, 0);
    if (err != cudaSuccess) {
      cudaFreeHost(ptr);
      delete a;
      ThrowCuda(env, err, "cudaHostGetDevicePointer");
    }
  }
  return ExposeHostMemory(env, a);
}

// registerHost: returns the handle. The view is held by a strong reference until unregistered, so
// its memory cannot be collected while page-locked.
Napi::Value RegisterHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  char* data = nullptr;
  size_t length = 0;
  if (!HostView(env, info[0], &data, &length)) ThrowType(env, "view must be an ArrayBuffer view");
  unsigned flags = static_cast<unsigned>(ReadInt(env, info[1], "flags", 0, 3));
  int device = ReadInt(env, info[2], "device", 0, 1 << 20);
  CheckDevice(env, device);
  if (length == 0) ThrowRange(env, "view must not be empty");
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaHostRegister(data, length, flags);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ThrowCuda(env, err, "cudaHostRegister",
              "could not page-lock " + std::to_string(length) + " bytes");
  }
  Allocation* a = new Allocation(&kRegisteredOps);
  a->device = device;
  a->ptr = data;
  a->bytes = length;
  a->flags = flags;
  if (flags & cudaHostRegisterMapped) {
    cudaHostGetDevicePointer(&a->device_ptr, data, 0);
    (void)cudaGetLastError();
  }
  napi_create_reference(env, info[0], 1, &a->host_ref);
  return WrapAllocation(env, a);
}

Napi::Value Free(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = UnwrapAllocation(env, info[0], "buffer", true);
  if (!a) return Napi::Boolean::New(env, false);
  if (a->pending > 0) {
    a->free_requested = true;  // the last pending operation releases it
    return Napi::Boolean::New(env, true);
  }
  ReleaseAllocation(env, a);
  return Napi::Boolean::New(env, true);
}

// freeOn: frees a buffer after the work queued on `stream`. A kind freed in stream order
// (BufferOps::free_on) is freed in that stream's order; any other memory waits for the stream, then
// is freed.
Napi::Value FreeOn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = UnwrapAllocation(env, info[0], "buffer", true);
  StreamRec* rec = UnwrapStreamRec(env, info[1]);
  if (!a) return Napi::Boolean::New(env, false);
  auto wait = [&] {
    cudaError_t err = cudaStreamSynchronize(rec->stream);
    if (err != cudaSuccess) ThrowCuda(env, err, "cudaStreamSynchronize");
  };
  if (a->pending > 0) {
    // A copyAsync still uses it: the stream's work so far is waited for now, and the buffer is
    // released when the copy settles (on its allocation stream, for a stream-ordered block).
    wait();
    a->free_requested = true;
    return Napi::Boolean::New(env, true);
  }
  if (a->ops->free_on)
    a->ops->free_on(a, rec->stream);
  else
    wait();
  ReleaseAllocation(env, a);
  return Napi::Boolean::New(env, true);
}

// An address as a JavaScript number, as every address the library reports is (snapshots and traces
// too): exact below 2^53, which device and host addresses on x86-64 and arm64 are. One that is
// not is refused rather than rounded.
Napi::Value AddressValue(Napi::Env env, const void* p) {
  uint64_t v = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
  if (v > 9007199254740991ull) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(v));
    throw LibraryError(
        env, "ERR_ADDRESS_RANGE",
        std::string("the address ") + hex + " is beyond 2^53 and has no exact JavaScript number");
  }
  return Napi::Number::New(env, static_cast<double>(v));
}

// handleInfo: returns { address: number, devicePointer: number|null, released, simulated }
Napi::Value HandleInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = UnwrapAllocation(env, info[0], "buffer", true);
  Napi::Object o = Napi::Object::New(env);
  if (!a) {
    o.Set("released", true);
    return o;
  }
  o.Set("address", AddressValue(env, a->ptr));
  o.Set("devicePointer", a->device_ptr ? AddressValue(env, a->device_ptr) : env.Null());
  o.Set("released", false);
  o.Set("simulated", a->simulated);
  return o;
}

Napi::Value LiveCount(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(GetInstance(info.Env()).handles.size()));
}

}  // namespace

void ReleaseAllLive(Napi::Env env) {
  Napi::HandleScope scope(env);  // a release op may still make handles (none reaches JavaScript)
  for (Allocation* a : GetInstance(env).handles.Live())
    if (a->pending == 0) {
      a->env_closing = true;
      ReleaseAllocation(env, a);
    }
}

void InitMemory(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"deviceAlloc", DeviceAlloc},
               {"pinnedAlloc", PinnedAlloc},
               {"registerHost", RegisterHost},
               {"free", Free},
               {"freeOn", FreeOn},
               {"handleInfo", HandleInfo},
               {"liveCount", LiveCount},
           });
}

}  // namespace cm
