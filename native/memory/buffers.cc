#include "memory/buffers.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "binding/instance.h"
#include "core/device/numa.h"
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
    /*free_host=*/nullptr,
    /*managed=*/false,
    /*free_on=*/nullptr,
    /*kind=*/"device",
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
    /*managed=*/false,
    /*free_on=*/nullptr,
    /*kind=*/"pinned",
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
    /*before_use=*/nullptr,
    /*export_range=*/nullptr,
    /*free_host=*/nullptr,
    /*managed=*/false,
    /*free_on=*/nullptr,
    /*kind=*/"registered",
};

void ThrowDeviceOom(Napi::Env env, uint64_t bytes, int device, const char* call) {
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  (void)cudaGetLastError();
  Napi::Object d = Napi::Object::New(env);
  d.Set("requestedBytes", static_cast<double>(bytes));
  d.Set("device", device);
  d.Set("deviceFree", static_cast<double>(free_b));
  d.Set("deviceTotal", static_cast<double>(total_b));
  d.Set("call", call);
  ThrowValue(env, MakeOutOfMemoryError(env, d));
}

// cudaMalloc on `device`; out of memory is an OutOfMemoryError with the device's free memory.
void* DeviceMalloc(Napi::Env env, uint64_t bytes, int device) {
  CheckDevice(env, device);
  void* ptr = nullptr;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMalloc(&ptr, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) ThrowDeviceOom(env, bytes, device, "cudaMalloc");
    ThrowCuda(env, err, "cudaMalloc");
  }
  return ptr;
}

Napi::Value DeviceAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t bytes = ReadSize(env, info[0], "bytes");
  int device = ReadInt(env, info[1], "device", 0, 1 << 20);
  CheckRange(env, "bytes", bytes, uint64_t{1}, UINT64_MAX, "at least 1");
  void* ptr = DeviceMalloc(env, bytes, device);
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

// What a mapped host allocation does when the driver gives it no device pointer: a PinnedBuffer
// asked for mapped memory, so its allocation fails (the memory given back with cudaFreeHost, the
// only kind that requires it); a registered view goes on with devicePointer null.
enum class DevicePointer { kRequired, kOptional };

// The setup both kinds of page-locked host memory share: `lock` (cudaHostAlloc or cudaHostRegister,
// named `call`, which sets the pointer) runs on `device`, and its failure is the CudaError with
// `detail`; then the allocation of `ops` over those bytes, with its device pointer where `mapped`.
template <class Lock>
Allocation* PageLockHost(Napi::Env env, const BufferOps* ops, int device, size_t bytes,
                         unsigned flags, bool mapped, DevicePointer device_pointer,
                         const char* call, const std::string& detail, Lock lock) {
  void* ptr = nullptr;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = lock(&ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ThrowCuda(env, err, call, detail);
  }
  Allocation* a = new Allocation(ops);
  a->device = device;
  a->ptr = ptr;
  a->bytes = bytes;
  a->flags = flags;
  if (mapped) {
    err = cudaHostGetDevicePointer(&a->device_ptr, ptr, 0);
    if (device_pointer == DevicePointer::kOptional) {
      (void)cudaGetLastError();
    } else if (err != cudaSuccess) {
      cudaFreeHost(ptr);
      delete a;
      ThrowCuda(env, err, "cudaHostGetDevicePointer");
    }
  }
  return a;
}

// pinnedAlloc: returns [handle, arrayBuffer]
Napi::Value PinnedAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t bytes = ReadSize(env, info[0], "bytes");
  unsigned flags = static_cast<unsigned>(ReadInt(env, info[1], "flags", 0, 7));
  int device = ReadInt(env, info[2], "device", 0, 1 << 20);
  CheckRange(env, "bytes", bytes, uint64_t{1}, UINT64_MAX, "at least 1");
  CheckDevice(env, device);
  Allocation* a = PageLockHost(env, &kPinnedOps, device, bytes, flags, flags & cudaHostAllocMapped,
                               DevicePointer::kRequired, "cudaHostAlloc",
                               "could not pin " + std::to_string(bytes) + " bytes of host memory",
                               [&](void** ptr) { return cudaHostAlloc(ptr, bytes, flags); });
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
  Allocation* a =
      PageLockHost(env, &kRegisteredOps, device, length, flags, flags & cudaHostRegisterMapped,
                   DevicePointer::kOptional, "cudaHostRegister",
                   "could not page-lock " + std::to_string(length) + " bytes", [&](void** ptr) {
                     *ptr = data;
                     return cudaHostRegister(data, length, flags);
                   });
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

// handleInfo: returns { address: number, devicePointer: number|null, released, simulated,
// numaNode }
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
  // Host memory: the NUMA node its first page is on (-1 unknown), which a copy's rate depends on.
  o.Set("numaNode", a->ops->on_device || a->simulated ? -1 : core::NodeOfAddress(a->ptr));
  return o;
}

Napi::Value LiveCount(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(Handles(info.Env()).size()));
}

// Raw allocations (rawDeviceAlloc): a cudaMalloc that no handle, pool or finalizer knows of, as a
// test's own CUDA code would make, so that leak checks can be tested against such memory. They are
// listed here only so that leak reports can name them; on a simulated device nothing is
// allocated and the address is made up.
struct RawAllocations : InstanceState {
  struct Raw {
    uint64_t address, bytes;
    int device;
    bool simulated;
    bool listed;  // counted by liveSummary(); unlisted ones only the driver sees
    std::string where;
  };
  std::vector<Raw> live;
  uint64_t next_simulated = 1ull << 40;
  ~RawAllocations() override {  // the environment goes away: nothing can free them after
    for (const Raw& r : live)
      if (!r.simulated) {
        cudaSetDevice(r.device);
        cudaFree(reinterpret_cast<void*>(static_cast<uintptr_t>(r.address)));
        (void)cudaGetLastError();
      }
  }
};

