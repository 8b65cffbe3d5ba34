// What moves a file's bytes on the memory's side: the chunk shape, the pinned ring and DMA stream
// per device (a host ring for O_DIRECT reads into memory the CPU addresses), the copy team for
// host memory, and the wait that makes managed memory safe for host threads.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "binding/errors.h"
#include "core/transfer/copy_team.h"
#include "core/transfer/file_pipeline.h"
#include "transfer/copy.h"
#include "transfer/cuda_ring.h"
#include "transfer/files/failure.h"

namespace cm::files {

// 4 slots of 8 MiB: a chunk is one DMA transfer of 8 MiB (past the size where per-transfer costs
// matter) and 8 pieces of 1 MiB, so the team keeps 8 or more reads in flight, which NVMe drives
// need to reach their rate. 4096: the largest logical block size O_DIRECT asks alignment to.
constexpr size_t kChunk = 8u << 20, kPiece = 1u << 20, kAlign = 4096;
constexpr int kSlots = 4;

inline core::FileShape Shape(bool direct) { return {kChunk, kSlots, kPiece, direct ? kAlign : 1}; }

// The pinned ring and DMA stream of one device (or, for device -1, an aligned host ring for
// O_DIRECT reads into memory the CPU addresses and for the storage-only read). One transfer at a
// time each; kept for the life of the process, as the staged path's rings are kept for its
// instance.
struct FileEngine {
  std::mutex mutex;
  int device = -1;
  char* ring = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> done;
  Error error;
};

// Engines are process-wide (the memory is), made on first use and never freed: freeing pinned
// memory from a static destructor at exit races the CUDA runtime's own teardown.
std::shared_ptr<FileEngine> GetEngine(int device, Error* err);

// The team for reads into host memory and the storage-only read: as large as the staged path's.
std::shared_ptr<core::CopyTeam> HostTeam();

// The engine's ring as the pipeline's DMA half, between it and `device_ptr` on the engine's
// device. Hold e.mutex while it runs.
inline CudaEventRing DeviceRing(FileEngine& e, char* device_ptr, bool to_device) {
  return CudaEventRing(e.device, e.ring, e.stream, e.done, device_ptr, to_device,
                       "cudaMemcpyAsync (file)");
}

// Managed memory is read and written by host threads here (it is not device memory to the ring).
// Where the device cannot access managed memory while the host does, a host access while a kernel
// runs faults the process: first wait for the device's work, as copies and ManagedBuffer.bytes
// do. (The JavaScript side counts the operation as in flight on the buffer meanwhile.)
FileFailure SettleManaged(const Endpoint& e, const std::string& path);

}  // namespace cm::files
