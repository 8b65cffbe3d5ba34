#include "transfer/staging.h"

#include <algorithm>
#include <map>
#include <thread>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "core/transfer/file_pipeline.h"  // HostTransport
#include "device/discovery.h"
#include "transfer/cuda_ring.h"

namespace cm {

StagingOptions StagingOptionsInForce(const StagingState& st) {
  // The defaults were chosen with the transfer benchmark and scripts/tune-staging.js on the H100
  // (docs/transfers.md); hardware threads bound the team.
  // configureStaging() overrides each one. Asked once: every pageable copy under 'auto' comes here
  // for its threshold.
  static const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  StagingOptions o;
  o.chunk_bytes = 8u << 20;
  o.first_chunk_bytes = 512u << 10;
  o.last_chunk_bytes = 512u << 10;
  o.slots = 8;
  o.threads = static_cast<int>(std::clamp(hw * 3 / 4, 1u, 12u));
  o.streaming = Streaming::kAuto;
  o.auto_h2d = 256u << 10;
  o.auto_d2h = 128u << 10;
  const StagingState::Config& c = st.config;
  if (c.chunk_bytes) o.chunk_bytes = c.chunk_bytes;
  if (c.first_chunk_bytes) o.first_chunk_bytes = c.first_chunk_bytes;
  if (c.last_chunk_bytes) o.last_chunk_bytes = c.last_chunk_bytes;
  if (c.slots) o.slots = c.slots;
  if (c.threads) o.threads = c.threads;
  if (c.streaming) o.streaming = *c.streaming;
  if (c.auto_h2d >= 0) o.auto_h2d = static_cast<size_t>(c.auto_h2d);
  if (c.auto_d2h >= 0) o.auto_d2h = static_cast<size_t>(c.auto_d2h);
  return o;
}

size_t StagedThreshold(Instance& inst, bool to_host) {
  StagingState& st = Staging(inst);
  std::lock_guard<std::mutex> lock(st.mutex);
  StagingOptions o = StagingOptionsInForce(st);
  return to_host ? o.auto_d2h : o.auto_h2d;
}

StagingEngine::StagingEngine(int device, bool to_host, const StagingOptions& options,
                             std::shared_ptr<core::CopyTeam> team, int node)
    : device_(device), to_host_(to_host), options_(options), team_(std::move(team)) {
  CM_TRY(error_, cudaSetDevice(device), "cudaSetDevice");
  if (!error_)
    CM_TRY(error_, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
           "cudaStreamCreateWithFlags");
  // cudaHostAlloc faults the pages in on this thread, so they follow its memory policy: prefer
  // the GPU's node for the allocation, then see where the pages went.
  core::ScopedPreferredNode prefer(node);
  ring_placed_ = prefer.ok();
  if (!error_) {
    void* p = nullptr;
    CM_TRY(error_, cudaHostAlloc(&p, core::StagingRingBytes(Shape()), cudaHostAllocPortable),
           "cudaHostAlloc (staging ring)");
    if (!error_) ring_ = static_cast<char*>(p);
  }
  CreateSlotEvents(options_.slots, &done_, &error_);
  if (ring_) ring_node_ = core::NodeOfAddress(ring_);
}

core::StagingDirection StagingEngine::Direction() const {
  return to_host_ ? core::StagingDirection::kToHost : core::StagingDirection::kToDevice;
}

core::StagingShape StagingEngine::Shape() const { return ShapeOf(options_); }

StagingEngine::~StagingEngine() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (cudaEvent_t ev : done_) cudaEventDestroy(ev);
  if (ring_) cudaFreeHost(ring_);
  if (stream_) cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

Error StagingEngine::Copy(char* device_ptr, char* host, size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  Error err;
  // Its Issue sets the device on whichever thread issues.
  CudaEventRing ring(device_, ring_, stream_, done_, device_ptr, !to_host_,
                     to_host_ ? "cudaMemcpyAsync (staged device-to-host)"
                              : "cudaMemcpyAsync (staged host-to-device)");
  core::TransportStatus s =
      core::RunStaged(*team_, ring, Direction(), host, n, Shape(),
                      StreamingFor(options_.streaming, to_host_, n), &ring_pos_, kIssue);
  if (!s.ok()) err = Error{static_cast<cudaError_t>(s.code), s.call, ""};
  return err;
}

core::StagingPlan StagingEngine::PlanFor(size_t n) const {
  return core::PlanStagedCopy(Direction(), kIssue, n, Shape(), team_->threads(), 0);
}

size_t StagingEngine::RingBytes() const { return core::StagingRingBytes(Shape()); }

void StagingEngine::HostHalf(char* host, size_t n, char* ring, char* stand_in, size_t* ring_pos) {
  // As a file read moves ring -> host memory and a file write host memory -> ring: to the device
  // the chunks leave the ring for the stand-in, to the host they arrive from it.
  core::HostTransport cpu(ring, stand_in, !to_host_);
  core::RunStaged(*team_, cpu, Direction(), host, n, Shape(),
                  StreamingFor(options_.streaming, to_host_, n), ring_pos, kIssue);
}

namespace {
std::shared_ptr<const core::NumaPlan> PlacementLocked(StagingState& st, int device) {
  auto& plan = st.numa_plans[device];
  if (!plan) {
    char bus[32] = "";
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) (void)cudaGetLastError();
    plan = std::make_shared<const core::NumaPlan>(core::PlanNumaPlacement("/sys", bus));
  }
  return plan;
}

// The CPUs that the copy teams draw on: one share per NUMA node the teams are kept on, or one for
// the CPUs the process may use. Process-wide, so that the teams of every addon instance (worker
// threads) are counted together.
std::shared_ptr<core::CpuShare> CpuShareFor(const core::NumaPlan& plan) {
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<core::CpuShare>> shares;  // by node; -1 unplaced
  std::lock_guard<std::mutex> lock(mutex);
  const int key = plan.applies ? plan.node : -1;
  auto& share = shares[key];
  if (!share)
    share = std::make_shared<core::CpuShare>(plan.applies ? static_cast<int>(plan.cpus.size())
                                                          : core::UsableCpus());
  return share;
}

// One team per GPU, so that GPUs copying at once do not share out one team's threads (two H200
// on one node each got about half of a shared team); on a host of several nodes its threads are
// kept on the GPU's node's CPUs (and the team is no larger than them). Teams on the same CPUs
// share them while they copy at once (core::CpuShare).
std::shared_ptr<core::CopyTeam> TeamLocked(StagingState& st, int device) {
  std::shared_ptr<const core::NumaPlan> plan = PlacementLocked(st, device);
  auto& team = st.teams[device];
  if (!team) {
    int threads = StagingOptionsInForce(st).threads;
    if (plan->applies) threads = std::min(threads, static_cast<int>(plan->cpus.size()));
    team = std::make_shared<core::CopyTeam>(
        threads, plan->applies ? plan->cpus : std::vector<int>{}, CpuShareFor(*plan));
  }
  return team;
}
}  // namespace

