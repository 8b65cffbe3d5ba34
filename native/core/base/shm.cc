#include "core/base/shm.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

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

int SetLock(int fd, short type, off_t byte) {
  struct flock fl = Range(type, byte);
  for (;;) {
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return 0;
    if (errno == EINTR) continue;
    return errno == EACCES ? EAGAIN : errno;
  }
}

}  // namespace

int TryLockShared(int fd, off_t byte) { return SetLock(fd, F_RDLCK, byte); }

int TryLock(int fd, off_t byte) { return SetLock(fd, F_WRLCK, byte); }

int LockWithin(int fd, off_t byte, int timeout_ms) {
  // Polled: F_OFD_SETLKW has no timeout, and a signal to interrupt it is not ours to send in a
  // Node process. Holders keep these locks for microseconds, so the first tries nearly always win.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    int err = TryLock(fd, byte);
    if (err != EAGAIN) return err;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return ETIMEDOUT;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
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

void ThrowLockTimeout(const std::string& path, const char* waiting_for, int timeout_ms) {
  throw ShmError("ERR_SHM_LOCK_TIMEOUT",
                 "waited " + std::to_string(timeout_ms) + " ms for the lock of " + Printable(path) +
                     " while " + waiting_for +
                     ": another process holds it (a stopped or hung member, or a process that is "
                     "not cuda-memory). `fuser -v " +
                     Printable(path) +
                     "` lists who has it open; CUDA_MEMORY_LOCK_TIMEOUT_MS or the lockTimeoutMs "
                     "option sets the wait.",
                 path);
}

MutexGuard::MutexGuard(int fd, const std::string& path, const char* waiting_for, int timeout_ms)
    : fd_(fd) {
  int err = LockWithin(fd, kMutexByte, timeout_ms);
  if (err == ETIMEDOUT) ThrowLockTimeout(path, waiting_for, timeout_ms);
  if (err) ThrowErrno("ERR_SHM_LOCK", "could not lock", path, err);
}

namespace {
std::string UserName(uid_t uid) {
  std::string out = "uid " + std::to_string(uid);
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found)
    out += " (" + std::string(found->pw_name) + ")";
  return out;
}

std::string Octal(mode_t mode) {
  char out[8];
  std::snprintf(out, sizeof out, "%04o", static_cast<unsigned>(mode & 07777));
  return out;
}
}  // namespace

std::string Untrusted(int fd, off_t expected_size) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return std::string("it cannot be examined (") + std::strerror(errno) + ")";
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  if (st.st_uid != geteuid())
    return "it is owned by " + UserName(st.st_uid) + ", not by this process's " +
           UserName(geteuid()) + " (mode " + Octal(st.st_mode) + ")";
  if (st.st_mode & 077)
    return "its mode " + Octal(st.st_mode) + " lets other users read or write it (0600 expected)";
  if (expected_size > 0 && st.st_size != expected_size)
    return "it has " + std::to_string(st.st_size) + " bytes where " +
           std::to_string(expected_size) + " were expected";
  return "";
}

void ThrowUntrusted(const std::string& path, const std::string& why) {
  throw ShmError("ERR_SHM_UNTRUSTED",
                 Printable(path) + " was not used: " + why +
                     ". cuda-memory uses only shared files that this user made, with mode 0600. "
                     "Remove it (as its owner or root) or choose another name.",
                 path);
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_not_of('/');
  slash = slash == std::string::npos ? std::string::npos : path.rfind('/', slash);
  if (slash == std::string::npos) return ".";
  size_t end = path.find_last_not_of('/', slash);
  return end == std::string::npos ? "/" : path.substr(0, end + 1);
}

namespace {
[[noreturn]] void ThrowUntrustedFolder(const std::string& dir, const std::string& why) {
  throw ShmError("ERR_SHM_UNTRUSTED",
                 "the folder " + Printable(dir) + " was not used: " + why +
                     ". cuda-memory keeps this user's shared files in a folder of its own (a "
                     "directory owned by this user, mode 0700) so that no other user can plant, "
                     "replace or remove a name in it. Remove it (as its owner or root), or set "
                     "CUDA_MEMORY_SHM_DIR to another folder.",
                 dir);
}
}  // namespace

bool CheckFolder(const std::string& dir, bool create) {
  // The parent: others may not rename or replace entries in it unless it is sticky.
  struct stat up;
  std::string parent = DirName(dir);
  if (stat(parent.c_str(), &up) == 0 && (up.st_mode & S_IWOTH) && !(up.st_mode & S_ISVTX))
    ThrowUntrustedFolder(dir, "its parent " + Printable(parent) + " has mode " + Octal(up.st_mode) +
                                  ": any user may rename what is in it (sticky mode 1777, as of "
                                  "/dev/shm, or no write permission for others expected)");
  // mkdir never follows a link planted under the name (it fails with EEXIST), and mode 0700 is
  // narrowed by the umask only; anything already there is checked below as an existing folder.
  bool made = create && mkdir(dir.c_str(), 0700) == 0;
  if (!made && create && errno != EEXIST)
    ThrowErrno("ERR_SHM_CREATE", "could not create", dir, errno);
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return false;
    struct stat st;
    if ((err == ELOOP || err == ENOTDIR) && lstat(dir.c_str(), &st) == 0)
      ThrowUntrustedFolder(dir,
                           S_ISLNK(st.st_mode) ? "it is a symbolic link" : "it is not a directory");
    if (err == EACCES && lstat(dir.c_str(), &st) == 0)
      ThrowUntrustedFolder(dir, "this user may not open it; it is owned by " + UserName(st.st_uid) +
                                    " with mode " + Octal(st.st_mode));
    ThrowErrno("ERR_SHM_OPEN", "could not open the folder", dir, err);
  }
  struct stat st;
  std::string why;
  if (made) (void)!fchmod(fd, 0700);  // the umask may have taken bits from the owner
  if (fstat(fd, &st) != 0)
    why = std::string("it cannot be examined (") + std::strerror(errno) + ")";
  else if (!S_ISDIR(st.st_mode))
    why = "it is not a directory";
  else if (st.st_uid != geteuid())
    why = "it is owned by " + UserName(st.st_uid) + ", not by this process's " +
          UserName(geteuid()) + " (mode " + Octal(st.st_mode) + ")";
  else if (st.st_mode & 077)
    why = "its mode " + Octal(st.st_mode) + " lets other users into it (0700 expected)";
  close(fd);
  if (!why.empty()) ThrowUntrustedFolder(dir, why);
  return true;
}

