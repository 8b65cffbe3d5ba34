#include "ledger.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "pool.h"  // FormatBytes

namespace cm::core {

namespace {
constexpr char kMagic[16] = "cuda-memory/grp";
constexpr uint64_t kMember = 0x4d454d4245523031ull;  // "MEMBER01": a live slot
}  // namespace

struct Ledger::Header {
  char magic[16];
  uint32_t version;
  uint32_t slot_count;
  uint64_t budget;
  uint64_t created_unix_ms;
  char name[72];
  char device[72];
  char budget_source[96];
  uint64_t checksum;  // of everything above
};

struct Ledger::Slot {
  uint64_t state;  // 0 free, kMember live
  int64_t pid;
  uint64_t pool_bytes;
  uint64_t peak_pool_bytes;
  uint64_t limit;
  uint64_t joined_unix_ms;
  uint64_t bytes_in_use;  // written by its member without the lock (atomically)
  uint64_t checksum;      // of state, pid, pool_bytes, peak, limit, joined
};

namespace {

constexpr size_t kFileSize = sizeof(Ledger::Header) + Ledger::kSlots * sizeof(Ledger::Slot);

uint64_t HeaderSum(const Ledger::Header& h) {
  return shm::Fnv1a(&h, offsetof(Ledger::Header, checksum));
}
uint64_t SlotSum(const Ledger::Slot& s) {
  return shm::Fnv1a(&s, offsetof(Ledger::Slot, bytes_in_use));
}

void CopyField(char* dst, size_t n, const std::string& s) {
  std::memset(dst, 0, n);
  std::memcpy(dst, s.data(), std::min(n - 1, s.size()));
}

std::string Field(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

// Maps an open ledger and checks what can be checked without the lock held by a writer: the size,
// the magic and the version. The checksum is checked under the lock.
void* MapChecked(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) shm::ThrowErrno("ERR_GROUP_LEDGER", "could not stat", path, errno);
  if (st.st_size >= static_cast<off_t>(sizeof kMagic)) {
    char magic[16] = {0};
    if (pread(fd, magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) &&
        std::memcmp(magic, kMagic, sizeof kMagic) != 0)
      throw ShmError("ERR_GROUP_LEDGER_FOREIGN",
                     path +
                         " is not a cuda-memory group ledger (its first bytes differ); it was "
                         "left untouched. Use another group name, or remove the file if "
                         "nothing uses it.",
                     path);
  }
  if (st.st_size != static_cast<off_t>(kFileSize))
    throw ShmError("ERR_GROUP_LEDGER_CORRUPT",
                   "the group ledger " + path + " has " + std::to_string(st.st_size) +
                       " bytes where " + std::to_string(kFileSize) +
                       " were expected; it was not trusted. Remove it once no process uses it.",
                   path);
  void* map = mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) shm::ThrowErrno("ERR_GROUP_LEDGER", "could not map", path, errno);
  const auto* h = static_cast<const Ledger::Header*>(map);
  if (h->version != Ledger::kVersion) {
    uint32_t v = h->version;
    munmap(map, kFileSize);
    throw ShmError("ERR_GROUP_LEDGER_VERSION",
                   "the group ledger " + path + " has format version " + std::to_string(v) +
                       " and this cuda-memory reads version " + std::to_string(Ledger::kVersion) +
                       "; every member of a group must use the same cuda-memory version",
                   path);
  }
  return map;
}

[[noreturn]] void Corrupt(const std::string& path, const std::string& what) {
  throw ShmError("ERR_GROUP_LEDGER_CORRUPT",
                 "the group ledger " + path + " is damaged (" + what +
                     "); it was not trusted. Remove it once no process uses it.",
                 path);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

}  // namespace

std::string GroupRefusal::Sentence() const {
  std::string m = "The group '" + group.name + "' has a budget of " + FormatBytes(group.budget) +
                  " (" + group.budget_source + ") and its " + std::to_string(group.members.size()) +
                  " member" + (group.members.size() == 1 ? "" : "s") + " hold " +
                  FormatBytes(group.charged) + ", so a region of " + FormatBytes(requested) +
                  " (the smallest this allocation could use) could not be charged. Members:";
  for (size_t i = 0; i < group.members.size(); ++i) {
    const GroupMember& g = group.members[i];
    m += (i ? "; pid " : " pid ") + std::to_string(g.pid) + (g.self ? " (this allocator)" : "") +
         " pool " + FormatBytes(g.pool_bytes) + ", in use " + FormatBytes(g.bytes_in_use);
  }
  return m + ".";
}

std::string Ledger::PathFor(const std::string& dir, const std::string& name,
                            const std::string& device) {
  return shm::Join(dir, "cuda-memory-group." + name + "." + device);
}

Ledger* Ledger::Join(const std::string& dir, const std::string& name, const std::string& device,
                     uint64_t budget, const std::string& budget_source, uint64_t limit) {
  if (!shm::ValidName(name))
    throw ShmError("ERR_GROUP_NAME", "group name '" + name +
                                         "' must be 1 to 64 of A-Z a-z 0-9 . _ - (no leading dot)");
  std::string path = PathFor(dir, name, device);
  for (int attempt = 0; attempt < 100; ++attempt) {
    Fd fd;
    fd.fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd.fd < 0 && errno != ENOENT)
      shm::ThrowErrno("ERR_GROUP_LEDGER", "could not open the group ledger", path, errno);
    if (fd.fd < 0) {
      if (budget == 0)
        throw ShmError("ERR_GROUP_NOT_FOUND",
                       "there is no group '" + name + "' on device " + device +
                           " to join; give shared.limit or shared.fraction to create it",
                       path);
      Header h;
      std::memset(&h, 0, sizeof h);
      std::memcpy(h.magic, kMagic, sizeof kMagic);
      h.version = kVersion;
      h.slot_count = kSlots;
      h.budget = budget;
      h.created_unix_ms = shm::NowUnixMs();
      CopyField(h.name, sizeof h.name, name);
      CopyField(h.device, sizeof h.device, device);
      CopyField(h.budget_source, sizeof h.budget_source, budget_source);
      h.checksum = HeaderSum(h);
      fd.fd = shm::CreateComplete(path, kFileSize, &h, sizeof h);
      if (fd.fd < 0) continue;  // another process created it first: open theirs
    }
    std::unique_ptr<Ledger> l(new Ledger());
    l->path_ = path;
    l->name_ = name;
    l->fd_ = fd.release();
    shm::MutexGuard lock(l->fd_);  // released before `l` closes the descriptor
    struct stat st;
    if (fstat(l->fd_, &st) == 0 && st.st_nlink == 0) continue;  // removed by its last member
    l->Map();
    uint64_t reaped = 0;
    l->CheckAndReap(&reaped);
    Header* h = l->header_;
    if (Field(h->name, sizeof h->name) != name || Field(h->device, sizeof h->device) != device)
      Corrupt(path, "it names another group or device");
    int live = 0, free_slot = -1;
    for (uint32_t i = 0; i < kSlots; ++i) {
      if (l->slots_[i].state == kMember)
        ++live;
      else if (free_slot < 0)
        free_slot = static_cast<int>(i);
    }
    if (budget != 0 && budget != h->budget) {
      if (live > 0)
        throw ShmError("ERR_GROUP_BUDGET_MISMATCH",
                       "group '" + name + "' already has a budget of " + FormatBytes(h->budget) +
                           " (" + Field(h->budget_source, sizeof h->budget_source) + ") and " +
                           std::to_string(live) + " live member" + (live == 1 ? "" : "s") +
                           "; this process asked for " + FormatBytes(budget) + " (" +
                           budget_source +
                           "). Give the same budget, or none to join the group's budget.",
                       path);
      h->budget = budget;  // an empty group takes the budget of whoever joins next
      CopyField(h->budget_source, sizeof h->budget_source, budget_source);
      h->checksum = HeaderSum(*h);
    }
    if (free_slot < 0)
      throw ShmError("ERR_GROUP_FULL",
                     "group '" + name + "' already has " + std::to_string(kSlots) + " members",
                     path);
    if (shm::Lock(l->fd_, shm::kSlotBytes + free_slot, false) != 0)
      Corrupt(path, "a free slot is held by a live process");
    Slot& s = l->slots_[free_slot];
    s.pid = getpid();
    s.pool_bytes = 0;
    s.peak_pool_bytes = 0;
    s.limit = limit;
    s.joined_unix_ms = shm::NowUnixMs();
    __atomic_store_n(&s.bytes_in_use, 0, __ATOMIC_RELAXED);
    s.state = kMember;
    s.checksum = SlotSum(s);
    l->slot_ = free_slot;
    return l.release();
  }
  throw ShmError("ERR_GROUP_LEDGER",
                 "the group ledger " + path + " kept being removed and recreated; try again", path);
}

