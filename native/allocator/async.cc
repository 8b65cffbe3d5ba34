#include "allocator/async.h"

#include <algorithm>

#include "binding/args.h"
#include "binding/errors.h"
#include "core/allocator/policy.h"
#include "device/discovery.h"
#include "device/stream.h"

namespace cm {

namespace {
uint64_t PoolAttr(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  uint64_t v = 0;  // a cuuint64_t, 64 bits
  if (pool && cudaMemPoolGetAttribute(pool, attr, &v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return static_cast<uint64_t>(v);
}

void SetPoolAttr(cudaMemPool_t pool, cudaMemPoolAttr attr, uint64_t value) {
  uint64_t v = value;
  cudaMemPoolSetAttribute(pool, attr, &v);
  (void)cudaGetLastError();
}

// The out-of-memory report: the allocator's figures, the pool's reservation, the device.
core::OomInfo Report(const AsyncBackend& p, uint64_t requested) {
  core::OomInfo o = p.budget.Oom(requested);
  o.device = p.device;
  o.pool_bytes = PoolAttr(p.pool, cudaMemPoolAttrReservedMemCurrent);
  uint64_t used = PoolAttr(p.pool, cudaMemPoolAttrUsedMemCurrent);
  o.largest_free_block = o.pool_bytes > used ? o.pool_bytes - used : 0;
  core::MemInfo mi = DeviceMemInfo(p.device);
  o.device_free = mi.free;
  o.device_total = mi.total;
  return o;
}

}  // namespace

BackendRef CreateAsyncBackend(Napi::Env env, const AllocatorOptions& o) {
  int device = o.device;
  CheckDevice(env, device);
  int supported = 0;
  cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device);
  (void)cudaGetLastError();
  if (!supported)
    ThrowRange(env, "device " + std::to_string(device) +
                        " does not support stream-ordered memory pools (cudaMallocAsync); use "
                        "backend 'bfc'");
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  core::ResolvedLimit limit;
  try {
    limit = core::ResolveLimit(o.spec.policy, DeviceMemInfo(device), major, minor);
    // What is reserved at creation and kept: the whole limit without growth, else
    // initialPoolBytes.
    if (o.spec.allow_growth)
      core::CheckInitialBytes(o.spec.initial_bytes, limit.bytes, limit.source);
  } catch (const std::invalid_argument& e) {
    ThrowRange(env, e.what());
  }
  auto p = std::make_shared<AsyncBackend>(limit.bytes, limit.source);
  p->device = device;
  p->cc_major = major;
  p->cc_minor = minor;
  p->allow_growth = o.spec.allow_growth;
  p->own = !o.async_default_pool;
  uint64_t keep = p->allow_growth ? o.spec.initial_bytes : limit.bytes;
  p->initial_bytes = p->allow_growth ? keep : 0;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess && p->own) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    err = cudaMemPoolCreate(&p->pool, &props);
  } else if (err == cudaSuccess) {
    err = cudaDeviceGetDefaultMemPool(&p->pool, device);
  }
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&p->order, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ThrowCuda(env, err, p->own ? "cudaMemPoolCreate" : "cudaDeviceGetDefaultMemPool");
  }
  // allowGrowth: give unused memory back at each synchronization (threshold 0, or the initial
  // pool). Preallocation: reserve the whole limit now and keep it (threshold = limit), as the BFC
  // pool takes it.
  // The driver reserves in granules of its own: while the reservation is made nothing is given
  // back, and then the threshold is what it reserved, so that a synchronization keeps all of it
  // (a threshold below the granule would let it give the whole granule back).
  // The device's default pool is the whole process's: an allocator that cannot be made leaves
  // its threshold as it found it, on every way out.
  const uint64_t threshold_before = PoolAttr(p->pool, cudaMemPoolAttrReleaseThreshold);
  SetPoolAttr(p->pool, cudaMemPoolAttrReleaseThreshold, keep ? UINT64_MAX : 0);
  if (keep > 0) {
    void* ptr = nullptr;
    err = cudaMallocFromPoolAsync(&ptr, keep, p->pool, nullptr);
    if (err == cudaSuccess) err = cudaFreeAsync(ptr, nullptr);
    if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      if (!p->own) SetPoolAttr(p->pool, cudaMemPoolAttrReleaseThreshold, threshold_before);
      if (err == cudaErrorMemoryAllocation) {
        p->budget.CountOom();
        ThrowValue(env, OomError(env, Report(*p, keep)));
      }
      ThrowCuda(env, err, "cudaMallocFromPoolAsync", "reserving the allocator's limit");
    }
    SetPoolAttr(p->pool, cudaMemPoolAttrReleaseThreshold,
                std::max(keep, PoolAttr(p->pool, cudaMemPoolAttrReservedMemCurrent)));
  }
  return p;
}

