#include "core/allocator/ledger.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <new>
#include <set>
#include <thread>

#include "core/allocator/pool.h"  // FormatBytes

namespace cm::core {

namespace {
constexpr char kMagic[16] = "cuda-memory/grp";
uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  uint64_t s;
  return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}
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
  uint64_t next_ticket;  // the next waiter's place in the queue
  uint64_t waits, waits_granted, wait_ms_total;
  uint64_t charge_ceiling;  // after a budget was lowered: the most the charge may still sum to
  uint64_t checksum;        // of everything above
  uint64_t generation;      // moved on at every change a waiter may wait for; read without the lock
};

struct Ledger::Slot {
  uint64_t state;  // 0 free, kMember live
  int64_t pid;
  uint64_t pool_bytes;
  uint64_t peak_pool_bytes;
  uint64_t limit;
  uint64_t joined_unix_ms;
  uint64_t request, member_limit;
  uint64_t waiting_bytes, waiting_ticket, waiting_since_ms;
  uint64_t bytes_in_use;  // written by its member without the lock (atomically)
  uint64_t checksum;      // of every field before bytes_in_use
};

namespace {

constexpr size_t kFileSize = sizeof(Ledger::Header) + Ledger::kSlots * sizeof(Ledger::Slot);
// The layout other tools and tests write by hand (native/core/test/allocator/ledger_shm_test.cc).
static_assert(sizeof(Ledger::Header) == 336 && sizeof(Ledger::Slot) == 104, "ledger layout");

uint64_t HeaderSum(const Ledger::Header& h) {
  return shm::Fnv1a(&h, offsetof(Ledger::Header, checksum));
}
uint64_t SlotSum(const Ledger::Slot& s) {
  return shm::Fnv1a(&s, offsetof(Ledger::Slot, bytes_in_use));
}

[[noreturn]] void Corrupt(const std::string& path, const std::string& what) {
  throw ShmError("ERR_GROUP_LEDGER_CORRUPT",
                 "the group ledger " + path + " is damaged (" + what +
                     "); it was not trusted. Remove it once no process uses it.",
                 path);
}

off_t SlotOffset(uint32_t i) {
  return static_cast<off_t>(sizeof(Ledger::Header) + i * sizeof(Ledger::Slot));
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

namespace {

// The members of this process, and the thread that writes the in-use figures their calling
// threads left waiting (PublishInUse writes at most once a millisecond itself). The thread sleeps
// on a condition variable until a figure waits, and ends when the last member leaves; the next
// member to join starts another. Process-wide and never destroyed: members come and go from any
// environment.
struct Publisher {
  std::mutex mutex;
  std::condition_variable wake;
  std::set<Ledger*> members;
  bool running = false;
  bool waiting = false;  // a member has a figure to write
  uint64_t wakeups = 0;  // times the thread woke: what a test reads
};
Publisher& ThePublisher() {
  static Publisher* p = [] {
    auto* made = new Publisher();
    // A child forked while the thread held the lock would wait for ever: the lock is taken
    // around fork, and the child starts a thread of its own when it needs one.
    pthread_atfork([] { ThePublisher().mutex.lock(); }, [] { ThePublisher().mutex.unlock(); },
                   [] {
                     Publisher& q = ThePublisher();
                     // The parent's thread may have been waiting on it: in the child, with no such
                     // thread, a signal would wait for it for ever. A fresh one, as if just made.
                     new (&q.wake) std::condition_variable();
                     q.running = false;
                     q.waiting = false;
                     q.members.clear();
                     q.mutex.unlock();
                   });
    return made;
  }();
  return *p;
}

void PublishLoop() {
  Publisher& p = ThePublisher();
  std::unique_lock<std::mutex> lock(p.mutex);
  for (;;) {
    p.wake.wait(lock, [&] { return p.waiting || p.members.empty(); });
    ++p.wakeups;
    if (p.members.empty()) break;
    // A figure left waiting: let the calling thread's millisecond pass, so that a burst of
    // changes costs one write, then write the latest.
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    lock.lock();
    p.waiting = false;
    for (Ledger* l : p.members) l->FlushInUse();
  }
  p.running = false;
}

// Tells the thread that a figure waits.
void WakePublisher() {
  Publisher& p = ThePublisher();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.waiting = true;
  }
  p.wake.notify_one();
}

// Writes every waiting figure of this process now (before a read of a ledger).
void FlushAll() {
  Publisher& p = ThePublisher();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (Ledger* l : p.members) l->FlushInUse();
}

}  // namespace

GroupPressure PressureOn(const GroupSnapshot& g) {
  GroupPressure p;
  for (const GroupMember& m : g.members)
    if (m.self) p.self_borrows = m.pool_bytes > m.request;
  if (g.charged > g.budget) {
    p.reason = GroupPressure::kBudget;
    p.bytes = g.charged - g.budget;
    return p;
  }
  std::vector<const GroupMember*> within;
  for (const GroupMember& m : g.members)
    if (!m.self && m.waiting_bytes && m.pool_bytes <= m.request &&
        m.waiting_bytes <= m.request - m.pool_bytes)
      within.push_back(&m);
  if (within.empty()) return p;
  std::stable_sort(within.begin(), within.end(), [](const GroupMember* a, const GroupMember* b) {
    return a->waiting_since_ms < b->waiting_since_ms;
  });
  p.reason = GroupPressure::kRequest;
  for (const GroupMember* m : within) {
    p.bytes = SaturatingAdd(p.bytes, m->waiting_bytes);
    p.pids.push_back(m->pid);
  }
  return p;
}

std::string GroupRefusal::Sentence() const {
  std::string m = "The group '" + group.name + "' has a budget of " + FormatBytes(group.budget) +
                  " (" + group.budget_source + ") and its " + std::to_string(group.members.size()) +
                  " member" + (group.members.size() == 1 ? "" : "s") + " hold " +
                  FormatBytes(group.charged);
  if (group.reserved) m += " and request " + FormatBytes(group.reserved);
  m += ", so a region of " + FormatBytes(requested) +
       " (the smallest this allocation could use) could not be charged";
  switch (reason) {
    case kBudget:
      break;
    case kMemberLimit:
      m += ": it would pass this member's own limit";
      break;
    case kNeverFits:
      m += ": this member could never hold that much beside the others' requests";
      break;
    case kDeadlock:
      m += ": it waited, and every member that holds memory is waiting too (the newest waiter is "
           "refused so that the others can go on)";
      break;
    case kTimeout:
      m += ": it waited " + std::to_string(waited_ms) + " ms for room";
      break;
  }
  m += ". Members:";
  for (size_t i = 0; i < group.members.size(); ++i) {
    const GroupMember& g = group.members[i];
    m += (i ? "; pid " : " pid ") + std::to_string(g.pid) + (g.self ? " (this allocator)" : "") +
         " pool " + FormatBytes(g.pool_bytes) + ", in use " + FormatBytes(g.bytes_in_use);
    if (g.request) m += ", request " + FormatBytes(g.request);
    if (g.member_limit) m += ", limit " + FormatBytes(g.member_limit);
    if (g.waiting_bytes) m += ", waiting for " + FormatBytes(g.waiting_bytes);
  }
  return m + ".";
}

std::string Ledger::PathFor(const std::string& dir, const std::string& name,
                            const std::string& device) {
  return shm::Join(dir, "cuda-memory-group." + name + "." + device);
}

namespace {

// The steps of Ledger::Join that need nothing of a Ledger's own.

void CheckGroupName(const std::string& name) {
  if (!shm::ValidName(name))
    throw ShmError("ERR_GROUP_NAME", "group name '" + name +
                                         "' must be 1 to 64 of A-Z a-z 0-9 . _ - (no leading dot)");
}

Ledger::Header NewHeader(const std::string& name, const std::string& device, uint64_t budget,
                         const std::string& budget_source) {
  Ledger::Header h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = Ledger::kVersion;
  h.slot_count = Ledger::kSlots;
  h.budget = budget;
  h.created_unix_ms = shm::NowUnixMs();
  shm::CopyText(h.name, sizeof h.name, name);
  shm::CopyText(h.device, sizeof h.device, device);
  shm::CopyText(h.budget_source, sizeof h.budget_source, budget_source);
  h.checksum = HeaderSum(h);
  return h;
}

// The group's file, opened, or made when there is none and `budget` can make it; -1 when another
// process made it first (the caller opens theirs on its next attempt).
int OpenOrCreate(const std::string& path, const std::string& name, const std::string& device,
                 uint64_t budget, const std::string& budget_source) {
  int fd = shm::OpenTrusted(path, 0, "ERR_GROUP_LEDGER");
  if (fd >= 0) return fd;
  if (budget == 0)
    throw ShmError("ERR_GROUP_NOT_FOUND",
                   "there is no group '" + name + "' on device " + device +
                       " to join; give shared.memoryLimit or shared.memoryFraction to create it",
                   path);
  Ledger::Header h = NewHeader(name, device, budget, budget_source);
  // Made with its mutex held, so that the file is never seen without its creator joining.
  return shm::CreateComplete(path, kFileSize, &h, sizeof h, 0600, shm::kMutexByte);
}

// Removed by its last member while this process waited for it.
bool Unlinked(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && st.st_nlink == 0;
}

void CheckSameGroup(const std::string& path, const Ledger::Header& h, const std::string& name,
                    const std::string& device) {
  if (shm::Text(h.name, sizeof h.name) != name || shm::Text(h.device, sizeof h.device) != device)
    Corrupt(path, "it names another group or device");
}

int LiveMembers(const Ledger::Slot* slots) {
  int live = 0;
  for (uint32_t i = 0; i < Ledger::kSlots; ++i) live += slots[i].state == kMember;
  return live;
}

// The member's figures are written by the process's publishing thread, started if none runs.
void AddToPublisher(Ledger* member) {
  Publisher& p = ThePublisher();
  std::lock_guard<std::mutex> members(p.mutex);
  p.members.insert(member);
  if (!p.running) {
    std::thread(PublishLoop).detach();
    p.running = true;
  }
}

}  // namespace

Ledger* Ledger::Join(const std::string& dir, const std::string& name, const std::string& device,
                     uint64_t budget, const std::string& budget_source, uint64_t limit,
                     int lock_timeout_ms, const MemberTerms& terms) {
  CheckGroupName(name);
  if (terms.member_limit && terms.request > terms.member_limit)
    throw ShmError("ERR_GROUP_TERMS", "a member's request (" + FormatBytes(terms.request) +
                                          ") is above its own limit (" +
                                          FormatBytes(terms.member_limit) + ")");
  std::string path = PathFor(dir, name, device);
  std::string waiting = "joining group '" + name + "'";
  for (int attempt = 0; attempt < 100; ++attempt) {
    Fd fd;
    fd.fd = OpenOrCreate(path, name, device, budget, budget_source);
    if (fd.fd < 0) continue;                      // another process created it first: open theirs
    shm::TryLockShared(fd.fd, shm::kOpenerByte);  // nobody write-locks it: cannot fail
    std::unique_ptr<Ledger> l(new Ledger());
    l->path_ = path;
    l->name_ = name;
    l->timeout_ms_ = lock_timeout_ms;
    l->fd_ = fd.release();
    l->terms_ = terms;
    shm::MutexGuard lock(l->fd_, path, waiting.c_str(), lock_timeout_ms);
    if (Unlinked(l->fd_)) continue;  // removed by its last member
    uint64_t reaped = 0;
    l->CheckAndReap(&reaped);
    CheckSameGroup(path, *l->header_, name, device);
    l->AdoptBudget(budget, budget_source);
    l->CheckRequestFits(terms.request, -1);
    if (!l->TakeFreeSlot(limit))
      throw ShmError("ERR_GROUP_FULL",
                     "group '" + name + "' already has " + std::to_string(kSlots) + " members",
                     path);
    AddToPublisher(l.get());
    return l.release();
  }
  throw ShmError("ERR_GROUP_LEDGER",
                 "the group ledger " + path + " kept being removed and recreated; try again", path);
}

void Ledger::AdoptBudget(uint64_t budget, const std::string& budget_source) {
  Header* h = header_.get();
  if (budget == 0 || budget == h->budget) return;
  int live = LiveMembers(slots_.get());
  if (live > 0)
    throw ShmError("ERR_GROUP_BUDGET_MISMATCH",
                   "group '" + name_ + "' already has a budget of " + FormatBytes(h->budget) +
                       " (" + shm::Text(h->budget_source, sizeof h->budget_source) + ") and " +
                       std::to_string(live) + " live member" + (live == 1 ? "" : "s") +
                       "; this process asked for " + FormatBytes(budget) + " (" + budget_source +
                       "). Give the same budget, or none to join the group's budget.",
                   path_);
  h->budget = budget;  // an empty group takes the budget of whoever joins next
  shm::CopyText(h->budget_source, sizeof h->budget_source, budget_source);
  h->checksum = HeaderSum(*h);
  WriteHeader();
}

bool Ledger::TakeFreeSlot(uint64_t limit) {
  // The first free slot whose lock is free too: a member that is leaving right now may still
  // hold the lock of the slot it has just cleared; that slot is skipped, not taken for damage.
  for (uint32_t i = 0; i < kSlots; ++i) {
    if (slots_[i].state != 0 || shm::TryLock(fd_, shm::kSlotBytes + i) != 0) continue;
    Slot& s = slots_[i];
    std::memset(&s, 0, sizeof s);
    s.pid = getpid();
    s.limit = limit;
    s.request = terms_.request;
    s.member_limit = terms_.member_limit;
    s.joined_unix_ms = shm::NowUnixMs();
    s.state = kMember;
    s.checksum = SlotSum(s);
    slot_ = static_cast<int>(i);
    WriteSlot(i);
    shm::Unlock(fd_, shm::kOpenerByte);  // a member now: its slot keeps the file
    return true;
  }
  return false;
}

void Ledger::Load() {
  if (broken_) Corrupt(path_, "it was found damaged before");
  if (!header_) {
    header_.reset(new Header());
    slots_.reset(new Slot[kSlots]);
  }
  // One read of the whole file, which pread cannot fault on however the file changes; its size
  // is checked after the read too, so a file cut or grown meanwhile is caught either way.
  struct stat st;
  if (fstat(fd_, &st) != 0 || st.st_size != static_cast<off_t>(kFileSize)) {
    char magic[sizeof kMagic] = {0};
    if (pread(fd_, magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) &&
        std::memcmp(magic, kMagic, sizeof kMagic) != 0)
      Foreign();  // another kind of file says so first
    broken_ = true;
    Corrupt(path_, "it has " + std::to_string(st.st_size) + " bytes where " +
                       std::to_string(kFileSize) + " were expected");
  }
  std::unique_ptr<char[]> buf(new char[kFileSize]);
  ssize_t got = pread(fd_, buf.get(), kFileSize, 0);
  if (got != static_cast<ssize_t>(kFileSize) || fstat(fd_, &st) != 0 ||
      st.st_size != static_cast<off_t>(kFileSize)) {
    broken_ = true;
    Corrupt(path_, "its size changed while it was read");
  }
  std::memcpy(header_.get(), buf.get(), sizeof(Header));
  std::memcpy(slots_.get(), buf.get() + sizeof(Header), kSlots * sizeof(Slot));
}

void Ledger::Foreign() {
  broken_ = true;
  throw ShmError("ERR_GROUP_LEDGER_FOREIGN",
                 path_ +
                     " is not a cuda-memory group ledger (its first bytes differ); it was left "
                     "untouched. Use another group name, or remove the file if nothing uses it.",
                 path_);
}

void Ledger::CheckFormat() {
  if (std::memcmp(header_->magic, kMagic, sizeof kMagic) != 0) Foreign();
  if (header_->version != kVersion)
    throw ShmError("ERR_GROUP_LEDGER_VERSION",
                   "the group ledger " + path_ + " has format version " +
                       std::to_string(header_->version) + " and this cuda-memory reads version " +
                       std::to_string(kVersion) +
                       "; every member of a group must use the same cuda-memory version",
                   path_);
}

void Ledger::WriteHeader() {
  if (pwrite(fd_, header_.get(), sizeof(Header), 0) != static_cast<ssize_t>(sizeof(Header)))
    shm::ThrowErrno("ERR_GROUP_LEDGER", "could not write", path_, errno);
}

void Ledger::WriteSlot(uint32_t i) {
  if (static_cast<int>(i) == slot_)
    slots_[i].bytes_in_use = in_use_.load(std::memory_order_relaxed);
  if (pwrite(fd_, &slots_[i], sizeof(Slot), SlotOffset(i)) != static_cast<ssize_t>(sizeof(Slot)))
    shm::ThrowErrno("ERR_GROUP_LEDGER", "could not write", path_, errno);
}

uint64_t Ledger::CheckAndReap(uint64_t* reaped) {
  Load();
  CheckFormat();
  broken_ = true;  // until every check below has passed
  if (HeaderSum(*header_) != header_->checksum) Corrupt(path_, "its header checksum is wrong");
  if (header_->slot_count != kSlots) Corrupt(path_, "its slot count is wrong");
  uint64_t sum = 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    Slot& s = slots_[i];
    bool own = static_cast<int>(i) == slot_;
    if (!own) {
      if (s.state == 0) continue;
      if (!shm::HeldByOther(fd_, shm::kSlotBytes + i)) {
        // Its member is gone (a live member always holds its slot): the charge comes back.
        std::memset(&s, 0, sizeof s);
        WriteSlot(i);
        ++*reaped;
        continue;
      }
    }
    if (s.state != kMember || SlotSum(s) != s.checksum)
      Corrupt(path_, "slot " + std::to_string(i) + " fails its checksum");
    if (__builtin_add_overflow(sum, s.pool_bytes, &sum))
      Corrupt(path_, "its members' charges overflow");
  }
  if (sum > std::max(header_->budget, header_->charge_ceiling))
    Corrupt(path_, "its members hold " + FormatBytes(sum) + ", more than the budget");
  broken_ = false;
  if (*reaped) Bump();                   // a dead member's share came back: waiters look again
  if (slot_ >= 0 && pending_release_) {  // releases that could not get the lock before
    Slot& own = slots_[slot_];
    uint64_t back = std::min(pending_release_, own.pool_bytes);
    own.pool_bytes -= back;
    own.checksum = SlotSum(own);
    sum -= back;
    pending_release_ = 0;
    WriteSlot(static_cast<uint32_t>(slot_));
    if (back) Bump();
  }
  return sum;
}

