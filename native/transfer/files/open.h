// Opening a file to read: a regular file only, its reads blocking, and the same open file again
// with O_DIRECT.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "transfer/files/failure.h"

namespace cm::files {

// A file descriptor, closed when it goes.
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Checks that an open file is a regular file, and makes its reads blocking.
FileFailure CheckReadable(int fd, const std::string& path, struct stat* st);

// Opens a file to read: a regular file only. O_NONBLOCK so that opening a FIFO does not wait for
// a writer (it is refused right after).
FileFailure OpenForRead(const std::string& path, Fd* fd, struct stat* st);

// The same open file again, with O_DIRECT; -errno when the file system refuses it. Through /proc,
// so it is the same file even if the path has been replaced meanwhile; where /proc is not mounted
// (a container, a chroot), through the path, checked to be the same file (device and inode), else
// -ESTALE: the path names another file now.
int ReopenDirect(int fd, const std::string& path);

}  // namespace cm::files
