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
#include <climits>
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
#include "core/base/errno_name.h"
#include "core/transfer/file_pipeline.h"
#include "device/discovery.h"
#include "memory/managed.h"
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

// A failure as JavaScript sees it: a CudaMemoryError with `code` (ERR_FILE_...), and the path,
// system call and errno name where there is one; or a CUDA failure.
struct FileFailure {
  std::string code;  // empty: none, or a failed system call, coded by `err`
  std::string message;
  std::string path;
  std::string syscall;
  int err = 0;  // a failed system call's errno: coded (FileCodeOf) once on JavaScript's thread
  Error cuda;   // set when the DMA engine failed
  explicit operator bool() const { return !code.empty() || err != 0 || static_cast<bool>(cuda); }
};

// The codes of file errors by errno: lib/base/files.ts's table, the one there is, handed over by
// init (SetFileCodes). This file names no code of a failed system call itself, so the two
// languages cannot disagree on one.
struct FileCodes : InstanceState {
  std::map<int, std::string> by_errno;
  std::string otherwise;
};

std::string FileCodeOf(Napi::Env env, int err) {
  const FileCodes& t = GetInstance(env).State<FileCodes>();
  auto it = t.by_errno.find(err);
  return it == t.by_errno.end() ? t.otherwise : it->second;
}

FileFailure Fail(const std::string& code, const std::string& path, const std::string& message) {
  FileFailure f;
  f.code = code;
  f.path = path;
  f.message = message;
  return f;
}

FileFailure FromErrno(int e, const char* syscall, const std::string& path,
                      const std::string& where = "") {
  FileFailure f = Fail("", path,
                       std::string(syscall) + " of " + Quote(path) + where +
                           " failed: " + std::strerror(e) + " (" + core::ErrnoName(e) + ")");
  f.syscall = syscall;
  f.err = e;
  return f;
}

Napi::Value MakeFileError(Napi::Env env, const FileFailure& f) {
  if (f.cuda) return MakeCudaError(env, f.cuda.code, f.cuda.call, f.cuda.detail);
  Napi::Error e = LibraryError(env, f.err ? FileCodeOf(env, f.err) : f.code, f.message);
  e.Set("path", f.path);
  if (!f.syscall.empty()) e.Set("syscall", f.syscall);
  if (f.err) e.Set("errno", core::ErrnoName(f.err));
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

// Checks that an open file is a regular file, and makes its reads blocking.
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

// Opens a file to read: a regular file only. O_NONBLOCK so that opening a FIFO does not wait for
// a writer (it is refused right after).
FileFailure OpenForRead(const std::string& path, Fd* fd, struct stat* st) {
  fd->fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd->fd < 0) return FromErrno(errno, "open", path);
  return CheckReadable(fd->fd, path, st);
}

