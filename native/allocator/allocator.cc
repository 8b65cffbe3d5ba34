#include "allocator/allocator.h"

#include <unistd.h>

#include <vector>

#include "allocator/group.h"
#include "allocator/stream_ordered.h"
#include "core/allocator/compose.h"
#include "core/allocator/policy.h"
#include "device/discovery.h"
#include "memory/buffers.h"

namespace cm {

namespace {
constexpr napi_type_tag kPoolTag = {0x51e0c7a93b2d4f86ull, 0x0f6b2a9d8e4c7135ull};
using PoolRef = std::shared_ptr<PoolBinding>;
}  // namespace

CudaUpstream::CudaUpstream(int device, bool managed) : device_(device), managed_(managed) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) == cudaSuccess) {
    major_ = p.major;
    minor_ = p.minor;
  }
  (void)cudaGetLastError();
}

core::UpstreamStatus CudaUpstream::Allocate(size_t bytes, uint64_t* address) {
  void* p = nullptr;
  cudaError_t err = cudaSetDevice(device_);
  if (err == cudaSuccess)
    err = managed_ ? cudaMallocManaged(&p, bytes, cudaMemAttachGlobal) : cudaMalloc(&p, bytes);
  if (err == cudaSuccess) {
    *address = reinterpret_cast<uintptr_t>(p);
    return core::UpstreamStatus::Ok();
  }
  (void)cudaGetLastError();
  return {err == cudaErrorMemoryAllocation ? core::UpstreamStatus::kOutOfMemory
                                           : core::UpstreamStatus::kError,
          static_cast<int>(err), managed_ ? "cudaMallocManaged" : "cudaMalloc"};
}

