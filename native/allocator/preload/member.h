// This process's membership of a group, for the interposer: the group named by CUDA_MEMORY_GROUP,
// joined at the first allocation it charges (so a process that never allocates never appears, and
// one loaded before CUDA is initialised waits for nothing), charged in grants (core/allocator/
// grants.h) so that an allocation usually costs no ledger operation.
//
// The host program is never harmed: nothing here throws, every wait is the ledger's bounded one,
// and a ledger that cannot be used (missing with no budget to create it, another budget, full,
// damaged, foreign, another user's, its lock not had in time) costs one line on stderr and the
// process goes on uncharged ("fails open"): a budget that cannot be kept must not stop a training
// run. A lock not had in time passes that allocation uncharged, and the ones after it for ten
// times the lock timeout (at least a second), then the ledger is tried again; anything else
// detaches the process from the group for the rest of its life. Refusals, one line on stderr the
// first time and then at most one every ten seconds, return the API's own out-of-memory error.
//
// fork: the child lets go of the parent's membership without touching it (the parent's slot and
// charge stay the parent's) and, if it allocates, joins as a new member of its own. CUDA itself
// does not let a child use the parent's context, so the parent's allocations are not the child's.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/allocator/grants.h"
#include "core/allocator/ledger.h"

namespace cm::preload {

// One line on stderr, "cuda-memory preload (pid N): <text>", written with one write(2).
void Say(const std::string& text) noexcept;

class Member {
 public:
  // The process's member (never destroyed: threads of the host program may allocate during exit).
  static Member& Get();

  enum class Verdict { kUncharged, kCharged, kRefused };
  // Charges `bytes` for an allocation through `api` on the group's device (`device` is its key,
  // used when joining). kUncharged: no group, or the group cannot be used; go on uncharged.
  // The addon's count of its own members of a ledger, by file name (Ledger::MembersNamed).
  using LibraryMembers = int (*)(const char* file);
  // library: set when the cuda-memory addon made the call; it goes on uncharged when the addon
  // holds a member of this group (one of its allocators, which has charged the region itself).
  Verdict Take(uint64_t bytes, const char* api, const std::string& device,
               LibraryMembers library = nullptr) noexcept;
  // What cuMemGetInfo tells the process about the group's device (`device`, its key): *info holds
  // the device's figures and becomes the group's view of them (core::GroupMemInfo), from this
  // member's ledger, or before it has joined from the group's ledger as it stands (the budget from
  // CUDA_MEMORY_GROUP_BUDGET where there is none yet, or no member is left to keep its own).
  // False, *info untouched, where the group does not apply: none set, or one this process cannot
  // use or could not join (another budget, no slot left). Behind a ledger lock not had in time,
  // the figures last read, for a while (its own back-off: allocations still try the ledger).
  bool MemInfo(const std::string& device, core::MemInfo* info) noexcept;
  // Gives back a charged allocation's bytes.
  void Give(uint64_t bytes) noexcept;
  // Leaves the group (at exit); later allocations pass uncharged.
  void Leave() noexcept;
  // CUDA_MEMORY_GROUP is set.
  bool enabled() const { return !group_.empty(); }

  // Around fork: held in the parent, so that the child gets a consistent state.
  void BeforeFork() { mutex_.lock(); }
  void AfterForkParent() { mutex_.unlock(); }
  void AfterForkChild() noexcept;

 private:
  Member();
  bool JoinLocked(const std::string& device) noexcept;
  void RefusedLocked(uint64_t bytes, const char* api, const core::GroupRefusal& refusal) noexcept;

  std::mutex mutex_;
  std::string group_, budget_source_, dir_;
  uint64_t budget_ = 0;
  int lock_timeout_ms_ = core::shm::kDefaultLockTimeoutMs;
  std::string problem_;  // a setting that could not be read: said once, then uncharged
  std::unique_ptr<core::Ledger> ledger_;
  std::unique_ptr<core::GrantedCharge> grants_;
  bool detached_ = false;  // the group cannot be used: uncharged from now on
  uint64_t refusals_ = 0, refusals_said_ = 0;
  int64_t last_refusal_line_ms_ = 0;
  uint64_t lock_timeouts_ = 0;
  // After a lock not had in time, the ledger is left alone until then (unix ms): allocations go
  // on uncharged at once instead of each waiting the timeout again behind a hung holder.
  uint64_t lock_retry_at_ms_ = 0;
  bool LockBackoffLocked() const;
  // When a back-off begun now ends (unix ms): ten lock timeouts, at least a second.
  uint64_t BackoffEndMs() const;
  // cudaMemGetInfo's own back-off after the lock was not had in time (unix ms), and the group's
  // figures it last read, which it answers with meanwhile (budget 0: none read yet).
  uint64_t query_retry_at_ms_ = 0, query_timeouts_ = 0;
  uint64_t last_budget_ = 0, last_charged_ = 0;
  bool LastFiguresLocked(core::MemInfo* info) const;
};

}  // namespace cm::preload
