#include "transfer/files/write.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "core/base/file_replace.h"
#include "transfer/files/open.h"

namespace cm::files {

namespace {

// Runs the pipeline from w.src into the open file at `offset`.
core::FileStatus WriteInto(const WriteRequest& w, int fd, uint64_t offset) {
  core::PosixFile file(fd);
  // Memory the CPU addresses is written straight from: no ring, one copy.
  if (w.src.where != Endpoint::kDevice)
    return core::WriteFileFromHost(w.team.get(), file, offset, w.n, w.src.ptr, kPiece, w.progress);
  std::lock_guard<std::mutex> lock(w.engine->mutex);
  CudaEventRing ring = DeviceRing(*w.engine, w.src.ptr, false);
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

}  // namespace

FileFailure RunWrite(const WriteRequest& w) {
  if (w.file_offset >= 0) return RunWriteAt(w);
  if (FileFailure f = SettleManaged(w.src, w.path)) return f;
  core::Replacement r;
  if (FileFailure f = FromReplace(core::BeginReplace(w.path, w.mode, &r))) return f;
  auto failed = [&](FileFailure f) {
    core::AbandonReplace(&r);
    return f;
  };
  // Claims the space first where the file system can, so a full disk fails before any copying.
  if (w.n && fallocate(r.fd, 0, 0, static_cast<off_t>(w.n)) != 0 &&
      (errno == ENOSPC || errno == EDQUOT || errno == EFBIG))
    return failed(FromErrno(errno, "fallocate", w.path));
  if (w.n) {
    core::FileStatus s = WriteInto(w, r.fd, 0);
    if (!s.ok()) return failed(FromStatus(s, w.path, r.fd, w.n));
  }
  return FromReplace(core::CommitReplace(&r, w.fsync));
}

}  // namespace cm::files