namespace {

cudaEvent_t TakeEvent(AsyncBackend* p) {
  if (!p->idle_events.empty()) {
    cudaEvent_t e = p->idle_events.back();
    p->idle_events.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return e;
}

void GiveEvent(AsyncBackend* p, cudaEvent_t e) noexcept {
  if (!e) return;
  if (p && p->idle_events.size() < 64) {
    p->idle_events.push_back(e);
  } else {
    cudaEventDestroy(e);
    (void)cudaGetLastError();
  }
}

// Gives back every byte the pool holds that no block uses: after the device's queued work, so
// that frees still pending in stream order count.
uint64_t Trim(AsyncBackend* p) noexcept {
  cudaSetDevice(p->device);
  cudaDeviceSynchronize();
  uint64_t before = PoolAttr(p->pool, cudaMemPoolAttrReservedMemCurrent);
  cudaMemPoolTrimTo(p->pool, 0);
  (void)cudaGetLastError();
  uint64_t after = PoolAttr(p->pool, cudaMemPoolAttrReservedMemCurrent);
  return before > after ? before - after : 0;
}

// The end of close(): trims the pool and destroys it if it is the allocator's own; returns the
// bytes given back.
uint64_t DestroyPool(AsyncBackend* p) noexcept {
  uint64_t released = Trim(p);
  if (p->own && p->pool) {
    cudaMemPoolDestroy(p->pool);
    (void)cudaGetLastError();
    p->pool = nullptr;
  }
  return released;
}

// Frees a block in stream order (its allocation stream, or the one free({ stream }) named).
void ReleaseAsyncBlock(napi_env env, Allocation* alloc) noexcept {
  auto* a = static_cast<AsyncAllocation*>(alloc);
  AsyncBackend* p = a->pool.get();
  cudaStream_t s = a->stream ? a->stream->stream : nullptr;  // null once that stream was disposed
  cudaSetDevice(a->device);
  if (a->ready) {
    GiveEvent(p, a->ready);
    a->ready = nullptr;
  }
  if (a->free_on_stream && a->free_stream != s) {
    // Freed on another stream: that stream first waits for all work queued so far on the
    // allocating one, so no use of the block there can overlap its reuse.
    if (p && p->order && cudaEventRecord(p->order, s) == cudaSuccess)
      cudaStreamWaitEvent(a->free_stream, p->order, 0);
    s = a->free_stream;
  }
  if (p && p->pool) {
    cudaFreeAsync(a->base ? a->base : a->ptr, s);
    p->budget.Release(a->bytes, a->charged);
    if (p->closed && p->deferred > 0 && --p->deferred == 0) DestroyPool(p);
  }
  (void)cudaGetLastError();
  if (a->host_ref) {
    napi_delete_reference(env, a->host_ref);
    a->host_ref = nullptr;
  }
  a->stream = nullptr;
  a->pool.reset();
}

// Before a use on `stream` (null: the legacy default stream): if the block was allocated on
// another stream, waits until that stream has reached the allocation.
void AwaitAllocation(Allocation* alloc, cudaStream_t stream) {
  auto* a = static_cast<AsyncAllocation*>(alloc);
  if (!a->ready) return;
  if (a->stream && a->stream->stream == stream) return;  // the same stream: already in order
  cudaEventSynchronize(a->ready);
  (void)cudaGetLastError();
  GiveEvent(a->pool.get(), a->ready);
  a->ready = nullptr;
}

const BufferOps kAsyncBlockOps{
    /*on_device=*/true,
    /*release=*/ReleaseAsyncBlock,
    /*before_use=*/AwaitAllocation,
    /*export_range=*/
    [](Napi::Env env, Allocation*, void**, uint64_t*) {
      throw LibraryError(env, "ERR_NOT_SUPPORTED",
                         "a block of a stream-ordered ('async') allocator cannot be exported: its "
                         "pool was not created for IPC (use the 'bfc' backend, or "
                         "DeviceBuffer.alloc)");
    },
    /*free_host=*/nullptr,
    /*managed=*/false,
    /*free_on=*/
    [](Allocation* alloc, cudaStream_t stream) {
      auto* a = static_cast<AsyncAllocation*>(alloc);
      a->free_on_stream = true;
      a->free_stream = stream;
    },
    /*kind=*/"allocator-block",
};

}  // namespace

// `stream` (a Stream's handle, or undefined): the block is allocated in its order.
Napi::Value AsyncBackend::Alloc(Napi::Env env, const BackendRef& self, uint64_t bytes,
                                size_t alignment, Napi::Value stream) {
  AsyncBackend* p = this;
  StreamRec* rec = nullptr;
  if (!Absent(stream)) {
    rec = UnwrapStreamRec(env, stream);
    if (rec->device != p->device)
      ThrowRange(env, "the stream is on device " + std::to_string(rec->device) +
                          " but the allocator on device " + std::to_string(p->device));
  }
  // cudaMallocFromPoolAsync aligns to 256 bytes: a larger alignment takes room for the padding
  // (RMM's aligned_resource_adaptor does the same) and the budget is charged for it.
  uint64_t charged = bytes;
  if (alignment > core::kMinBlock) {
    if (bytes > UINT64_MAX - alignment) ThrowRange(env, "bytes plus alignment overflow");
    charged = bytes + alignment - core::kMinBlock;
  }
  auto oom_report = [&]() {
    core::OomInfo o = Report(*p, bytes);
    o.alignment = alignment;
    return o;
  };
  if (!p->budget.Charge(bytes, charged)) ThrowValue(env, OomError(env, oom_report()));
  cudaStream_t s = rec ? rec->stream : nullptr;
  void* ptr = nullptr;
  cudaError_t err = cudaSetDevice(p->device);
  if (err == cudaSuccess) err = cudaMallocFromPoolAsync(&ptr, charged, p->pool, s);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    p->budget.Uncharge(bytes, charged);
    if (err == cudaErrorMemoryAllocation) {
      p->budget.CountOom();
      core::OomInfo o = oom_report();
      Napi::Value e = OomError(env, o);
      e.As<Napi::Object>().Set("call", "cudaMallocFromPoolAsync");
      ThrowValue(env, e);
    }
    ThrowCuda(env, err, "cudaMallocFromPoolAsync");
  }
  auto* a = new AsyncAllocation(&kAsyncBlockOps);
  a->device = p->device;
  a->ptr = ptr;
  a->charged = charged;
  if (alignment > core::kMinBlock) {
    uintptr_t at = reinterpret_cast<uintptr_t>(ptr);
    a->base = ptr;
    a->ptr = reinterpret_cast<void*>((at + alignment - 1) / alignment * alignment);
  }
  a->bytes = bytes;
  a->pool = std::static_pointer_cast<AsyncBackend>(self);
  if (rec) {
    a->stream = rec;
    napi_create_reference(env, stream, 1, &a->host_ref);  // keeps the stream's record alive
    a->ready = TakeEvent(p);
    if (a->ready && cudaEventRecord(a->ready, s) != cudaSuccess) {
      (void)cudaGetLastError();
      GiveEvent(p, a->ready);
      a->ready = nullptr;
      cudaStreamSynchronize(s);  // no event: make the allocation complete now instead
      (void)cudaGetLastError();
    }
  }
  return WrapAllocation(env, a);
}

