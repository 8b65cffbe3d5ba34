#include "transfer/files/engine.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <thread>

#include "memory/managed.h"

namespace cm::files {

namespace {

std::shared_ptr<FileEngine> MakeEngine(int device) {
  auto e = std::make_shared<FileEngine>();
  e->device = device;
  const size_t bytes = core::FileRingBytes(Shape(true));
  if (device < 0) {
    e->ring = static_cast<char*>(std::aligned_alloc(kAlign, bytes));
    if (!e->ring) e->error = Error{cudaErrorMemoryAllocation, "aligned_alloc (file ring)", ""};
    return e;
  }
  CM_TRY(e->error, cudaSetDevice(device), "cudaSetDevice");
  if (!e->error)
    CM_TRY(e->error, cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking),
           "cudaStreamCreateWithFlags");
  void* p = nullptr;
  // Page-aligned, so every piece's address is aligned for O_DIRECT.
  if (!e->error)
    CM_TRY(e->error, cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc (file ring)");
  e->ring = static_cast<char*>(p);
  CreateSlotEvents(kSlots, &e->done, &e->error);
  return e;
}

}  // namespace

std::shared_ptr<FileEngine> GetEngine(int device, Error* err) {
  static std::mutex mutex;
  static auto* engines = new std::map<int, std::shared_ptr<FileEngine>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& e = (*engines)[device];
  if (!e || e->error) e = MakeEngine(device);
  if (e->error) {
    *err = e->error;
    return nullptr;
  }
  return e;
}

std::shared_ptr<core::CopyTeam> HostTeam() {
  static std::mutex mutex;
  static auto* team = new std::shared_ptr<core::CopyTeam>();
  std::lock_guard<std::mutex> lock(mutex);
  if (!*team) {
    unsigned hw = std::max(2u, std::thread::hardware_concurrency());
    *team = std::make_shared<core::CopyTeam>(static_cast<int>(std::clamp(hw * 3 / 4, 2u, 12u)));
  }
  return *team;
}

FileFailure SettleManaged(const Endpoint& e, const std::string& path) {
  if (e.where != Endpoint::kManaged || ConcurrentManagedAccess(e.device)) return {};
  cudaError_t r = UseDevice(e.device);
  if (r == cudaSuccess) r = cudaDeviceSynchronize();
  if (r == cudaSuccess) return {};
  (void)cudaGetLastError();
  return FileFailure{"", "", path, "", 0, Error{r, "cudaDeviceSynchronize", ""}};
}

}  // namespace cm::files
