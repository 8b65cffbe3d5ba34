// Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync) and their
// pools. What a pool costs the device is its reserve, which holds more than its live allocations
// (core/allocator/reserve_charge.h): a pool on the group's device is charged its reserve, before an
// allocation for the reserve plus what the pool may grow by for it (the whole allocation in
// chunks: what the reserve holds free may be in pieces), after it trued to what the driver reports,
// and given back as synchronisations and trims shrink it. The device is the pool's: an explicit
// pool's location (cuMemPoolCreate), or the current pool of the stream's device for
// cuMemAllocAsync, not the calling thread's current device. A pool located in host memory is not
// device memory and is not charged.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "allocator/preload/areas.h"
#include "allocator/preload/charge.h"
#include "core/allocator/footprint.h"
#include "core/allocator/reserve_charge.h"

using namespace cm::preload;

namespace {

struct Pool {
  CUdevice device = -1;  // where its memory is; -1: host memory, or a device not known
  bool tracked = false;  // on the group's device: charged
  bool destroyed = false;
  cm::core::ReserveCharge charge;
  uint64_t uncharged = 0;  // what failing open let it take uncharged (given back first)
  uint64_t traced = 0;     // the reserve beyond its allocations, as the trace last has it
};
struct Block {
  uint64_t bytes;
  CUmemoryPool pool;
};

// One lock for the pools and their blocks, held across each driver call that changes them, so
// that a pool's reserve and its charge never disagree between threads.
std::mutex g_mutex;
auto& g_pools = *new std::unordered_map<CUmemoryPool, Pool>;
auto& g_blocks = *new std::unordered_map<uint64_t, Block>;
// Some pool holds a charge beyond its live allocations that a synchronisation may let go.
std::atomic<bool> g_excess{false};

// What a charge of `pool` asks of the group and the driver (`api` names the call in a refusal;
// `quiet`: its charges are quiet tries, Member::Take's, neither waited for nor said where there is
// no room; `verdict`: where each take's verdict is kept).
cm::core::ReserveOps OpsFor(CUmemoryPool handle, Pool& pool, const char* library, const char* api,
                            bool quiet = false, Member::Verdict* verdict = nullptr) {
  cm::core::ReserveOps ops;
  ops.take = [&pool, library, api, quiet, verdict](uint64_t n) {
    Member::Verdict v = Member::Get().Take(n, api, GroupDevice(), library, quiet);
    if (verdict) *verdict = v;
    if (v == Member::Verdict::kRefused || v == Member::Verdict::kNoRoom) return false;
    if (v == Member::Verdict::kUncharged) pool.uncharged += n;
    return true;
  };
  ops.give = [&pool](uint64_t n) {
    uint64_t free_ = std::min(n, pool.uncharged);
    pool.uncharged -= free_;
    if (n > free_) Member::Get().Give(n - free_);
  };
  ops.reserved = [handle](uint64_t* r) {
    uint64_t v = 0;
    if (Call<kMemPoolGetAttribute>(handle, kMemPoolAttrReservedMemCurrent, &v) != kCudaSuccess)
      return false;
    *r = v;
    return true;
  };
  return ops;
}

// The trace holds a pool's reserve beyond its allocations as one live id, "pool 0x...", whose
// bytes follow it, so that the trace's live bytes are what the group is charged.
void TraceExcess(CUmemoryPool handle, Pool& pool) {
  uint64_t excess = pool.charge.charged() - std::min(pool.charge.charged(), pool.charge.live());
  if (excess == pool.traced) return;
  uint64_t id = reinterpret_cast<uintptr_t>(handle);
  if (pool.traced) Recorder::Get().Free("pool", id, pool.traced);
  if (excess) Recorder::Get().Alloc("pool", id, excess);
  pool.traced = excess;
  if (excess) g_excess.store(true, std::memory_order_relaxed);
}

// The device of a pool the interposer did not see made: a device's default or current pool.
CUdevice DeviceOfPool(CUmemoryPool handle, CUdevice hint) {
  int count = 0;
  if (Call<kDeviceGetCount>(&count) != kCudaSuccess) count = 0;
  for (CUdevice d = 0; d < count; ++d) {
    CUmemoryPool p = nullptr;
    if ((Call<kDeviceGetDefaultMemPool>(&p, d) == kCudaSuccess && p == handle) ||
        (Call<kDeviceGetMemPool>(&p, d) == kCudaSuccess && p == handle))
      return d;
  }
  return hint;  // not one of them: taken as the stream's device's
}

// With g_mutex held: the pool's record, made on first sight.
Pool* PoolOf(CUmemoryPool handle, CUdevice hint) {
  auto it = g_pools.find(handle);
  if (it != g_pools.end()) return &it->second;
  try {
    Pool& p = g_pools[handle];
    p.device = DeviceOfPool(handle, hint);
    p.tracked = Tracked(p.device);
    return &p;
  } catch (...) {
    return nullptr;
  }
}

uint64_t Page(CUdevice dev) { return GroupDevice() == "simulated" ? 1 : DevicePage(dev); }
// What the pool may take from the device for one allocation beyond its reserve: the allocation
// rounded up to this (core::ReserveCharge::Prepare).
uint64_t Chunk() { return GroupDevice() == "simulated" ? 1 : Member::Get().pool_chunk(); }

// With g_mutex held: every pool's charge trued to its reserve; `trim`: trimmed first. A charge
// the reserve grew past is caught up only where the group has room now (a quiet try: nothing
// waits with the lock held).
bool RefreshLocked(bool trim) {
  bool gave = false;
  bool excess = false;
  for (auto& [handle, pool] : g_pools) {
    if (!pool.tracked) continue;
    uint64_t before = pool.charge.charged();
    if (trim) Call<kMemPoolTrimTo>(handle, size_t{0});
    pool.charge.Refresh(OpsFor(handle, pool, nullptr, "cuMemAllocAsync", true));
    gave = gave || pool.charge.charged() < before;
    TraceExcess(handle, pool);
    excess = excess || pool.charge.charged() > pool.charge.live();
  }
  g_excess.store(excess, std::memory_order_relaxed);
  return gave;
}

template <typename Forward>
CUresult PoolAllocate(void* caller, CUdeviceptr* dptr, size_t bytes, CUmemoryPool explicit_pool,
                      CUstream stream, const char* api, Forward forward) {
  if (!Active()) return forward();
  CUdevice stream_device = DeviceOfStream(stream);
  CUmemoryPool handle = explicit_pool;
  if (!handle && Call<kDeviceGetMemPool>(&handle, stream_device) != kCudaSuccess) handle = nullptr;
  if (!handle) return forward();
  std::unique_lock<std::mutex> lock(g_mutex);
  Pool* pool = PoolOf(handle, stream_device);
  if (!pool || !pool->tracked) return forward();
  const char* library = LibraryCharging(caller);
  uint64_t page = Page(pool->device), chunk = Chunk();
  // Not there at the first try: what the pools keep unused (this one's too) may be what is
  // missing, and the try that may wait and is said comes after the trim.
  Member::Verdict verdict = Member::Verdict::kUncharged;
  uint64_t lacked = 0;  // what the last quiet try found no room for
  cm::core::ReserveOps quiet = OpsFor(handle, *pool, library, api, true, &verdict);
  quiet.take = [&lacked, take = quiet.take](uint64_t n) { return take(n) || (lacked = n, false); };
  // A quiet try refused for good (failing open under strict) is not tried again.
  auto refused = [&] { return verdict == Member::Verdict::kRefused; };
  bool ready = pool->charge.Prepare(bytes, page, chunk, quiet);
  if (!ready && !refused()) {
    RefreshLocked(true);
    ready = pool->charge.Prepare(bytes, page, chunk, quiet);
  }
  if (!ready && refused()) {
    Recorder::Get().Oom(bytes);
    return kCudaErrorOutOfMemory;
  }
  if (!ready) {
    Prepaid prepaid;  // what it leaves is given back at the end of this block
    // The try that may wait runs without the lock, so that the process's other threads free
    // into their pools (and synchronise, fork) meanwhile; what it took is drawn on once the
    // lock is had again.
    if (!prepaid.Take(lock, lacked, api, library)) {
      Recorder::Get().Oom(bytes);
      return kCudaErrorOutOfMemory;
    }
    pool = PoolOf(handle, stream_device);
    if (!pool || !pool->tracked) return forward();
    if (!pool->charge.Prepare(
            bytes, page, chunk,
            prepaid.Drawing(OpsFor(handle, *pool, library, api, true), &pool->uncharged))) {
      Recorder::Get().Oom(bytes);
      return kCudaErrorOutOfMemory;
    }
  }
  cm::core::ReserveOps ops = OpsFor(handle, *pool, library, api);
  CUresult r = forward();
  bool ok = r == kCudaSuccess;
  if (!pool->charge.Done(ok, bytes, ops)) {
    // The reserve grew past its charge and what the group affords (by more than the allocation
    // in chunks): freed at once, the stream waited for so that the trim can release it, and
    // refused.
    Call<kMemFreeAsync>(*dptr, stream);
    Call<kStreamSynchronize>(stream);
    Call<kMemPoolTrimTo>(handle, size_t{0});
    pool->charge.Freed(bytes, ops);
    TraceExcess(handle, *pool);
    Recorder::Get().Oom(bytes);
    return kCudaErrorOutOfMemory;
  }
  if (ok) {
    try {
      g_blocks[*dptr] = Block{bytes, handle};
      Recorder::Get().Alloc("", *dptr, bytes);
    } catch (...) {
      pool->charge.Freed(bytes, ops);  // untracked: its free passes; the reserve stays charged
    }
  } else if (r == kCudaErrorOutOfMemory) {
    Recorder::Get().Oom(bytes);
  }
  TraceExcess(handle, *pool);
  return r;
}

template <typename Forward>
CUresult PoolFree(CUdeviceptr p, Forward forward) {
  if (!Active()) return forward();
  std::lock_guard<std::mutex> lock(g_mutex);
  CUresult r = forward();
  if (r != kCudaSuccess) return r;
  auto b = g_blocks.find(p);
  if (b == g_blocks.end()) return r;
  Block block = b->second;
  g_blocks.erase(b);
  Recorder::Get().Free("", p, block.bytes);
  auto it = g_pools.find(block.pool);
  if (it == g_pools.end()) return r;
  Pool& pool = it->second;
  pool.charge.Freed(block.bytes, OpsFor(block.pool, pool, nullptr, "cuMemFreeAsync"));
  TraceExcess(block.pool, pool);
  if (pool.destroyed && pool.charge.live() == 0) {
    pool.charge.GiveBackUnused(OpsFor(block.pool, pool, nullptr, "cuMemPoolDestroy"));
    TraceExcess(block.pool, pool);
    g_pools.erase(it);
  }
  return r;
}

// After a call that may let the driver shrink reserves (a synchronisation).
void AfterSync() {
  if (!g_excess.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  RefreshLocked(false);
}

}  // namespace

namespace cm::preload {

void RefreshPools() noexcept {
  if (!g_excess.load(std::memory_order_relaxed)) return;
  try {
    std::lock_guard<std::mutex> lock(g_mutex);
    RefreshLocked(false);
  } catch (...) {
  }
}

bool TrimPools() noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_mutex);
    return RefreshLocked(true);
  } catch (...) {
    return false;
  }
}