GroupSnapshot Ledger::SnapshotLocked(uint64_t reaped) {
  GroupSnapshot g;
  g.path = path_;
  g.name = shm::Text(header_->name, sizeof header_->name);
  g.device = shm::Text(header_->device, sizeof header_->device);
  g.budget = header_->budget;
  g.budget_source = shm::Text(header_->budget_source, sizeof header_->budget_source);
  g.reaped = reaped;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const Slot& s = slots_[i];
    if (s.state != kMember) continue;
    GroupMember m;
    m.pid = s.pid;
    m.pool_bytes = s.pool_bytes;
    m.peak_pool_bytes = s.peak_pool_bytes;
    m.bytes_in_use =
        static_cast<int>(i) == slot_ ? in_use_.load(std::memory_order_relaxed) : s.bytes_in_use;
    m.limit = s.limit;
    m.joined_unix_ms = s.joined_unix_ms;
    m.request = s.request;
    m.member_limit = s.member_limit;
    m.waiting_bytes = s.waiting_bytes;
    m.waiting_since_ms = s.waiting_bytes ? s.waiting_since_ms : 0;
    m.self = static_cast<int>(i) == slot_;
    g.charged += s.pool_bytes;  // no overflow: CheckAndReap summed the same values
    g.reserved = SaturatingAdd(g.reserved, s.request);
    g.members.push_back(m);
  }
  g.waits = header_->waits;
  g.waits_granted = header_->waits_granted;
  g.wait_ms_total = header_->wait_ms_total;
  return g;
}

