// The read path: a file range into any memory of the library, through the device's ring (device
// memory), straight in (memory the CPU addresses, buffered), or through the host ring (O_DIRECT
// into host memory, and the storage-only read, whose bytes stop there).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/transfer/copy_team.h"
#include "transfer/copy.h"
#include "transfer/files/direct.h"
#include "transfer/files/engine.h"
#include "transfer/files/failure.h"

namespace cm::files {

struct ReadRequest {
  std::string path;
  // >= 0: read this open file (the caller's, left open), which `path` only names in messages; a
  // format whose header was read from it then reads its data from the same file, whatever
  // replaces the path meanwhile.
  int fd = -1;
  Endpoint dst;  // from dstOffset on: length is the room there
  uint64_t file_offset = 0;
  int64_t length = -1;  // -1: to the end of the file
  DirectMode direct = DirectMode::kAuto;
  std::shared_ptr<FileEngine> engine;  // the device's; null for memory the CPU addresses
  std::shared_ptr<core::CopyTeam> team;
  std::atomic<uint64_t>* progress = nullptr;
  std::atomic<uint64_t>* total = nullptr;
};

struct ReadResult {
  uint64_t bytes = 0;
  bool direct = false;
  std::string why;
};

// Checks the range against the file and the destination, then reads it.
FileFailure RunRead(const ReadRequest& r, ReadResult* out);

}  // namespace cm::files
