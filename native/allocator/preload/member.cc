#include "allocator/preload/member.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/allocator/pool.h"  // FormatBytes
#include "core/base/shm.h"

namespace cm::preload {

namespace {

// A decimal integer from min to max, else false.
bool ParseUnsigned(const char* text, uint64_t min, uint64_t max, uint64_t* out) {
  if (!text || !*text) return false;
  uint64_t v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    uint64_t d = static_cast<uint64_t>(*p - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  if (v < min) return false;
  *out = v;
  return true;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Set while this thread holds a Member's lock: an exit() from inside a charge (a signal handler)
// must not wait for a lock its own thread holds.
thread_local bool t_holding = false;

}  // namespace

class Member::Lock {
 public:
  explicit Lock(std::timed_mutex& m) : m_(m) {
    m_.lock();
    t_holding = true;
  }
  ~Lock() {
    t_holding = false;
    m_.unlock();
  }
  // Lets the member go for a wait, and takes it again.
  template <typename Wait>
  void Released(Wait wait) {
    t_holding = false;
    m_.unlock();
    wait();
    m_.lock();
    t_holding = true;
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  std::timed_mutex& m_;
};

void Say(const std::string& text) noexcept {
  try {
    std::string line = "cuda-memory preload (pid " + std::to_string(getpid()) + "): " + text + "\n";
    (void)!write(2, line.data(), line.size());
  } catch (...) {
  }
}

Member& Member::Get() {
  static Member* m = new Member();
  return *m;
}

Member::Member() {
  group_ = Env("CUDA_MEMORY_GROUP");
  if (group_.empty()) return;
  // Anything but 0 or nothing asks for strictness: a misspelt "true" must not loosen a budget.
  std::string strict = Env("CUDA_MEMORY_GROUP_STRICT");
  strict_ = !strict.empty() && strict != "0";
  budget_source_ = Env("CUDA_MEMORY_GROUP_BUDGET_SOURCE");
  std::string budget = Env("CUDA_MEMORY_GROUP_BUDGET");
  if (!budget.empty() && !ParseUnsigned(budget.c_str(), 0, UINT64_MAX, &budget_))
    problem_ = "CUDA_MEMORY_GROUP_BUDGET is " + core::shm::Printable(budget) +
               ", not a number of bytes (decimal digits)";
  if (budget_ && budget_source_.empty()) budget_source_ = "limit " + core::FormatBytes(budget_);
  // Elastic sharing's terms (run --request, --member-limit, --wait).
  const struct {
    const char* name;
    uint64_t most;
    uint64_t* into;
    const char* what;
  } terms[] = {
      {"CUDA_MEMORY_GROUP_REQUEST", UINT64_MAX, &terms_.request, "a number of bytes"},
      {"CUDA_MEMORY_GROUP_MEMBER_LIMIT", UINT64_MAX, &terms_.member_limit, "a number of bytes"},
      {"CUDA_MEMORY_GROUP_WAIT_MS", 86400000, &wait_ms_, "an integer from 0 to 86400000 (ms)"},
  };
  for (const auto& t : terms) {
    std::string v = Env(t.name);
    if (!v.empty() && !ParseUnsigned(v.c_str(), 0, t.most, t.into) && problem_.empty())
      problem_ = std::string(t.name) + " is " + core::shm::Printable(v) + ", not " + t.what;
  }
  terms_.wait_ms = static_cast<int64_t>(wait_ms_);
  std::string timeout = Env("CUDA_MEMORY_LOCK_TIMEOUT_MS");
  uint64_t ms = 0;
  if (!timeout.empty()) {
    // 0 would make every ledger operation time out: refused, as the library refuses it.
    if (ParseUnsigned(timeout.c_str(), 1, 86400000, &ms))
      lock_timeout_ms_ = static_cast<int>(ms);
    else if (problem_.empty())
      problem_ = "CUDA_MEMORY_LOCK_TIMEOUT_MS is " + core::shm::Printable(timeout) +
                 ", not an integer from 1 to 86400000 (milliseconds)";
  }
  // What a stream-ordered pool may take from the device at a time (core::kPoolChunk by default,
  // an H200's): a driver that grows its pools in other units can be told so.
  std::string chunk = Env("CUDA_MEMORY_POOL_CHUNK");
  if (!chunk.empty() && !ParseUnsigned(chunk.c_str(), 1, 1ull << 30, &pool_chunk_) &&
      problem_.empty())
    problem_ = "CUDA_MEMORY_POOL_CHUNK is " + core::shm::Printable(chunk) +
               ", not a number of bytes from 1 to 1073741824";
  // As the library's shmDir(): this user's own folder, by effective uid.
  std::string base = Env("CUDA_MEMORY_SHM_DIR");
  dir_ =
      core::shm::Join(base.empty() ? "/dev/shm" : base, "cuda-memory-" + std::to_string(geteuid()));
}

std::string Member::LedgerFile(const std::string& device) const {
  std::string path = core::Ledger::PathFor(dir_, group_, device);
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Member::Verdict Member::FailOpen(const char* code, const std::string& detail, uint64_t bytes,
                                 const std::string& device) noexcept {
  if (group_.empty()) return Verdict::kUncharged;
  Lock lock(mutex_);
  if (left_) return Verdict::kUncharged;
  try {
    if (!device.empty() && device_ != device) device_ = device;
  } catch (...) {
  }
  return FailOpenLocked(code, detail, bytes, true);
}

Member::Verdict Member::FailOpenLocked(const std::string& code, const std::string& detail,
                                       uint64_t bytes, bool lasting) noexcept {
  try {
    if (said_codes_.find(" " + code + " ") == std::string::npos) {
      said_codes_ += " " + code + " ";
      if (!detail.empty())
        Say(detail + (strict_ ? "; under CUDA_MEMORY_GROUP_STRICT=1 they are refused with the "
                                "out-of-memory error instead"
                              : ""));
    }
    if (!record_) {
      try {
        record_.reset(core::UnchargedRecord::Make(dir_, group_, GroupKey(), code,
                                                  detail.empty() ? code : detail, strict_));
        record_lasting_ = lasting;
      } catch (...) {
        // The folder cannot hold it (another user's, no room): the line on stderr stays.
      }
    } else if (lasting) {
      record_lasting_ = true;
    }
    if (record_ && bytes) record_->Count(bytes);
  } catch (...) {
  }
  return strict_ ? Verdict::kRefused : Verdict::kUncharged;
}

void Member::RecoveredLocked() noexcept {
  if (record_ && !record_lasting_) record_.reset();
}

bool Member::JoinLocked(const std::string& device) noexcept {
  try {
    // A preloaded process has no limit of its own: the group's budget is its limit, as for an
    // allocator of the library that joins without one.
    ledger_.reset(core::Ledger::Join(dir_, group_, device, budget_, budget_source_, budget_,
                                     lock_timeout_ms_, terms_));
    if (!budget_) ledger_->SetLimit(ledger_->budget());
    grants_.reset(new core::GrantedCharge(core::GrantedCharge::GrantFor(ledger_->budget())));
    return true;
  } catch (const core::ShmError& e) {
    join_code_ = e.code;
    join_detail_ = e.code + ": " + e.what();
  } catch (const std::exception& e) {
    join_code_ = "ERR_GROUP_LEDGER";
    join_detail_ = e.what();
  } catch (...) {
    join_code_ = "ERR_GROUP_LEDGER";
    join_detail_ = "an unknown error";
  }
  ledger_.reset();
  grants_.reset();
  if (join_code_ == "ERR_SHM_LOCK_TIMEOUT") {
    // A stopped or hung holder while joining: a back-off like a charge's, then joined again.
    lock_retry_at_ms_ = BackoffEndMs();
  } else {
    detached_ = true;
    detached_code_ = join_code_;
  }
  return false;
}

Member::Verdict Member::Take(uint64_t bytes, const char* api, const std::string& device,
                             const char* library_ledger, bool quiet) noexcept {
  if (group_.empty()) return Verdict::kUncharged;
  Lock lock(mutex_);
  try {
    // The addon taking a region its own allocator of this group has charged already.
    if (library_ledger && LedgerFile(device) == library_ledger) return Verdict::kUncharged;
    if (left_) return Verdict::kUncharged;  // at exit, after leaving: nothing to keep any more
    if (device_ != device) device_ = device;
    if (!problem_.empty()) return FailOpenLocked("ERR_PRELOAD_SETTING", problem_, bytes, true);
    if (detached_) return FailOpenLocked(detached_code_, "", bytes, true);
    if (LockBackoffLocked()) return FailOpenLocked("ERR_SHM_LOCK_TIMEOUT", "", bytes, false);
    if (!ledger_ && !JoinLocked(device)) {
      if (detached_)
        return FailOpenLocked(join_code_,
                              "cannot join group '" + core::shm::Printable(group_) + "' on " +
                                  core::shm::Printable(device) + " (" + join_detail_ +
                                  "); this process's allocations are not charged to any group",
                              bytes, true);
      return FailOpenLocked(
          join_code_,
          join_detail_ + " (joining) An allocation of " + core::FormatBytes(bytes) +
              " went on uncharged, and so do the ones after it for a while " + "(said once)",
          bytes, false);
    }
  } catch (...) {
    return strict_ ? Verdict::kRefused : Verdict::kUncharged;
  }
  try {
    core::GroupRefusal refusal;
    if (grants_->Take(*ledger_, bytes, &refusal)) {
      RecoveredLocked();
      return Verdict::kCharged;
    }
    if (quiet) return Verdict::kNoRoom;
    if (terms_.wait_ms > 0 && refusal.reason == core::GroupRefusal::kBudget) {
      Verdict v = WaitLocked(lock, bytes, &refusal);
      if (v != Verdict::kRefused) return v;
    }
    RefusedLocked(bytes, api, refusal);
    return Verdict::kRefused;
  } catch (const core::ShmError& e) {
    if (e.code == "ERR_SHM_LOCK_TIMEOUT") {
      // A stopped or hung holder: this allocation fails open, and so do the ones until
      // lock_retry_at_ms_, so that each does not wait the timeout again.
      lock_retry_at_ms_ = BackoffEndMs();
      return FailOpenLocked(
          e.code,
          e.code + ": " + e.what() + " An allocation of " + core::FormatBytes(bytes) +
              " went on uncharged, and so do the ones after it for a while " + "(said once)",
          bytes, false);
    }
    detached_ = true;
    detached_code_ = e.code;
    return FailOpenLocked(e.code,
                          "group '" + core::shm::Printable(group_) + "': " + e.code + ": " +
                              e.what() + "; this process's allocations are no longer charged to it",
                          bytes, true);
  } catch (...) {
    detached_ = true;
    detached_code_ = "ERR_GROUP_LEDGER";
    return FailOpenLocked(detached_code_,
                          "group '" + core::shm::Printable(group_) +
                              "' could not be charged; this process's allocations are no longer "
                              "charged to it",
                          bytes, true);
  }
}

Member::Verdict Member::WaitLocked(Lock& lock, uint64_t bytes, core::GroupRefusal* refusal) {
  // One place in the queue for the process: a second thread that waits meanwhile shares it.
  if (waiters_ == 0) ledger_->BeginWait(bytes);
  ++waiters_;
  core::RoomWaitSteps steps;
  steps.gone = [this] { return left_ || !ledger_; };  // left at exit meanwhile
  steps.generation = [this] { return ledger_->Generation(); };
  steps.attempt = [&](core::RefusalReasons::Reason* why) {
    const bool granted = grants_->Take(*ledger_, bytes, refusal);
    *why = refusal->reason;
    return granted;
  };
  // The member's lock is let go while it waits: the process's other threads free meanwhile.
  steps.pause = [&](uint64_t seen, int ms) {
    const core::Ledger* l = ledger_.get();
    lock.Released([&] { l->WaitForChange(seen, ms); });
  };
  auto end = [&](bool granted) {
    if (--waiters_ == 0 && ledger_) ledger_->EndWait(granted, refusal->waited_ms);
  };
  core::RoomWaitResult w;
  try {
    w = core::WaitForRoom(terms_.wait_ms, steps, &refusal->waited_ms);
  } catch (...) {
    end(false);
    throw;
  }
  if (w.gone) {
    --waiters_;
    return Verdict::kUncharged;
  }
  refusal->reason = w.reason;
  end(w.granted);
  if (!w.granted) return Verdict::kRefused;
  RecoveredLocked();
  return Verdict::kCharged;
}

namespace {
// What a refusal adds to the line beyond the budget's figures.
std::string WhyRefused(const core::GroupRefusal& r) {
  switch (r.reason) {
    case core::GroupRefusal::kBudget:
      return r.group.reserved
                 ? ", of which its members request " + core::FormatBytes(r.group.reserved)
                 : "";
    case core::GroupRefusal::kMemberLimit:
      return ", and the allocation would pass this process's own limit "
             "(CUDA_MEMORY_GROUP_MEMBER_LIMIT)";
    case core::GroupRefusal::kNeverFits:
      return ", and this process could never hold that much beside the others' requests";
    case core::GroupRefusal::kDeadlock:
      return ", and it waited while every member that holds memory waits too (the newest waiter "
             "is refused)";
    case core::GroupRefusal::kTimeout:
      return ", after waiting " + std::to_string(r.waited_ms) + " ms for room";
  }
  return "";
}
}  // namespace

void Member::RefusedLocked(uint64_t bytes, const char* api,
                           const core::GroupRefusal& refusal) noexcept {
  ++refusals_;
  int64_t now = static_cast<int64_t>(core::shm::NowUnixMs());
  if (refusals_said_ && now - last_refusal_line_ms_ < 10000) return;
  try {
    const core::GroupSnapshot& g = refusal.group;
    uint64_t unsaid = refusals_ - refusals_said_ - 1;
    Say("group '" + core::shm::Printable(g.name) + "' refused " + api + " of " +
        core::FormatBytes(bytes) + ": its budget is " + core::FormatBytes(g.budget) + " (" +
        core::shm::Printable(g.budget_source) + ") and its " + std::to_string(g.members.size()) +
        " member" + (g.members.size() == 1 ? " holds " : "s hold ") + core::FormatBytes(g.charged) +
        " (this process " + core::FormatBytes(grants_->held()) + ")" + WhyRefused(refusal) +
        "; the call returns its out-of-memory error" +
        (unsaid ? " (" + std::to_string(unsaid) + " more refusals since the last line)" : ""));
  } catch (...) {
  }
  refusals_said_ = refusals_;
  last_refusal_line_ms_ = now;
}

uint64_t Member::BackoffEndMs() const {
  return core::shm::NowUnixMs() + std::max<uint64_t>(1000, 10ull * lock_timeout_ms_);
}

bool Member::LockBackoffLocked() const {
  return lock_retry_at_ms_ && core::shm::NowUnixMs() < lock_retry_at_ms_;
}

void Member::LimitedLocked(core::MemInfo* info) const noexcept {
  const uint64_t limit = terms_.member_limit;
  if (!limit) return;
  const uint64_t held = grants_ ? grants_->held() : 0, spare = grants_ ? grants_->spare() : 0;
  const uint64_t room = held >= limit ? spare : limit - held + spare;
  info->total = std::min(info->total, limit);
  info->free = std::min({info->free, room, info->total});
}

bool Member::MemInfo(const std::string& device, core::MemInfo* info) noexcept {
  if (group_.empty()) return false;
  Lock lock(mutex_);
  if (left_) return false;
  if (detached_ || !problem_.empty()) {
    // A budget that cannot be kept: under strict nothing may be allocated, and the process is
    // told so; else the device as it is.
    if (!strict_) return false;
    info->free = 0;
    return true;
  }
  // Behind a lock not had in time (an allocation's, or an earlier question's): the group's figures
  // as last read, without waiting again.
  if (LockBackoffLocked() || core::shm::NowUnixMs() < query_retry_at_ms_)
    return LastFiguresLocked(info);
  try {
    core::GroupSnapshot g;
    uint64_t spare = 0;
    if (ledger_) {
      g = ledger_->Snapshot();
      spare = grants_->spare();
    } else {
      try {
        g = core::Ledger::Read(core::Ledger::PathFor(dir_, group_, device), lock_timeout_ms_);
      } catch (const core::ShmError& e) {
        if (e.code != "ERR_GROUP_NOT_FOUND") throw;
      }
      if (g.members.empty()) {
        // No group, or one no member keeps: joining starts it with this process's budget, and
        // without one would fail.
        if (!budget_) return false;
        g.budget = budget_;
        g.charged = 0;
      } else if ((budget_ && budget_ != g.budget) || g.members.size() >= core::Ledger::kSlots) {
        return false;  // joining would fail: another budget, or no slot left
      }
    }
    last_budget_ = g.budget;
    last_charged_ = core::ChargeSeenBy(g);  // the others' unused requests are theirs
    *info = core::GroupMemInfo(*info, g.budget, last_charged_, spare);
    LimitedLocked(info);
    return true;
  } catch (const core::ShmError& e) {
    if (e.code != "ERR_SHM_LOCK_TIMEOUT") return false;  // the next allocation says what is wrong
    // Its own back-off: allocations still try the ledger, and are charged once it answers.
    if (query_timeouts_++ == 0)
      Say(e.code + ": " + e.what() +
          " cudaMemGetInfo answered with the group's figures as last read (the device's before "
          "any), and does so for a while without waiting (said once)");
    query_retry_at_ms_ = BackoffEndMs();
    return LastFiguresLocked(info);
  } catch (...) {
    return false;
  }
}

bool Member::LastFiguresLocked(core::MemInfo* info) const {
  if (!last_budget_) return false;
  *info = core::GroupMemInfo(*info, last_budget_, last_charged_, grants_ ? grants_->spare() : 0);
  LimitedLocked(info);
  return true;
}

void Member::Give(uint64_t bytes) noexcept {
  if (group_.empty()) return;
  Lock lock(mutex_);
  if (ledger_ && !detached_ && !left_) grants_->Give(*ledger_, bytes, !LockBackoffLocked());
}

void Member::Leave() noexcept {
  if (group_.empty() || t_holding) return;  // t_holding: exit() from inside a charge
  if (!mutex_.try_lock_for(std::chrono::milliseconds(lock_timeout_ms_))) return;
  if (ledger_) ledger_->Leave();
  record_.reset();
  left_ = true;
  mutex_.unlock();
}

void Member::AfterForkChild() noexcept {
  if (ledger_) ledger_->Abandon();
  ledger_.reset();
  grants_.reset();
  if (record_) record_->Abandon();
  record_.reset();
  record_lasting_ = false;
  detached_ = false;
  left_ = false;
  detached_code_.clear();
  said_codes_.clear();
  refusals_ = refusals_said_ = 0;
  waiters_ = 0;  // a thread of the parent that waited is not in the child
  query_timeouts_ = 0;
  lock_retry_at_ms_ = query_retry_at_ms_ = 0;
  last_budget_ = last_charged_ = 0;
  t_holding = false;
  // The mutex was held by the forking thread in the parent; the child is a copy of that thread.
  mutex_.unlock();
}

}  // namespace cm::preload
