#include "transfer/files/read.h"

#include <sys/stat.h>

#include <mutex>

#include "transfer/files/open.h"

namespace cm::files {

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
      CudaEventRing ring = DeviceRing(*engine, r.dst.ptr, true);
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

}  // namespace cm::files