int OpenTrusted(const std::string& path, off_t expected_size, const std::string& open_code) {
  if (!CheckFolder(DirName(path), false)) {
    errno = ENOENT;
    return -1;
  }
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return -1;
    if (err == ELOOP) ThrowUntrusted(path, "it is a symbolic link");
    if (err == EACCES) {
      struct stat st;
      if (lstat(path.c_str(), &st) == 0)
        ThrowUntrusted(path, "this user may not open it; it is owned by " + UserName(st.st_uid) +
                                 " with mode " + Octal(st.st_mode));
    }
    ThrowErrno(open_code, "could not open", path, err);
  }
  std::string why = Untrusted(fd, expected_size);
  if (!why.empty()) {
    close(fd);
    ThrowUntrusted(path, why);
  }
  return fd;
}

void CopyText(char* dst, size_t n, const std::string& s) {
  std::memset(dst, 0, n);
  std::memcpy(dst, s.data(), std::min(n - 1, s.size()));
}

std::string Text(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

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

std::string Printable(const std::string& text) {
  std::string out;
  char esc[16];
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    unsigned char n1 = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    unsigned char n2 = i + 2 < text.size() ? static_cast<unsigned char>(text[i + 2]) : 0;
    if (c < 0x20 || c == 0x7f) {
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    } else if (c == 0xc2 && n1 >= 0x80 && n1 <= 0x9f) {  // C1 controls (U+0080 to U+009F)
      std::snprintf(esc, sizeof esc, "\\u{%04x}", n1);
      out += esc;
      ++i;
    } else if (c == 0xe2 && n1 == 0x80 && n2 >= 0xaa && n2 <= 0xae) {  // U+202A to U+202E
      std::snprintf(esc, sizeof esc, "\\u{20%02x}", n2 - 0x80);
      out += esc;
      i += 2;
    } else if (c == 0xe2 && n1 == 0x81 && n2 >= 0xa6 && n2 <= 0xa9) {  // U+2066 to U+2069
      std::snprintf(esc, sizeof esc, "\\u{20%02x}", n2 - 0x80 + 0x40);
      out += esc;
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string Join(const std::string& dir, const std::string& file) {
  return dir.empty() || dir.back() == '/' ? dir + file : dir + "/" + file;
}

void ThrowErrno(const std::string& code, const std::string& what, const std::string& path,
                int err) {
  std::string m = what + (path.empty() ? "" : " " + Printable(path)) + ": " + std::strerror(err);
  throw ShmError(code, m, path);
}

namespace {

// A new file of `size` reserved bytes beside `path`, made as CreateComplete makes its files;
// *tmp its name. Returns the descriptor; throws ShmError (its name removed) on failure.
int MakeReserved(const std::string& path, size_t size, mode_t mode, std::string* tmp) {
  CheckFolder(DirName(path), true);
  std::random_device rd;
  *tmp = path + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(rd());
  int fd = open(tmp->c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  int err = fd < 0 ? errno : 0;
  if (err == 0) err = fchmod(fd, mode) == 0 ? 0 : errno;  // the umask may have taken bits away
  if (err == 0 && size) err = posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (err == 0) return fd;
  if (fd >= 0) {
    unlink(tmp->c_str());
    close(fd);
  }
  // Out of blocks (fallocate) or of inodes (open): the same for whoever asked.
  if (err == ENOSPC)
    throw ShmError("ERR_SHM_NO_SPACE",
                   "not enough room for " + std::to_string(size) + " bytes in the shared-memory " +
                       "file system holding " + Printable(path) +
                       " (see `df` of its folder; CUDA_MEMORY_SHM_DIR picks another)",
                   path);
  ThrowErrno("ERR_SHM_CREATE", "could not create", fd < 0 ? *tmp : path, err);
}

}  // namespace

int CreateComplete(const std::string& path, size_t size, const void* init, size_t init_size,
                   mode_t mode, off_t hold_byte) {
  std::string tmp;
  int fd = MakeReserved(path, size, mode, &tmp);
  int err = 0;
  if (init_size && pwrite(fd, init, init_size, 0) != static_cast<ssize_t>(init_size))
    err = errno ? errno : EIO;
  if (err == 0 && hold_byte >= 0) err = TryLock(fd, hold_byte);
  if (err == 0 && link(tmp.c_str(), path.c_str()) != 0) err = errno;
  unlink(tmp.c_str());
  if (err == 0) return fd;
  close(fd);
  if (err == EEXIST) {
    errno = EEXIST;
    return -1;
  }
  ThrowErrno("ERR_SHM_CREATE", "could not create", path, err);
}

void ProbeRoom(const std::string& path, size_t size) {
  std::string tmp;
  int fd = MakeReserved(path, size, 0600, &tmp);
  unlink(tmp.c_str());
  close(fd);
}

}  // namespace cm::core::shm
