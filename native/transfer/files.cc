#include "transfer/files.h"

#include <fcntl.h>
#include <libgen.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "binding/args.h"
#include "binding/errors.h"
#include "binding/exports.h"
#include "binding/handles.h"
#include "binding/instance.h"
#include "binding/promise_worker.h"
#include "core/transfer/file_pipeline.h"
#include "device/discovery.h"
#include "transfer/copy.h"
#include "transfer/staging.h"

namespace cm {

namespace {

// 4 slots of 8 MiB: a chunk is one DMA transfer of 8 MiB (past the size where per-transfer costs
// matter) and 8 pieces of 1 MiB, so the team keeps 8 or more reads in flight, which NVMe drives
// need to reach their rate. 4096: the largest logical block size O_DIRECT asks alignment to.
constexpr size_t kChunk = 8u << 20, kPiece = 1u << 20, kAlign = 4096;
constexpr int kSlots = 4;
// Reads below this never use O_DIRECT under 'auto' (nor measure it): a few blocks' worth of
// buffered reads cost little, and a measurement would cost more than the read.
constexpr size_t kDirectFrom = 16u << 20;
// The measurement reads this much each way, on a file at least four times as large.
constexpr size_t kMeasureBytes = 16u << 20;

core::FileShape Shape(bool direct) { return {kChunk, kSlots, kPiece, direct ? kAlign : 1}; }

// Control characters in a path are escaped before it reaches a message (and a terminal).
std::string Quote(const std::string& path) {
  std::string out = "'";
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

const char* ErrnoName(int e) {
  switch (e) {
    case ENOENT:
      return "ENOENT";
    case ENOTDIR:
      return "ENOTDIR";
    case EACCES:
      return "EACCES";
    case EPERM:
      return "EPERM";
    case EROFS:
      return "EROFS";
    case EISDIR:
      return "EISDIR";
    case ENOSPC:
      return "ENOSPC";
    case EDQUOT:
      return "EDQUOT";
    case EFBIG:
      return "EFBIG";
    case EIO:
      return "EIO";
    case EINVAL:
      return "EINVAL";
    case ELOOP:
      return "ELOOP";
    case EMFILE:
      return "EMFILE";
    case ENAMETOOLONG:
      return "ENAMETOOLONG";
    case EEXIST:
      return "EEXIST";
    default:
      return "EUNKNOWN";
  }
}

// A failure as JavaScript sees it: a CudaMemoryError with `code` (ERR_FILE_...), and the path,
// system call and errno name where there is one; or a CUDA failure.
struct FileFailure {
  std::string code;  // empty: none
  std::string message;
  std::string path;
  std::string syscall;
  int err = 0;
  Error cuda;  // set when the DMA engine failed
  explicit operator bool() const { return !code.empty() || static_cast<bool>(cuda); }
};

FileFailure Fail(const std::string& code, const std::string& path, const std::string& message) {
  FileFailure f;
  f.code = code;
  f.path = path;
  f.message = message;
  return f;
}

FileFailure FromErrno(int e, const char* syscall, const std::string& path,
                      const std::string& where = "") {
  const char* code = "ERR_FILE_IO";
  if (e == ENOENT || e == ENOTDIR) code = "ERR_FILE_NOT_FOUND";
  if (e == EACCES || e == EPERM || e == EROFS) code = "ERR_FILE_PERMISSION";
  if (e == EISDIR) code = "ERR_FILE_IS_DIRECTORY";
  if (e == ENOSPC || e == EDQUOT || e == EFBIG) code = "ERR_FILE_NO_SPACE";
  FileFailure f = Fail(code, path,
                       std::string(syscall) + " of " + Quote(path) + where +
                           " failed: " + std::strerror(e) + " (" + ErrnoName(e) + ")");
  f.syscall = syscall;
  f.err = e;
  return f;
}

Napi::Value MakeFileError(Napi::Env env, const FileFailure& f) {
  if (f.cuda) return MakeCudaError(env, f.cuda.code, f.cuda.call, f.cuda.detail);
  Napi::Error e = LibraryError(env, f.code, f.message);
  e.Set("path", f.path);
  if (!f.syscall.empty()) e.Set("syscall", f.syscall);
  if (f.err) e.Set("errno", ErrnoName(f.err));
  return e.Value();
}

struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// The pinned ring and DMA stream of one device (or, for device -1, an aligned host ring for
// O_DIRECT reads into memory the CPU addresses and for the storage-only read). One transfer at a
// time each; kept for the life of the process, as the staged path's rings are kept for its
// instance.
struct FileEngine {
  std::mutex mutex;
  int device = -1;
  char* ring = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> done;
  Error error;
};

std::shared_ptr<FileEngine> MakeEngine(int device) {
  auto e = std::make_shared<FileEngine>();
  e->device = device;
  const size_t bytes = core::FileRingBytes(Shape(true));
  if (device < 0) {
    e->ring = static_cast<char*>(std::aligned_alloc(kAlign, bytes));
    if (!e->ring) e->error = Error{cudaErrorMemoryAllocation, "aligned_alloc (file ring)", ""};
    return e;
  }
  CM_TRY(e->error, cudaSetDevice(device), "cudaSetDevice");
  if (!e->error)
    CM_TRY(e->error, cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking),
           "cudaStreamCreateWithFlags");
  void* p = nullptr;
  // Page-aligned, so every piece's address is aligned for O_DIRECT.
  if (!e->error)
    CM_TRY(e->error, cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc (file ring)");
  e->ring = static_cast<char*>(p);
  for (int i = 0; i < kSlots && !e->error; ++i) {
    cudaEvent_t ev = nullptr;
    CM_TRY(e->error, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    e->done.push_back(ev);
  }
  return e;
}

// Engines are process-wide (the memory is), made on first use and never freed: freeing pinned
// memory from a static destructor at exit races the CUDA runtime's own teardown.
std::shared_ptr<FileEngine> GetEngine(int device, Error* err) {
  static std::mutex mutex;
  static auto* engines = new std::map<int, std::shared_ptr<FileEngine>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& e = (*engines)[device];
  if (!e || e->error) e = MakeEngine(device);
  if (e->error) {
    *err = e->error;
    return nullptr;
  }
  return e;
}

// The team for reads into host memory and the storage-only read: as large as the staged path's.
std::shared_ptr<core::CopyTeam> HostTeam() {
  static std::mutex mutex;
  static auto* team = new std::shared_ptr<core::CopyTeam>();
  std::lock_guard<std::mutex> lock(mutex);
  if (!*team) {
    unsigned hw = std::max(2u, std::thread::hardware_concurrency());
    *team = std::make_shared<core::CopyTeam>(static_cast<int>(std::clamp(hw * 3 / 4, 2u, 12u)));
  }
  return *team;
}

// The DMA half on CUDA: chunk c moves on the engine's stream between its place in the ring and
// the device, and the event of its slot marks when it is done.
class CudaFileRing : public core::StagingTransport {
 public:
  CudaFileRing(FileEngine& e, char* device_ptr, bool to_device)
      : e_(e), dev_(device_ptr), to_device_(to_device) {}
  char* ring() override { return e_.ring; }
  core::TransportStatus Issue(const core::StagingChunk& c) override {
    cudaError_t r = UseDevice(e_.device);
    if (r != cudaSuccess) return Fail(r, "cudaSetDevice");
    r = to_device_ ? cudaMemcpyAsync(dev_ + c.offset, e_.ring + c.ring_offset, c.length,
                                     cudaMemcpyHostToDevice, e_.stream)
                   : cudaMemcpyAsync(e_.ring + c.ring_offset, dev_ + c.offset, c.length,
                                     cudaMemcpyDeviceToHost, e_.stream);
    if (r != cudaSuccess) return Fail(r, "cudaMemcpyAsync (file)");
    r = cudaEventRecord(e_.done[c.slot], e_.stream);
    return r == cudaSuccess ? core::TransportStatus{} : Fail(r, "cudaEventRecord");
  }
  core::TransportStatus Wait(int s) override {
    cudaError_t r = cudaEventSynchronize(e_.done[s]);
    return r == cudaSuccess ? core::TransportStatus{} : Fail(r, "cudaEventSynchronize");
  }
  core::TransportStatus Finish() override {
    cudaError_t r = cudaStreamSynchronize(e_.stream);
    return r == cudaSuccess ? core::TransportStatus{} : Fail(r, "cudaStreamSynchronize");
  }

 private:
  static core::TransportStatus Fail(cudaError_t r, const char* call) {
    (void)cudaGetLastError();
    return {static_cast<int>(r), call};
  }
  FileEngine& e_;
  char* dev_;
  bool to_device_;
};

// Opens a file to read: a regular file only. O_NONBLOCK so that opening a FIFO does not wait for
// a writer (it is refused right after).
FileFailure OpenForRead(const std::string& path, Fd* fd, struct stat* st) {
  fd->fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd->fd < 0) return FromErrno(errno, "open", path);
  if (fstat(fd->fd, st) != 0) return FromErrno(errno, "fstat", path);
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
  int flags = fcntl(fd->fd, F_GETFL);
  if (flags >= 0) fcntl(fd->fd, F_SETFL, flags & ~O_NONBLOCK);
  return {};
}

// The same open file again, with O_DIRECT (through /proc, so it is the same file even if the
// path has been replaced meanwhile); -errno when the file system refuses it.
int ReopenDirect(int fd) {
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  int d = open(self.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  return d >= 0 ? d : -errno;
}

// Whether the range's pages are in the page cache, by reading one block at its start, middle and
// end without waiting for the storage (RWF_NOWAIT fails with EAGAIN where it would have to).
bool LooksCached(int fd, uint64_t offset, size_t n) {
#ifdef RWF_NOWAIT
  alignas(64) char buf[kAlign];
  for (uint64_t at : {offset, offset + n / 2, offset + n - 1}) {
    iovec v{buf, sizeof buf};
    if (preadv2(fd, &v, 1, static_cast<off_t>(at / kAlign * kAlign), RWF_NOWAIT) <= 0) return false;
  }
  return true;
#else
  return false;
#endif
}

// O_DIRECT's measured choice per file system (device number), process-wide.
struct DirectChoice {
  bool direct = false;
  double direct_rate = 0, buffered_rate = 0;  // bytes/s, cold
  std::string reason;
};
std::mutex choice_mutex;
std::map<dev_t, DirectChoice>& Choices() {
  static auto* choices = new std::map<dev_t, DirectChoice>();
  return *choices;
}

// Reads n bytes at `offset` into a host ring and drops them: the storage's rate on this path.
double TimedRead(core::CopyTeam& team, char* ring, int fd, uint64_t offset, size_t n, bool direct,
                 core::FileStatus* st) {
  core::PosixFile file(fd);
  core::HostTransport none(ring, nullptr, true);
  auto t0 = std::chrono::steady_clock::now();
  *st = core::RunFileRead(&team, none, file, offset, n, Shape(direct));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st->ok() && s > 0 ? n / s : 0;
}

// Measures, on this file, cold reads of kMeasureBytes each way: O_DIRECT from the start, buffered
// from the middle after dropping those pages from the cache (and dropping them again after, so
// the measurement leaves the cache as it was, less that part).
DirectChoice Measure(int fd, uint64_t size) {
  DirectChoice c;
  Error err;
  std::shared_ptr<FileEngine> host = GetEngine(-1, &err);
  if (!host) return c.reason = "no memory for the measurement", c;
  std::lock_guard<std::mutex> lock(host->mutex);
  std::shared_ptr<core::CopyTeam> team = HostTeam();
  int d = ReopenDirect(fd);
  if (d < 0) {
    c.reason = std::string("the file system refuses O_DIRECT (") + ErrnoName(-d) + ")";
    return c;
  }
  core::FileStatus st;
  c.direct_rate = TimedRead(*team, host->ring, d, 0, kMeasureBytes, true, &st);
  close(d);
  if (!st.ok()) {
    c.reason = "an O_DIRECT read failed (" + std::string(ErrnoName(st.err)) + ")";
    return c;
  }
  const uint64_t mid = size / 2 / kAlign * kAlign;
  posix_fadvise(fd, static_cast<off_t>(mid), kMeasureBytes, POSIX_FADV_DONTNEED);
  c.buffered_rate = TimedRead(*team, host->ring, fd, mid, kMeasureBytes, false, &st);
  posix_fadvise(fd, static_cast<off_t>(mid), kMeasureBytes, POSIX_FADV_DONTNEED);
  c.direct = core::PreferDirect(c.direct_rate, c.buffered_rate);
  c.reason = std::string(c.direct ? "O_DIRECT" : "buffered") + " measured faster cold";
  return c;
}

enum class DirectMode { kAuto, kOn, kOff };

// Whether this read uses O_DIRECT, and why.
bool ChooseDirect(int fd, const struct stat& st, uint64_t offset, size_t n, DirectMode mode,
                  std::string* why) {
  if (mode != DirectMode::kAuto) {
    *why = "asked for";
    return mode == DirectMode::kOn;
  }
  if (n < kDirectFrom) return *why = "a small read", false;
  if (LooksCached(fd, offset, n)) return *why = "the range is in the page cache", false;
  std::lock_guard<std::mutex> lock(choice_mutex);
  auto it = Choices().find(st.st_dev);
  if (it == Choices().end()) {
    if (static_cast<uint64_t>(st.st_size) < 4 * kMeasureBytes)
      return *why = "not measured yet on this file system (the file is too small to)", false;
    it = Choices().emplace(st.st_dev, Measure(fd, static_cast<uint64_t>(st.st_size))).first;
  }
  *why = it->second.reason;
  return it->second.direct;
}

struct ReadRequest {
  std::string path;
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

FileFailure FromStatus(const core::FileStatus& s, const std::string& path, int fd,
                       uint64_t expected_end) {
  if (s.kind == core::FileStatus::kTransport)
    return FileFailure{
        "", "", path,
        "", 0,  Error{static_cast<cudaError_t>(s.transport.code), s.transport.call, ""}};
  if (s.kind == core::FileStatus::kShrunk) {
    struct stat now {};
    fstat(fd, &now);
    // With several readers the first to find the end may have started past it.
    const uint64_t ended = std::min<uint64_t>(s.offset, static_cast<uint64_t>(now.st_size));
    return Fail("ERR_FILE_SHRUNK", path,
                Quote(path) + " ended at byte " + std::to_string(ended) +
                    " while being read up to byte " + std::to_string(expected_end) + " (it has " +
                    std::to_string(now.st_size) + " bytes now): it shrank, or was being rewritten");
  }
  return FromErrno(s.err, s.call.c_str(), path, " at byte " + std::to_string(s.offset));
}

FileFailure RunRead(const ReadRequest& r, ReadResult* out) {
  Fd fd;
  struct stat st {};
  if (FileFailure f = OpenForRead(r.path, &fd, &st)) return f;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (r.file_offset > size)
    return Fail("ERR_FILE_SHORT", r.path,
                "fileOffset " + std::to_string(r.file_offset) + " is past the end of " +
                    Quote(r.path) + " (" + std::to_string(size) + " bytes)");
  const uint64_t n = r.length < 0 ? size - r.file_offset : static_cast<uint64_t>(r.length);
  if (r.length >= 0 && n > size - r.file_offset)
    return Fail("ERR_FILE_SHORT", r.path,
                "the range [" + std::to_string(r.file_offset) + ", " +
                    std::to_string(r.file_offset + n) + ") runs past the end of " + Quote(r.path) +
                    " (" + std::to_string(size) + " bytes)");
  if (n > r.dst.length)
    return Fail("ERR_FILE_TOO_LARGE", r.path,
                Quote(r.path) + " has " + std::to_string(n) + " bytes from fileOffset " +
                    std::to_string(r.file_offset) + ", more than the " +
                    std::to_string(r.dst.length) +
                    " bytes of dst from dstOffset; pass byteLength to read part of it");
  if (r.total) r.total->store(n);
  out->bytes = n;
  if (n == 0) return {};
  out->direct = ChooseDirect(fd.fd, st, r.file_offset, n, r.direct, &out->why);
  Fd direct;
  if (out->direct) {
    direct.fd = ReopenDirect(fd.fd);
    if (direct.fd < 0) {
      int e = -direct.fd;
      direct.fd = -1;
      return FromErrno(e, "open (O_DIRECT)", r.path);
    }
  }
  core::PosixFile file(out->direct ? direct.fd : fd.fd);
  core::FileStatus s;
  if (r.dst.where != Endpoint::kDevice && r.dst.ptr && !out->direct) {
    // Memory the CPU addresses takes buffered reads straight in: no ring, one copy. (The
    // storage-only read has no destination: its bytes stop in the ring.)
    s = core::ReadFileToHost(r.team.get(), file, r.file_offset, n, r.dst.ptr, kPiece, r.progress);
  } else {
    // The device's engine came with the request; the host ring is made only for what needs it
    // (O_DIRECT reads into host memory, the storage-only read).
    std::shared_ptr<FileEngine> engine = r.engine;
    Error err;
    if (!engine && !(engine = GetEngine(-1, &err))) return FileFailure{"", "", r.path, "", 0, err};
    std::lock_guard<std::mutex> lock(engine->mutex);
    if (r.dst.where == Endpoint::kDevice) {
      CudaFileRing ring(*engine, r.dst.ptr, true);
      s = core::RunFileRead(r.team.get(), ring, file, r.file_offset, n, Shape(out->direct),
                            r.progress);
    } else {
      core::HostTransport host(engine->ring, r.dst.ptr, true);
      s = core::RunFileRead(r.team.get(), host, file, r.file_offset, n, Shape(out->direct),
                            r.progress);
    }
  }
  if (!s.ok()) return FromStatus(s, r.path, fd.fd, r.file_offset + n);
  return {};
}

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

std::string Directory(const std::string& path) {
  std::vector<char> buf(path.begin(), path.end());
  buf.push_back('\0');
  return dirname(buf.data());
}

// Runs the pipeline from w.src into the open file at `offset`.
core::FileStatus WriteInto(const WriteRequest& w, int fd, uint64_t offset) {
  core::PosixFile file(fd);
  // Memory the CPU addresses is written straight from: no ring, one copy.
  if (w.src.where != Endpoint::kDevice)
    return core::WriteFileFromHost(w.team.get(), file, offset, w.n, w.src.ptr, kPiece, w.progress);
  std::lock_guard<std::mutex> lock(w.engine->mutex);
  CudaFileRing ring(*w.engine, w.src.ptr, false);
  return core::RunFileWrite(w.team.get(), ring, file, offset, w.n, Shape(false), w.progress);
}

// Writes into an existing regular file at an offset, in place (the file grows if the range ends
// past it): how a multi-part file (a checkpoint) is assembled under its temporary name.
FileFailure RunWriteAt(const WriteRequest& w) {
  Fd fd;
  fd.fd = open(w.path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (fd.fd < 0) return FromErrno(errno, "open", w.path);
  struct stat st {};
  if (fstat(fd.fd, &st) != 0) return FromErrno(errno, "fstat", w.path);
  if (!S_ISREG(st.st_mode))
    return Fail("ERR_FILE_NOT_REGULAR", w.path, Quote(w.path) + " is not a regular file");
  if (w.n) {
    core::FileStatus s = WriteInto(w, fd.fd, static_cast<uint64_t>(w.file_offset));
    if (!s.ok()) return FromStatus(s, w.path, fd.fd, w.file_offset + w.n);
  }
  if (w.fsync && fsync(fd.fd) != 0) return FromErrno(errno, "fsync", w.path);
  int fdn = fd.fd;
  fd.fd = -1;
  if (close(fdn) != 0) return FromErrno(errno, "close", w.path);
  return {};
}

// Writes to a new file beside the target (same directory, so the same file system), then renames
// it over the target: a write that fails part-way leaves the target as it was and no file that
// looks complete.
FileFailure RunWrite(const WriteRequest& w) {
  if (w.file_offset >= 0) return RunWriteAt(w);
  struct stat st {};
  if (stat(w.path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      return Fail("ERR_FILE_IS_DIRECTORY", w.path, Quote(w.path) + " is a directory, not a file");
    if (!S_ISREG(st.st_mode))
      return Fail("ERR_FILE_NOT_REGULAR", w.path,
                  Quote(w.path) + " exists and is not a regular file; only regular files are " +
                      "replaced");
  } else if (errno != ENOENT) {
    return FromErrno(errno, "stat", w.path);
  }
  std::random_device rd;
  std::string tmp;
  Fd fd;
  for (int attempt = 0; attempt < 16 && fd.fd < 0; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".tmp-%08x", rd());
    tmp = w.path + suffix;
    fd.fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, w.mode);
    if (fd.fd < 0 && errno != EEXIST) return FromErrno(errno, "open", tmp);
  }
  if (fd.fd < 0) return FromErrno(EEXIST, "open", tmp);
  auto failed = [&](FileFailure f) {
    close(fd.fd);
    fd.fd = -1;
    unlink(tmp.c_str());
    return f;
  };
  // Claims the space first where the file system can, so a full disk fails before any copying.
  if (w.n && fallocate(fd.fd, 0, 0, static_cast<off_t>(w.n)) != 0 &&
      (errno == ENOSPC || errno == EDQUOT || errno == EFBIG))
    return failed(FromErrno(errno, "fallocate", w.path));
  if (w.n) {
    core::FileStatus s = WriteInto(w, fd.fd, 0);
    if (!s.ok()) return failed(FromStatus(s, w.path, fd.fd, w.n));
  }
  if (w.fsync && fsync(fd.fd) != 0) return failed(FromErrno(errno, "fsync", w.path));
  int c = close(fd.fd);
  fd.fd = -1;
  // Some file systems (NFS) report a failed write only at close.
  if (c != 0) {
    FileFailure f = FromErrno(errno, "close", w.path);
    unlink(tmp.c_str());
    return f;
  }
  if (rename(tmp.c_str(), w.path.c_str()) != 0) {
    FileFailure f = FromErrno(errno, "rename", w.path);
    unlink(tmp.c_str());
    return f;
  }
  if (w.fsync) {
    // The rename is durable once the directory is.
    Fd dir;
    dir.fd = open(Directory(w.path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir.fd >= 0 && fsync(dir.fd) != 0 && errno != EINVAL)
      return FromErrno(errno, "fsync (directory)", w.path);
  }
  return {};
}

// A BigUint64Array of at least `count` elements, where the pipeline counts bytes, or null.
std::atomic<uint64_t>* ProgressSlots(Napi::Env env, Napi::Value v, size_t count) {
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) &&
                    std::atomic<uint64_t>::is_always_lock_free,
                "progress counters are read by JavaScript as plain 64-bit integers");
  if (Absent(v)) return nullptr;
  char* data = nullptr;
  size_t len = 0;
  if (!HostView(env, v, &data, &len) || len < count * 8 ||
      reinterpret_cast<uintptr_t>(data) % alignof(std::atomic<uint64_t>))
    ThrowType(env, "progress must be a BigUint64Array of " + std::to_string(count) + " elements");
  return reinterpret_cast<std::atomic<uint64_t>*>(data);
}

DirectMode ReadDirectMode(Napi::Env env, Napi::Value v) {
  int m = Absent(v) ? 0 : ReadInt(env, v, "direct", 0, 2);
  return m == 1 ? DirectMode::kOn : m == 2 ? DirectMode::kOff : DirectMode::kAuto;
}

// The engine and team for memory on `e`'s side: the device's ring and staged team, or, for
// memory the CPU addresses, the host team alone (RunRead makes the host ring if it needs it).
void Attach(Napi::Env env, const Endpoint& e, std::shared_ptr<FileEngine>* engine,
            std::shared_ptr<core::CopyTeam>* team) {
  if (e.where != Endpoint::kDevice) {
    *team = HostTeam();
    return;
  }
  RequireCuda(env);
  Error err;
  *engine = GetEngine(e.device, &err);
  if (!*engine) ThrowCuda(env, err.code, err.call, err.detail);
  *team = GetStagingTeam(GetInstance(env), e.device);
}

// (path, dst, dstOffset, fileOffset, byteLength | -1, direct 0|1|2, progress?)
ReadRequest ReadReadArgs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ReadRequest r;
  r.path = ReadString(env, info[0], "path");
  r.dst = ResolveEndpoint(env, info[1], "dst");
  uint64_t dst_off = ReadSize(env, info[2], "dstOffset");
  r.file_offset = ReadSize(env, info[3], "fileOffset");
  if (!(info[4].IsNumber() && info[4].As<Napi::Number>().DoubleValue() == -1))
    r.length = static_cast<int64_t>(ReadSize(env, info[4], "byteLength"));
  r.direct = ReadDirectMode(env, info[5]);
  if (info.Length() > 6) {
    r.progress = ProgressSlots(env, info[6], 2);
    if (r.progress) r.total = r.progress + 1;
  }
  if (dst_off > r.dst.length)
    ThrowRange(env, "dstOffset (" + std::to_string(dst_off) + ") is past the end of dst (" +
                        std::to_string(r.dst.length) + " bytes)");
  if (r.length >= 0 && static_cast<uint64_t>(r.length) > r.dst.length - dst_off)
    ThrowRange(env, "dstOffset + byteLength (" + std::to_string(dst_off) + " + " +
                        std::to_string(r.length) + ") runs past the end of dst (" +
                        std::to_string(r.dst.length) + " bytes)");
  if (r.length >= 0 && r.file_offset + static_cast<uint64_t>(r.length) < r.file_offset)
    ThrowRange(env, "fileOffset + byteLength overflows");
  r.dst.ptr += dst_off;
  r.dst.length -= dst_off;
  BeforeUse(r.dst.alloc, nullptr);
  Attach(env, r.dst, &r.engine, &r.team);
  return r;
}

// (path, src, srcOffset, byteLength, fsync, mode, progress?, fileOffset?)
WriteRequest ReadWriteArgs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  WriteRequest w;
  w.path = ReadString(env, info[0], "path");
  w.src = ResolveEndpoint(env, info[1], "src");
  uint64_t off = ReadSize(env, info[2], "srcOffset");
  w.n = ReadSize(env, info[3], "byteLength");
  if (off > w.src.length || w.n > w.src.length - off)
    ThrowRange(env, "srcOffset + byteLength (" + std::to_string(off) + " + " + std::to_string(w.n) +
                        ") runs past the end of src (" + std::to_string(w.src.length) + " bytes)");
  w.src.ptr += off;
  w.src.length = w.n;
  w.fsync = info[4].ToBoolean();
  w.mode = Absent(info[5]) ? 0666 : ReadInt(env, info[5], "mode", 0, 07777);
  if (info.Length() > 6) w.progress = ProgressSlots(env, info[6], 1);
  if (info.Length() > 7 && !Absent(info[7])) {
    w.file_offset = static_cast<int64_t>(ReadSize(env, info[7], "fileOffset"));
    if (static_cast<uint64_t>(w.file_offset) + w.n > (1ull << 53))
      ThrowRange(env, "fileOffset + byteLength is above 2^53");
  }
  BeforeUse(w.src.alloc, nullptr);
  Attach(env, w.src, &w.engine, &w.team);
  return w;
}

Napi::Value ReadResultValue(Napi::Env env, const ReadResult& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("bytes", static_cast<double>(r.bytes));
  o.Set("direct", r.direct);
  o.Set("directReason", r.why);
  return o;
}

Napi::Value FileRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ReadRequest r = ReadReadArgs(info);
  ReadResult out;
  if (FileFailure f = RunRead(r, &out)) ThrowValue(env, MakeFileError(env, f));
  return ReadResultValue(env, out);
}

Napi::Value FileWrite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  WriteRequest w = ReadWriteArgs(info);
  if (FileFailure f = RunWrite(w)) ThrowValue(env, MakeFileError(env, f));
  return Napi::Number::New(env, static_cast<double>(w.n));
}

