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
// Read-locked (shared) by each process between opening a file and joining it: the last member
// leaving removes the file only when nobody holds this byte, so a joiner is not left holding a
// removed file over and over while others come and go.
constexpr off_t kOpenerByte = kMutexByte + 2;
constexpr off_t kSlotBytes = kMutexByte + 16;  // slot i is held at kSlotBytes + i

// How long a lock is waited for when the caller says nothing. The JS layer always says: it reads
// the lockTimeoutMs option or CUDA_MEMORY_LOCK_TIMEOUT_MS, refuses a bad value, and passes the
// result down, so there is one rule and the native layer never reads the variable. Holders keep a
// lock for microseconds; a wait of seconds means a stopped, hung or hostile holder, and ends in
// ERR_SHM_LOCK_TIMEOUT instead of blocking the thread.
constexpr int kDefaultLockTimeoutMs = 5000;

// Takes an exclusive lock on one byte without waiting. Returns 0, or the errno (EAGAIN when it
// is held).
int TryLock(int fd, off_t byte);
// Takes a shared (read) lock on one byte without waiting; 0 or the errno.
int TryLockShared(int fd, off_t byte);
// Takes it, waiting up to timeout_ms (polling, from 50 µs to 10 ms apart). Returns 0, ETIMEDOUT,
// or another errno.
int LockWithin(int fd, off_t byte, int timeout_ms);
void Unlock(int fd, off_t byte) noexcept;
// True when another open file description holds a lock on the byte. A lock held through `fd`
// itself never counts, so a process never sees its own slot as held this way.
bool HeldByOther(int fd, off_t byte);

// Holds the file's mutex byte for a scope. Throws ShmError ERR_SHM_LOCK_TIMEOUT naming the file
// and `waiting_for` ("joining group 'x'") when it is not had within timeout_ms.
class MutexGuard {
 public:
  MutexGuard(int fd, const std::string& path, const char* waiting_for, int timeout_ms);
  ~MutexGuard() { Unlock(fd_, kMutexByte); }
  MutexGuard(const MutexGuard&) = delete;
  MutexGuard& operator=(const MutexGuard&) = delete;

 private:
  int fd_;
};

// The ShmError for a lock not had in time.
[[noreturn]] void ThrowLockTimeout(const std::string& path, const char* waiting_for,
                                   int timeout_ms);

// The folder that holds a user's shared files ("<base>/cuda-memory-<uid>", made by the JS layer)
// must be this user's own: a directory (not a link to one), owned by the effective uid, with no
// permission for group or others, in a parent that others cannot write unless it is sticky (as
// /dev/shm and /tmp are), so nobody else can plant, replace or remove a name in it. `create`:
// made (mode 0700) when missing. Returns false when it is missing and not made; a folder that
// fails a check is a ShmError ERR_SHM_UNTRUSTED saying why and what to do.
bool CheckFolder(const std::string& dir, bool create);
// The folder part of a path ("." when there is none).
std::string DirName(const std::string& path);
// Opens a shared file that this library made, read-write, without following a symbolic link,
// and checks it before anything is read: in a folder that passes CheckFolder, a regular file,
// owned by this process's effective uid, with no permission for group or others, and
// (expected_size > 0) exactly that size. Returns the descriptor, or -1 with errno ENOENT when
// there is no such file (or folder). Anything else is a ShmError: ERR_SHM_UNTRUSTED (naming the
// file, its owner and mode, and what to do) or `open_code` for a failed open.
int OpenTrusted(const std::string& path, off_t expected_size, const std::string& open_code);
// The same checks on an open descriptor: an empty string when it passes, else why not.
std::string Untrusted(int fd, off_t expected_size);
// The ShmError for a file that fails those checks.
[[noreturn]] void ThrowUntrusted(const std::string& path, const std::string& why);

// FNV-1a, for the checksums that detect a damaged or foreign file.
uint64_t Fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);
uint64_t NowUnixMs();
// Names that may be part of a file name: 1 to 64 of [A-Za-z0-9._-], not starting with a dot.
bool ValidName(const std::string& name);
// The text with control characters (C0, DEL, C1) and bidirectional overrides written as \xNN or
// \u{NNNN}, for a file name in a message that may reach a terminal.
std::string Printable(const std::string& text);
// "<dir>/<file>"
std::string Join(const std::string& dir, const std::string& file);
// A fixed-size text field of a shared file: written zero-padded (cut to n - 1 bytes), and read up
// to its first zero byte or its end, whatever another process left in it.
void CopyText(char* dst, size_t n, const std::string& s);
std::string Text(const char* s, size_t n);
// Creates `path` (its folder first, if missing: see CheckFolder) with `size` bytes reserved
// (posix_fallocate, so a full tmpfs is an error now and not a SIGBUS later) and `init` written at
// its start, published atomically: the content is complete before the name appears. The file is
// made with O_EXCL | O_NOFOLLOW and gets exactly `mode` (whatever the umask), and the name is made
// with link(), which never follows a link planted under it. hold_byte >= 0: that byte is locked
// before the name appears, so no other process ever sees the file without its holder. Returns the
// open descriptor, or -1 with errno EEXIST when the name exists. Throws ShmError for anything else.
int CreateComplete(const std::string& path, size_t size, const void* init, size_t init_size,
                   mode_t mode = 0600, off_t hold_byte = -1);
// Whether CreateComplete could make a file of `size` bytes at `path` now: the folder checked (and
// made, as CreateComplete makes it), then a file of that size made beside the name, with its
// space reserved as CreateComplete reserves it, and removed. Returns nothing; a full file system is
// a ShmError ERR_SHM_NO_SPACE, an untrusted folder ERR_SHM_UNTRUSTED, anything else ERR_SHM_CREATE,
// each naming the file. Another process may take the room a moment later: it tells what now is.
void ProbeRoom(const std::string& path, size_t size);
// The ShmError for a failed system call on `path`.
[[noreturn]] void ThrowErrno(const std::string& code, const std::string& what,
                             const std::string& path, int err);

}  // namespace shm
}  // namespace cm::core