std::shared_ptr<core::CopyTeam> GetStagingTeam(Instance& inst, int device) {
  StagingState& st = Staging(inst);
  std::lock_guard<std::mutex> lock(st.mutex);
  return TeamLocked(st, device);
}

std::shared_ptr<const core::NumaPlan> DevicePlacement(Instance& inst, int device) {
  StagingState& st = Staging(inst);
  std::lock_guard<std::mutex> lock(st.mutex);
  return PlacementLocked(st, device);
}

std::shared_ptr<StagingEngine> GetStagingEngine(Instance& inst, int device, bool to_host,
                                                Error* err) {
  StagingState& st = Staging(inst);
  std::lock_guard<std::mutex> lock(st.mutex);
  const int key = device * 2 + (to_host ? 1 : 0);
  auto it = st.engines.find(key);
  if (it != st.engines.end()) return it->second;
  std::shared_ptr<const core::NumaPlan> plan = PlacementLocked(st, device);
  auto engine =
      std::make_shared<StagingEngine>(device, to_host, StagingOptionsInForce(st),
                                      TeamLocked(st, device), plan->applies ? plan->node : -1);
  if (engine->error()) {
    *err = engine->error();
    return nullptr;
  }
  st.engines[key] = engine;
  return engine;
}

}  // namespace cm