uint64_t CudaUpstream::HostBytes() const {
  if (!managed_) return 0;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

void CudaUpstream::Deallocate(uint64_t address, size_t) noexcept {
  cudaSetDevice(device_);
  cudaFree(reinterpret_cast<void*>(static_cast<uintptr_t>(address)));
  (void)cudaGetLastError();
}

uint64_t CudaUpstream::Granularity() const {
  if (managed_) {
    why_ = "a managed allocator's regions are cudaMallocManaged allocations";
    return 0;
  }
  if (!vmm_checked_) {
    granule_ = vmm::Granularity(device_, &why_);
    vmm_checked_ = true;
  }
  return granule_;
}

namespace {
core::UpstreamStatus FromVmm(const vmm::Result& r) {
  switch (r.kind) {
    case vmm::Result::kOk:
      return core::UpstreamStatus::Ok();
    case vmm::Result::kOutOfMemory:
      return {core::UpstreamStatus::kOutOfMemory, r.code, r.call};
    case vmm::Result::kError:
      break;
  }
  return {core::UpstreamStatus::kError, r.code, r.call};
}
}  // namespace

core::UpstreamStatus CudaUpstream::Reserve(uint64_t bytes, uint64_t* address) {
  if (!space_) space_ = std::make_unique<vmm::Space>(device_, Granularity());
  return FromVmm(space_->Reserve(bytes, address));
}

void CudaUpstream::Unreserve(uint64_t address, uint64_t bytes) noexcept {
  if (space_) space_->Unreserve(address, bytes);
}

core::UpstreamStatus CudaUpstream::Map(uint64_t address, uint64_t bytes) {
  return space_ ? FromVmm(space_->Map(address, bytes))
                : core::UpstreamStatus{core::UpstreamStatus::kError, 1, "cuMemMap"};
}

void CudaUpstream::Unmap(uint64_t address, uint64_t bytes) noexcept {
  if (space_) space_->Unmap(address, bytes);
}

core::MemInfo DeviceMemInfo(int device) {
  size_t free_b = 0, total_b = 0;
  cudaSetDevice(device);
  cudaMemGetInfo(&free_b, &total_b);
  (void)cudaGetLastError();
  return {free_b, total_b};
}

core::MemInfo CudaUpstream::GetMemInfo() { return DeviceMemInfo(device_); }

void ThrowAllocatorClosed(Napi::Env env) {
  throw LibraryError(env, "ERR_ALLOCATOR_CLOSED",
                     "the allocator was closed and can no longer be used");
}

void ThrowAllocatorBusy(Napi::Env env, uint64_t live, uint64_t bytes_in_use) {
  Napi::Error e =
      LibraryError(env, "ERR_ALLOCATOR_BUSY",
                   "the allocator still has " + std::to_string(live) + " live buffer" +
                       (live == 1 ? "" : "s") + " (" + core::FormatBytes(bytes_in_use) +
                       "); free them first, or close({ force: true }) to invalidate them");
  e.Set("liveBuffers", static_cast<double>(live));
  throw e;
}

void PoolBinding::ReleaseRegions() noexcept {
  if (pool) pool->ReleaseAll();
  if (group) group->ledger().Leave();  // the group sees this member go now, not at GC
}

namespace {

// A pool block goes back to its pool (no CUDA call, so no error to clear); it is exported as its
// region (one cudaMalloc) and where in it the block lies.
void ReleasePoolBlock(napi_env, Allocation* a) noexcept {
  auto* b = static_cast<PoolAllocation*>(a);
  PoolBinding* p = b->pool.get();
  if (p && p->pool && b->block && (!p->closed || p->deferred > 0)) {
    p->pool->Free(b->block);
    if (!p->closed)
      p->PublishInUse();
    else if (--p->deferred == 0)
      p->ReleaseRegions();  // the last busy block of a forced close has settled
  }
  b->block = nullptr;
  b->pool.reset();
}

const BufferOps kPoolBlockOps{
    /*on_device=*/true,
    /*release=*/ReleasePoolBlock,
    /*before_use=*/nullptr,
    /*export_range=*/
    [](Napi::Env env, Allocation* a, void** base, uint64_t* offset) {
      auto* b = static_cast<PoolAllocation*>(a);
      if (b->pool && b->pool->pool && b->pool->pool->options().expandable)
        throw LibraryError(
            env, "ERR_NOT_SUPPORTED",
            "a block of an allocator with expandableSegments cannot be exported: its memory is "
            "mapped with cuMemCreate, which cudaIpcGetMemHandle cannot share (that would take a "
            "POSIX file descriptor handle sent over a Unix socket); allocate what other "
            "processes open from an allocator without it");
      uint64_t region = core::Pool::RegionOf(b->block);
      *offset = reinterpret_cast<uintptr_t>(a->ptr) - region;
      *base = reinterpret_cast<void*>(static_cast<uintptr_t>(region));
    },
    /*free_host=*/nullptr,
    /*managed=*/false,
    /*kind=*/"allocator-block",
};

// A block of a managed allocator: its region is one cudaMallocManaged allocation, which copies
// address wherever the driver has put its pages, and which cudaIpcGetMemHandle cannot share.
const BufferOps kManagedPoolBlockOps{
    /*on_device=*/true,
    /*release=*/ReleasePoolBlock,
    /*before_use=*/nullptr,
    /*export_range=*/
    [](Napi::Env env, Allocation*, void**, uint64_t*) {
      throw LibraryError(env, "ERR_NOT_SUPPORTED",
                         "a block of a managed allocator cannot be exported: cudaIpcGetMemHandle "
                         "does not share managed memory; allocate what other processes open "
                         "from an allocator without managed: true");
    },
    /*free_host=*/nullptr,
    /*managed=*/true,
    /*kind=*/"allocator-block",
};

// Whether `a` is a block of a BFC allocator (managed or not).
PoolAllocation* AsPoolBlock(Allocation* a) {
  return a->ops == &kPoolBlockOps || a->ops == &kManagedPoolBlockOps
             ? static_cast<PoolAllocation*>(a)
             : nullptr;
}

}  // namespace

Napi::Value OomError(Napi::Env env, const core::OomInfo& oom, const core::GroupSnapshot* group) {
  Napi::Object d = Napi::Object::New(env);
  d.Set("message", oom.Message());
  d.Set("requestedBytes", static_cast<double>(oom.requested));
  d.Set("roundedBytes", static_cast<double>(oom.rounded));
  d.Set("device", oom.device);
  d.Set("limitBytes", static_cast<double>(oom.limit));
  d.Set("limitSource", oom.limit_source);
  d.Set("bytesInUse", static_cast<double>(oom.bytes_in_use));
  d.Set("poolBytes", static_cast<double>(oom.pool_bytes));
  d.Set("largestFreeBlock", static_cast<double>(oom.largest_free_block));
  d.Set("fragmentation", oom.fragmentation);
  d.Set("deviceFree", static_cast<double>(oom.device_free));
  d.Set("deviceTotal", static_cast<double>(oom.device_total));
  d.Set("simulated", oom.simulated);
  d.Set("call", "allocator.alloc");
  if (group) d.Set("group", GroupObject(env, *group));
  return GetInstance(env).oom_error.New({d});
}

Napi::Object StatsObject(Napi::Env env, const core::PoolStats& s) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("bytesInUse", static_cast<double>(s.bytes_in_use));
  o.Set("peakBytesInUse", static_cast<double>(s.peak_bytes_in_use));
  o.Set("requestedBytesInUse", static_cast<double>(s.requested_bytes_in_use));
  o.Set("poolBytes", static_cast<double>(s.pool_bytes));
  o.Set("peakPoolBytes", static_cast<double>(s.peak_pool_bytes));
  o.Set("limitBytes", static_cast<double>(s.bytes_limit));
  o.Set("numAllocs", static_cast<double>(s.num_allocs));
  o.Set("numFrees", static_cast<double>(s.num_frees));
  o.Set("numOoms", static_cast<double>(s.num_ooms));
  o.Set("numAllocRetries", static_cast<double>(s.counters.num_alloc_retries));
  o.Set("largestAllocSize", static_cast<double>(s.largest_alloc_size));
  o.Set("largestFreeBlock", static_cast<double>(s.largest_free_block));
  o.Set("regions", static_cast<double>(s.regions));
  o.Set("fragmentation", s.fragmentation);
  o.Set("numRegionAllocs", static_cast<double>(s.num_region_allocs));
  o.Set("gcReleasedBytes", static_cast<double>(s.gc_released_bytes));
  auto counter = [&](const char* name, const core::Counter& c) {
    Napi::Object x = Napi::Object::New(env);
    x.Set("current", static_cast<double>(c.current));
    x.Set("peak", static_cast<double>(c.peak));
    x.Set("total", static_cast<double>(c.allocated));
    x.Set("freed", static_cast<double>(c.freed));
    o.Set(name, x);
  };
  counter("requestedBytes", s.counters.requested_bytes);
  counter("allocatedBytes", s.counters.allocated_bytes);
  counter("allocations", s.counters.allocations);
  counter("reservedBytes", s.counters.reserved_bytes);
  counter("segments", s.counters.segments);
  return o;
}

