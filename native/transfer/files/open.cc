#include "transfer/files/open.h"

#include <fcntl.h>

#include <cerrno>

namespace cm::files {

FileFailure CheckReadable(int fd, const std::string& path, struct stat* st) {
  if (fstat(fd, st) != 0) return FromErrno(errno, "fstat", path);
  if (S_ISDIR(st->st_mode))
    return Fail("ERR_FILE_IS_DIRECTORY", path, Quote(path) + " is a directory, not a file");
  if (!S_ISREG(st->st_mode))
    return Fail("ERR_FILE_NOT_REGULAR", path,
                Quote(path) + " is not a regular file (" +
                    (S_ISFIFO(st->st_mode)   ? "a FIFO"
                     : S_ISSOCK(st->st_mode) ? "a socket"
                     : S_ISCHR(st->st_mode)  ? "a character device"
                     : S_ISBLK(st->st_mode)  ? "a block device"
                                             : "not a file") +
                    "); only regular files can be read, since their size is known");
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK)) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return {};
}

FileFailure OpenForRead(const std::string& path, Fd* fd, struct stat* st) {
  fd->fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd->fd < 0) return FromErrno(errno, "open", path);
  return CheckReadable(fd->fd, path, st);
}

int ReopenDirect(int fd, const std::string& path) {
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  int d = open(self.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (d >= 0 || errno == EINVAL) return d >= 0 ? d : -errno;
  d = open(path.c_str(), O_RDONLY | O_DIRECT | O_NONBLOCK | O_CLOEXEC);
  if (d < 0) return errno == ENOENT || errno == ENOTDIR ? -ESTALE : -errno;
  struct stat was {
  }, now{};
  if (fstat(fd, &was) != 0 || fstat(d, &now) != 0 || was.st_dev != now.st_dev ||
      was.st_ino != now.st_ino) {
    close(d);
    return -ESTALE;
  }
  int flags = fcntl(d, F_GETFL);
  if (flags >= 0) fcntl(d, F_SETFL, flags & ~O_NONBLOCK);
  return d;
}

}  // namespace cm::files