uint64_t ChargeSeenBy(const GroupSnapshot& g) {
  uint64_t seen = 0;
  for (const GroupMember& m : g.members) {
    const uint64_t c = m.self ? m.pool_bytes : std::max(m.pool_bytes, m.request);
    if (__builtin_add_overflow(seen, c, &seen)) return UINT64_MAX;
  }
  return seen;
}

std::vector<ElasticMember> Ledger::Members(size_t* self) const {
  std::vector<ElasticMember> out;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const Slot& s = slots_[i];
    if (s.state != kMember) continue;
    if (static_cast<int>(i) == slot_) *self = out.size();
    out.push_back({s.pool_bytes, s.request, s.member_limit, s.waiting_bytes, s.waiting_ticket});
  }
  return out;
}

bool Ledger::Charge(uint64_t bytes, GroupRefusal* refusal) {
  shm::MutexGuard lock(fd_, path_, "charging a region to the group", timeout_ms_);
  uint64_t reaped = 0;
  uint64_t sum = CheckAndReap(&reaped);  // the budget and the figures come from one read
  size_t self = 0;
  std::vector<ElasticMember> members = Members(&self);
  ElasticVerdict v = DecideCharge(members, self, bytes, header_->budget);
  if (v.ok) {
    Slot& s = slots_[slot_];
    s.pool_bytes += bytes;  // within the budget: no overflow
    if (s.pool_bytes > s.peak_pool_bytes) s.peak_pool_bytes = s.pool_bytes;
    s.checksum = SlotSum(s);
    WriteSlot(static_cast<uint32_t>(slot_));
    if (header_->charge_ceiling && sum + bytes <= header_->budget) {
      header_->charge_ceiling = 0;  // back under a lowered budget
      header_->checksum = HeaderSum(*header_);
      WriteHeader();
    }
    return true;
  }
  if (v.reason == GroupRefusal::kBudget)
    v.reason = WaitVerdict(members, self, bytes, header_->budget, members[self].waiting != 0);
  if (refusal) {
    refusal->reason = v.reason;
    refusal->requested = bytes;
    refusal->group = SnapshotLocked(reaped);
  }
  return false;
}