core::ResolvedLimit ReadFractionLimit(Napi::Env env, Napi::Value v, uint64_t total) {
  double fraction = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  try {
    return core::FractionLimit(fraction, total);
  } catch (const std::invalid_argument& e) {
    ThrowRange(env, e.what());
  }
}

void ReadPlatformLimit(Napi::Env env, Napi::Value v, core::PolicyOptions* policy) {
  if (!v.IsObject()) return;
  Napi::Object o = v.As<Napi::Object>();
  policy->platform_cap = ReadSize(env, o.Get("capBytes"), "platform.capBytes");
  policy->platform_cap_source = ReadString(env, o.Get("capSource"), "platform.capSource");
  policy->platform_default = ReadSize(env, o.Get("defaultBytes"), "platform.defaultBytes");
  policy->platform_default_source =
      ReadString(env, o.Get("defaultSource"), "platform.defaultSource");
}

uint64_t ReadInitialPoolBytes(Napi::Env env, Napi::Value v, uint64_t limit,
                              const std::string& limit_source) {
  if (Absent(v)) return 0;
  uint64_t bytes = ReadSize(env, v, "initialPoolBytes");
  try {
    core::CheckInitialBytes(bytes, limit, limit_source);
  } catch (const std::invalid_argument& e) {
    ThrowRange(env, e.what());
  }
  return bytes;
}

size_t ReadAlignment(Napi::Env env, Napi::Value v) {
  if (Absent(v)) return core::kMinBlock;
  uint64_t a = ReadSize(env, v, "options.alignment");
  if (a == 0 || (a & (a - 1)) != 0 || a > core::kMaxAlignment)
    ThrowRange(
        env, "options.alignment must be a power of two from 1 to 1 GiB, got " + std::to_string(a));
  return std::max<size_t>(a, core::kMinBlock);
}

