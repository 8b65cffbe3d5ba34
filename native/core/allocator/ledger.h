// The group ledger: one memory budget shared by every process that joins the same group on the
// same device. It is a small file in shared memory (a tmpfs such as /dev/shm) holding the budget
// and one slot per member: its pid, the pool bytes it has charged, and the bytes its buffers use.
// Charges are made under the file's lock and only while the sum stays within the budget.
//
// Crash safety: a member holds an open-file-description lock on its slot (core/base/shm.h); when it
// dies, however it dies, the kernel drops the lock, and the next process to touch the ledger (a
// charge, a join, groupStats) finds the slot unheld and clears it, so its charge returns at once.
//
// Trust: the file is made by this user with mode 0600 and opened without following links, then
// checked for owner, type, mode and size (shm::OpenTrusted); another user's file is refused. The
// file is never mapped: it is read and written with pread/pwrite under its lock, so a file that
// shrinks under a member is a damaged ledger (ERR_GROUP_LEDGER_CORRUPT) and never a SIGBUS. Nothing
// is used that does not check out: a foreign file (wrong magic), another version, a damaged header
// (checksum) or slot, a wrong size, or a sum above the budget (added with overflow checks, from one
// read of the file) is reported, not used. Every wait for the lock is bounded
// (ERR_SHM_LOCK_TIMEOUT).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/allocator/elastic.h"
#include "core/base/shm.h"

namespace cm::core {

// What a member asks of its group beyond a share of the budget (elastic sharing,
// core/allocator/elastic.h): a guaranteed request, a limit of its own, and how long an allocation
// past what it may take waits for room before it is refused.
struct MemberTerms {
  uint64_t request = 0;       // bytes it can always have (reserved from the moment it joins)
  uint64_t member_limit = 0;  // the most it may hold (0: the budget)
  int64_t wait_ms = 0;        // 0: refused at once, as a hard cap
};

struct GroupMember {
  int64_t pid = 0;
  uint64_t pool_bytes = 0, bytes_in_use = 0, peak_pool_bytes = 0, limit = 0;
  uint64_t joined_unix_ms = 0;
  uint64_t request = 0, member_limit = 0;
  uint64_t waiting_bytes = 0;     // an allocation waiting for room (0: none)
  uint64_t waiting_since_ms = 0;  // when it began to wait (unix ms)
  bool self = false;              // this ledger handle's own slot
};

struct GroupSnapshot {
  std::string path, name, device;
  uint64_t budget = 0;
  std::string budget_source;  // how the budget was set ("limit 8.00 GiB", "fraction 0.5 of ...")
  uint64_t charged = 0;       // sum of the members' pool bytes
  uint64_t reserved = 0;      // the members' requests, summed
  uint64_t reaped = 0;        // slots of dead members cleared by this call
  // Waits, since the group was made: how many began, how many ended with room, and how long
  // they waited in all (ms).
  uint64_t waits = 0, waits_granted = 0, wait_ms_total = 0;
  std::vector<GroupMember> members;
};

// What a group needs back from the members that hold cache (freed blocks their pools keep
// charged): kBudget, the charge above a budget lowered while the group runs, which refuses every
// new allocation until it falls under it; kRequest, other members waiting for room within their
// own requests, which only what the rest borrowed can give them. kNone otherwise, waiters beyond
// their requests included: they wait for what others free, in arrival order.
struct GroupPressure {
  enum Reason { kNone, kBudget, kRequest };
  Reason reason = kNone;
  uint64_t bytes = 0;         // the charge above the budget, or what those members wait for
  std::vector<int64_t> pids;  // kRequest: the members waiting within their requests, oldest first
  // Whether the member that looks holds more than its own request: what it frees of that is what
  // the waiters within their requests wait for (its cache up to its request is its own).
  bool self_borrows = false;
};
// The pressure on `g`, as seen by its member marked self (who is left out of the waiters).
GroupPressure PressureOn(const GroupSnapshot& g);

// Why a charge was refused: the group's state at that moment.
struct GroupRefusal : RefusalReasons {
  Reason reason = kBudget;
  uint64_t requested = 0;
  uint64_t waited_ms = 0;
  GroupSnapshot group;
  std::string Sentence() const;
};

// The charge a member sees when it asks what it may still take (cudaMemGetInfo under `run`): what
// every member holds, and what the others' requests reserve beyond what they hold (its own request
// is its own to take). `self` marks the member in g.members; without one, every request counts.
uint64_t ChargeSeenBy(const GroupSnapshot& g);

class Ledger {
 public:
  static constexpr uint32_t kVersion = 2;
  static constexpr uint32_t kSlots = 128;