bool Ledger::ChargeWaiting(uint64_t bytes, GroupRefusal* refusal) {
  GroupRefusal local;
  GroupRefusal* r = refusal ? refusal : &local;
  if (Charge(bytes, r)) return true;
  if (terms_.wait_ms <= 0 || r->reason != GroupRefusal::kBudget) return false;
  RoomWaitSteps steps;
  steps.generation = [this] { return Generation(); };
  steps.attempt = [&](RefusalReasons::Reason* why) {
    const bool granted = Charge(bytes, r);
    *why = r->reason;
    return granted;
  };
  steps.pause = [this](uint64_t seen, int ms) { WaitForChange(seen, ms); };
  BeginWait(bytes);
  RoomWaitResult w;
  try {
    w = WaitForRoom(terms_.wait_ms, steps, &r->waited_ms);
  } catch (...) {
    EndWait(false, r->waited_ms);
    throw;
  }
  r->reason = w.reason;
  EndWait(w.granted, w.waited_ms);
  return w.granted;
}

void Ledger::BeginWait(uint64_t bytes) {
  shm::MutexGuard lock(fd_, path_, "waiting for room in the group", timeout_ms_);
  uint64_t reaped = 0;
  CheckAndReap(&reaped);
  Slot& s = slots_[slot_];
  s.waiting_bytes = bytes ? bytes : 1;
  s.waiting_ticket = header_->next_ticket++;
  s.waiting_since_ms = shm::NowUnixMs();
  s.checksum = SlotSum(s);
  ++header_->waits;
  header_->checksum = HeaderSum(*header_);
  WriteHeader();
  WriteSlot(static_cast<uint32_t>(slot_));
  Bump();
}

