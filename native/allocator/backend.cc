#include "allocator/backend.h"

#include <algorithm>

#include "allocator/group.h"
#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"

namespace cm {

namespace {
// What a backend that does not report its blocks says to recording and snapshot().
[[noreturn]] void ThrowNoBlocks(Napi::Env env, const char* what) {
  throw LibraryError(env, "ERR_NOT_SUPPORTED",
                     std::string(what) +
                         " needs the 'bfc' backend: CUDA's stream-ordered pool does not report "
                         "its blocks and regions");
}
}  // namespace

core::MemInfo DeviceMemInfo(int device) {
  size_t free_b = 0, total_b = 0;
  cudaSetDevice(device);
  cudaMemGetInfo(&free_b, &total_b);
  (void)cudaGetLastError();
  return {free_b, total_b};
}

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

namespace {
// GroupRefusalReason of lib/base/errors.ts.
const char* ReasonName(core::GroupRefusal::Reason r) {
  switch (r) {
    case core::GroupRefusal::kMemberLimit:
      return "memberLimit";
    case core::GroupRefusal::kNeverFits:
      return "neverFits";
    case core::GroupRefusal::kDeadlock:
      return "deadlock";
    case core::GroupRefusal::kTimeout:
      return "timeout";
    case core::GroupRefusal::kBudget:
      break;
  }
  return "budget";
}
}  // namespace

Napi::Value OomError(Napi::Env env, const core::OomInfo& oom, const core::GroupRefusal* refusal) {
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
  if (refusal) {
    d.Set("group", GroupObject(env, refusal->group));
    d.Set("groupReason", ReasonName(refusal->reason));
    d.Set("groupWaitedMs", static_cast<double>(refusal->waited_ms));
  }
  return MakeOutOfMemoryError(env, d);
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

namespace {

constexpr napi_type_tag kAllocatorTag = {0x51e0c7a93b2d4f86ull, 0x0f6b2a9d8e4c7135ull};

void ReadPlatformLimit(Napi::Env env, Napi::Value v, core::PolicyOptions* policy) {
  if (!v.IsObject()) return;
  Napi::Object o = v.As<Napi::Object>();
  policy->platform_cap = ReadSize(env, o.Get("capBytes"), "platform.capBytes");
  policy->platform_cap_source = ReadString(env, o.Get("capSource"), "platform.capSource");
  policy->platform_default = ReadSize(env, o.Get("defaultBytes"), "platform.defaultBytes");
  policy->platform_default_source =
      ReadString(env, o.Get("defaultSource"), "platform.defaultSource");
}

// An alloc()'s alignment argument: absent gives 256, else a power of two up to 1 GiB.
size_t ReadAlignment(Napi::Env env, Napi::Value v) {
  if (Absent(v)) return core::kMinBlock;
  uint64_t a = ReadSize(env, v, "options.alignment");
  if (a == 0 || (a & (a - 1)) != 0 || a > core::kMaxAlignment)
    ThrowRange(
        env, "options.alignment must be a power of two from 1 to 1 GiB, got " + std::to_string(a));
  return std::max<size_t>(a, core::kMinBlock);
}

double Opt(Napi::Object o, const char* key, double fallback) {
  Napi::Value v = o.Get(key);
  return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : fallback;
}

SimulatedDevice ReadSimulatedDevice(Napi::Env env, Napi::Object s) {
  SimulatedDevice d;
  d.total_bytes = ReadSize(env, s.Get("totalBytes"), "simulate.totalBytes");
  d.free_bytes = ReadSize(env, s.Get("freeBytes"), "simulate.freeBytes");
  if (d.free_bytes > d.total_bytes)
    ThrowRange(env, "simulate.freeBytes must not exceed simulate.totalBytes");
  d.cc_major = static_cast<int>(Opt(s, "ccMajor", 9));
  d.cc_minor = static_cast<int>(Opt(s, "ccMinor", 0));
  if (!Absent(s.Get("granularity")))
    d.granularity = ReadSize(env, s.Get("granularity"), "simulate.granularity");
  if (!Absent(s.Get("hostBytes")))
    d.host_bytes = ReadSize(env, s.Get("hostBytes"), "simulate.hostBytes");
  return d;
}

// shared: { dir, name, device (uuid or "simulated"), budget (0: the group's), budgetSource,
// lockTimeoutMs, and the member's terms: request, memberLimit (bytes; absent: 0), waitMs }
core::GroupJoin ReadGroupJoin(Napi::Env env, Napi::Object g) {
  core::GroupJoin join{ReadString(env, g.Get("dir"), "shared.dir"),
                       ReadString(env, g.Get("name"), "shared.name"),
                       ReadString(env, g.Get("device"), "shared.device"),
                       ReadSize(env, g.Get("budget"), "shared.budget"),
                       ReadString(env, g.Get("budgetSource"), "shared.budgetSource"),
                       ReadInt(env, g.Get("lockTimeoutMs"), "shared.lockTimeoutMs", 0, 86400000),
                       {}};
  if (!Absent(g.Get("request")))
    join.terms.request = ReadSize(env, g.Get("request"), "shared.request");
  if (!Absent(g.Get("memberLimit")))
    join.terms.member_limit = ReadSize(env, g.Get("memberLimit"), "shared.memberLimit");
  if (!Absent(g.Get("waitMs")))
    join.terms.wait_ms = ReadInt(env, g.Get("waitMs"), "shared.waitMs", 0, 86400000);
  if (join.terms.member_limit && join.terms.request > join.terms.member_limit)
    ThrowRange(env, "shared.request must not exceed shared.memberLimit");
  return join;
}

}  // namespace

AllocatorOptions ReadAllocatorOptions(Napi::Env env, Napi::Value v) {
  if (!v.IsObject()) ThrowType(env, "options must be an object");
  Napi::Object o = v.As<Napi::Object>();
  AllocatorOptions out;
  Napi::Value backend = o.Get("backend");
  if (!Absent(backend)) {
    std::string name = ReadString(env, backend, "options.backend");
    if (name == "async")
      out.backend = BackendKind::kAsync;
    else if (name != "bfc")
      ThrowRange(env, "options.backend must be 'bfc' or 'async', got '" + name + "'");
  }
  out.device = ReadInt(env, o.Get("device"), "options.device", 0, 1 << 20);
  core::AllocatorSpec& spec = out.spec;
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
  if (o.Get("shared").IsObject())
    spec.group = ReadGroupJoin(env, o.Get("shared").As<Napi::Object>());
  out.managed = o.Get("managed").ToBoolean();
  out.async_default_pool = o.Get("asyncDefaultPool").ToBoolean();
  if (o.Get("simulate").IsObject())
    out.simulate = ReadSimulatedDevice(env, o.Get("simulate").As<Napi::Object>());
  if (out.backend == BackendKind::kAsync) {
    // What lib/allocator/backend.ts refuses first, with the reasons.
    const char* refused = out.simulate      ? "simulate"
                          : out.managed     ? "managed"
                          : spec.expandable ? "expandableSegments"
                          : spec.group      ? "shared"
                                            : nullptr;
    if (refused)
      throw LibraryError(env, "ERR_NOT_SUPPORTED",
                         std::string("options.") + refused + " needs backend 'bfc'");
  }
  return out;
}

void Backend::Record(Napi::Env env, Napi::Value) { ThrowNoBlocks(env, "recording"); }

void Backend::Tally(uint64_t id) {
  tally_id_ = id;
  CountLive(&tallied_);
  for (const LiveRow& r : tallied_) tally::Change(id, r.kind.c_str(), r.device, r.simulated, 1, 0);
}

void Backend::Untally() noexcept {
  for (const LiveRow& r : tallied_)
    tally::Change(tally_id_, r.kind.c_str(), r.device, r.simulated, -1, 0);
  tallied_.clear();
}

Backend::~Backend() { Untally(); }
Napi::Value Backend::Trace(Napi::Env env) { ThrowNoBlocks(env, "recording"); }
Napi::Value Backend::Snapshot(Napi::Env env) { ThrowNoBlocks(env, "snapshot()"); }

namespace {

// Allocator handles by number (allocatorId), which allocatorAlloc takes: a table lookup, where
// checking an External's type tag was a tenth of a pooled alloc+free pair. A number is -1 - the
// entry's handle in the table (slot + generation * 2^24, as buffer handles are:
// core/binding/handle_table.h), so a stale or forged one misses, and no buffer handle (never
// negative) is taken for one. Shared by the environment and every handle it made, so that a
// handle's finalizer can take its entry out whenever it runs, the environment's state gone or not.
struct AllocatorIds {
  core::HandleTable<const BackendRef> table;
};
struct AllocatorIdState : InstanceState {
  std::shared_ptr<AllocatorIds> ids = std::make_shared<AllocatorIds>();
};

// What an allocator handle (an External) owns: its backend, and its entry in the numbers' table.
struct AllocatorHandle {
  BackendRef ref;
  std::shared_ptr<AllocatorIds> ids;
  uint32_t slot = core::HandleTable<const BackendRef>::kNoSlot;
  double id = 0;  // its number (negative); 0: none (the table was full), the External is taken
};

AllocatorHandle& UnwrapHandle(Napi::Env env, Napi::Value v) {
  if (!v.IsExternal() || !v.As<Napi::Object>().CheckTypeTag(&kAllocatorTag))
    ThrowType(env, "allocator must be an allocator handle of this library");
  return *v.As<Napi::External<AllocatorHandle>>().Data();
}

// The backend behind an allocator handle; a TypeError if `v` is not one, ERR_ALLOCATOR_CLOSED if
// it is closed (unless allow_closed).
const BackendRef& Unwrap(Napi::Env env, Napi::Value v, bool allow_closed = false) {
  const BackendRef& b = UnwrapHandle(env, v).ref;
  if (b->closed && !allow_closed) ThrowAllocatorClosed(env);
  return b;
}

// The same for an allocator handle's number (allocatorId), or the handle itself.
const BackendRef& UnwrapNumbered(Napi::Env env, Napi::Value v) {
  double id = 0;
  if (napi_get_value_double(env, v, &id) != napi_ok) return Unwrap(env, v);
  bool stale = false;
  const BackendRef* b =
      id < 0 ? GetInstance(env).State<AllocatorIdState>().ids->table.Find(-1 - id, &stale)
             : nullptr;
  if (!b) ThrowType(env, "allocator must be an allocator handle of this library, or its number");
  if ((*b)->closed) ThrowAllocatorClosed(env);
  return *b;
}

Backend* Open(const Napi::CallbackInfo& info) { return Unwrap(info.Env(), info[0]).get(); }

// The allocators this environment made, held weakly (allocatorsLive()).
struct MadeAllocators : InstanceState {
  std::vector<std::weak_ptr<Backend>> list;
};

Napi::Value Number(const Napi::CallbackInfo& info, uint64_t n) {
  return Napi::Number::New(info.Env(), static_cast<double>(n));
}

// createAllocator: returns an allocator handle of the backend the options name.
Napi::Value Create(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  AllocatorOptions o = ReadAllocatorOptions(env, info[0]);
  BackendRef b =
      o.backend == BackendKind::kAsync ? CreateAsyncBackend(env, o) : CreateBfcBackend(env, o);
  auto* h = new AllocatorHandle{std::move(b), GetInstance(env).State<AllocatorIdState>().ids};
  const double entry = h->ids->table.Add(&h->ref, &h->slot);
  h->id = entry < 0 ? 0 : -1 - entry;
  Napi::External<AllocatorHandle> ext =
      Napi::External<AllocatorHandle>::New(env, h, [](Napi::Env, AllocatorHandle* h) {
        h->ids->table.Remove(&h->ref, h->slot);
        if (h->ref.use_count() == 1) h->ref->Collected();  // no block holds it either
        delete h;
      });
  ext.TypeTag(&kAllocatorTag);
  MadeAllocators& made = GetInstance(env).State<MadeAllocators>();
  auto gone = [](const std::weak_ptr<Backend>& w) { return w.expired(); };
  made.list.erase(std::remove_if(made.list.begin(), made.list.end(), gone), made.list.end());
  made.list.push_back(h->ref);
  h->ref->Tally(GetInstance(env).tally_id);
  return ext;
}

// allocatorsLive: the open allocators of both backends by device, with their pool bytes, and
// those that are group members, for leak checks.
Napi::Value AllocatorsLive(const Napi::CallbackInfo& info) {
  std::vector<LiveRow> rows;
  for (const auto& w : GetInstance(info.Env()).State<MadeAllocators>().list)
    if (BackendRef b = w.lock()) b->CountLive(&rows);
  return LiveRowsValue(info.Env(), rows);
}

// allocatorId: returns the number of an allocator handle, negative (0: none; pass the handle)
Napi::Value Id(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), UnwrapHandle(info.Env(), info[0]).id);
}

// allocatorAlloc: returns a buffer handle
Napi::Value Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const BackendRef& b = UnwrapNumbered(env, info[0]);
  uint64_t bytes = ReadSize(env, info[1], "bytes");
  CheckRange(env, "bytes", bytes, uint64_t{1}, UINT64_MAX, "at least 1");
  size_t alignment = info.Length() > 2 ? ReadAlignment(env, info[2]) : core::kMinBlock;
  return b->Alloc(env, b, bytes, alignment, info.Length() > 3 ? info[3] : env.Undefined());
}