  // The file of group `name` on `device` (a GPU uuid, or "simulated") in `dir`.
  static std::string PathFor(const std::string& dir, const std::string& name,
                             const std::string& device);

  // Joins the group, creating its ledger if there is none. budget > 0 sets the budget when the
  // ledger is new or has no live member, and must equal it otherwise (ERR_GROUP_BUDGET_MISMATCH);
  // budget == 0 joins whatever budget the group has (ERR_GROUP_NOT_FOUND if none). `limit` is
  // the member's own limit, for display. Throws ShmError.
  // Waits for the lock at most lock_timeout_ms, then and at every later operation.
  // `terms`: the member's request, own limit and wait; a request that does not fit beside the
  // others' is refused (ERR_GROUP_REQUEST_TOO_LARGE, naming the requests that hold the budget).
  static Ledger* Join(const std::string& dir, const std::string& name, const std::string& device,
                      uint64_t budget, const std::string& budget_source, uint64_t limit,
                      int lock_timeout_ms = shm::kDefaultLockTimeoutMs,
                      const MemberTerms& terms = {});
  // Reads a ledger (clearing dead members' slots). Throws ShmError (ERR_GROUP_NOT_FOUND if absent).
  static GroupSnapshot Read(const std::string& path,
                            int lock_timeout_ms = shm::kDefaultLockTimeoutMs);
  // The size of a ledger file, header and kSlots slots: what Join reserves when it makes one.
  static size_t FileBytes();
  // Changes a live group's budget (ERR_GROUP_NOT_FOUND if absent): raising takes effect at once
  // and wakes waiters; lowering below the charge refuses new charges past it until the charge
  // falls under it. Never below the members' requests summed (ERR_GROUP_BUDGET_BELOW_REQUESTS).
  // Returns the group after the change.
  static GroupSnapshot SetBudget(const std::string& path, uint64_t budget,
                                 const std::string& budget_source,
                                 int lock_timeout_ms = shm::kDefaultLockTimeoutMs);
  // Changes member `pid`'s request: never below what it holds (ERR_GROUP_REQUEST_BELOW_HELD),
  // and only as far as the budget less the others' requests (ERR_GROUP_REQUEST_TOO_LARGE);
  // ERR_GROUP_MEMBER_NOT_FOUND for a pid that is no member.
  static GroupSnapshot SetRequest(const std::string& path, int64_t pid, uint64_t request,
                                  int lock_timeout_ms = shm::kDefaultLockTimeoutMs);

  ~Ledger();  // leaves the group (see Leave)
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Charges `bytes` to this member if elastic sharing's rules allow it now
  // (core/allocator/elastic.h: within the budget and the member's limit, beside the others'
  // requests, behind older waiters unless within its own request). Otherwise returns false and
  // fills *refusal. Never waits. Throws ShmError if the ledger is found damaged.
  bool Charge(uint64_t bytes, GroupRefusal* refusal);
  // As Charge, and where the charge does not fit now but may later (kBudget), waits for room up
  // to the member's wait_ms: in arrival order among waiters, woken within a few milliseconds of
  // the change that makes room, and refused at once (kDeadlock) when it is the newest waiter and
  // every member that holds memory waits too. For a handle no other thread uses meanwhile (the
  // library's allocators); a process whose other threads must free while one waits uses
  // BeginWait / Charge / WaitForChange / EndWait with its own lock released in between.
  bool ChargeWaiting(uint64_t bytes, GroupRefusal* refusal);
  // Marks this member as waiting for `bytes` (its place in the queue is taken now).
  void BeginWait(uint64_t bytes);
  // Ends the wait (granted or not), counting it in the group's figures.
  void EndWait(bool granted, uint64_t waited_ms) noexcept;
  // The ledger's change counter, read without the lock: it moves at every release, leave, budget
  // or request change and wait that begins or ends. Thread-safe.
  uint64_t Generation() const noexcept;
  // Waits until Generation() differs from `seen` or `ms` pass; true if it changed. Thread-safe.
  bool WaitForChange(uint64_t seen, int ms) const noexcept;
  const MemberTerms& terms() const { return terms_; }
  // Gives back a charge. Never throws: if the lock cannot be had in time, the charge is given back
  // at this member's next operation that gets it (or when it leaves).
  void Release(uint64_t bytes) noexcept;
  // Records this member's own limit, for display.
  void SetLimit(uint64_t limit);
  // Publishes the bytes this member's buffers use (for display). At most one 8-byte pwrite into
  // its own slot a millisecond from the calling thread (a syscall costs more than a pooled
  // alloc+free); a change within that millisecond is written by a background thread within a few
  // milliseconds, and before any read of a ledger by this process.
  void PublishInUse(uint64_t bytes) noexcept;
  // Writes a published value still waiting; false if there was none. Thread-safe.
  bool FlushInUse() noexcept;
  // Clears this member's slot, and removes the file if no member is left. Never throws; a lock not
  // had in time leaves the slot to be cleared by the next process that finds it unheld.
  void Leave() noexcept;
  // In a child process after fork: lets go of the parent's membership without touching the file
  // (the slot and its charge stay the parent's) and closes the inherited descriptor, so that the
  // child never keeps the parent's slot held after the parent dies. Never throws.
  void Abandon() noexcept;