// Holds what a file transfer off the JS thread uses until it settles: the JS values (views, the
// progress array) and the library buffer, whose free() waits meanwhile.
class FileWorker : public PromiseWorker {
 public:
  FileWorker(Napi::Env env, const char* name, Allocation* alloc,
             const std::vector<Napi::Value>& keep)
      : PromiseWorker(env, name), alloc_(alloc) {
    for (const Napi::Value& v : keep)
      if (v.IsObject()) keep_.push_back(Napi::Persistent(v.As<Napi::Object>()));
    if (alloc_) {
      alloc_->pending++;
      alloc_->refs++;
    }
  }

 protected:
  void Release(Napi::Env env) noexcept override {
    if (!alloc_) return;
    if (--alloc_->pending == 0 && alloc_->free_requested) ReleaseAllocation(env, alloc_);
    DropReference(alloc_);
    alloc_ = nullptr;
  }
  Napi::Value Reject(Napi::Env env, bool* reject) {
    *reject = true;
    return MakeFileError(env, failure_);
  }
  FileFailure failure_;

 private:
  Allocation* alloc_;
  std::vector<Napi::ObjectReference> keep_;
};

class ReadWorker : public FileWorker {
 public:
  ReadWorker(Napi::Env env, ReadRequest r, const std::vector<Napi::Value>& keep)
      : FileWorker(env, "cuda-memory:readFileAsync", r.dst.alloc, keep), r_(std::move(r)) {}

