#include "shm.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>

namespace cm::core::shm {

namespace {
struct flock Range(short type, off_t byte) {
  struct flock fl;
  std::memset(&fl, 0, sizeof fl);  // OFD locks require l_pid == 0
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = byte;
  fl.l_len = 1;
  return fl;
}
}  // namespace

int Lock(int fd, off_t byte, bool wait) {
  struct flock fl = Range(F_WRLCK, byte);
  for (;;) {
    if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0) return 0;
    if (errno == EINTR) continue;
    return errno == EACCES ? EAGAIN : errno;
  }
}

void Unlock(int fd, off_t byte) noexcept {
  struct flock fl = Range(F_UNLCK, byte);
  fcntl(fd, F_OFD_SETLK, &fl);
}

bool HeldByOther(int fd, off_t byte) {
  struct flock fl = Range(F_WRLCK, byte);
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;  // unknown: never reap what may be alive
  return fl.l_type != F_UNLCK;
}

MutexGuard::MutexGuard(int fd) : fd_(fd) {
  int err = Lock(fd, kMutexByte, true);
  if (err) ThrowErrno("ERR_SHM_LOCK", "could not lock", "", err);
}

uint64_t Fnv1a(const void* data, size_t n, uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t NowUnixMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return false;
  return true;
}

std::string Join(const std::string& dir, const std::string& file) {
  return dir.empty() || dir.back() == '/' ? dir + file : dir + "/" + file;
}

void ThrowErrno(const std::string& code, const std::string& what, const std::string& path,
                int err) {
  std::string m = what + (path.empty() ? "" : " " + path) + ": " + std::strerror(err);
  throw ShmError(code, m, path);
}

int CreateComplete(const std::string& path, size_t size, const void* init, size_t init_size,
                   mode_t mode, off_t hold_byte) {
  std::random_device rd;
  std::string tmp = path + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(rd());
  int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) ThrowErrno("ERR_SHM_CREATE", "could not create", tmp, errno);
  int err = size ? posix_fallocate(fd, 0, static_cast<off_t>(size)) : 0;
  if (err == 0 && init_size && pwrite(fd, init, init_size, 0) != static_cast<ssize_t>(init_size))
    err = errno ? errno : EIO;
  if (err == 0 && hold_byte >= 0) err = Lock(fd, hold_byte, false);
  if (err == 0 && link(tmp.c_str(), path.c_str()) != 0) err = errno;
  unlink(tmp.c_str());
  if (err == 0) return fd;
  close(fd);
  if (err == EEXIST) {
    errno = EEXIST;
    return -1;
  }
  if (err == ENOSPC)
    throw ShmError("ERR_SHM_NO_SPACE",
                   "not enough room for " + std::to_string(size) + " bytes in the shared-memory " +
                       "file system holding " + path +
                       " (see `df` of its folder; CUDA_MEMORY_SHM_DIR picks another)",
                   path);
  ThrowErrno("ERR_SHM_CREATE", "could not create", path, err);
}

}  // namespace cm::core::shm