Napi::Object AsyncBackend::Stats(Napi::Env env) {
  AsyncBackend* p = this;
  core::PoolStats s = p->budget.Stats();
  uint64_t reserved = PoolAttr(p->pool, cudaMemPoolAttrReservedMemCurrent);
  uint64_t reserved_high = PoolAttr(p->pool, cudaMemPoolAttrReservedMemHigh);
  uint64_t used = PoolAttr(p->pool, cudaMemPoolAttrUsedMemCurrent);
  // The driver keeps the reservation: its current and high-water figures are the pool's; how
  // much it took and gave back over time, and in how many pieces, it does not say.
  s.pool_bytes = s.counters.reserved_bytes.current = reserved;
  s.peak_pool_bytes = s.counters.reserved_bytes.peak = reserved_high;
  s.largest_free_block = reserved > used ? reserved - used : 0;
  Napi::Object o = StatsObject(env, s);
  Napi::Object m = Napi::Object::New(env);
  m.Set("reservedBytes", static_cast<double>(reserved));
  m.Set("reservedPeakBytes", static_cast<double>(reserved_high));
  m.Set("usedBytes", static_cast<double>(used));
  m.Set("usedPeakBytes", static_cast<double>(PoolAttr(p->pool, cudaMemPoolAttrUsedMemHigh)));
  m.Set("releaseThreshold",
        static_cast<double>(PoolAttr(p->pool, cudaMemPoolAttrReleaseThreshold)));
  o.Set("cudaMemPool", m);
  return o;
}

