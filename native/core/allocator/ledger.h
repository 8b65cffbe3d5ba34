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

#include "core/base/shm.h"

namespace cm::core {

struct GroupMember {
  int64_t pid = 0;
  uint64_t pool_bytes = 0, bytes_in_use = 0, peak_pool_bytes = 0, limit = 0;
  uint64_t joined_unix_ms = 0;
  bool self = false;  // this ledger handle's own slot
};

struct GroupSnapshot {
  std::string path, name, device;
  uint64_t budget = 0;
  std::string budget_source;  // how the budget was set ("limit 8.00 GiB", "fraction 0.5 of ...")
  uint64_t charged = 0;       // sum of the members' pool bytes
  uint64_t reaped = 0;        // slots of dead members cleared by this call
  std::vector<GroupMember> members;
};

// Why a charge was refused: the group's state at that moment.
struct GroupRefusal {
  uint64_t requested = 0;
  GroupSnapshot group;
  std::string Sentence() const;
};

class Ledger {
 public:
  static constexpr uint32_t kVersion = 1;
  static constexpr uint32_t kSlots = 128;

  // The file of group `name` on `device` (a GPU uuid, or "simulated") in `dir`.
  static std::string PathFor(const std::string& dir, const std::string& name,
                             const std::string& device);

  // Joins the group, creating its ledger if there is none. budget > 0 sets the budget when the
  // ledger is new or has no live member, and must equal it otherwise (ERR_GROUP_BUDGET_MISMATCH);
  // budget == 0 joins whatever budget the group has (ERR_GROUP_NOT_FOUND if none). `limit` is
  // the member's own limit, for display. Throws ShmError.
  // Waits for the lock at most lock_timeout_ms, then and at every later operation.
  static Ledger* Join(const std::string& dir, const std::string& name, const std::string& device,
                      uint64_t budget, const std::string& budget_source, uint64_t limit,
                      int lock_timeout_ms = shm::kDefaultLockTimeoutMs);
  // Reads a ledger (clearing dead members' slots). Throws ShmError (ERR_GROUP_NOT_FOUND if absent).
  static GroupSnapshot Read(const std::string& path,
                            int lock_timeout_ms = shm::kDefaultLockTimeoutMs);
  // The size of a ledger file, header and kSlots slots: what Join reserves when it makes one.
  static size_t FileBytes();

  ~Ledger();  // leaves the group (see Leave)
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Charges `bytes` to this member if the group stays within its budget. Otherwise returns false
  // and fills *refusal. Throws ShmError if the ledger is found damaged.
  bool Charge(uint64_t bytes, GroupRefusal* refusal);
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
};

}  // namespace cm::core