void PoolsBeforeFork() { g_mutex.lock(); }
void PoolsAfterForkParent() { g_mutex.unlock(); }
void PoolsAfterForkChild() {
  g_pools.clear();
  g_blocks.clear();
  g_excess.store(false);
  g_mutex.unlock();
}

}  // namespace cm::preload

// The stream-ordered allocators, each in its legacy-stream and per-thread-stream form.
#define CM_ASYNC_ALLOC(name, fn)                                                           \
  CM_WRAPPER CUresult name(CUdeviceptr* dptr, size_t bytes, CUstream stream) {             \
    return PoolAllocate(__builtin_return_address(0), dptr, bytes, nullptr, stream,         \
                        "cuMemAllocAsync", [&] { return Call<fn>(dptr, bytes, stream); }); \
  }
#define CM_POOL_ALLOC(name, fn)                                                                   \
  CM_WRAPPER CUresult name(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream) { \
    return PoolAllocate(__builtin_return_address(0), dptr, bytes, pool, stream,                   \
                        "cuMemAllocFromPoolAsync",                                                \
                        [&] { return Call<fn>(dptr, bytes, pool, stream); });                     \
  }
#define CM_ASYNC_FREE(name, fn)                              \
  CM_WRAPPER CUresult name(CUdeviceptr p, CUstream stream) { \
    return PoolFree(p, [&] { return Call<fn>(p, stream); }); \
  }
