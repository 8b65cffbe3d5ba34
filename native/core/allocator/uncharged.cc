#include "core/allocator/uncharged.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>

#include "core/base/shm.h"

namespace cm::core {

namespace {
constexpr char kMagic[16] = "cuda-memory/unc";
constexpr uint32_t kVersion = 1;
constexpr off_t kHeldByte = shm::kOwnerByte;  // held by the process for its life
}  // namespace

struct UnchargedRecord::File {
  char magic[16];
  uint32_t version;
  uint32_t strict;
  int64_t pid;
  uint64_t since_unix_ms;
  char code[48];
  char detail[464];
  uint64_t checksum;  // of everything above
  uint64_t bytes;     // written by the process itself without a lock
  uint64_t calls;
};

namespace {

// Removes `path` if it is still the file open as `fd`: never one made under the same name since.
void UnlinkIfSame(int fd, const std::string& path) {
  struct stat open_st, named;
  if (fstat(fd, &open_st) == 0 && stat(path.c_str(), &named) == 0 &&
      open_st.st_ino == named.st_ino && open_st.st_dev == named.st_dev)
    unlink(path.c_str());
}

uint64_t Sum(const UnchargedRecord::File& f) {
  return shm::Fnv1a(&f, offsetof(UnchargedRecord::File, checksum));
}

void CheckName(const std::string& name, const std::string& device) {
  if (!shm::ValidName(name) || !shm::ValidName(device))
    throw ShmError("ERR_GROUP_NAME", "group '" + shm::Printable(name) + "' on '" +
                                         shm::Printable(device) + "' cannot name a file");
}

}  // namespace

std::string UnchargedRecord::Prefix(const std::string& name, const std::string& device) {
  return "cuda-memory-uncharged." + name + "." + device + ".";
}

UnchargedRecord* UnchargedRecord::Make(const std::string& dir, const std::string& name,
                                       const std::string& device, const std::string& code,
                                       const std::string& detail, bool strict) {
  CheckName(name, device);
  std::unique_ptr<UnchargedRecord> r(new UnchargedRecord());
  r->path_ = shm::Join(dir, Prefix(name, device) + std::to_string(getpid()));
  File f;
  std::memset(&f, 0, sizeof f);
  std::memcpy(f.magic, kMagic, sizeof kMagic);
  f.version = kVersion;
  f.strict = strict;
  f.pid = getpid();
  f.since_unix_ms = shm::NowUnixMs();
  shm::CopyText(f.code, sizeof f.code, code);
  shm::CopyText(f.detail, sizeof f.detail, detail);
  f.checksum = Sum(f);
  for (int attempt = 0; attempt < 2; ++attempt) {
    r->fd_ = shm::CreateComplete(r->path_, sizeof f, &f, sizeof f, 0600, kHeldByte);
    if (r->fd_ >= 0) return r.release();
    // A file of this pid already: an earlier process's (gone, or it would hold the lock), or
    // this process's own from before a fork's exec; replaced if nobody holds it.
    int fd = shm::OpenTrusted(r->path_, 0, "ERR_SHM_OPEN");
    if (fd < 0) continue;
    bool held = shm::HeldByOther(fd, kHeldByte);
    if (!held) UnlinkIfSame(fd, r->path_);
    close(fd);
    if (held) break;
  }
  throw ShmError("ERR_SHM_CREATE", "could not record this process in " + r->path_, r->path_);
}

void UnchargedRecord::Count(uint64_t bytes) noexcept {
  if (fd_ < 0) return;
  bytes_ = bytes_ > UINT64_MAX - bytes ? UINT64_MAX : bytes_ + bytes;
  ++calls_;
  uint64_t v[2] = {bytes_, calls_};
  (void)!pwrite(fd_, v, sizeof v, offsetof(File, bytes));
}

void UnchargedRecord::Remove() noexcept {
  if (fd_ < 0) return;
  unlink(path_.c_str());
  close(fd_);
  fd_ = -1;
}

void UnchargedRecord::Abandon() noexcept {
  // The descriptor shares its open file description (and the lock) with the parent's.
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

UnchargedRecord::~UnchargedRecord() { Remove(); }

std::vector<UnchargedProcess> UnchargedRecord::Read(const std::string& dir, const std::string& name,
                                                    const std::string& device) {
  std::vector<UnchargedProcess> out;
  if (!shm::ValidName(name) || !shm::ValidName(device) || !shm::CheckFolder(dir, false)) return out;
  const std::string prefix = Prefix(name, device);
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (!d) return out;
  while (dirent* e = readdir(d.get())) {
    std::string file = e->d_name;
    if (file.compare(0, prefix.size(), prefix) != 0) continue;
    std::string path = shm::Join(dir, file);
    int fd = -1;
    try {
      fd = shm::OpenTrusted(path, sizeof(File), "ERR_SHM_OPEN");
    } catch (const ShmError&) {
      continue;  // not this user's, or not a record: left alone
    }
    if (fd < 0) continue;
    File f;
    bool ok = pread(fd, &f, sizeof f, 0) == static_cast<ssize_t>(sizeof f) &&
              std::memcmp(f.magic, kMagic, sizeof kMagic) == 0 && f.version == kVersion &&
              Sum(f) == f.checksum;
    bool held = shm::HeldByOther(fd, kHeldByte);
    // Gone however it ended (its lock went with it); a record being made holds its lock before
    // its name appears, so it is never taken for one gone.
    if (!held) UnlinkIfSame(fd, path);
    close(fd);
    if (!held) continue;
    if (!ok) continue;
    UnchargedProcess p;
    p.pid = f.pid;
    p.since_unix_ms = f.since_unix_ms;
    p.code = shm::Text(f.code, sizeof f.code);
    p.detail = shm::Text(f.detail, sizeof f.detail);
    p.strict = f.strict != 0;
    p.bytes = f.bytes;
    p.calls = f.calls;
    p.path = path;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace cm::core
