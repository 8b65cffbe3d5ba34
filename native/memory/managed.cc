#include "memory/managed.h"

#include <string>
#include <vector>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "binding/instance.h"
#include "binding/promise_worker.h"
#include "device/discovery.h"
#include "device/stream.h"
#include "memory/buffers.h"

namespace cm {

namespace {

// Locations cross as numbers: a device index, or -1 for the host (cudaCpuDeviceId).
constexpr int kHost = -1;

cudaMemLocation LocationOf(int where) {
  cudaMemLocation l{};
  if (where == kHost) {
    l.type = cudaMemLocationTypeHost;
    l.id = 0;
  } else {
    l.type = cudaMemLocationTypeDevice;
    l.id = where;
  }
  return l;
}

Napi::Value LocationValue(Napi::Env env, int type, int id) {
  if (type == cudaMemLocationTypeDevice) return Napi::Number::New(env, id);
  if (type == cudaMemLocationTypeHost || type == cudaMemLocationTypeHostNuma ||
      type == cudaMemLocationTypeHostNumaCurrent)
    return Napi::String::New(env, "host");
  return env.Null();
}

int ReadLocation(Napi::Env env, Napi::Value v, const char* what) {
  int where = ReadInt(env, v, what, kHost, 1 << 20);
  if (where != kHost) CheckDevice(env, where);
  return where;
}

// The host sees managed memory through an ArrayBuffer, as it sees pinned memory, so the views go
// before the memory. Freeing while the runtime unloads at process exit may report an error; it is
// harmless. Not exportable: cudaIpcGetMemHandle does not share managed memory.
// Its bytes are an external ArrayBuffer, as pinned memory's are: the memory is given back only
// once no ArrayBuffer can reach it (ReleaseHostMemory).
const BufferOps kManagedOps{
    /*on_device=*/true,
    /*release=*/ReleaseHostMemory,
    /*before_use=*/nullptr,
    /*export_range=*/nullptr,
    /*free_host=*/
    [](Allocation* a) noexcept {
      cudaSetDevice(a->device);
      cudaFree(a->ptr);
      (void)cudaGetLastError();
    },
    /*managed=*/true,
    /*free_on=*/nullptr,
    /*kind=*/"managed",
};

Allocation* UnwrapManaged(Napi::Env env, Napi::Value v) {
  Allocation* a = UnwrapAllocation(env, v, "buffer");
  if (a->ops != &kManagedOps) ThrowType(env, "buffer must be a ManagedBuffer");
  return a;
}

// The arguments every range call opens with, (buffer, offset, byteLength), once CUDA is there:
// the range [offset, offset + byteLength) of the managed buffer they name (set in *out), checked
// against its length. Returns where the range starts, and its length in *n.
char* ReadManagedRange(const Napi::CallbackInfo& info, Allocation** out, size_t* n) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  Allocation* a = *out = UnwrapManaged(env, info[0]);
  uint64_t offset = ReadSize(env, info[1], "offset");
  uint64_t bytes = ReadSize(env, info[2], "byteLength");
  if (offset > a->bytes || bytes > a->bytes - offset)
    ThrowRange(env, "offset + byteLength (" + std::to_string(offset) + " + " +
                        std::to_string(bytes) + ") runs past the end of the buffer (" +
                        std::to_string(a->bytes) + " bytes)");
  *n = bytes;
  return static_cast<char*>(a->ptr) + offset;
}

// managedAlloc: returns [handle, arrayBuffer]
Napi::Value ManagedAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t bytes = ReadSize(env, info[0], "bytes");
  int device = ReadInt(env, info[1], "device", 0, 1 << 20);
  unsigned flags = info[2].ToBoolean() ? cudaMemAttachHost : cudaMemAttachGlobal;
  CheckRange(env, "bytes", bytes, uint64_t{1}, UINT64_MAX, "at least 1");
  CheckDevice(env, device);
  int supported = 0;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&supported, cudaDevAttrManagedMemory, device);
  if (err == cudaSuccess && !supported)
    throw LibraryError(env, "ERR_NOT_SUPPORTED",
                       "device " + std::to_string(device) +
                           " cannot allocate managed memory on this system "
                           "(cudaDevAttrManagedMemory is 0)");
  void* ptr = nullptr;
  if (err == cudaSuccess) err = cudaMallocManaged(&ptr, bytes, flags);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    // With the device's free and total memory, as cudaMalloc's (the sentence names them).
    if (err == cudaErrorMemoryAllocation) ThrowDeviceOom(env, bytes, device, "cudaMallocManaged");
    ThrowCuda(env, err, "cudaMallocManaged");
  }
  Allocation* a = new Allocation(&kManagedOps);
  a->device = device;
  a->ptr = ptr;
  a->bytes = bytes;
  a->flags = flags;
  return ExposeHostMemory(env, a);
}