void Ledger::Map() {
  map_ = MapChecked(fd_, path_);
  header_ = static_cast<Header*>(map_);
  slots_ = reinterpret_cast<Slot*>(static_cast<char*>(map_) + sizeof(Header));
}

bool Ledger::SizeOk() const {
  struct stat st;
  return fstat(fd_, &st) == 0 && st.st_size == static_cast<off_t>(kFileSize);
}

uint64_t Ledger::CheckAndReap(uint64_t* reaped) {
  if (broken_ || !SizeOk()) {
    broken_ = true;
    Corrupt(path_, "its size changed");
  }
  broken_ = true;  // until every check below has passed
  if (HeaderSum(*header_) != header_->checksum) Corrupt(path_, "its header checksum is wrong");
  if (header_->slot_count != kSlots) Corrupt(path_, "its slot count is wrong");
  uint64_t sum = 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    Slot& s = slots_[i];
    if (static_cast<int>(i) == slot_) {
      sum += s.pool_bytes;
      continue;
    }
    if (s.state == 0) continue;
    if (!shm::HeldByOther(fd_, shm::kSlotBytes + i)) {
      // Its member is gone (a live member always holds its slot): the charge comes back.
      std::memset(&s, 0, sizeof s);
      ++*reaped;
      continue;
    }
    if (s.state != kMember || SlotSum(s) != s.checksum)
      Corrupt(path_, "slot " + std::to_string(i) + " fails its checksum");
    sum += s.pool_bytes;
  }
  if (sum > header_->budget)
    Corrupt(path_, "its members hold " + FormatBytes(sum) + ", more than the budget");
  broken_ = false;
  return sum;
}

