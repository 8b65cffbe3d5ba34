#include "allocator/bfc.h"

#include <unistd.h>

#include <limits>
#include <vector>

#include "allocator/group.h"
#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "core/allocator/compose.h"
#include "core/allocator/footprint.h"
#include "core/allocator/policy.h"
#include "core/allocator/upstream_contract.h"
#include "device/discovery.h"

namespace cm {

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

uint64_t CudaUpstream::Footprint(uint64_t bytes) const {
  uint64_t page = Granularity();
  return core::DeviceFootprint(bytes, page ? page : core::kDevicePage);
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
  // Without granules (managed regions, a driver without VMM) there is nothing to map: refuse as
  // the driver refuses what it does not support (CUDA_ERROR_NOT_SUPPORTED), before any address
  // space is taken. Why() says why.
  const uint64_t g = Granularity();
  if (g == 0) return {core::UpstreamStatus::kError, 801, "cuMemAddressReserve"};
  if (!space_) space_ = std::make_unique<vmm::Space>(device_, g);
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

core::MemInfo CudaUpstream::GetMemInfo() { return DeviceMemInfo(device_); }

void BfcBackend::ReleaseRegions() noexcept {
  if (pool) pool->ReleaseAll();
  if (group) group->ledger().Leave();  // the group sees this member go now, not at GC
}

namespace {

// A pool block goes back to its pool (no CUDA call, so no error to clear); it is exported as its
// region (one cudaMalloc) and where in it the block lies.
void ReleasePoolBlock(napi_env, Allocation* a) noexcept {
  auto* b = static_cast<PoolAllocation*>(a);
  BfcBackend* p = b->pool.get();
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
    /*free_on=*/nullptr,
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
    /*free_on=*/nullptr,
    /*kind=*/"allocator-block",
};

// Whether `a` is a block of a BFC allocator (managed or not).
PoolAllocation* AsPoolBlock(Allocation* a) {
  return a->ops == &kPoolBlockOps || a->ops == &kManagedPoolBlockOps
             ? static_cast<PoolAllocation*>(a)
             : nullptr;
}

}  // namespace

namespace {

// The OutOfMemoryError of a BFC pool, saying so when the group budget refused the region.
[[noreturn]] void ThrowOom(Napi::Env env, BfcBackend* p, core::OomInfo* oom) {
  if (p->group && p->group->refused()) {
    oom->group_sentence = p->group->refusal().Sentence();
    ThrowValue(env, OomError(env, *oom, &p->group->refusal()));
  }
  ThrowValue(env, OomError(env, *oom));
}

[[noreturn]] void ThrowUpstream(Napi::Env env, const core::UpstreamError& e) {
  ThrowCuda(env, static_cast<cudaError_t>(e.status.code), e.status.call);
}

// The device the pool takes its regions from: a simulated one, or the GPU.
std::unique_ptr<core::Upstream> DeviceUpstream(Napi::Env env, const AllocatorOptions& o) {
  if (!o.simulate) {
    CheckDevice(env, o.device);
    return std::make_unique<CudaUpstream>(o.device, o.managed);
  }
  const SimulatedDevice& s = *o.simulate;
  auto sim = std::make_unique<core::SimulatedUpstream>(s.total_bytes, s.free_bytes, s.cc_major,
                                                       s.cc_minor, o.device);
  if (s.granularity) sim->SetGranularity(*s.granularity);
  if (o.managed) sim->SetManaged(s.host_bytes);
  return sim;
}

}  // namespace

BackendRef CreateBfcBackend(Napi::Env env, const AllocatorOptions& o) {
  auto binding = std::make_shared<BfcBackend>();
  core::PoolOptions po;
  try {
    InterprocessCall(env, [&] {
      core::ComposedAllocator composed = core::ComposeAllocator(DeviceUpstream(env, o), o.spec);
      binding->upstream = std::move(composed.upstream);
      binding->group = composed.group;
      binding->limit_is_budget =
          composed.group && composed.options.limit_source.rfind("the budget of group", 0) == 0;
      po = std::move(composed.options);
    });
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
    InterprocessCall(
        env, [&] { binding->pool = std::make_unique<core::Pool>(binding->upstream.get(), po); });
  } catch (core::OomInfo& oom) {
    ThrowOom(env, binding.get(), &oom);
  } catch (const core::UpstreamError& e) {
    ThrowUpstream(env, e);
  }
  return binding;
}

uint64_t BfcBackend::LeastRegion(uint64_t bytes, size_t alignment) const {
  uint64_t need = core::RoundBytes(bytes);
  if (alignment > core::kMinBlock) need += alignment - core::kMinBlock;
  uint64_t granule = upstream->Granularity();
  if (pool->options().expandable && granule) return (need + granule - 1) / granule * granule;
  return upstream->Footprint(need);
}

// A BFC block is usable on any stream at once: `stream` orders nothing here.
Napi::Value BfcBackend::Alloc(Napi::Env env, const BackendRef& self, uint64_t bytes,
                              size_t alignment, Napi::Value) {
  core::OomInfo oom;
  core::Pool::Chunk* block;
  auto allocate = [&] {
    if (group) group->ClearRefusal(LeastRegion(bytes, alignment));
    try {
      return InterprocessCall(env, [&] { return pool->Allocate(bytes, &oom, alignment); });
    } catch (const core::UpstreamError& e) {
      ThrowUpstream(env, e);
    }
  };
  block = allocate();
  // A budget raised since the pool's limit was set: once more under the new one.
  if (!block && InterprocessCall(env, [&] { return FollowBudget(); })) block = allocate();
  if (!block) ThrowOom(env, this, &oom);
  PublishInUse();
  uint64_t address = core::Pool::Address(block);
  auto* a = new PoolAllocation(upstream->managed() ? &kManagedPoolBlockOps : &kPoolBlockOps);
  a->device = upstream->device();
  a->simulated = upstream->simulated();
  a->ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
  a->bytes = bytes;
  a->block = block;
  a->pool = std::static_pointer_cast<BfcBackend>(self);
  return WrapAllocation(env, a);
}

Napi::Object BfcBackend::Stats(Napi::Env env) { return StatsObject(env, pool->Stats()); }

// A number (maxEvents) starts recording afresh; absent stops it.
void BfcBackend::Record(Napi::Env env, Napi::Value max_events) {
  if (Absent(max_events)) {
    pool->SetRecorder(nullptr);
    return;
  }
  uint64_t max = ReadSize(env, max_events, "maxEvents");
  CheckRange(env, "maxEvents", max, uint64_t{1}, UINT64_MAX, "at least 1", Got::kLeftOut);
  recorder = std::make_unique<core::Recorder>(max);
  pool->SetRecorder(recorder.get());
}

// The trace as { action: Uint8Array, time (µs), id, requested, size, region, offset:
// Float64Array, dropped }: columns, so a long trace crosses into JS in one piece.
Napi::Value BfcBackend::Trace(Napi::Env env) {
  Napi::Object out = Napi::Object::New(env);
  const std::vector<core::TraceEvent> none;
  const auto& ev = recorder ? recorder->events() : none;
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
  out.Set("dropped", static_cast<double>(recorder ? recorder->dropped() : 0));
  return out;
}

// The pool as [{ address, size, blocks: [{ offset, size, requested, id, inUse }] }].
Napi::Value BfcBackend::Snapshot(Napi::Env env) {
  std::vector<core::RegionInfo> regions = pool->Regions();
  Napi::Array out = Napi::Array::New(env, regions.size());
  for (size_t i = 0; i < regions.size(); ++i) {
    Napi::Object r = Napi::Object::New(env);
    r.Set("address", static_cast<double>(regions[i].address));
    r.Set("size", static_cast<double>(regions[i].size));
    std::vector<core::BlockInfo> blocks = pool->Blocks(regions[i].address);
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

namespace {
// blockId: returns the id a recording allocator gave the block, or 0.
Napi::Value BlockId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Allocation* a = UnwrapAllocation(env, info[0], "buffer");
  PoolAllocation* b = AsPoolBlock(a);
  uint64_t id = b && b->block ? core::Pool::BlockId(b->block) : 0;
  return Napi::Number::New(env, static_cast<double>(id));
}

// upstreamContract(device, managed, slackBytes): the upstream contract
// (core/allocator/upstream_contract.h) over the CUDA device's upstream, cudaMalloc's or, managed,
// cudaMallocManaged's, limited by the device's whole memory (managed memory may take more); the
// rules it found broken, none when it keeps them. slackBytes: what the driver's own allocations
// may move the free memory by between two readings. It synchronizes the device before it reads the
// free memory. For the test suite on a GPU: it takes and gives back a few regions and granules,
// and asks once for more than the device has. Not for more than it has free: the driver gives
// back memory it held for this process to try such a request, which may then succeed.
Napi::Value UpstreamContract(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int device = ReadInt(env, info[0], "device", 0, std::numeric_limits<int>::max());
  CheckDevice(env, device);
  const bool managed = info[1].ToBoolean();
  // The device's queued work first: a stream-ordered pool gives back what was freed in stream
  // order at the next synchronize, and the contract's own cudaFree synchronizes, so this process's
  // pending frees would raise the free memory midway.
  int current = 0;
  if (cudaGetDevice(&current) == cudaSuccess && cudaSetDevice(device) == cudaSuccess) {
    cudaDeviceSynchronize();
    cudaSetDevice(current);
  }
  (void)cudaGetLastError();
  CudaUpstream upstream(device, managed);
  core::ContractOptions o;
  o.slack = ReadSize(env, info[2], "slackBytes");
  o.limit = managed ? 0 : upstream.GetMemInfo().total;
  o.refusal_reclaims = true;
  o.resident = !managed;
  o.map_refusal = false;  // the whole device, granule by granule: the simulated legs check it
  const std::vector<std::string> broken = core::CheckUpstreamContract(upstream, o);
  Napi::Array out = Napi::Array::New(env, broken.size());
  for (size_t i = 0; i < broken.size(); ++i) out.Set(i, broken[i]);
  return out;
}
}  // namespace

void InitBfc(Napi::Env env, Napi::Object exports) {
  Register(env, exports, {{"blockId", BlockId}, {"upstreamContract", UpstreamContract}});
}

Napi::Array BfcBackend::Regions(Napi::Env env) {
  std::vector<core::RegionInfo> regions = pool->Regions();
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

Napi::Object BfcBackend::Info(Napi::Env env) {
  core::MemInfo mi = upstream->GetMemInfo();
  Napi::Object o = Napi::Object::New(env);
  o.Set("device", upstream->device());
  o.Set("simulated", upstream->simulated());
  o.Set("managed", upstream->managed());
  o.Set("hostBytes", static_cast<double>(upstream->HostBytes()));
  o.Set("allowGrowth", pool->options().allow_growth);
  o.Set("garbageCollection", pool->options().garbage_collection);
  o.Set("limitBytes", static_cast<double>(pool->options().limit));
  o.Set("limitSource", pool->options().limit_source);
  o.Set("initialPoolBytes", static_cast<double>(pool->options().initial_bytes));
  o.Set("expandableSegments", pool->options().expandable);
  o.Set("granularity", static_cast<double>(pool->granularity()));
  o.Set("reservedRange", static_cast<double>(pool->reserved_range()));
  o.Set("deviceFree", static_cast<double>(mi.free));
  o.Set("deviceTotal", static_cast<double>(mi.total));
  o.Set("computeCapability",
        std::to_string(upstream->ccMajor()) + "." + std::to_string(upstream->ccMinor()));
  o.Set("liveBlocks", static_cast<double>(pool->live_blocks()));
  if (group)
    o.Set("group",
          InterprocessCall(env, [&] { return GroupObject(env, group->ledger().Snapshot()); }));
  return o;
}

Napi::Value BfcBackend::Pressure(Napi::Env env) {
  if (!group) return env.Null();
  const uint64_t seen = group->ledger().Generation();
  // UINT64_MAX: the counter could not be read (or the ledger was never read); looked at under the
  // lock, as a change. Under pressure every look takes the lock: blocks freed into the pool
  // meanwhile move no counter, and a release that could not have the lock is applied only by a
  // look that has it.
  if (!pressure_on && seen == pressure_seen && seen != UINT64_MAX) return env.Undefined();
  const core::GroupPressure p =
      InterprocessCall(env, [&] { return core::PressureOn(group->ledger().Snapshot()); });
  pressure_seen = seen;  // only once the ledger was read: a look that threw is looked again
  pressure_on = p.reason != core::GroupPressure::kNone;
  if (!pressure_on) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("reason", p.reason == core::GroupPressure::kBudget ? "budget" : "request");
  o.Set("bytes", static_cast<double>(p.bytes));
  Napi::Array pids = Napi::Array::New(env, p.pids.size());
  for (size_t i = 0; i < p.pids.size(); ++i) pids.Set(i, static_cast<double>(p.pids[i]));
  o.Set("pids", pids);
  o.Set("borrowing", p.self_borrows);
  return o;
}

bool BfcBackend::FollowBudget() {
  if (!limit_is_budget) return false;
  uint64_t budget =
      std::min<uint64_t>(group->ledger().Snapshot().budget, upstream->GetMemInfo().total) /
      core::kMinBlock * core::kMinBlock;
  if (budget == pool->options().limit) return false;
  pool->SetLimit(budget, pool->options().limit_source);
  group->ledger().SetLimit(budget);
  return true;
}

uint64_t BfcBackend::SetFraction(Napi::Env env, Napi::Value fraction) {
  limit_is_budget = false;  // a limit of its own from now on
  core::ResolvedLimit limit = ReadFractionLimit(env, fraction, upstream->GetMemInfo().total);
  if (group) InterprocessCall(env, [&] { group->ledger().SetLimit(limit.bytes); });
  pool->SetLimit(limit.bytes, limit.source);
  return limit.bytes;
}

uint64_t BfcBackend::Close(Napi::Env env, bool force) {
  uint64_t live = pool->live_blocks();
  if (live > 0 && !force) ThrowAllocatorBusy(env, live, pool->Stats().bytes_in_use);
  if (live > 0) {
    // Forced: every buffer still carved from this pool becomes a freed buffer. One that an
    // asynchronous copy still uses is released when the copy settles (as free() does), and the
    // pool's regions stay mapped until then: the copy may still read or write them.
    deferred = ReleaseOrDefer(env, Handles(env).Live(), [this](Allocation* a) {
      PoolAllocation* b = AsPoolBlock(a);
      return b && b->pool.get() == this;
    });
  }
  uint64_t bytes = pool->Stats().pool_bytes;
  closed = true;
  if (deferred == 0) ReleaseRegions();
  return bytes;
}

void BfcBackend::CountLive(std::vector<LiveRow>* rows) {
  if (closed || !pool) return;
  uint64_t bytes = pool->Stats().pool_bytes;
  cm::CountLive(rows, "allocator", upstream->device(), upstream->simulated(), bytes);
  if (group) cm::CountLive(rows, "group", upstream->device(), upstream->simulated(), bytes);
}

}  // namespace cm
