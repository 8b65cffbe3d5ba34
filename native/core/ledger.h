// The group ledger: one memory budget shared by every process that joins the same group on the
// same device. It is a small file in shared memory (a tmpfs such as /dev/shm) holding the budget
// and one slot per member: its pid, the pool bytes it has charged, and the bytes its buffers use.
// Charges are made under the file's lock and only while the sum stays within the budget.
//
// Crash safety: a member holds an open-file-description lock on its slot (shm.h); when it dies,
// however it dies, the kernel drops the lock, and the next process to touch the ledger (a charge,
// a join, groupStats) finds the slot unheld and clears it, so its charge returns at once.
// Nothing is trusted that does not check out: a foreign file (wrong magic), another version, a
// damaged header (checksum) or slot, a wrong size, or a sum above the budget is reported, not
// used. The size is checked under the lock before every use of the mapping; a process that
// truncates the file without taking the lock could still fault a member between two checks, so
// the file is created 0600 and only processes of the same user can open it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shm.h"

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
  static Ledger* Join(const std::string& dir, const std::string& name, const std::string& device,
                      uint64_t budget, const std::string& budget_source, uint64_t limit);
  // Reads a ledger (clearing dead members' slots). Throws ShmError (ERR_GROUP_NOT_FOUND if absent).
  static GroupSnapshot Read(const std::string& path);

  ~Ledger();  // leaves the group (see Leave)
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Charges `bytes` to this member if the group stays within its budget. Otherwise returns false
  // and fills *refusal. Throws ShmError if the ledger is found damaged.
  bool Charge(uint64_t bytes, GroupRefusal* refusal);
  // Gives back a charge. Never throws.
  void Release(uint64_t bytes) noexcept;
  // Records this member's own limit, for display.
  void SetLimit(uint64_t limit);
  // Publishes the bytes this member's buffers use (for display; no lock, one relaxed store).
  void PublishInUse(uint64_t bytes) noexcept;
  // Clears this member's slot, and removes the file if no member is left. Never throws.
  void Leave() noexcept;

  GroupSnapshot Snapshot();
  uint64_t budget() const;
  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }

  struct Header;
  struct Slot;

 private:
  Ledger() = default;
  // Maps the open file (checking size, magic and version).
  void Map();
  // With the mutex held: checks the file, clears dead members' slots, returns the sum charged.
  uint64_t CheckAndReap(uint64_t* reaped);
  GroupSnapshot SnapshotLocked(uint64_t reaped);
  // With the mutex held: CheckAndReap, then the snapshot.
  GroupSnapshot CheckedSnapshot();

  std::string path_, name_;
  int fd_ = -1;
  void* map_ = nullptr;
  Header* header_ = nullptr;
  Slot* slots_ = nullptr;
  int slot_ = -1;
  // Set once the file was found damaged: the mapping is no longer touched (a file truncated under
  // a mapping faults on access), only unmapped and closed.
  bool broken_ = false;
  bool SizeOk() const;
};

}  // namespace cm::core
