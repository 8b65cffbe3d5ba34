// The write path: any memory of the library into a file, through the device's ring (device
// memory) or straight from memory the CPU addresses; either whole, through a replacement
// (core/base/file_replace.h), or into an existing file at an offset, in place.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/transfer/copy_team.h"
#include "transfer/copy.h"
#include "transfer/files/engine.h"
#include "transfer/files/failure.h"

namespace cm::files {

struct WriteRequest {
  std::string path;
  Endpoint src;  // from srcOffset on
  uint64_t n = 0;
  bool fsync = false;
  int mode = 0666;
  int64_t file_offset = -1;            // >= 0: into the existing file there, in place
  std::shared_ptr<FileEngine> engine;  // the device's; null for memory the CPU addresses
  std::shared_ptr<core::CopyTeam> team;
  std::atomic<uint64_t>* progress = nullptr;
};

// Writes to a new file beside the target (same directory, so the same file system), then renames
// it over the target: a write that fails part-way leaves the target as it was and no file that
// looks complete. With a file_offset, into the existing file there instead, in place.
FileFailure RunWrite(const WriteRequest& w);

}  // namespace cm::files
