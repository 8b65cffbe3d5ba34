#include "core/memory/ipc_record.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <random>

namespace cm::core {

namespace {

constexpr char kMagic[16] = "cuda-memory/ipc";
constexpr uint32_t kVersion = 1;
constexpr char kPrefix[] = "cuda-memory-ipc.";

struct RecordFile {
  char magic[16];
  uint32_t version;
  uint32_t reserved;
  int64_t pid;
  uint64_t offset;
  uint64_t bytes;
  char device[72];
  uint8_t handle[64];
  uint8_t token[16];
  uint64_t checksum;                                  // of everything above
  int64_t importers[IpcExportRecord::kMaxImporters];  // pid per slot, 0 when free
};

static_assert(sizeof(RecordFile) == kIpcRecordBytes, "the record's size is part of its format");

uint64_t Sum(const RecordFile& r) { return shm::Fnv1a(&r, offsetof(RecordFile, checksum)); }

[[noreturn]] void Invalid(const std::string& why) {
  throw ShmError("ERR_IPC_HANDLE_INVALID", "the IPC handle is not valid: " + why);
}

bool HolderAlive(int fd) { return shm::HeldByOther(fd, shm::kOwnerByte); }

}  // namespace

// Removes records whose exporter is gone and that no importer holds. Files it may not trust
// (another user's, a link, a wrong mode or size) are left alone and counted.
int SweepStaleIpcRecords(const std::string& dir) {
  int skipped = 0;
  if (!shm::CheckFolder(dir, false)) return 0;
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (!ValidRecordName(name)) continue;
    std::string path = shm::Join(dir, name);
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
      skipped += errno != ENOENT;
      continue;
    }
    if (!shm::Untrusted(fd, sizeof(RecordFile)).empty()) {
      ++skipped;
      close(fd);
      continue;
    }
    if (shm::TryLock(fd, shm::kMutexByte) == 0) {
      bool held = HolderAlive(fd);
      for (int i = 0; i < IpcExportRecord::kMaxImporters && !held; ++i)
        held = shm::HeldByOther(fd, shm::kSlotBytes + i);
      if (!held) unlink(path.c_str());
      shm::Unlock(fd, shm::kMutexByte);
    }
    close(fd);
  }
  closedir(d);
  return skipped;
}

std::string ToHex(const uint8_t* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[bytes[i] >> 4];
    s[2 * i + 1] = digits[bytes[i] & 15];
  }
  return s;
}