namespace {

// The BFC pool behind a handle, or null if `v` is not one (an async handle, or no handle).
PoolBinding* PoolOrNull(Napi::Value v) {
  if (!v.IsExternal() || !v.As<Napi::Object>().CheckTypeTag(&kPoolTag)) return nullptr;
  return v.As<Napi::External<PoolRef>>().Data()->get();
}

PoolBinding* UnwrapPool(Napi::Env env, Napi::Value v) {
  PoolBinding* p = PoolOrNull(v);
  if (!p) ThrowType(env, "allocator must be an allocator handle of this library");
  if (p->closed) ThrowAllocatorClosed(env);
  return p;
}

// The OutOfMemoryError of a BFC pool, saying so when the group budget refused the region.
[[noreturn]] void ThrowOom(Napi::Env env, PoolBinding* p, core::OomInfo* oom) {
  if (p->group && p->group->refused()) {
    oom->group_sentence = p->group->refusal().Sentence();
    ThrowValue(env, OomError(env, *oom, &p->group->refusal().group));
  }
  ThrowValue(env, OomError(env, *oom));
}

[[noreturn]] void ThrowUpstream(Napi::Env env, const core::UpstreamError& e) {
  ThrowCuda(env, static_cast<cudaError_t>(e.status.code), e.status.call);
}

double Opt(Napi::Object o, const char* key, double fallback) {
  Napi::Value v = o.Get(key);
  return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : fallback;
}

// createAllocator({device, allowGrowth, memoryFraction?, memoryLimit?, garbageCollection,
//                  simulate?: {totalBytes, freeBytes, ccMajor, ccMinor}})
Napi::Value CreateAllocator(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) ThrowType(env, "options must be an object");
  Napi::Object o = info[0].As<Napi::Object>();
  int device = ReadInt(env, o.Get("device"), "options.device", 0, 1 << 20);
  const bool managed = o.Get("managed").ToBoolean();
  std::unique_ptr<core::Upstream> device_upstream;
  Napi::Value sim = o.Get("simulate");
  if (sim.IsObject()) {
    Napi::Object s = sim.As<Napi::Object>();
    uint64_t total = ReadSize(env, s.Get("totalBytes"), "simulate.totalBytes");
    uint64_t free_b = ReadSize(env, s.Get("freeBytes"), "simulate.freeBytes");
    if (free_b > total) ThrowRange(env, "simulate.freeBytes must not exceed simulate.totalBytes");
    auto sim_up = std::make_unique<core::SimulatedUpstream>(
        total, free_b, static_cast<int>(Opt(s, "ccMajor", 9)),
        static_cast<int>(Opt(s, "ccMinor", 0)), device);
    if (!Absent(s.Get("granularity")))
      sim_up->SetGranularity(ReadSize(env, s.Get("granularity"), "simulate.granularity"));
    if (managed)
      sim_up->SetManaged(
          Absent(s.Get("hostBytes")) ? 0 : ReadSize(env, s.Get("hostBytes"), "simulate.hostBytes"));
    device_upstream = std::move(sim_up);
  } else {
    CheckDevice(env, device);
    device_upstream = std::make_unique<CudaUpstream>(device, managed);
  }
  core::AllocatorSpec spec;
  // shared: { dir, name, device (uuid or "simulated"), budget (0: the group's), budgetSource,
  // lockTimeoutMs }
  Napi::Value shared = o.Get("shared");
  if (shared.IsObject()) {
    Napi::Object g = shared.As<Napi::Object>();
    spec.group =
        core::GroupJoin{ReadString(env, g.Get("dir"), "shared.dir"),
                        ReadString(env, g.Get("name"), "shared.name"),
                        ReadString(env, g.Get("device"), "shared.device"),
                        ReadSize(env, g.Get("budget"), "shared.budget"),
                        ReadString(env, g.Get("budgetSource"), "shared.budgetSource"),
                        ReadInt(env, g.Get("lockTimeoutMs"), "shared.lockTimeoutMs", 0, 86400000)};
  }
  if (o.Get("memoryFraction").IsNumber()) spec.policy.memory_fraction = Opt(o, "memoryFraction", 0);
  if (!Absent(o.Get("memoryLimit")))
    spec.policy.memory_limit = ReadSize(env, o.Get("memoryLimit"), "memoryLimit");
  spec.policy.oversubscribe = o.Get("oversubscribe").ToBoolean();
  ReadPlatformLimit(env, o.Get("platform"), &spec.policy);
  spec.allow_growth = o.Get("allowGrowth").ToBoolean();
  if (!Absent(o.Get("initialPoolBytes")))
    spec.initial_bytes = ReadSize(env, o.Get("initialPoolBytes"), "initialPoolBytes");
  spec.garbage_collection =
      !o.Get("garbageCollection").IsBoolean() || o.Get("garbageCollection").ToBoolean();
  spec.expandable = o.Get("expandableSegments").ToBoolean();
  auto binding = std::make_shared<PoolBinding>();
  core::PoolOptions po;
  try {
    core::ComposedAllocator composed = core::ComposeAllocator(std::move(device_upstream), spec);
    binding->upstream = std::move(composed.upstream);
    binding->group = composed.group;
    po = std::move(composed.options);
  } catch (const core::ShmError& e) {
    ThrowInterprocess(env, e);
  } catch (const core::OversubscriptionRefused& e) {
    Napi::Error err = Napi::RangeError::New(env, e.what());
    err.Set("code", "ERR_OVERSUBSCRIPTION");
    throw err;
  } catch (const std::invalid_argument& e) {
    ThrowRange(env, e.what());
  } catch (const core::NotSupported& e) {
    throw LibraryError(env, "ERR_NOT_SUPPORTED", e.what());
  }
  try {
    binding->pool = std::make_unique<core::Pool>(binding->upstream.get(), po);
  } catch (core::OomInfo& oom) {
    ThrowOom(env, binding.get(), &oom);
  } catch (const core::UpstreamError& e) {
    ThrowUpstream(env, e);
  } catch (const core::ShmError& e) {
    ThrowInterprocess(env, e);
  }
  Napi::External<PoolRef> ext =
      Napi::External<PoolRef>::New(env, new PoolRef(binding), [](Napi::Env, PoolRef* ref) {
        // The pool's regions go back when the last block handle lets go of it too.
        if (ref->use_count() == 1 && !(*ref)->closed) {
          (*ref)->closed = true;
          (*ref)->pool.reset();
        }
        delete ref;
      });
  ext.TypeTag(&kPoolTag);
  RememberAllocator(&GetInstance(env).State<MadeAllocators>().bfc, binding);
  return ext;
}