void Ledger::EndWait(bool granted, uint64_t waited_ms) noexcept {
  if (slot_ < 0 || broken_) return;
  try {
    shm::MutexGuard lock(fd_, path_, "ending a wait for room in the group", timeout_ms_);
    uint64_t reaped = 0;
    CheckAndReap(&reaped);
    Slot& s = slots_[slot_];
    s.waiting_bytes = s.waiting_ticket = s.waiting_since_ms = 0;
    s.checksum = SlotSum(s);
    header_->waits_granted += granted;
    header_->wait_ms_total = SaturatingAdd(header_->wait_ms_total, waited_ms);
    header_->checksum = HeaderSum(*header_);
    WriteHeader();
    WriteSlot(static_cast<uint32_t>(slot_));
    Bump();
  } catch (...) {
    // Not had in time: the slot says it waits until the member's next wait or its leaving; the
    // others' verdicts count it as a waiter meanwhile, which only holds younger borrowers back.
  }
}

void Ledger::Bump() {
  ++header_->generation;
  (void)!pwrite(fd_, &header_->generation, sizeof header_->generation,
                offsetof(Header, generation));
}

uint64_t Ledger::Generation() const noexcept {
  uint64_t g = 0;
  if (pread(fd_, &g, sizeof g, offsetof(Header, generation)) != static_cast<ssize_t>(sizeof g))
    return UINT64_MAX;  // gone or closed: a change, so that the waiter looks under the lock
  return g;
}