// The same open file again, with O_DIRECT; -errno when the file system refuses it. Through /proc,
// so it is the same file even if the path has been replaced meanwhile; where /proc is not mounted
// (a container, a chroot), through the path, checked to be the same file (device and inode), else
// -ESTALE: the path names another file now.
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
DirectChoice Measure(int fd, const std::string& path, uint64_t size) {
  DirectChoice c;
  Error err;
  std::shared_ptr<FileEngine> host = GetEngine(-1, &err);
  if (!host) return c.reason = "no memory for the measurement", c;
  std::lock_guard<std::mutex> lock(host->mutex);
  std::shared_ptr<core::CopyTeam> team = HostTeam();
  int d = ReopenDirect(fd, path);
  if (d < 0) {
    c.reason = std::string("the file system refuses O_DIRECT (") + core::ErrnoName(-d) + ")";
    return c;
  }
  core::FileStatus st;
  c.direct_rate = TimedRead(*team, host->ring, d, 0, kMeasureBytes, true, &st);
  close(d);
  if (!st.ok()) {
    c.reason = "an O_DIRECT read failed (" + std::string(core::ErrnoName(st.err)) + ")";
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
bool ChooseDirect(int fd, const std::string& path, const struct stat& st, uint64_t offset, size_t n,
                  DirectMode mode, std::string* why) {
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
    it = Choices().emplace(st.st_dev, Measure(fd, path, static_cast<uint64_t>(st.st_size))).first;
  }
  *why = it->second.reason;
  return it->second.direct;
}

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

// Managed memory is read and written by host threads here (it is not device memory to the ring).
// Where the device cannot access managed memory while the host does, a host access while a kernel
// runs faults the process: first wait for the device's work, as copies and ManagedBuffer.bytes
// do. (The JavaScript side counts the operation as in flight on the buffer meanwhile.)
FileFailure SettleManaged(const Endpoint& e, const std::string& path) {
  if (e.where != Endpoint::kManaged || ConcurrentManagedAccess(e.device)) return {};
  cudaError_t r = UseDevice(e.device);
  if (r == cudaSuccess) r = cudaDeviceSynchronize();
  if (r == cudaSuccess) return {};
  (void)cudaGetLastError();
  return FileFailure{"", "", path, "", 0, Error{r, "cudaDeviceSynchronize", ""}};
}

FileFailure RunRead(const ReadRequest& r, ReadResult* out) {
  Fd own;
  struct stat st {};
  if (FileFailure f = r.fd >= 0 ? CheckReadable(r.fd, r.path, &st) : OpenForRead(r.path, &own, &st))
    return f;
  const int fd = r.fd >= 0 ? r.fd : own.fd;
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
  if (FileFailure f = SettleManaged(r.dst, r.path)) return f;
  out->direct = ChooseDirect(fd, r.path, st, r.file_offset, n, r.direct, &out->why);
  Fd direct;
  if (out->direct) {
    direct.fd = ReopenDirect(fd, r.path);
    if (direct.fd < 0) {
      int e = -direct.fd;
      direct.fd = -1;
      return FromErrno(e, "open (O_DIRECT)", r.path);
    }
  }
  core::PosixFile file(out->direct ? direct.fd : fd);
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
  if (!s.ok()) return FromStatus(s, r.path, fd, r.file_offset + n);
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
// past it): how a multi-part file (a checkpoint) is assembled under its temporary name. A
// symbolic link is refused, not followed: a temporary file swapped for a link between its
// creation and these writes would send them elsewhere.
FileFailure RunWriteAt(const WriteRequest& w) {
  Fd fd;
  fd.fd = open(w.path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (fd.fd < 0 && errno == ELOOP)
    return Fail("ERR_FILE_NOT_REGULAR", w.path,
                Quote(w.path) + " is a symbolic link; writes at a fileOffset do not follow " +
                    "links (pass the path of the file it names)");
  if (fd.fd < 0) return FromErrno(errno, "open", w.path);
  struct stat st {};
  if (fstat(fd.fd, &st) != 0) return FromErrno(errno, "fstat", w.path);
  if (!S_ISREG(st.st_mode))
    return Fail("ERR_FILE_NOT_REGULAR", w.path, Quote(w.path) + " is not a regular file");
  if (FileFailure f = SettleManaged(w.src, w.path)) return f;
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

// A file being replaced: the new contents go to `tmp`, beside `target`, renamed over it once
// complete.
struct Replacement {
  std::string target;  // the path with its symbolic links followed
  std::string tmp;
};

// The file a path names once its symbolic links are followed (a link is written through to its
// target, as fs.writeFile does; a dangling link's target is created). `path` itself when it is
// no link or does not exist.
FileFailure FollowLinks(const std::string& path, std::string* out) {
  std::string p = path;
  for (int hop = 0; hop < 40; ++hop) {
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
      *out = p;
      return {};
    }
    std::vector<char> buf(PATH_MAX);
    ssize_t n = readlink(p.c_str(), buf.data(), buf.size());
    if (n < 0) return FromErrno(errno, "readlink", path);
    std::string link(buf.data(), static_cast<size_t>(n));
    p = link[0] == '/' ? link : Directory(p) + "/" + link;
  }
  return FromErrno(ELOOP, "open", path);
}

// Starts replacing `path`: refuses a folder (ERR_FILE_IS_DIRECTORY) and anything else that is
// not a regular file (a FIFO, socket or device: ERR_FILE_NOT_REGULAR); creates the temporary
// file, open in *fd, with the mode (and owner and group, where permitted) of the file it
// replaces, else `mode` less the umask.
FileFailure BeginReplace(const std::string& path, int mode, Replacement* r, Fd* fd) {
  if (FileFailure f = FollowLinks(path, &r->target)) return f;
  struct stat st {};
  const bool exists = stat(r->target.c_str(), &st) == 0;
  if (exists) {
    if (S_ISDIR(st.st_mode))
      return Fail("ERR_FILE_IS_DIRECTORY", path, Quote(path) + " is a directory, not a file");
    if (!S_ISREG(st.st_mode))
      return Fail("ERR_FILE_NOT_REGULAR", path,
                  Quote(path) + " exists and is not a regular file (a FIFO, socket or device); " +
                      "only regular files are replaced");
  } else if (errno != ENOENT) {
    return FromErrno(errno, "stat", path);
  }
  std::random_device rd;
  for (int attempt = 0; attempt < 16 && fd->fd < 0; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".tmp-%08x", rd());
    r->tmp = r->target + suffix;
    // 0600 until the replaced file's mode is copied: never more open than either file.
    fd->fd = open(r->tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  exists ? 0600 : mode);
    if (fd->fd < 0 && errno != EEXIST) return FromErrno(errno, "open", r->tmp);
  }
  if (fd->fd < 0) return FromErrno(EEXIST, "open", r->tmp);
  if (exists) {
    // The owner changes only for a privileged caller, the group to one of the caller's groups;
    // otherwise the file is the caller's, as any new file would be.
    if (st.st_uid != geteuid() || st.st_gid != getegid()) {
      int ignored = fchown(fd->fd, st.st_uid, st.st_gid);
      if (ignored != 0) ignored = fchown(fd->fd, static_cast<uid_t>(-1), st.st_gid);
      (void)ignored;
    }
    if (fchmod(fd->fd, st.st_mode & 07777) != 0) {
      FileFailure f = FromErrno(errno, "fchmod", r->tmp);
      close(fd->fd);
      fd->fd = -1;
      unlink(r->tmp.c_str());
      return f;
    }
  }
  return {};
}

// Ends a replacement: closes the temporary file (some file systems, NFS, report a failed write
// only there), renames it over the target, and with `sync` makes both durable. The temporary
// file is removed on failure.
FileFailure CommitReplace(const std::string& path, const Replacement& r, Fd* fd, bool sync) {
  FileFailure f;
  if (sync && fd->fd >= 0 && fsync(fd->fd) != 0) f = FromErrno(errno, "fsync", path);
  if (fd->fd >= 0) {
    int c = close(fd->fd);
    fd->fd = -1;
    if (c != 0 && !f) f = FromErrno(errno, "close", path);
  }
  if (!f && rename(r.tmp.c_str(), r.target.c_str()) != 0) f = FromErrno(errno, "rename", path);
  if (f) {
    unlink(r.tmp.c_str());
    return f;
  }
  if (sync) {
    // The rename is durable once the directory is.
    Fd dir;
    dir.fd = open(Directory(r.target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir.fd >= 0 && fsync(dir.fd) != 0 && errno != EINVAL)
      return FromErrno(errno, "fsync (directory)", path);
  }
  return {};
}

// Writes to a new file beside the target (same directory, so the same file system), then renames
// it over the target: a write that fails part-way leaves the target as it was and no file that
// looks complete.
FileFailure RunWrite(const WriteRequest& w) {
  if (w.file_offset >= 0) return RunWriteAt(w);
  if (FileFailure f = SettleManaged(w.src, w.path)) return f;
  Replacement r;
  Fd fd;
  if (FileFailure f = BeginReplace(w.path, w.mode, &r, &fd)) return f;
  auto failed = [&](FileFailure f) {
    close(fd.fd);
    fd.fd = -1;
    unlink(r.tmp.c_str());
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
  return CommitReplace(w.path, r, &fd, w.fsync);
}

// fileReplaceBegin: returns [tmp, target]: a file that writes (fileWrite with a fileOffset) fill
// before fileReplaceCommit renames it over the target; what saveSafetensors assembles a file in.
Napi::Value FileReplaceBegin(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  Replacement r;
  Fd fd;
  if (FileFailure f = BeginReplace(path, 0666, &r, &fd)) ThrowValue(env, MakeFileError(env, f));
  Napi::Array a = Napi::Array::New(env, 2);
  a.Set(0u, r.tmp);
  a.Set(1u, r.target);
  return a;
}

// fileReplaceCommit: renames tmp over target (see CommitReplace); the
// temporary file is removed on failure.
Napi::Value FileReplaceCommit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ReadString(env, info[0], "path");
  Replacement r{ReadString(env, info[2], "target"), ReadString(env, info[1], "tmp")};
  bool sync = info[3].ToBoolean();
  Fd fd;
  if (sync) {
    fd.fd = open(r.tmp.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd.fd < 0) {
      FileFailure f = FromErrno(errno, "open", r.tmp);
      unlink(r.tmp.c_str());
      ThrowValue(env, MakeFileError(env, f));
    }
  }
  if (FileFailure f = CommitReplace(path, r, &fd, sync)) ThrowValue(env, MakeFileError(env, f));
  return env.Undefined();
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

// (path, dst, dstOffset, fileOffset, byteLength | -1, direct 0|1|2, progress?, fd?)
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
  if (info.Length() > 7 && !Absent(info[7])) r.fd = ReadInt(env, info[7], "fd", 0, INT32_MAX);
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

// The fraction of the file's pages in the page cache (mincore over a mapping of each span that
// core::ResidencySpans picks: exact up to kResidencyWhole pages, else an estimate from windows
// spread over the file), -1 if unknown. Time and memory are bounded whatever the file's size.
constexpr uint64_t kResidencyWhole = 1u << 21, kResidencyWindow = 1u << 14;

double Resident(int fd, uint64_t size) {
  if (size == 0) return 0;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t pages = (size + page - 1) / page;
  std::vector<unsigned char> vec(kResidencyWindow);
  uint64_t in = 0, looked = 0;
  for (const core::PageSpan& s : core::ResidencySpans(pages, kResidencyWhole, kResidencyWindow)) {
    const uint64_t offset = s.first * page;
    const size_t bytes = static_cast<size_t>(std::min(s.count * page, size - offset));
    void* m = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset));
    if (m == MAP_FAILED) return -1;
    const bool ok = mincore(m, bytes, vec.data()) == 0;
    munmap(m, bytes);
    if (!ok) return -1;
    const size_t n = (bytes + page - 1) / page;
    for (size_t i = 0; i < n; ++i) in += vec[i] & 1;
    looked += n;
  }
  return looked ? static_cast<double>(in) / looked : 0;
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

// fileErrnoError: returns the error a file call whose system call `syscall` failed with `errno`
// throws, coded as every such error is: most errnos (EDQUOT, EROFS, ...) cannot be provoked at
// will, and a test compares these codes with those lib/base/files.ts gives Node's errors.
Napi::Value FileErrnoError(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int err = ReadInt(env, info[0], "errno", 1, INT32_MAX);
  std::string syscall = ReadString(env, info[1], "syscall");
  std::string path = ReadString(env, info[2], "path");
  return MakeFileError(env, FromErrno(err, syscall.c_str(), path));
}

}  // namespace

void SetFileCodes(Napi::Env env, Napi::Value table) {
  if (!table.IsObject()) ThrowType(env, "fileCodes must be an object");
  Napi::Object o = table.As<Napi::Object>();
  Napi::Value list = o.Get("byErrno");
  if (!list.IsArray()) ThrowType(env, "fileCodes.byErrno must be an array");
  FileCodes codes;
  Napi::Array pairs = list.As<Napi::Array>();
  for (uint32_t i = 0; i < pairs.Length(); ++i) {
    Napi::Value pair = pairs.Get(i);
    if (!pair.IsArray()) ThrowType(env, "fileCodes.byErrno must hold [errno, code] pairs");
    Napi::Array p = pair.As<Napi::Array>();
    codes.by_errno[ReadInt(env, p.Get(0u), "errno", 1, INT32_MAX)] =
        ReadString(env, p.Get(1u), "code");
  }
  codes.otherwise = ReadString(env, o.Get("otherwise"), "fileCodes.otherwise");
  FileCodes& t = GetInstance(env).State<FileCodes>();
  t.by_errno = std::move(codes.by_errno);
  t.otherwise = std::move(codes.otherwise);
}

void InitFiles(Napi::Env env, Napi::Object exports) {
  Register(env, exports,
           {
               {"fileRead", FileRead},
               {"fileReadAsync", FileReadAsync},
               {"fileWrite", FileWrite},
               {"fileWriteAsync", FileWriteAsync},
               {"fileStorageRead", FileStorageRead},
               {"fileCache", FileCache},
               {"fileReplaceBegin", FileReplaceBegin},
               {"fileReplaceCommit", FileReplaceCommit},
               {"fileDirectChoices", FileDirectChoices},
               {"fileErrnoError", FileErrnoError},
           });
}

}  // namespace cm