// allocatorAlloc(allocator, bytes, alignment?, stream?) -> handle. The stream is the async
// backend's; a BFC block is usable on any stream at once.
Napi::Value AllocatorAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  PoolBinding* p = PoolOrNull(info[0]);
  if (!p) return async_backend::Alloc(info);  // which throws if it is no allocator at all
  if (p->closed) ThrowAllocatorClosed(env);
  uint64_t bytes = ReadSize(env, info[1], "bytes");
  if (bytes == 0) ThrowRange(env, "bytes must be at least 1, got 0");
  size_t alignment = info.Length() > 2 ? ReadAlignment(env, info[2]) : core::kMinBlock;
  core::OomInfo oom;
  core::Pool::Chunk* block;
  if (p->group) p->group->ClearRefusal();
  try {
    block = p->pool->Allocate(bytes, &oom, alignment);
  } catch (const core::UpstreamError& e) {
    ThrowUpstream(env, e);
  } catch (const core::ShmError& e) {
    ThrowInterprocess(env, e);
  }
  if (!block) ThrowOom(env, p, &oom);
  p->PublishInUse();
  uint64_t address = core::Pool::Address(block);
  auto* a = new PoolAllocation(p->upstream->managed() ? &kManagedPoolBlockOps : &kPoolBlockOps);
  a->device = p->upstream->device();
  a->simulated = p->upstream->simulated();
  a->ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
  a->bytes = bytes;
  a->block = block;
  a->pool = *info[0].As<Napi::External<PoolRef>>().Data();
  return WrapAllocation(env, a);
}

Napi::Value AllocatorStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return StatsObject(env, UnwrapPool(env, info[0])->pool->Stats());
}

// allocatorRecord(handle, maxEvents | null): starts recording afresh (a number) or stops (null).
Napi::Value AllocatorRecord(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  PoolBinding* p = UnwrapPool(env, info[0]);
  if (Absent(info[1])) {
    p->pool->SetRecorder(nullptr);
    return env.Undefined();
  }
  uint64_t max_events = ReadSize(env, info[1], "maxEvents");
  if (max_events == 0) ThrowRange(env, "maxEvents must be at least 1");
  p->recorder = std::make_unique<core::Recorder>(max_events);
  p->pool->SetRecorder(p->recorder.get());
  return env.Undefined();
}