  GroupSnapshot Snapshot();
  // Whether this process's publishing thread runs, and how often it has woken (for tests).
  struct PublisherState {
    bool running;
    uint64_t wakeups;
  };
  static PublisherState PublisherStatus();
  uint64_t budget() const;
  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }

  struct Header;
  struct Slot;

 private:
  Ledger() = default;
  // With the mutex held: reads the whole file into header_ and slots_ (ERR_GROUP_LEDGER_CORRUPT
  // if it is not exactly the ledger's size).
  void Load();
  // Checks magic and version of what Load read.
  void CheckFormat();
  [[noreturn]] void Foreign();
  // With the mutex held: Load, check, clear dead members' slots, return the sum charged.
  uint64_t CheckAndReap(uint64_t* reaped);
  GroupSnapshot SnapshotLocked(uint64_t reaped);
  // With the mutex held: CheckAndReap, then the snapshot.
  GroupSnapshot CheckedSnapshot();
  // Join's steps, with the mutex held after CheckAndReap. A group with live members keeps its
  // budget (ERR_GROUP_BUDGET_MISMATCH for another); an empty one takes `budget`; 0 takes any.
  void AdoptBudget(uint64_t budget, const std::string& budget_source);
  // Takes the first free slot for this process and writes it; false when the group is full.
  bool TakeFreeSlot(uint64_t limit);
  void WriteHeader();
  void WriteSlot(uint32_t i);

  std::string path_, name_;
  int fd_ = -1;
  int timeout_ms_ = shm::kDefaultLockTimeoutMs;
  std::unique_ptr<Header> header_;
  std::unique_ptr<Slot[]> slots_;
  int slot_ = -1;
  std::atomic<uint64_t> in_use_{0};  // what PublishInUse was last given
  std::atomic<bool> in_use_dirty_{false};
  std::mutex publish_mutex_;  // one writer of the in-use field at a time
  std::chrono::steady_clock::time_point last_publish_{};
  uint64_t pending_release_ = 0;  // released while the lock could not be had
  // Set once the file was found damaged: it is no longer written, only closed.
  bool broken_ = false;
  MemberTerms terms_;
  // With the mutex held after CheckAndReap: the live members' figures for elastic sharing's
  // rules (core/allocator/elastic.h), and which of them is this handle's (*self).
  std::vector<ElasticMember> Members(size_t* self) const;
  // With the mutex held: moves the change counter on.
  void Bump();
  // With the mutex held: a request of `request` fits beside the other members' (all but slot
  // `except_slot`), or ERR_GROUP_REQUEST_TOO_LARGE naming them.
  void CheckRequestFits(uint64_t request, int except_slot);
  // SetBudget and SetRequest: opens the ledger as a reader, holds its mutex, runs `change` after
  // CheckAndReap, moves the change counter on and returns the group.
  template <typename Change>
  static GroupSnapshot Changed(const std::string& path, int lock_timeout_ms, const char* what,
                               Change change);
};

}  // namespace cm::core