namespace cm {

namespace {

// stagingPlacement(device) -> { device, numaNode, hostNodes, applies, reason, cpus, threads,
// threadsPinned, rings: [{ direction, node, placed }] }: where the staged path for this GPU keeps
// its threads and pinned ring, and whether the kernel did as asked. Rings are listed once a
// staged copy in that direction has made them.
Napi::Value StagingPlacement(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  int device = ReadInt(env, info[0], "device", 0, 1 << 20);
  CheckDevice(env, device);
  StagingState& st = Staging(GetInstance(env));
  std::lock_guard<std::mutex> lock(st.mutex);
  std::shared_ptr<const core::NumaPlan> plan = PlacementLocked(st, device);
  std::shared_ptr<core::CopyTeam> team = TeamLocked(st, device);
  Napi::Object o = Napi::Object::New(env);
  o.Set("device", device);
  o.Set("numaNode", plan->node);
  o.Set("hostNodes", plan->host_nodes);
  o.Set("applies", plan->applies);
  o.Set("reason", plan->reason);
  Napi::Array cpus = Napi::Array::New(env, plan->cpus.size());
  for (size_t i = 0; i < plan->cpus.size(); ++i) cpus.Set(static_cast<uint32_t>(i), plan->cpus[i]);
  o.Set("cpus", cpus);
  o.Set("threads", team->threads());
  o.Set("threadsPinned", team->pinned());
  o.Set("sharedCpus", team->share() ? team->share()->cpus() : 0);
  Napi::Array rings = Napi::Array::New(env);
  uint32_t k = 0;
  for (bool to_host : {false, true}) {
    auto it = st.engines.find(device * 2 + (to_host ? 1 : 0));
    if (it == st.engines.end()) continue;
    Napi::Object r = Napi::Object::New(env);
    r.Set("direction", to_host ? "d2h" : "h2d");
    r.Set("node", it->second->ring_node());
    r.Set("placed", it->second->ring_placed());
    rings.Set(k++, r);
  }
  o.Set("rings", rings);
  return o;
}

// configureStaging: returns the settings in force. A field set to null returns to its default.
// Drops the engines and the team, so the next staged copy builds them with the new settings (copies
// in flight keep the ones they hold).
Napi::Value ConfigureStaging(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  StagingState& st = Staging(GetInstance(env));
  if (info[0].IsObject()) {
    Napi::Object o = info[0].As<Napi::Object>();
    StagingState::Config cfg = st.config;
    auto has = [&](const Napi::Object& from, const char* key, bool* reset) {
      Napi::Value v = from.Get(key);
      *reset = v.IsNull();
      return !v.IsUndefined();
    };
    bool reset = false;
    if (has(o, "chunkBytes", &reset))
      cfg.chunk_bytes = reset ? 0 : ReadSize(env, o.Get("chunkBytes"), "chunkBytes");
    if (has(o, "firstChunkBytes", &reset))
      cfg.first_chunk_bytes =
          reset ? 0 : ReadSize(env, o.Get("firstChunkBytes"), "firstChunkBytes");
    if (has(o, "lastChunkBytes", &reset))
      cfg.last_chunk_bytes = reset ? 0 : ReadSize(env, o.Get("lastChunkBytes"), "lastChunkBytes");
    if (has(o, "slots", &reset))
      cfg.slots = reset ? 0 : ReadInt(env, o.Get("slots"), "slots", 2, 64);
    if (has(o, "threads", &reset))
      cfg.threads = reset ? 0 : ReadInt(env, o.Get("threads"), "threads", 1, 256);
    if (has(o, "streaming", &reset))
      cfg.streaming = reset ? std::nullopt
                      : o.Get("streaming").IsString()  // 'auto', checked by the TS layer
                          ? std::optional<Streaming>(Streaming::kAuto)
                          : o.Get("streaming").ToBoolean() ? Streaming::kOn : Streaming::kOff;
    if (has(o, "autoThreshold", &reset)) {
      if (reset) {
        cfg.auto_h2d = cfg.auto_d2h = -1;
      } else {
        Napi::Object t = o.Get("autoThreshold").As<Napi::Object>();
        bool r = false;
        if (has(t, "h2d", &r))
          cfg.auto_h2d =
              r ? -1 : static_cast<int64_t>(ReadSize(env, t.Get("h2d"), "autoThreshold.h2d"));
        if (has(t, "d2h", &r))
          cfg.auto_d2h =
              r ? -1 : static_cast<int64_t>(ReadSize(env, t.Get("d2h"), "autoThreshold.d2h"));
      }
    }
    // Chunk sizes: 0 (the default) or from 64 KiB to 1 GiB.
    for (auto [bytes, name] : {std::pair{cfg.chunk_bytes, "chunkBytes"},
                               std::pair{cfg.first_chunk_bytes, "firstChunkBytes"},
                               std::pair{cfg.last_chunk_bytes, "lastChunkBytes"}})
      if (bytes && (bytes < 65536 || bytes > (1ull << 30)))
        ThrowRange(env, std::string(name) + " must be from 64 KiB to 1 GiB");
    std::lock_guard<std::mutex> lock(st.mutex);
    st.config = cfg;
    st.engines.clear();
    st.teams.clear();
  }
  std::lock_guard<std::mutex> lock(st.mutex);
  StagingOptions o = StagingOptionsInForce(st);
  Napi::Object out = Napi::Object::New(env);
  out.Set("chunkBytes", static_cast<double>(o.chunk_bytes));
  out.Set("firstChunkBytes", static_cast<double>(std::min(o.first_chunk_bytes, o.chunk_bytes)));
  out.Set("lastChunkBytes", static_cast<double>(std::min(o.last_chunk_bytes, o.chunk_bytes)));
  out.Set("slots", o.slots);
  out.Set("ringBytes", static_cast<double>(core::StagingRingBytes(ShapeOf(o))));
  out.Set("threads", o.threads);
  if (o.streaming == Streaming::kAuto)
    out.Set("streaming", "auto");
  else
    out.Set("streaming", o.streaming == Streaming::kOn);
  Napi::Object t = Napi::Object::New(env);
  t.Set("h2d", static_cast<double>(o.auto_h2d));
  t.Set("d2h", static_cast<double>(o.auto_d2h));
  out.Set("autoThreshold", t);
  return out;
}

}  // namespace

void InitStaging(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"stagingPlacement", StagingPlacement},
               {"configureStaging", ConfigureStaging},
           });
}

}  // namespace cm