 protected:
  void Work() override { failure_ = RunRead(r_, &out_); }
  Napi::Value Settlement(Napi::Env env, bool* reject) override {
    if (failure_) return Reject(env, reject);
    return ReadResultValue(env, out_);
  }

 private:
  ReadRequest r_;
  ReadResult out_;
};

class WriteWorker : public FileWorker {
 public:
  WriteWorker(Napi::Env env, WriteRequest w, const std::vector<Napi::Value>& keep)
      : FileWorker(env, "cuda-memory:writeFileAsync", w.src.alloc, keep), w_(std::move(w)) {}

 protected:
  void Work() override { failure_ = RunWrite(w_); }
  Napi::Value Settlement(Napi::Env env, bool* reject) override {
    if (failure_) return Reject(env, reject);
    return Napi::Number::New(env, static_cast<double>(w_.n));
  }

 private:
  WriteRequest w_;
};

Napi::Value FileReadAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* w = new ReadWorker(env, ReadReadArgs(info), {info[1], info[6]});
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value FileWriteAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto* w = new WriteWorker(env, ReadWriteArgs(info), {info[1], info[6]});
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// fileStorageRead: returns { bytes, seconds, direct, directReason }: the library's read path
// without a GPU (the bytes stop in the ring), the storage's own rate for the file benchmark. Needs
// no CUDA.
Napi::Value FileStorageRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ReadRequest r;
  r.path = ReadString(env, info[0], "path");
  r.file_offset = ReadSize(env, info[1], "fileOffset");
  if (!(info[2].IsNumber() && info[2].As<Napi::Number>().DoubleValue() == -1))
    r.length = static_cast<int64_t>(ReadSize(env, info[2], "byteLength"));
  r.direct = ReadDirectMode(env, info[3]);
  r.dst.where = Endpoint::kPinned;
  r.dst.length = UINT64_MAX;  // nowhere: never written
  r.team = HostTeam();
  ReadResult out;
  auto t0 = std::chrono::steady_clock::now();
  if (FileFailure f = RunRead(r, &out)) ThrowValue(env, MakeFileError(env, f));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Napi::Object o = ReadResultValue(env, out).As<Napi::Object>();
  o.Set("seconds", s);
  return o;
}

