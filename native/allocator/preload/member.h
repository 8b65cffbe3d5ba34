// This process's membership of a group, for the interposer: the group named by CUDA_MEMORY_GROUP,
// joined at the first allocation it charges (so a process that never allocates never appears, and
// one loaded before CUDA is initialised waits for nothing), charged in grants (core/allocator/
// grants.h) so that an allocation usually costs no ledger operation.
//
// The host program is never harmed: nothing here throws and every wait is bounded. Where the
// budget cannot be kept, the process "fails open": a ledger that cannot be used (missing with no
// budget to create it, another budget, full, damaged, foreign, another user's), a setting that
// does not parse, a lock not had in time. It costs one line on stderr, the process is recorded
// beside the ledger (core/allocator/uncharged.h: top, groupStats() and the gauges list it), and its
// allocations go on uncharged, or, under CUDA_MEMORY_GROUP_STRICT=1 (`cuda-memory run --strict`),
// are refused with the API's out-of-memory error, so that a budget the user gave binds whatever
// happens. A lock not had in time is a back-off, whether joining or charging: that allocation and
// the ones for ten times the lock timeout (at least a second) fail open, then the ledger is tried
// again; anything else lasts for the rest of the process's life. Refusals, one line on stderr the
// first time and then at most one every ten seconds, return the API's own out-of-memory error.
//
// fork: the child lets go of the parent's membership without touching it (the parent's slot and
// charge stay the parent's) and, if it allocates, joins as a new member of its own. CUDA itself
// does not let a child use the parent's context, so the parent's allocations are not the child's.
//
// exit: leaving needs this object's lock. A thread that ends the process from inside a charge (a
// signal handler that calls exit() while the charge waits for the ledger) already holds it: the
// process then ends without leaving, which loses nothing (the kernel drops its locks, and the next
// process to read the ledger clears its slot).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/allocator/grants.h"
#include "core/allocator/ledger.h"
#include "core/allocator/reserve_charge.h"
#include "core/allocator/uncharged.h"

namespace cm::preload {

// One line on stderr, "cuda-memory preload (pid N): <text>", written with one write(2).
void Say(const std::string& text) noexcept;

class Member {
 public:
  // The process's member (never destroyed: threads of the host program may allocate during exit).
  static Member& Get();

  enum class Verdict { kUncharged, kCharged, kRefused, kNoRoom };
  // Charges `bytes` for an allocation through `api` on the group's device (`device` is its key,
  // used when joining). kUncharged: no group, the group cannot be used (failed open), or
  // `library_ledger` names this group's ledger file: the cuda-memory addon is taking a region its
  // own group allocator has charged already. kRefused: past the budget, or failed open under
  // strict. `quiet`: a first try that the caller follows with another once it has made room of
  // its own (a trim): where the group has no room, kNoRoom, neither waited for, counted nor said
  // (anything else, a strict refusal of failing open among them, is final and said as ever).
  Verdict Take(uint64_t bytes, const char* api, const std::string& device,
               const char* library_ledger = nullptr, bool quiet = false) noexcept;
  // What cuMemGetInfo tells the process about the group's device (`device`, its key): *info holds
  // the device's figures and becomes the group's view of them (core::GroupMemInfo), from this
  // member's ledger, or before it has joined from the group's ledger as it stands (the budget from
  // CUDA_MEMORY_GROUP_BUDGET where there is none yet, or no member is left to keep its own).
  // False, *info untouched, where the group does not apply: none set, or one this process cannot
  // use or could not join (another budget, no slot left); under strict such a group leaves no free
  // memory. Behind a ledger lock not had in time, the figures last read, for a while (its own
  // back-off: allocations still try the ledger).
  bool MemInfo(const std::string& device, core::MemInfo* info) noexcept;
  // Gives back a charged allocation's bytes.
  void Give(uint64_t bytes) noexcept;
  // Memory of `bytes` on the group's device (`device`, its key) that cannot be charged, for `code`
  // (detail says why): said on stderr once per code, recorded beside the ledger, counted. Returns
  // kRefused under strict (for a caller that can still refuse), else kUncharged.
  Verdict FailOpen(const char* code, const std::string& detail, uint64_t bytes,
                   const std::string& device) noexcept;
  // Leaves the group (at exit); later allocations pass uncharged.
  void Leave() noexcept;
  // CUDA_MEMORY_GROUP is set.
  bool enabled() const { return !group_.empty(); }
  bool strict() const { return strict_; }
  // What a stream-ordered pool may take from the device at a time (CUDA_MEMORY_POOL_CHUNK).
  uint64_t pool_chunk() const { return pool_chunk_; }

  // Around fork: held in the parent, so that the child gets a consistent state.
  void BeforeFork() { mutex_.lock(); }
  void AfterForkParent() { mutex_.unlock(); }
  void AfterForkChild() noexcept;

 private:
  Member();
  class Lock;
  bool JoinLocked(const std::string& device) noexcept;
  void RefusedLocked(uint64_t bytes, const char* api, const core::GroupRefusal& refusal) noexcept;
  // An allocation refused for the budget, with a wait set: waits for room with the member's lock
  // let go, then charges (kCharged) or gives the refusal (kRefused: timeout, deadlock).
  Verdict WaitLocked(Lock& lock, uint64_t bytes, core::GroupRefusal* refusal);
  // cudaMemGetInfo's figures held to the member's own limit (CUDA_MEMORY_GROUP_MEMBER_LIMIT).
  void LimitedLocked(core::MemInfo* info) const noexcept;
  Verdict FailOpenLocked(const std::string& code, const std::string& detail, uint64_t bytes,
                         bool lasting) noexcept;
  // Charged again after a back-off: the record of failing open goes.
  void RecoveredLocked() noexcept;
  std::string LedgerFile(const std::string& device) const;
  // The device key of the record beside the ledger.
  const std::string& GroupKey() const { return device_; }

  std::timed_mutex mutex_;
  std::string group_, budget_source_, dir_;
  uint64_t budget_ = 0;
  bool strict_ = false;
  int lock_timeout_ms_ = core::shm::kDefaultLockTimeoutMs;
  uint64_t pool_chunk_ = core::kPoolChunk;
  core::MemberTerms terms_;  // CUDA_MEMORY_GROUP_REQUEST, _MEMBER_LIMIT, _WAIT_MS
  uint64_t wait_ms_ = 0;
  int waiters_ = 0;      // this process's threads waiting for room now
  std::string problem_;  // a setting that could not be read: said once, then failed open
  std::unique_ptr<core::Ledger> ledger_;
  std::unique_ptr<core::GrantedCharge> grants_;
  bool detached_ = false;      // the group cannot be used: failed open from now on
  bool left_ = false;          // left at exit: later allocations pass uncharged, unrecorded
  std::string detached_code_;  // why, for the refusals under strict
  std::string join_code_, join_detail_;  // why the last join failed
  std::string device_;                   // the group's device key, as the wrappers gave it
  std::unique_ptr<core::UnchargedRecord> record_;  // beside the ledger, while failing open
  bool record_lasting_ = false;  // false: only lock back-offs, removed once charged again
  std::string said_codes_;       // codes said on stderr once already (" CODE " each)
  uint64_t refusals_ = 0, refusals_said_ = 0;
  int64_t last_refusal_line_ms_ = 0;
  // After a lock not had in time, the ledger is left alone until then (unix ms): allocations fail
  // open at once instead of each waiting the timeout again behind a hung holder.
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