bool Ledger::WaitForChange(uint64_t seen, int ms) const noexcept {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    if (Generation() != seen) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Ledger::CheckRequestFits(uint64_t request, int except_slot) {
  if (request == 0) return;
  uint64_t others = 0;
  std::string whose;
  for (uint32_t i = 0; i < kSlots; ++i) {
    const Slot& s = slots_[i];
    if (s.state != kMember || static_cast<int>(i) == except_slot || !s.request) continue;
    others = SaturatingAdd(others, s.request);
    whose += (whose.empty() ? "pid " : ", pid ") + std::to_string(s.pid) + " requests " +
             FormatBytes(s.request);
  }
  if (SaturatingAdd(others, request) > header_->budget)
    throw ShmError("ERR_GROUP_REQUEST_TOO_LARGE",
                   "group '" + shm::Text(header_->name, sizeof header_->name) +
                       "' has a budget of " + FormatBytes(header_->budget) +
                       (whose.empty() ? std::string()
                                      : ", of which its members request " + FormatBytes(others) +
                                            " (" + whose + ")") +
                       "; a request of " + FormatBytes(request) + " does not fit beside them",
                   path_);
}

// A reader's handle on the ledger at `path`, with its mutex held for `what`; the caller reads or
// changes the file and returns the snapshot.
template <typename Change>
GroupSnapshot Ledger::Changed(const std::string& path, int lock_timeout_ms, const char* what,
                              Change change) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::unique_ptr<Ledger> l(new Ledger());
    l->path_ = path;
    l->timeout_ms_ = lock_timeout_ms;
    l->fd_ = shm::OpenTrusted(path, 0, "ERR_GROUP_LEDGER");
    if (l->fd_ < 0) throw ShmError("ERR_GROUP_NOT_FOUND", "there is no group ledger " + path, path);
    shm::TryLockShared(l->fd_, shm::kOpenerByte);
    shm::MutexGuard lock(l->fd_, path, what, lock_timeout_ms);
    if (Unlinked(l->fd_)) continue;
    uint64_t reaped = 0;
    uint64_t sum = l->CheckAndReap(&reaped);
    change(*l, sum);
    l->Bump();
    return l->SnapshotLocked(reaped);
  }
  throw ShmError("ERR_GROUP_LEDGER", "the group ledger " + path + " kept changing", path);
}