GroupSnapshot Ledger::SnapshotLocked(uint64_t reaped) {
  GroupSnapshot g;
  g.path = path_;
  g.name = Field(header_->name, sizeof header_->name);
  g.device = Field(header_->device, sizeof header_->device);
  g.budget = header_->budget;
  g.budget_source = Field(header_->budget_source, sizeof header_->budget_source);
  g.reaped = reaped;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const Slot& s = slots_[i];
    if (s.state != kMember) continue;
    GroupMember m;
    m.pid = s.pid;
    m.pool_bytes = s.pool_bytes;
    m.peak_pool_bytes = s.peak_pool_bytes;
    m.bytes_in_use = __atomic_load_n(&s.bytes_in_use, __ATOMIC_RELAXED);
    m.limit = s.limit;
    m.joined_unix_ms = s.joined_unix_ms;
    m.self = static_cast<int>(i) == slot_;
    g.charged += s.pool_bytes;
    g.members.push_back(m);
  }
  return g;
}

bool Ledger::Charge(uint64_t bytes, GroupRefusal* refusal) {
  shm::MutexGuard lock(fd_);
  uint64_t reaped = 0;
  uint64_t sum = CheckAndReap(&reaped);
  if (bytes <= header_->budget - sum) {
    Slot& s = slots_[slot_];
    s.pool_bytes += bytes;
    if (s.pool_bytes > s.peak_pool_bytes) s.peak_pool_bytes = s.pool_bytes;
    s.checksum = SlotSum(s);
    return true;
  }
  if (refusal) {
    refusal->requested = bytes;
    refusal->group = SnapshotLocked(reaped);
  }
  return false;
}

void Ledger::Release(uint64_t bytes) noexcept {
  if (slot_ < 0) return;
  try {
    shm::MutexGuard lock(fd_);
    if (broken_ || !SizeOk()) return;
    Slot& s = slots_[slot_];
    s.pool_bytes -= std::min(bytes, s.pool_bytes);
    s.checksum = SlotSum(s);
  } catch (...) {
    // The lock cannot fail on an open descriptor; if it ever did, the charge stays until Leave.
  }
}

void Ledger::SetLimit(uint64_t limit) {
  shm::MutexGuard lock(fd_);
  if (slot_ < 0 || broken_ || !SizeOk()) return;
  slots_[slot_].limit = limit;
  slots_[slot_].checksum = SlotSum(slots_[slot_]);
}

void Ledger::PublishInUse(uint64_t bytes) noexcept {
  if (slot_ >= 0 && !broken_)
    __atomic_store_n(&slots_[slot_].bytes_in_use, bytes, __ATOMIC_RELAXED);
}

GroupSnapshot Ledger::CheckedSnapshot() {
  uint64_t reaped = 0;
  CheckAndReap(&reaped);
  return SnapshotLocked(reaped);
}

GroupSnapshot Ledger::Snapshot() {
  shm::MutexGuard lock(fd_);
  return CheckedSnapshot();
}

uint64_t Ledger::budget() const { return header_->budget; }

void Ledger::Leave() noexcept {
  if (fd_ < 0) return;
  if (slot_ >= 0 && map_ && !broken_ && shm::Lock(fd_, shm::kMutexByte, true) == 0) {
    if (SizeOk()) {
      std::memset(&slots_[slot_], 0, sizeof(Slot));
      bool anyone = false;
      for (uint32_t i = 0; i < kSlots && !anyone; ++i)
        anyone = slots_[i].state != 0 && shm::HeldByOther(fd_, shm::kSlotBytes + i);
      // The last member removes the file; a process waiting to join sees it unlinked and retries.
      if (!anyone) unlink(path_.c_str());
    }
    shm::Unlock(fd_, shm::kMutexByte);
  }
  slot_ = -1;
  if (map_) munmap(map_, kFileSize);
  map_ = nullptr;
  close(fd_);  // drops the slot lock too
  fd_ = -1;
}

Ledger::~Ledger() { Leave(); }

GroupSnapshot Ledger::Read(const std::string& path) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::unique_ptr<Ledger> l(new Ledger());  // a reader: no slot of its own
    l->path_ = path;
    l->fd_ = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (l->fd_ < 0 && errno == ENOENT)
      throw ShmError("ERR_GROUP_NOT_FOUND", "there is no group ledger " + path, path);
    if (l->fd_ < 0) shm::ThrowErrno("ERR_GROUP_LEDGER", "could not open", path, errno);
    shm::MutexGuard lock(l->fd_);
    struct stat st;
    if (fstat(l->fd_, &st) == 0 && st.st_nlink == 0) continue;
    l->Map();
    return l->CheckedSnapshot();
  }
  throw ShmError("ERR_GROUP_LEDGER", "the group ledger " + path + " kept changing", path);
}

}  // namespace cm::core
