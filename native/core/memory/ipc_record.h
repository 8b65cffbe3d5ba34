// The record behind an exported CUDA IPC handle: a small file in shared memory that the exporting
// process creates and holds (a lock on its owner byte) and that each importing process holds a
// slot of while the memory is open. It lets the exporter count its importers, lets an importer
// tell a live export from one whose process has exited or freed it, and lets a handle be checked
// against what was really exported (a random token, the CUDA handle bytes, offset and size), so a
// forged or altered handle is refused before it reaches the driver. No Node, no CUDA.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/shm.h"

namespace cm::core {

// What a handle carries and the record must match.
struct IpcDescriptor {
  std::string record;  // file name of the record, "cuda-memory-ipc.<pid>.<16 hex>"
  std::array<uint8_t, 16> token{};
  std::array<uint8_t, 64> handle{};  // cudaIpcMemHandle_t
  std::string device;                // uuid of the GPU
  uint64_t offset = 0, bytes = 0;    // of the buffer within the exported allocation
  int64_t pid = 0;                   // of the exporter
};

class IpcExportRecord {
 public:
  static constexpr int kMaxImporters = 64;
  // Creates the record (and first removes records of processes that have exited). Fills
  // d->record, d->token and d->pid. Every later wait for the record's lock lasts at most
  // lock_timeout_ms (ERR_SHM_LOCK_TIMEOUT).
  static IpcExportRecord* Create(const std::string& dir, IpcDescriptor* d,
                                 int lock_timeout_ms = shm::kDefaultLockTimeoutMs);
  ~IpcExportRecord();  // Remove()
  IpcExportRecord(const IpcExportRecord&) = delete;
  IpcExportRecord& operator=(const IpcExportRecord&) = delete;

  // The pids of the processes that hold the memory open now.
  std::vector<int64_t> Importers();
  // What free() does: under the record's lock, counts the importers and, when there are none (or
  // `force`), removes the record, all in one hold of the lock. An importer opens the record under
  // the same lock and refuses a removed one, so none can open it between the count and the
  // removal. Returns the importers that were counted; empty means removed. Throws ShmError
  // (ERR_SHM_LOCK_TIMEOUT), and then removes nothing.
  std::vector<int64_t> Withdraw(bool force);
  // Removes the record: no process can open the handle any more. Never throws.
  void Remove() noexcept;
  const IpcDescriptor& descriptor() const { return d_; }

 private:
  IpcExportRecord() = default;
  std::vector<int64_t> ImportersLocked();
  std::string path_;
  int fd_ = -1;
  int timeout_ms_ = shm::kDefaultLockTimeoutMs;
  IpcDescriptor d_;
};

class IpcImportRecord {
 public:
  // Checks `d` against its record and takes an importer slot. Throws ShmError:
  // ERR_IPC_HANDLE_INVALID (malformed, forged, altered or damaged), ERR_IPC_EXPORT_GONE (freed,
  // or its process exited), ERR_IPC_SAME_PROCESS, ERR_IPC_TOO_MANY_IMPORTERS.
  // Waits for the record's lock at most lock_timeout_ms, here and at Close.
  static IpcImportRecord* Open(const std::string& dir, const IpcDescriptor& d,
                               int lock_timeout_ms = shm::kDefaultLockTimeoutMs);
  ~IpcImportRecord();  // Close()
  IpcImportRecord(const IpcImportRecord&) = delete;
  IpcImportRecord& operator=(const IpcImportRecord&) = delete;
  // Gives the slot back. Never throws.
  void Close() noexcept;
  const std::string& record() const { return record_; }

 private:
  IpcImportRecord() = default;
  std::string record_;
  int fd_ = -1;
  int slot_ = -1;
  int timeout_ms_ = shm::kDefaultLockTimeoutMs;
};

// One opening of CUDA IPC memory in a thread, as the check that memory is not opened twice there
// sees it. The handle's 64 bytes name the allocation: the driver gives new memory a new handle
// even at an address it reuses, and a second cuIpcOpenMemHandle of the same bytes in a context
// returns the same mapping, counted (the CUDA driver API's reference). With the range in it, they
// are what a descriptor is, however it was written: hex in either case, PyTorch's prefix, the
// optional fields, the uuid's case and the format all come down to these.
struct IpcOpening {
  std::array<uint8_t, 64> handle{};  // cudaIpcMemHandle_t
  uint64_t offset = 0, bytes = 0;    // of the buffer within the allocation
  std::string record;                // the export's record; empty for a cuda-ipc@1 descriptor
};
// Whether opening `wanted` would give a second buffer over what `open` has open: the same handle
// bytes and range, unless both came with records and the records differ (two exports of the same
// range, the first withdrawn by a forced free, each counting its own importers).
bool SameOpening(const IpcOpening& open, const IpcOpening& wanted);
// "handle <128 hex digits>, offset N, byteLength M[, record R]", for error messages.
std::string DescribeOpening(const IpcOpening& o);

// Hex of bytes, and back (false if `hex` is not exactly 2*n hex digits).
std::string ToHex(const uint8_t* bytes, size_t n);
bool FromHex(const std::string& hex, uint8_t* bytes, size_t n);
// The size of a record file.
constexpr size_t kIpcRecordBytes = 720;

// Removes the records in `dir` whose exporter is gone and that no importer holds (an export does
// this first). Files it may not trust (another user's, a link, a wrong mode or size) are left
// alone; returns how many.
int SweepStaleIpcRecords(const std::string& dir);
// True for names as an export writes them, "cuda-memory-ipc.<pid>.<16 hex>": the pid in decimal
// without leading zeros, the hex in lower case, so that each record has one name.
bool ValidRecordName(const std::string& name);

}  // namespace cm::core