GroupSnapshot Ledger::SetBudget(const std::string& path, uint64_t budget,
                                const std::string& budget_source, int lock_timeout_ms) {
  return Changed(
      path, lock_timeout_ms, "changing the group's budget", [&](Ledger& l, uint64_t sum) {
        Header* h = l.header_.get();
        uint64_t requests = 0;
        for (uint32_t i = 0; i < kSlots; ++i)
          if (l.slots_[i].state == kMember) requests = SaturatingAdd(requests, l.slots_[i].request);
        if (budget == 0 || budget < requests)
          throw ShmError("ERR_GROUP_BUDGET_BELOW_REQUESTS",
                         "group '" + shm::Text(h->name, sizeof h->name) + "': a budget of " +
                             FormatBytes(budget) + " is below what its members request, " +
                             FormatBytes(requests) + "; lower their requests first",
                         path);
        // Lowered below the charge: what is charged stays (nothing is taken back), and no charge
        // passes the new budget until the sum has fallen under it.
        if (sum > budget) h->charge_ceiling = std::max({h->charge_ceiling, sum, h->budget});
        h->budget = budget;
        shm::CopyText(h->budget_source, sizeof h->budget_source, budget_source);
        h->checksum = HeaderSum(*h);
        l.WriteHeader();
      });
}

GroupSnapshot Ledger::SetRequest(const std::string& path, int64_t pid, uint64_t request,
                                 int lock_timeout_ms) {
  return Changed(path, lock_timeout_ms, "changing a member's request", [&](Ledger& l, uint64_t) {
    int found = -1;
    for (uint32_t i = 0; i < kSlots && found < 0; ++i)
      if (l.slots_[i].state == kMember && l.slots_[i].pid == pid) found = static_cast<int>(i);
    if (found < 0)
      throw ShmError("ERR_GROUP_MEMBER_NOT_FOUND",
                     "pid " + std::to_string(pid) + " is no member of group '" +
                         shm::Text(l.header_->name, sizeof l.header_->name) + "'",
                     path);
    Slot& s = l.slots_[found];
    if (request < s.pool_bytes)
      throw ShmError("ERR_GROUP_REQUEST_BELOW_HELD",
                     "pid " + std::to_string(pid) + " holds " + FormatBytes(s.pool_bytes) +
                         "; its request cannot be lowered below that (to " + FormatBytes(request) +
                         ")",
                     path);
    if (s.member_limit && request > s.member_limit)
      throw ShmError("ERR_GROUP_TERMS",
                     "pid " + std::to_string(pid) + "'s limit is " + FormatBytes(s.member_limit) +
                         ", below a request of " + FormatBytes(request),
                     path);
    l.CheckRequestFits(request, found);
    s.request = request;
    s.checksum = SlotSum(s);
    l.WriteSlot(static_cast<uint32_t>(found));
  });
}

void Ledger::Release(uint64_t bytes) noexcept {
  if (slot_ < 0 || broken_) return;
  pending_release_ += bytes;
  try {
    shm::MutexGuard lock(fd_, path_, "giving a region back to the group", timeout_ms_);
    uint64_t reaped = 0;
    CheckAndReap(&reaped);  // applies pending_release_
  } catch (...) {
    // Not had in time, or the ledger is damaged: the charge goes back at the next operation that
    // gets the lock, or when this member leaves (its slot is then cleared).
  }
}

void Ledger::SetLimit(uint64_t limit) {
  shm::MutexGuard lock(fd_, path_, "recording a member's limit", timeout_ms_);
  if (slot_ < 0) return;
  uint64_t reaped = 0;
  CheckAndReap(&reaped);
  slots_[slot_].limit = limit;
  slots_[slot_].checksum = SlotSum(slots_[slot_]);
  WriteSlot(static_cast<uint32_t>(slot_));
}

void Ledger::PublishInUse(uint64_t bytes) noexcept {
  in_use_.store(bytes, std::memory_order_relaxed);
  if (slot_ < 0 || broken_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_publish_ < std::chrono::milliseconds(1)) {
    // The first figure left waiting wakes the thread; later ones ride on that wake-up.
    if (!in_use_dirty_.exchange(true, std::memory_order_acq_rel)) WakePublisher();
    return;
  }
  last_publish_ = now;
  in_use_dirty_.store(true, std::memory_order_release);
  FlushInUse();
}