// liveSummary: returns [{ kind, device, simulated, count, bytes, where }]: the live buffers of this
// environment by kind and device, and the listed raw allocations, for leak checks. A buffer freed
// while a copy still uses it counts until that copy settles, since its memory is held until then.
Napi::Value LiveSummary(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<LiveRow> rows;
  for (Allocation* a : Handles(env).Live())
    CountLive(&rows, KindOf(a), a->device, a->simulated, a->bytes);
  for (const RawAllocations::Raw& r : GetInstance(env).State<RawAllocations>().live) {
    if (!r.listed) continue;
    LiveRow& row = CountLive(&rows, "raw", r.device, r.simulated, r.bytes);
    if (!r.where.empty()) row.where.push_back(r.where);
  }
  return LiveRowsValue(env, rows);
}

// liveElsewhere: returns [{ kind, device, simulated, count, bytes, where: [], thread }]: what the
// process's other environments (worker threads) hold, from the process-wide tally, leaving out
// those that run a leak gate of their own. An allocator is counted, not its pool's bytes (0).
Napi::Value LiveElsewhere(const Napi::CallbackInfo& info) {
  std::vector<LiveRow> rows;
  for (const tally::Row& r : tally::Others(GetInstance(info.Env()).tally_id))
    rows.push_back(LiveRow{r.kind, r.device, r.simulated, r.count, r.bytes, {}, r.thread});
  return LiveRowsValue(info.Env(), rows);
}

// leakGateHere: this environment runs a leak gate, which checks what it holds: the gates of
// other environments leave it out of liveElsewhere().
Napi::Value LeakGateHere(const Napi::CallbackInfo& info) {
  tally::SetGated(GetInstance(info.Env()).tally_id);
  return info.Env().Undefined();
}

// rawDeviceAlloc: returns the allocation's device address
Napi::Value RawDeviceAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t bytes = ReadSize(env, info[0], "bytes");
  int device = ReadInt(env, info[1], "device", 0, 1 << 20);
  bool simulated = info[2].ToBoolean();
  std::string where = info[3].IsString() ? info[3].As<Napi::String>().Utf8Value() : "";
  bool listed = info[4].IsUndefined() || info[4].ToBoolean();
  CheckRange(env, "bytes", bytes, uint64_t{1}, UINT64_MAX, "at least 1");
  RawAllocations& raw = GetInstance(env).State<RawAllocations>();
  uint64_t address = 0;
  if (simulated) {
    address = raw.next_simulated;
    raw.next_simulated += (bytes + 255) / 256 * 256;
  } else {
    address = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(DeviceMalloc(env, bytes, device)));
  }
  raw.live.push_back(RawAllocations::Raw{address, bytes, device, simulated, listed, where});
  if (listed)
    tally::Change(GetInstance(env).tally_id, "raw", device, simulated, 1,
                  static_cast<double>(bytes));
  return Napi::Number::New(env, static_cast<double>(address));
}

// rawDeviceFree: returns whether it was a live raw allocation (and is freed now)
Napi::Value RawDeviceFree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t address = ReadSize(env, info[0], "address");
  RawAllocations& raw = GetInstance(env).State<RawAllocations>();
  for (size_t i = 0; i < raw.live.size(); ++i) {
    if (raw.live[i].address != address) continue;
    RawAllocations::Raw r = raw.live[i];
    raw.live.erase(raw.live.begin() + static_cast<std::ptrdiff_t>(i));
    if (r.listed)
      tally::Change(GetInstance(env).tally_id, "raw", r.device, r.simulated, -1,
                    -static_cast<double>(r.bytes));
    if (!r.simulated) {
      cudaSetDevice(r.device);
      cudaFree(reinterpret_cast<void*>(static_cast<uintptr_t>(r.address)));
      (void)cudaGetLastError();
    }
    return Napi::Boolean::New(env, true);
  }
  return Napi::Boolean::New(env, false);
}

}  // namespace

LiveRow& CountLive(std::vector<LiveRow>* rows, const std::string& kind, int device, bool simulated,
                   uint64_t bytes) {
  LiveRow* row = nullptr;
  for (LiveRow& r : *rows)
    if (r.kind == kind && r.device == device && r.simulated == simulated) row = &r;
  if (!row) {
    rows->push_back(LiveRow{kind, device, simulated, 0, 0, {}});
    row = &rows->back();
  }
  row->count += 1;
  row->bytes += static_cast<double>(bytes);
  return *row;
}

Napi::Array LiveRowsValue(Napi::Env env, const std::vector<LiveRow>& rows) {
  Napi::Array out = Napi::Array::New(env, rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("kind", rows[i].kind);
    o.Set("device", rows[i].device);
    o.Set("simulated", rows[i].simulated);
    o.Set("count", rows[i].count);
    o.Set("bytes", rows[i].bytes);
    Napi::Array where = Napi::Array::New(env, rows[i].where.size());
    for (size_t j = 0; j < rows[i].where.size(); ++j)
      where.Set(static_cast<uint32_t>(j), rows[i].where[j]);
    o.Set("where", where);
    if (rows[i].thread >= 0) o.Set("thread", rows[i].thread);
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

void ReleaseAllLive(Napi::Env env) {
  Napi::HandleScope scope(env);  // a release op may still make handles (none reaches JavaScript)
  for (Allocation* a : Handles(env).Live())
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
               {"liveSummary", LiveSummary},
               {"liveElsewhere", LiveElsewhere},
               {"leakGateHere", LeakGateHere},
               {"rawDeviceAlloc", RawDeviceAlloc},
               {"rawDeviceFree", RawDeviceFree},
           });
}

}  // namespace cm
