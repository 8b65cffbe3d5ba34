// Whether a read uses O_DIRECT: asked for, or under 'auto' what a measurement of cold reads each
// way chose for the file system (once per device number, process-wide), unless the read is small
// or its range is in the page cache.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

namespace cm::files {

enum class DirectMode { kAuto, kOn, kOff };

// O_DIRECT's measured choice per file system (device number), process-wide.
struct DirectChoice {
  bool direct = false;
  double direct_rate = 0, buffered_rate = 0;  // bytes/s, cold
  std::string reason;
};

// Whether this read uses O_DIRECT, and why.
bool ChooseDirect(int fd, const std::string& path, const struct stat& st, uint64_t offset, size_t n,
                  DirectMode mode, std::string* why);

// The choices the measurements have made so far, by file system.
std::map<dev_t, DirectChoice> DirectChoicesMade();

}  // namespace cm::files