Napi::Object AsyncBackend::Info(Napi::Env env) {
  AsyncBackend* p = this;
  core::MemInfo mi = DeviceMemInfo(p->device);
  Napi::Object o = Napi::Object::New(env);
  o.Set("device", p->device);
  o.Set("simulated", false);
  o.Set("allowGrowth", p->allow_growth);
  o.Set("garbageCollection", false);
  o.Set("limitBytes", static_cast<double>(p->budget.limit()));
  o.Set("limitSource", p->budget.limit_source());
  o.Set("initialPoolBytes", static_cast<double>(p->initial_bytes));
  o.Set("deviceFree", static_cast<double>(mi.free));
  o.Set("deviceTotal", static_cast<double>(mi.total));
  o.Set("computeCapability", std::to_string(p->cc_major) + "." + std::to_string(p->cc_minor));
  o.Set("liveBlocks", static_cast<double>(p->budget.live()));
  o.Set("defaultPool", !p->own);
  return o;
}

void AsyncBackend::ResetPeak() {
  budget.ResetPeak();
  // CUDA allows the high watermarks to be reset to zero only, which sets them to the current
  // values.
  SetPoolAttr(pool, cudaMemPoolAttrReservedMemHigh, 0);
  SetPoolAttr(pool, cudaMemPoolAttrUsedMemHigh, 0);
}

// The reservation is left as it is: lowering the limit frees nothing, it refuses new blocks past
// it.
uint64_t AsyncBackend::SetFraction(Napi::Env env, Napi::Value fraction) {
  core::ResolvedLimit limit = ReadFractionLimit(env, fraction, DeviceMemInfo(device).total);
  budget.SetLimit(limit.bytes, limit.source);
  return limit.bytes;
}

uint64_t AsyncBackend::EmptyCache() { return Trim(this); }

uint64_t AsyncBackend::Close(Napi::Env env, bool force) {
  AsyncBackend* p = this;
  uint64_t live = p->budget.live();
  if (live > 0 && !force) ThrowAllocatorBusy(env, live, p->budget.in_use());
  // A block that an asynchronous copy still uses is released when the copy settles (as free()
  // does), and the pool is destroyed after it: the copy may still read or write the block.
  p->deferred = ReleaseOrDefer(env, Handles(env).Live(), [p](Allocation* a) {
    return a->ops == &kAsyncBlockOps && static_cast<AsyncAllocation*>(a)->pool.get() == p;
  });
  p->closed = true;
  return p->deferred ? Trim(p) : DestroyPool(p);
}

AsyncBackend::~AsyncBackend() {
  if (pool && own) {
    cudaSetDevice(device);
    cudaMemPoolDestroy(pool);  // deferred by CUDA until pending frees have run
  }
  for (cudaEvent_t e : idle_events) cudaEventDestroy(e);
  if (order) cudaEventDestroy(order);
  (void)cudaGetLastError();
}

void AsyncBackend::CountLive(std::vector<LiveRow>* rows) {
  if (!closed)
    cm::CountLive(rows, "allocator", device, false,
                  PoolAttr(pool, cudaMemPoolAttrReservedMemCurrent));
}

}  // namespace cm