// Runs cudaMemPrefetchAsync on a pool thread and settles once the stream has reached it. The call
// holds the thread that makes it while the driver moves the pages (to a device about 1.0 of 1.4 ms
// for 64 MiB on an H100 and 18 of 22 ms for 1 GiB, to the host all of it), so it is never made on
// the event loop; and it is made whole: the calling thread moving the first MiBs while the pool
// thread wakes cost more than that wake-up saves (scripts/awaited-call-wakeups.cc, head-N).
class PrefetchWorker : public PromiseWorker {
 public:
  PrefetchWorker(Napi::Env env, Allocation* a, char* ptr, size_t n, int where, StreamRec* rec,
                 Napi::Value keep)
      : PromiseWorker(env, "cuda-memory:prefetch"),
        a_(a),
        ptr_(ptr),
        n_(n),
        where_(where),
        rec_(rec),
        stream_(rec ? rec->stream : nullptr) {
    a_->pending++;
    a_->refs++;
    if (rec_) HoldStream(rec_);
    if (keep.IsObject()) keep_ = Napi::Persistent(keep.As<Napi::Object>());
  }

 protected:
  void Work() override {
    CM_TRY(err_, cudaSetDevice(where_ == kHost ? a_->device : where_), "cudaSetDevice");
    if (!err_ && n_)
      CM_TRY(err_, cudaMemPrefetchAsync(ptr_, n_, LocationOf(where_), 0, stream_),
             "cudaMemPrefetchAsync");
    if (!err_) CM_TRY(err_, cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void Release(Napi::Env env) noexcept override {
    if (--a_->pending == 0 && a_->free_requested) ReleaseAllocation(env, a_);
    DropReference(a_);
    if (rec_) {
      DropStream(rec_);
      rec_ = nullptr;
    }
  }

  Napi::Value Settlement(Napi::Env env, bool* reject) override {
    if (!err_) return env.Undefined();
    *reject = true;
    return MakeCudaError(env, err_.code, err_.call, err_.detail);
  }

 private:
  Allocation* a_;
  char* ptr_;
  size_t n_;
  int where_;
  StreamRec* rec_;
  cudaStream_t stream_;
  Error err_;
  Napi::ObjectReference keep_;
};

// managedPrefetch: returns Promise<void>
Napi::Value ManagedPrefetch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = nullptr;
  size_t n = 0;
  char* p = ReadManagedRange(info, &a, &n);
  int where = ReadLocation(env, info[3], "location");
  StreamRec* rec = info.Length() > 4 && !Absent(info[4]) ? UnwrapStreamRec(env, info[4]) : nullptr;
  auto* w =
      new PrefetchWorker(env, a, p, n, where, rec, info.Length() > 4 ? info[4] : env.Undefined());
  Napi::Promise promise = w->Promise();
  w->Queue();
  return promise;
}

Napi::Value ManagedAdvise(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = nullptr;
  size_t n = 0;
  char* p = ReadManagedRange(info, &a, &n);
  int advice =
      ReadInt(env, info[3], "advice", cudaMemAdviseSetReadMostly, cudaMemAdviseUnsetAccessedBy);
  int where = ReadLocation(env, info[4], "location");
  cudaError_t err = cudaSetDevice(a->device);
  if (err == cudaSuccess && n)
    err = cudaMemAdvise(p, n, static_cast<cudaMemoryAdvise>(advice), LocationOf(where));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ThrowCuda(env, err, "cudaMemAdvise");
  }
  return env.Undefined();
}