// allocatorClose: returns bytes returned to the device (0: closed already)
Napi::Value Close(const Napi::CallbackInfo& info) {
  Backend* b = Unwrap(info.Env(), info[0], true).get();
  if (b->closed) return Number(info, 0);
  uint64_t bytes = b->Close(info.Env(), info[1].ToBoolean());
  b->Untally();
  return Number(info, bytes);
}

// allocatorRecord: starts recording afresh (a number) or stops.
Napi::Value Record(const Napi::CallbackInfo& info) {
  Open(info)->Record(info.Env(), info[1]);
  return info.Env().Undefined();
}

}  // namespace

void InitAllocator(Napi::Env env, Napi::Object exports) {
  using Info = const Napi::CallbackInfo&;
  Register(
      env, exports,
      {
          {"allocatorsLive", AllocatorsLive},
          {"createAllocator", Create},
          {"allocatorId", Id},
          {"allocatorAlloc", Alloc},
          {"allocatorStats", [](Info i) -> Napi::Value { return Open(i)->Stats(i.Env()); }},
          {"allocatorRegions", [](Info i) -> Napi::Value { return Open(i)->Regions(i.Env()); }},
          {"allocatorInfo", [](Info i) -> Napi::Value { return Open(i)->Info(i.Env()); }},
          {"allocatorResetPeak",
           [](Info i) -> Napi::Value {
             Open(i)->ResetPeak();
             return i.Env().Undefined();
           }},
          {"allocatorResetAccumulated",
           [](Info i) -> Napi::Value {
             Open(i)->ResetAccumulated();
             return i.Env().Undefined();
           }},
          {"allocatorSetFraction",
           [](Info i) -> Napi::Value { return Number(i, Open(i)->SetFraction(i.Env(), i[1])); }},
          {"allocatorEmptyCache",
           [](Info i) -> Napi::Value { return Number(i, Open(i)->EmptyCache()); }},
          {"allocatorGroupPressure",
           [](Info i) -> Napi::Value { return Open(i)->Pressure(i.Env()); }},
          {"allocatorClose", Close},
          {"allocatorRecord", Record},
          {"allocatorTrace", [](Info i) -> Napi::Value { return Open(i)->Trace(i.Env()); }},
          {"allocatorSnapshot", [](Info i) -> Napi::Value { return Open(i)->Snapshot(i.Env()); }},
      });
}

}  // namespace cm