// allocatorTrace(handle) -> { action: Uint8Array, time (µs), id, requested, size, region,
// offset: Float64Array, dropped } — columns, so a long trace crosses into JS in one piece.
Napi::Value AllocatorTrace(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  PoolBinding* p = UnwrapPool(env, info[0]);
  Napi::Object out = Napi::Object::New(env);
  const std::vector<core::TraceEvent> none;
  const auto& ev = p->recorder ? p->recorder->events() : none;
  size_t n = ev.size();
  Napi::Uint8Array action = Napi::Uint8Array::New(env, n);
  Napi::Float64Array cols[6] = {Napi::Float64Array::New(env, n), Napi::Float64Array::New(env, n),
                                Napi::Float64Array::New(env, n), Napi::Float64Array::New(env, n),
                                Napi::Float64Array::New(env, n), Napi::Float64Array::New(env, n)};
  for (size_t i = 0; i < n; ++i) {
    action[i] = static_cast<uint8_t>(ev[i].action);
    cols[0][i] = static_cast<double>(ev[i].time_ns) / 1000.0;
    cols[1][i] = static_cast<double>(ev[i].id);
    cols[2][i] = static_cast<double>(ev[i].requested);
    cols[3][i] = static_cast<double>(ev[i].size);
    cols[4][i] = static_cast<double>(ev[i].region);
    cols[5][i] = static_cast<double>(ev[i].offset);
  }
  out.Set("action", action);
  const char* names[6] = {"time", "id", "requested", "size", "region", "offset"};
  for (int c = 0; c < 6; ++c) out.Set(names[c], cols[c]);
  out.Set("dropped", static_cast<double>(p->recorder ? p->recorder->dropped() : 0));
  return out;
}

// allocatorSnapshot(handle) -> [{ address, size, blocks: [{ offset, size, requested, id, inUse }]
// }]
Napi::Value AllocatorSnapshot(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  PoolBinding* p = UnwrapPool(env, info[0]);
  std::vector<core::RegionInfo> regions = p->pool->Regions();
  Napi::Array out = Napi::Array::New(env, regions.size());
  for (size_t i = 0; i < regions.size(); ++i) {
    Napi::Object r = Napi::Object::New(env);
    r.Set("address", static_cast<double>(regions[i].address));
    r.Set("size", static_cast<double>(regions[i].size));
    std::vector<core::BlockInfo> blocks = p->pool->Blocks(regions[i].address);
    Napi::Array bs = Napi::Array::New(env, blocks.size());
    for (size_t j = 0; j < blocks.size(); ++j) {
      Napi::Object b = Napi::Object::New(env);
      b.Set("offset", static_cast<double>(blocks[j].offset));
      b.Set("size", static_cast<double>(blocks[j].size));
      b.Set("requested", static_cast<double>(blocks[j].requested));
      b.Set("id", static_cast<double>(blocks[j].id));
      b.Set("inUse", blocks[j].in_use);
      bs.Set(j, b);
    }
    r.Set("blocks", bs);
    out.Set(i, r);
  }
  return out;
}

// blockId(buffer handle) -> the id a recording allocator gave the block, or 0.
Napi::Value BlockId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = UnwrapAllocation(env, info[0], "buffer");
  PoolAllocation* b = AsPoolBlock(a);
  uint64_t id = b && b->block ? core::Pool::BlockId(b->block) : 0;
  return Napi::Number::New(env, static_cast<double>(id));
}

Napi::Value AllocatorRegions(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<core::RegionInfo> regions = UnwrapPool(env, info[0])->pool->Regions();
  Napi::Array out = Napi::Array::New(env, regions.size());
  for (size_t i = 0; i < regions.size(); ++i) {
    Napi::Object r = Napi::Object::New(env);
    r.Set("address", static_cast<double>(regions[i].address));  // a number, as every address
    r.Set("size", static_cast<double>(regions[i].size));
    r.Set("bytesInUse", static_cast<double>(regions[i].bytes_in_use));
    r.Set("blocks", regions[i].chunks);
    out.Set(i, r);
  }
  return out;
}