// managedAttributes: returns { readMostly, preferredLocation, lastPrefetchLocation, accessedBy } as
// cudaMemRangeGetAttribute reports them for the range.
Napi::Value ManagedAttributes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = nullptr;
  size_t n = 0;
  char* p = ReadManagedRange(info, &a, &n);
  CheckRange(env, "byteLength", n, size_t{1}, SIZE_MAX, "at least 1 to read a range's attributes",
             Got::kLeftOut);
  cudaError_t err = cudaSetDevice(a->device);
  auto get = [&](cudaMemRangeAttribute attr, void* data, size_t size) {
    if (err == cudaSuccess) err = cudaMemRangeGetAttribute(data, size, attr, p, n);
  };
  int read_mostly = 0, pref_type = 0, pref_id = 0, last_type = 0, last_id = 0;
  get(cudaMemRangeAttributeReadMostly, &read_mostly, sizeof read_mostly);
  get(cudaMemRangeAttributePreferredLocationType, &pref_type, sizeof pref_type);
  get(cudaMemRangeAttributePreferredLocationId, &pref_id, sizeof pref_id);
  get(cudaMemRangeAttributeLastPrefetchLocationType, &last_type, sizeof last_type);
  get(cudaMemRangeAttributeLastPrefetchLocationId, &last_id, sizeof last_id);
  // One entry per device that could be named, plus the host; unused entries read -2
  // (cudaInvalidDeviceId).
  std::vector<int> accessed(static_cast<size_t>(GetStatus(env).device_count) + 1, -2);
  get(cudaMemRangeAttributeAccessedBy, accessed.data(), accessed.size() * sizeof(int));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ThrowCuda(env, err, "cudaMemRangeGetAttribute");
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("readMostly", read_mostly != 0);
  o.Set("preferredLocation", LocationValue(env, pref_type, pref_id));
  o.Set("lastPrefetchLocation", LocationValue(env, last_type, last_id));
  Napi::Array by = Napi::Array::New(env);
  uint32_t k = 0;
  for (int d : accessed) {
    if (d == -1) by.Set(k++, Napi::String::New(env, "host"));
    if (d >= 0) by.Set(k++, Napi::Number::New(env, d));
  }
  o.Set("accessedBy", by);
  return o;
}

// managedConcurrent: returns whether the device accesses managed memory concurrently with the host
// (cudaDevAttrConcurrentManagedAccess).
Napi::Value ManagedConcurrent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  int device = ReadInt(env, info[0], "device", 0, 1 << 20);
  CheckDevice(env, device);
  return Napi::Boolean::New(env, ConcurrentManagedAccess(device));
}

// managedSynchronize: waits for all work on the device (cudaDeviceSynchronize), which a device
// without concurrent managed access needs before the host touches managed memory.
Napi::Value ManagedSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  int device = ReadInt(env, info[0], "device", 0, 1 << 20);
  CheckDevice(env, device);
  cudaError_t err = UseDevice(device);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ThrowCuda(env, err, "cudaDeviceSynchronize");
  }
  return env.Undefined();
}

}  // namespace

bool ConcurrentManagedAccess(int device) noexcept {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return v != 0;
}

void InitManaged(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"managedAlloc", ManagedAlloc},
               {"managedPrefetch", ManagedPrefetch},
               {"managedAdvise", ManagedAdvise},
               {"managedAttributes", ManagedAttributes},
               {"managedConcurrent", ManagedConcurrent},
               {"managedSynchronize", ManagedSynchronize},
           });
}

}  // namespace cm