// The fraction of the file's pages in the page cache (mincore over a mapping), -1 if unknown.
double Resident(int fd, uint64_t size) {
  if (size == 0) return 0;
  void* m = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return -1;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  double frac = -1;
  if (mincore(m, size, vec.data()) == 0) {
    size_t in = 0;
    for (unsigned char v : vec) in += v & 1;
    frac = static_cast<double>(in) / vec.size();
  }
  munmap(m, size);
  return frac;
}

// fileCache: returns { resident, dropped }: how much of the file is in the page cache, after asking
// the kernel to drop it when `drop` (posix_fadvise DONTNEED, after writing back its dirty pages;
// any user may, for a file they can open).
Napi::Value FileCache(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  bool drop = info[1].ToBoolean();
  Fd fd;
  struct stat st {};
  if (FileFailure f = OpenForRead(path, &fd, &st)) ThrowValue(env, MakeFileError(env, f));
  bool dropped = false;
  if (drop) {
    fdatasync(fd.fd);
    dropped = posix_fadvise(fd.fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("resident", Resident(fd.fd, static_cast<uint64_t>(st.st_size)));
  o.Set("dropped", dropped);
  return o;
}

// fileDirectChoices: returns [{ device, direct, directRate, bufferedRate, reason }]: what the
// measurements at first use chose per file system.
Napi::Value FileDirectChoices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::lock_guard<std::mutex> lock(choice_mutex);
  Napi::Array a = Napi::Array::New(env);
  uint32_t i = 0;
  for (const auto& [dev, c] : Choices()) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("device", static_cast<double>(dev));
    o.Set("direct", c.direct);
    o.Set("directRate", c.direct_rate);
    o.Set("bufferedRate", c.buffered_rate);
    o.Set("reason", c.reason);
    a.Set(i++, o);
  }
  return a;
}

}  // namespace

void InitFiles(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"fileRead", FileRead},
               {"fileReadAsync", FileReadAsync},
               {"fileWrite", FileWrite},
               {"fileWriteAsync", FileWriteAsync},
               {"fileStorageRead", FileStorageRead},
               {"fileCache", FileCache},
               {"fileDirectChoices", FileDirectChoices},
           });
}

}  // namespace cm