Napi::Value AllocatorInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  PoolBinding* p = UnwrapPool(env, info[0]);
  core::MemInfo mi = p->upstream->GetMemInfo();
  Napi::Object o = Napi::Object::New(env);
  o.Set("device", p->upstream->device());
  o.Set("simulated", p->upstream->simulated());
  o.Set("managed", p->upstream->managed());
  o.Set("hostBytes", static_cast<double>(p->upstream->HostBytes()));
  o.Set("allowGrowth", p->pool->options().allow_growth);
  o.Set("garbageCollection", p->pool->options().garbage_collection);
  o.Set("limitBytes", static_cast<double>(p->pool->options().limit));
  o.Set("limitSource", p->pool->options().limit_source);
  o.Set("initialPoolBytes", static_cast<double>(p->pool->options().initial_bytes));
  o.Set("expandableSegments", p->pool->options().expandable);
  o.Set("granularity", static_cast<double>(p->pool->granularity()));
  o.Set("reservedRange", static_cast<double>(p->pool->reserved_range()));
  o.Set("deviceFree", static_cast<double>(mi.free));
  o.Set("deviceTotal", static_cast<double>(mi.total));
  o.Set("computeCapability",
        std::to_string(p->upstream->ccMajor()) + "." + std::to_string(p->upstream->ccMinor()));
  o.Set("liveBlocks", static_cast<double>(p->pool->live_blocks()));
  if (p->group) {
    try {
      o.Set("group", GroupObject(env, p->group->ledger().Snapshot()));
    } catch (const core::ShmError& e) {
      ThrowInterprocess(env, e);
    }
  }
  return o;
}

Napi::Value AllocatorResetPeak(const Napi::CallbackInfo& info) {
  UnwrapPool(info.Env(), info[0])->pool->ResetPeakStats();
  return info.Env().Undefined();
}

Napi::Value AllocatorResetAccumulated(const Napi::CallbackInfo& info) {
  UnwrapPool(info.Env(), info[0])->pool->ResetAccumulatedStats();
  return info.Env().Undefined();
}

// allocatorSetFraction(handle, fraction in [0, 1]) -> the new limit in bytes
Napi::Value AllocatorSetFraction(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  PoolBinding* p = UnwrapPool(env, info[0]);
  core::ResolvedLimit limit = ReadFractionLimit(env, info[1], p->upstream->GetMemInfo().total);
  if (p->group) {
    try {
      p->group->ledger().SetLimit(limit.bytes);
    } catch (const core::ShmError& e) {
      ThrowInterprocess(env, e);
    }
  }
  p->pool->SetLimit(limit.bytes, limit.source);
  return Napi::Number::New(env, static_cast<double>(limit.bytes));
}

Napi::Value AllocatorEmptyCache(const Napi::CallbackInfo& info) {
  return Napi::Number::New(
      info.Env(), static_cast<double>(UnwrapPool(info.Env(), info[0])->pool->EmptyCache()));
}

// allocatorClose(handle, force) -> bytes returned to the device
Napi::Value AllocatorClose(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsExternal() || !info[0].As<Napi::Object>().CheckTypeTag(&kPoolTag))
    ThrowType(env, "allocator must be an allocator handle of this library");
  PoolBinding* p = info[0].As<Napi::External<PoolRef>>().Data()->get();
  if (p->closed) return Napi::Number::New(env, 0);
  bool force = info[1].ToBoolean();
  uint64_t live = p->pool->live_blocks();
  if (live > 0 && !force) ThrowAllocatorBusy(env, live, p->pool->Stats().bytes_in_use);
  if (live > 0) {
    // Forced: every buffer still carved from this pool becomes a freed buffer. One that an
    // asynchronous copy still uses is released when the copy settles (as free() does), and the
    // pool's regions stay mapped until then: the copy may still read or write them.
    p->deferred = ReleaseOrDefer(env, GetInstance(env).handles.Live(), [p](Allocation* a) {
      PoolAllocation* b = AsPoolBlock(a);
      return b && b->pool.get() == p;
    });
  }
  uint64_t bytes = p->pool->Stats().pool_bytes;
  p->closed = true;
  if (p->deferred == 0) p->ReleaseRegions();
  return Napi::Number::New(env, static_cast<double>(bytes));
}

}  // namespace