bool FromHex(const std::string& hex, uint8_t* bytes, size_t n) {
  if (hex.size() != 2 * n) return false;
  auto val = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    int hi = val(hex[2 * i]), lo = val(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

bool ValidRecordName(const std::string& name) {
  size_t p = sizeof kPrefix - 1;
  if (name.compare(0, p, kPrefix) != 0) return false;
  size_t dot = name.find('.', p);
  if (dot == std::string::npos || dot == p || dot - p > 10) return false;
  if (name[p] == '0' && dot - p > 1) return false;
  for (size_t i = p; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  if (name.size() - dot - 1 != 16) return false;
  for (size_t i = dot + 1; i < name.size(); ++i)
    if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f'))) return false;
  return true;
}

bool SameOpening(const IpcOpening& open, const IpcOpening& wanted) {
  if (open.handle != wanted.handle || open.offset != wanted.offset || open.bytes != wanted.bytes)
    return false;
  return open.record.empty() || wanted.record.empty() || open.record == wanted.record;
}

std::string DescribeOpening(const IpcOpening& o) {
  std::string s = "handle " + ToHex(o.handle.data(), o.handle.size()) + ", offset " +
                  std::to_string(o.offset) + ", byteLength " + std::to_string(o.bytes);
  if (!o.record.empty()) s += ", record " + o.record;
  return s;
}

IpcExportRecord* IpcExportRecord::Create(const std::string& dir, IpcDescriptor* d,
                                         int lock_timeout_ms) {
  shm::CheckFolder(dir, true);
  SweepStaleIpcRecords(dir);
  std::random_device rd;
  std::unique_ptr<IpcExportRecord> r(new IpcExportRecord());
  r->timeout_ms_ = lock_timeout_ms;
  d->pid = getpid();
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint8_t id[8];
    for (auto& b : id) b = static_cast<uint8_t>(rd());
    for (auto& b : d->token) b = static_cast<uint8_t>(rd());
    d->record = kPrefix + std::to_string(d->pid) + "." + ToHex(id, 8);
    RecordFile f;
    std::memset(&f, 0, sizeof f);
    std::memcpy(f.magic, kMagic, sizeof kMagic);
    f.version = kVersion;
    f.pid = d->pid;
    f.offset = d->offset;
    f.bytes = d->bytes;
    std::memcpy(f.device, d->device.data(), std::min(sizeof f.device - 1, d->device.size()));
    std::memcpy(f.handle, d->handle.data(), 64);
    std::memcpy(f.token, d->token.data(), 16);
    f.checksum = Sum(f);
    r->path_ = shm::Join(dir, d->record);
    r->fd_ = shm::CreateComplete(r->path_, sizeof f, &f, sizeof f, 0600, shm::kOwnerByte);
    if (r->fd_ >= 0) {
      r->d_ = *d;
      return r.release();
    }
  }
  throw ShmError("ERR_IPC_EXPORT", "could not create an IPC record in " + dir, dir);
}

std::vector<int64_t> IpcExportRecord::Importers() {
  if (fd_ < 0) return {};
  shm::MutexGuard lock(fd_, path_, "counting the importers of an exported buffer", timeout_ms_);
  return ImportersLocked();
}

std::vector<int64_t> IpcExportRecord::Withdraw(bool force) {
  if (fd_ < 0) return {};
  std::vector<int64_t> pids;
  {
    shm::MutexGuard lock(fd_, path_, "freeing an exported buffer", timeout_ms_);
    pids = ImportersLocked();
    if (!pids.empty() && !force) return pids;
    unlink(path_.c_str());  // under the lock: an importer waiting for it then finds it removed
  }
  close(fd_);
  fd_ = -1;
  return force ? std::vector<int64_t>() : pids;
}

std::vector<int64_t> IpcExportRecord::ImportersLocked() {
  std::vector<int64_t> pids;
  for (int i = 0; i < kMaxImporters; ++i) {
    if (!shm::HeldByOther(fd_, shm::kSlotBytes + i)) continue;
    int64_t pid = 0;
    if (pread(fd_, &pid, sizeof pid, offsetof(RecordFile, importers) + i * sizeof pid) !=
        static_cast<ssize_t>(sizeof pid))
      pid = -1;  // held, pid unreadable: still an importer
    pids.push_back(pid);
  }
  return pids;
}

void IpcExportRecord::Remove() noexcept {
  if (fd_ < 0) return;
  unlink(path_.c_str());
  close(fd_);
  fd_ = -1;
}

IpcExportRecord::~IpcExportRecord() { Remove(); }

IpcImportRecord* IpcImportRecord::Open(const std::string& dir, const IpcDescriptor& d,
                                       int lock_timeout_ms) {
  if (!ValidRecordName(d.record)) Invalid("its record name is malformed");
  std::string path = shm::Join(dir, d.record);
  std::unique_ptr<IpcImportRecord> r(new IpcImportRecord());
  r->record_ = d.record;
  r->timeout_ms_ = lock_timeout_ms;
  r->fd_ = shm::OpenTrusted(path, 0, "ERR_IPC_EXPORT");
  if (r->fd_ < 0)
    throw ShmError("ERR_IPC_EXPORT_GONE",
                   "the exported buffer is gone: process " + std::to_string(d.pid) +
                       " freed it or exited (no record " + path + ")",
                   path);
  shm::MutexGuard lock(r->fd_, path, "opening an exported buffer", lock_timeout_ms);
  struct stat st;
  if (fstat(r->fd_, &st) != 0 || st.st_nlink == 0)
    throw ShmError("ERR_IPC_EXPORT_GONE",
                   "the exported buffer is gone: process " + std::to_string(d.pid) + " freed it",
                   path);
  RecordFile f;
  if (st.st_size != static_cast<off_t>(sizeof f) ||
      pread(r->fd_, &f, sizeof f, 0) != static_cast<ssize_t>(sizeof f) ||
      std::memcmp(f.magic, kMagic, sizeof kMagic) != 0 || f.version != kVersion ||
      Sum(f) != f.checksum)
    Invalid("its record " + path + " is damaged or not an IPC record");
  if (f.pid != d.pid || std::memcmp(f.token, d.token.data(), 16) != 0 ||
      std::memcmp(f.handle, d.handle.data(), 64) != 0 || f.offset != d.offset ||
      f.bytes != d.bytes || std::string(f.device, strnlen(f.device, sizeof f.device)) != d.device)
    Invalid("it does not match the export it names (forged, altered, or from an older export)");
  if (!HolderAlive(r->fd_)) {
    unlink(path.c_str());
    throw ShmError("ERR_IPC_EXPORT_GONE",
                   "the exported buffer is gone: process " + std::to_string(d.pid) +
                       ", which exported it, has exited",
                   path);
  }
  if (d.pid == getpid())
    throw ShmError("ERR_IPC_SAME_PROCESS",
                   "this process exported the buffer: CUDA cannot open an IPC handle in the "
                   "process that made it; use the DeviceBuffer itself (worker threads share it "
                   "by address too)",
                   path);
  for (int i = 0; i < IpcExportRecord::kMaxImporters; ++i) {
    if (shm::TryLock(r->fd_, shm::kSlotBytes + i) != 0) continue;
    int64_t pid = getpid();
    if (pwrite(r->fd_, &pid, sizeof pid, offsetof(RecordFile, importers) + i * sizeof pid) !=
        static_cast<ssize_t>(sizeof pid)) {
      shm::Unlock(r->fd_, shm::kSlotBytes + i);
      shm::ThrowErrno("ERR_IPC_EXPORT", "could not write the IPC record", path, errno);
    }
    r->slot_ = i;
    return r.release();
  }
  throw ShmError("ERR_IPC_TOO_MANY_IMPORTERS",
                 "the exported buffer is already open in " +
                     std::to_string(IpcExportRecord::kMaxImporters) + " processes",
                 path);
}

void IpcImportRecord::Close() noexcept {
  if (fd_ < 0) return;
  // Bounded: if the lock is not had, the slot's pid stays written, but the slot lock drops with
  // the descriptor, and a slot counts only while its lock is held.
  if (slot_ >= 0 && shm::LockWithin(fd_, shm::kMutexByte, timeout_ms_) == 0) {
    int64_t zero = 0;
    (void)!pwrite(fd_, &zero, sizeof zero, offsetof(RecordFile, importers) + slot_ * sizeof zero);
    shm::Unlock(fd_, shm::kMutexByte);
  }
  slot_ = -1;
  close(fd_);  // drops the slot lock
  fd_ = -1;
}

IpcImportRecord::~IpcImportRecord() { Close(); }

}  // namespace cm::core