CM_ASYNC_ALLOC(cuMemAllocAsync, kMemAllocAsync)
CM_ASYNC_ALLOC(cuMemAllocAsync_ptsz, kMemAllocAsyncPtsz)
CM_POOL_ALLOC(cuMemAllocFromPoolAsync, kMemAllocFromPoolAsync)
CM_POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz, kMemAllocFromPoolAsyncPtsz)
CM_ASYNC_FREE(cuMemFreeAsync, kMemFreeAsync)
CM_ASYNC_FREE(cuMemFreeAsync_ptsz, kMemFreeAsyncPtsz)

CM_WRAPPER CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  CUresult r = Call<kMemPoolCreate>(pool, props);
  if (r != kCudaSuccess || !Active() || !pool || !props) return r;
  std::lock_guard<std::mutex> lock(g_mutex);
  try {
    Pool& p = g_pools[*pool];
    p = Pool();
    // A pool in host memory (CU_MEM_LOCATION_TYPE_HOST, _HOST_NUMA, ..._CURRENT) is not charged.
    p.device = props->location.type == kMemLocationTypeDevice ? props->location.id : -1;
    p.tracked = Tracked(p.device);
  } catch (...) {
  }
  return r;
}

CM_WRAPPER CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  if (!Active()) return Call<kMemPoolDestroy>(pool);
  std::lock_guard<std::mutex> lock(g_mutex);
  CUresult r = Call<kMemPoolDestroy>(pool);
  auto it = g_pools.find(pool);
  if (r != kCudaSuccess || it == g_pools.end()) return r;
  // Its reserve goes (after its last block's free, if any is still live: CUDA defers it so).
  Pool& p = it->second;
  p.destroyed = true;
  if (p.tracked) p.charge.GiveBackUnused(OpsFor(pool, p, nullptr, "cuMemPoolDestroy"));
  TraceExcess(pool, p);
  if (p.charge.live() == 0) g_pools.erase(it);
  return r;
}

CM_WRAPPER CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  CUresult r = Call<kMemPoolTrimTo>(pool, keep);
  if (r == kCudaSuccess && Active()) {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_pools.find(pool);
    if (it != g_pools.end() && it->second.tracked) {
      it->second.charge.Refresh(OpsFor(pool, it->second, nullptr, "cuMemPoolTrimTo", true));
      TraceExcess(pool, it->second);
    }
  }
  return r;
}

// A synchronisation trims every pool to its release threshold: the charges follow.
#define CM_SYNC(name, fn, params, args)             \
  CM_WRAPPER CUresult name params {                 \
    CUresult r = Call<fn> args;                     \
    if (r == kCudaSuccess && Active()) AfterSync(); \
    return r;                                       \
  }
CM_SYNC(cuStreamSynchronize, kStreamSynchronize, (CUstream stream), (stream))
CM_SYNC(cuStreamSynchronize_ptsz, kStreamSynchronizePtsz, (CUstream stream), (stream))
CM_SYNC(cuEventSynchronize, kEventSynchronize, (CUevent event), (event))
CM_SYNC(cuCtxSynchronize, kCtxSynchronize, (), ())
CM_SYNC(cuCtxSynchronize_v2, kCtxSynchronizeV2, (CUcontext context), (context))
