// Files in shared memory (a tmpfs such as /dev/shm) that cooperating processes open together,
// and the locks that tell which of those processes are alive. No Node, no CUDA: POSIX only.
//
// Liveness comes from Linux open-file-description locks (F_OFD_SETLK): a process holds a lock on
// "its" byte of the file for as long as it takes part, and the kernel drops the lock when the
// file is closed, which happens however the process ends, SIGKILL included. Another process asks
// the kernel (F_OFD_GETLK) whether anyone still holds that byte. Unlike a recorded pid, this
// cannot be fooled by a reused pid or by a process in another pid namespace.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace cm::core {

// A failure with a machine-readable code (ERR_GROUP_..., ERR_IPC_..., ERR_SHM_...) and the file
// it concerns; the bindings turn it into a JS error with the same code.
struct ShmError : std::runtime_error {
  ShmError(std::string code, const std::string& message, std::string path = "")
      : std::runtime_error(message), code(std::move(code)), path(std::move(path)) {}
  std::string code;
  std::string path;
};

namespace shm {

// Byte offsets used as locks (beyond the data; a lock may cover bytes past the end of a file).
constexpr off_t kMutexByte = 1 << 20;  // held while a process reads or changes the file
constexpr off_t kOwnerByte = kMutexByte + 1;
constexpr off_t kSlotBytes = kMutexByte + 16;  // slot i is held at kSlotBytes + i

// Takes an exclusive lock on one byte. wait: block until it is free (retrying on EINTR).
// Returns 0, or the errno (EAGAIN when it is held and !wait).
int Lock(int fd, off_t byte, bool wait);
void Unlock(int fd, off_t byte) noexcept;
// True when another open file description holds a lock on the byte. A lock held through `fd`
// itself never counts, so a process never sees its own slot as held this way.
bool HeldByOther(int fd, off_t byte);

// Holds the file's mutex byte for a scope.
class MutexGuard {
 public:
  explicit MutexGuard(int fd);
  ~MutexGuard() { Unlock(fd_, kMutexByte); }
  MutexGuard(const MutexGuard&) = delete;
  MutexGuard& operator=(const MutexGuard&) = delete;

 private:
  int fd_;
};

// FNV-1a, for the checksums that detect a damaged or foreign file.
uint64_t Fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);
uint64_t NowUnixMs();
// Names that may be part of a file name: 1 to 64 of [A-Za-z0-9._-], not starting with a dot.
bool ValidName(const std::string& name);
// "<dir>/<file>"
std::string Join(const std::string& dir, const std::string& file);
// Creates `path` with `size` bytes reserved (posix_fallocate, so a full tmpfs is an error now and
// not a SIGBUS later) and `init` written at its start, published atomically: the content is
// complete before the name appears. hold_byte >= 0: that byte is locked before the name appears,
// so no other process ever sees the file without its holder. Returns the open descriptor, or -1
// with errno EEXIST when the name exists. Throws ShmError for anything else.
int CreateComplete(const std::string& path, size_t size, const void* init, size_t init_size,
                   mode_t mode = 0600, off_t hold_byte = -1);
// The ShmError for a failed system call on `path`.
[[noreturn]] void ThrowErrno(const std::string& code, const std::string& what,
                             const std::string& path, int err);

}  // namespace shm
}  // namespace cm::core
