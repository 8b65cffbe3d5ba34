#include "staging.h"

#include <algorithm>
#include <thread>

namespace cm {

StagingOptions StagingOptionsInForce(const Instance& inst) {
  // The defaults were chosen with the transfer benchmark and scripts/tune-staging.js on the H100
  // (BENCHMARKS.md); hardware threads bound the team. configureStaging() overrides each one.
  // Asked once: every pageable copy under 'auto' comes here for its threshold.
  static const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  StagingOptions o;
  o.chunk_bytes = 8u << 20;
  o.first_chunk_bytes = 512u << 10;
  o.slots = 8;
  o.threads = static_cast<int>(std::clamp(hw * 3 / 4, 1u, 12u));
  o.streaming = true;
  o.auto_h2d = 256u << 10;
  o.auto_d2h = 128u << 10;
  const Instance::StagingConfig& c = inst.staging_config;
  if (c.chunk_bytes) o.chunk_bytes = c.chunk_bytes;
  if (c.first_chunk_bytes) o.first_chunk_bytes = c.first_chunk_bytes;
  if (c.slots) o.slots = c.slots;
  if (c.threads) o.threads = c.threads;
  if (c.streaming >= 0) o.streaming = c.streaming == 1;
  if (c.auto_h2d >= 0) o.auto_h2d = static_cast<size_t>(c.auto_h2d);
  if (c.auto_d2h >= 0) o.auto_d2h = static_cast<size_t>(c.auto_d2h);
  return o;
}

size_t StagedThreshold(Instance& inst, bool to_host) {
  std::lock_guard<std::mutex> lock(inst.staging_mutex);
  StagingOptions o = StagingOptionsInForce(inst);
  return to_host ? o.auto_d2h : o.auto_h2d;
}

// The DMA half of the pipeline on CUDA: chunk c moves on the engine's stream between its ring
// slot and the device, and the slot's event marks when it is done. Issue runs on whichever team
// thread finished the chunk's last piece, so it sets that thread's device first.
class CudaRing : public core::StagingTransport {
 public:
  CudaRing(StagingEngine& e, char* device_ptr) : e_(e), device_ptr_(device_ptr) {}
  char* slot(int s) override { return e_.slots_[s]; }
  core::TransportStatus Issue(const core::StagingChunk& c) override {
    cudaError_t r = UseDevice(e_.device_);
    if (r != cudaSuccess) return Fail(r, "cudaSetDevice");
    char* dev = device_ptr_ + c.offset;
    r = e_.to_host_
            ? cudaMemcpyAsync(e_.slots_[c.slot], dev, c.length, cudaMemcpyDeviceToHost, e_.stream_)
            : cudaMemcpyAsync(dev, e_.slots_[c.slot], c.length, cudaMemcpyHostToDevice, e_.stream_);
    if (r != cudaSuccess)
      return Fail(r, e_.to_host_ ? "cudaMemcpyAsync (staged device-to-host)"
                                 : "cudaMemcpyAsync (staged host-to-device)");
    r = cudaEventRecord(e_.done_[c.slot], e_.stream_);
    return r == cudaSuccess ? core::TransportStatus{} : Fail(r, "cudaEventRecord");
  }
  core::TransportStatus Wait(int s) override {
    cudaError_t r = cudaEventSynchronize(e_.done_[s]);
    return r == cudaSuccess ? core::TransportStatus{} : Fail(r, "cudaEventSynchronize");
  }
  core::TransportStatus Finish() override {
    cudaError_t r = cudaStreamSynchronize(e_.stream_);
    return r == cudaSuccess ? core::TransportStatus{} : Fail(r, "cudaStreamSynchronize");
  }

 private:
  static core::TransportStatus Fail(cudaError_t r, const char* call) {
    (void)cudaGetLastError();
    return {static_cast<int>(r), call};
  }
  StagingEngine& e_;
  char* device_ptr_;
};

StagingEngine::StagingEngine(int device, bool to_host, const StagingOptions& options,
                             std::shared_ptr<core::CopyTeam> team)
    : device_(device), to_host_(to_host), options_(options), team_(std::move(team)) {
  CM_TRY(error_, cudaSetDevice(device), "cudaSetDevice");
  if (!error_)
    CM_TRY(error_, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
           "cudaStreamCreateWithFlags");
  for (int i = 0; i < options_.slots && !error_; ++i) {
    void* p = nullptr;
    CM_TRY(error_, cudaHostAlloc(&p, options_.chunk_bytes, cudaHostAllocPortable),
           "cudaHostAlloc (staging ring)");
    if (error_) break;
    slots_.push_back(static_cast<char*>(p));
    cudaEvent_t ev = nullptr;
    CM_TRY(error_, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    if (!error_) done_.push_back(ev);
  }
}

StagingEngine::~StagingEngine() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (cudaEvent_t ev : done_) cudaEventDestroy(ev);
  for (char* p : slots_) cudaFreeHost(p);
  if (stream_) cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

Error StagingEngine::Copy(char* device_ptr, char* host, size_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  Error err;
  CudaRing ring(*this, device_ptr);  // its Issue sets the device on whichever thread issues
  core::StagingShape shape{options_.first_chunk_bytes, options_.chunk_bytes, options_.slots};
  core::TransportStatus s = core::RunStaged(
      *team_, ring, to_host_ ? core::StagingDirection::kToHost : core::StagingDirection::kToDevice,
      host, n, shape, options_.streaming);
  if (!s.ok()) err = Error{static_cast<cudaError_t>(s.code), s.call, ""};
  return err;
}

namespace {
std::shared_ptr<core::CopyTeam> TeamLocked(Instance& inst) {
  if (!inst.staging_team)
    inst.staging_team = std::make_shared<core::CopyTeam>(StagingOptionsInForce(inst).threads);
  return inst.staging_team;
}
}  // namespace

std::shared_ptr<core::CopyTeam> GetStagingTeam(Instance& inst) {
  std::lock_guard<std::mutex> lock(inst.staging_mutex);
  return TeamLocked(inst);
}

std::shared_ptr<StagingEngine> GetStagingEngine(Instance& inst, int device, bool to_host,
                                                Error* err) {
  std::lock_guard<std::mutex> lock(inst.staging_mutex);
  const int key = device * 2 + (to_host ? 1 : 0);
  auto it = inst.staging.find(key);
  if (it != inst.staging.end()) return it->second;
  auto engine = std::make_shared<StagingEngine>(device, to_host, StagingOptionsInForce(inst),
                                                TeamLocked(inst));
  if (engine->error()) {
    *err = engine->error();
    return nullptr;
  }
  inst.staging[key] = engine;
  return engine;
}

}  // namespace cm