bool Ledger::FlushInUse() noexcept {
  if (!in_use_dirty_.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(publish_mutex_);
  if (!in_use_dirty_.exchange(false, std::memory_order_acq_rel) || slot_ < 0 || fd_ < 0)
    return false;
  // pwrite, never a store through a mapping: a file cut short is extended, not a SIGBUS.
  uint64_t v = in_use_.load(std::memory_order_relaxed);
  (void)!pwrite(fd_, &v, sizeof v, SlotOffset(slot_) + offsetof(Slot, bytes_in_use));
  return true;
}

GroupSnapshot Ledger::CheckedSnapshot() {
  uint64_t reaped = 0;
  CheckAndReap(&reaped);
  return SnapshotLocked(reaped);
}

GroupSnapshot Ledger::Snapshot() {
  FlushAll();
  shm::MutexGuard lock(fd_, path_, "reading the group", timeout_ms_);
  return CheckedSnapshot();
}

uint64_t Ledger::budget() const { return header_->budget; }

size_t Ledger::FileBytes() { return kFileSize; }

void Ledger::Leave() noexcept {
  if (fd_ < 0) return;
  {
    // Out of the publisher's list first: it never writes through a closed descriptor.
    Publisher& p = ThePublisher();
    std::lock_guard<std::mutex> lock(p.mutex);
    p.members.erase(this);
    if (p.members.empty()) p.wake.notify_one();  // the thread ends
  }
  if (slot_ >= 0 && !broken_ && shm::LockWithin(fd_, shm::kMutexByte, timeout_ms_) == 0) {
    try {
      Load();
      std::memset(&slots_[slot_], 0, sizeof(Slot));
      in_use_.store(0, std::memory_order_relaxed);
      WriteSlot(static_cast<uint32_t>(slot_));
      Bump();  // its share came back: waiters look again
      // The slot's lock goes before the mutex: a process that joins next finds the slot free in
      // both senses, and never finds it cleared but still held (which would look like damage).
      shm::Unlock(fd_, shm::kSlotBytes + slot_);
      bool anyone = shm::HeldByOther(fd_, shm::kOpenerByte);  // someone about to join or read
      for (uint32_t i = 0; i < kSlots && !anyone; ++i)
        anyone = slots_[i].state != 0 && shm::HeldByOther(fd_, shm::kSlotBytes + i);
      // The last member removes the file; a process waiting to join sees it unlinked and retries.
      if (!anyone) unlink(path_.c_str());
    } catch (...) {
      // Damaged: left as it is; closing drops the slot lock, so others clear the slot.
    }
    shm::Unlock(fd_, shm::kMutexByte);
  }
  slot_ = -1;
  close(fd_);  // drops the slot lock too
  fd_ = -1;
}

void Ledger::Abandon() noexcept {
  // The descriptor shares its open file description (and so the slot's lock) with the parent's:
  // closing it here drops nothing while the parent has it open.
  slot_ = -1;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Ledger::~Ledger() { Leave(); }

Ledger::PublisherState Ledger::PublisherStatus() {
  auto& p = ThePublisher();
  std::lock_guard<std::mutex> lock(p.mutex);
  return {p.running, p.wakeups};
}

GroupSnapshot Ledger::Read(const std::string& path, int lock_timeout_ms) {
  FlushAll();  // this process's own members' latest figures first
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::unique_ptr<Ledger> l(new Ledger());  // a reader: no slot of its own
    l->path_ = path;
    l->timeout_ms_ = lock_timeout_ms;
    l->fd_ = shm::OpenTrusted(path, 0, "ERR_GROUP_LEDGER");
    if (l->fd_ < 0) throw ShmError("ERR_GROUP_NOT_FOUND", "there is no group ledger " + path, path);
    shm::TryLockShared(l->fd_, shm::kOpenerByte);  // held until closed
    shm::MutexGuard lock(l->fd_, path, "reading the group", lock_timeout_ms);
    if (Unlinked(l->fd_)) continue;
    GroupSnapshot g = l->CheckedSnapshot();
    // The last member left while someone was reading or joining: whoever finds the group empty
    // and nobody else about to use it removes the file, as that member would have.
    if (g.members.empty() && !shm::HeldByOther(l->fd_, shm::kOpenerByte)) unlink(path.c_str());
    return g;
  }
  throw ShmError("ERR_GROUP_LEDGER", "the group ledger " + path + " kept changing", path);
}

}  // namespace cm::core