namespace {

// One export per operation for both backends: the handle says which backend runs it. The BFC
// pool is tried first; alloc (above) does the same by hand, so that its handle is checked once.
template <Napi::Value (*Bfc)(const Napi::CallbackInfo&),
          Napi::Value (*Async)(const Napi::CallbackInfo&)>
Napi::Value EitherBackend(const Napi::CallbackInfo& info) {
  return PoolOrNull(info[0]) || !IsAsyncAllocator(info[0]) ? Bfc(info) : Async(info);
}

// allocatorsLive() -> [{ kind: 'allocator' | 'group', device, simulated, count, bytes }]: the
// open allocators by device with their pool bytes, and those of them that are group members (a
// group's charge is its members' pool bytes), for leak checks.
Napi::Value AllocatorsLive(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<LiveRow> rows;
  MadeAllocators& made = GetInstance(env).State<MadeAllocators>();
  for (const auto& w : made.bfc) {
    std::shared_ptr<PoolBinding> p = w.lock();
    if (!p || p->closed || !p->pool) continue;
    uint64_t bytes = p->pool->Stats().pool_bytes;
    CountLive(&rows, "allocator", p->upstream->device(), p->upstream->simulated(), bytes);
    if (p->group) CountLive(&rows, "group", p->upstream->device(), p->upstream->simulated(), bytes);
  }
  for (const auto& w : made.async) {
    std::shared_ptr<AsyncPool> p = w.lock();
    if (p && !p->closed) CountLive(&rows, "allocator", p->device, false, AsyncPoolBytes(*p));
  }
  return LiveRowsValue(env, rows);
}

// createAllocator({ backend: 'bfc' | 'async', ... }) -> an allocator handle of that backend.
Napi::Value CreateEither(const Napi::CallbackInfo& info) {
  if (info[0].IsObject()) {
    Napi::Value backend = info[0].As<Napi::Object>().Get("backend");
    if (backend.IsString() && backend.As<Napi::String>().Utf8Value() == "async")
      return async_backend::Create(info);
  }
  return CreateAllocator(info);
}

// allocatorRegions: the async backend takes no regions of its own (the driver's pool does).
Napi::Value NoRegions(const Napi::CallbackInfo& info) { return Napi::Array::New(info.Env()); }

void Export(Napi::Env env, Napi::Object exports, const char* name,
            Napi::Value (*f)(const Napi::CallbackInfo&)) {
  exports.Set(name, Napi::Function::New(env, f, name));
}

}  // namespace

void InitAllocator(Napi::Env env, Napi::Object exports) {
  Export(env, exports, "createAllocator", CreateEither);
  Export(env, exports, "allocatorAlloc", AllocatorAlloc);
  Export(env, exports, "allocatorStats", EitherBackend<AllocatorStats, async_backend::Stats>);
  Export(env, exports, "allocatorRegions", EitherBackend<AllocatorRegions, NoRegions>);
  Export(env, exports, "allocatorInfo", EitherBackend<AllocatorInfo, async_backend::Info>);
  Export(env, exports, "allocatorResetPeak",
         EitherBackend<AllocatorResetPeak, async_backend::ResetPeak>);
  Export(env, exports, "allocatorResetAccumulated",
         EitherBackend<AllocatorResetAccumulated, async_backend::ResetAccumulated>);
  Export(env, exports, "allocatorSetFraction",
         EitherBackend<AllocatorSetFraction, async_backend::SetFraction>);
  Export(env, exports, "allocatorEmptyCache",
         EitherBackend<AllocatorEmptyCache, async_backend::EmptyCache>);
  Export(env, exports, "allocatorClose", EitherBackend<AllocatorClose, async_backend::Close>);
  exports.Set("allocatorRecord", Napi::Function::New(env, AllocatorRecord, "allocatorRecord"));
  exports.Set("allocatorTrace", Napi::Function::New(env, AllocatorTrace, "allocatorTrace"));
  exports.Set("allocatorSnapshot",
              Napi::Function::New(env, AllocatorSnapshot, "allocatorSnapshot"));
  exports.Set("blockId", Napi::Function::New(env, BlockId, "blockId"));
  exports.Set("allocatorsLive", Napi::Function::New(env, AllocatorsLive, "allocatorsLive"));
}

}  // namespace cm
