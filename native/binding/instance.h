// Per-environment state: each addon instance (main thread or worker) has its own Instance, with
// its handle table, staging engines and the JS error classes; nothing lives in static globals.
// Also the CUDA status every GPU call checks first. Errors, handles and argument reading have
// their own headers, included here for the files that use all of them.
#pragma once

#include <napi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/cuda_api.h"
#include "binding/args.h"
#include "binding/errors.h"
#include "binding/handles.h"

namespace cm {

namespace core {
class CopyTeam;
struct NumaPlan;
}  // namespace core

struct CudaStatus {
  bool available = false;
  std::string reason;  // NOT_BUILT_WITH_CUDA, NO_DRIVER, INSUFFICIENT_DRIVER, NO_DEVICE, or ""
  std::string message;
  int device_count = 0;
  int driver_version = 0;
  int runtime_version = 0;
};

// Non-temporal stores on the staged path: always, never, or where they measured faster
// (StreamingFor in staging.h).
enum class Streaming { kAuto, kOn, kOff };

struct Instance {
  std::unique_ptr<CudaStatus> status;  // computed once, on first use
  Napi::FunctionReference library_error, cuda_error, oom_error, unavailable_error,
      interprocess_error;
  HandleTable handles;
  // What copyHandles() reads (dst handle, src handle, byte count), written by the JavaScript
  // layer: made by copyArgs() on first use.
  Napi::Reference<Napi::ArrayBuffer> copy_args;
  std::mutex staging_mutex;
  // One per device and direction (key device * 2 + 1 for device-to-host), made on first use, so
  // that copies in the two directions overlap. The two directions share one team of copy threads
  // per device (key: the device), kept on the device's NUMA node where placement applies.
  std::map<int, std::shared_ptr<StagingEngine>> staging;
  std::map<int, std::shared_ptr<core::CopyTeam>> staging_teams;
  std::map<int, std::shared_ptr<const core::NumaPlan>> numa_plans;  // per device, read once
  struct StagingConfig {
    size_t chunk_bytes = 0;  // 0: the tuned default
    size_t first_chunk_bytes = 0;
    size_t last_chunk_bytes = 0;
    int slots = 0;
    int threads = 0;
    std::optional<Streaming> streaming;  // none: the default
    int64_t auto_h2d = -1;               // -1: default
    int64_t auto_d2h = -1;
  } staging_config;
  // Peer access per (from, to) pair once tried (native/peer.cc), and the pinned bounce buffers of
  // host-staged copies between devices.
  std::mutex peer_mutex;
  std::map<std::pair<int, int>, bool> peer_enabled;
  std::map<int, cudaStream_t> peer_streams;  // per device, for peer copies
  std::mutex peer_staging_mutex;
  void* peer_bounce[2] = {nullptr, nullptr};
  Instance();
  ~Instance();
};

Instance& GetInstance(Napi::Env env);

Instance& GetInstance(Napi::Env env);

const CudaStatus& GetStatus(Napi::Env env);
// Throws CudaUnavailableError unless the build has CUDA and a device is usable.
void RequireCuda(Napi::Env env);
// Throws a RangeError unless 0 <= device < the device count.
void CheckDevice(Napi::Env env, int device);

}  // namespace cm
