// Elastic sharing's rules: who in a group may charge how much, now, and whether one that may not
// waits or is refused at once. Pure functions over the members' figures, which the ledger
// (core/allocator/ledger.h) applies under its lock; and the wait for room (WaitForRoom), the one
// loop that the library's allocators and the interposer's members run over time.
//
// - A member's request is guaranteed: it can always charge up to it, whatever others do, because
//   no other member may take the part of the budget that requests reserve and do not use.
// - Beyond its request a member borrows from the burst pool, the budget less every member's
//   request (less, for a member at or past its request, what it already holds of it), up to its
//   own limit.
// - Borrowing is in arrival order: while an older member waits to borrow, a younger one that
//   would borrow is held back, so a large wait is not starved by small ones. A charge within the
//   member's own request is never held back.
// - The budget is a hard cap: nothing is charged past it, also after it was lowered.
// - A waiter that could never fit (more than the budget less the others' requests) is refused at
//   once; so is the newest waiter when every member that holds memory waits (none of them will
//   free what another waits for).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace cm::core {

// Why a charge is refused (GroupRefusal, core/allocator/ledger.h, carries one).
struct RefusalReasons {
  enum Reason {
    kBudget,       // past the budget (or the part of it that others' requests leave)
    kMemberLimit,  // past the member's own limit
    kNeverFits,    // more than the member could ever have beside the others' requests
    kDeadlock,     // waiting, and every member that holds memory waits too: the newest refused
    kTimeout,      // waited its wait_ms without room
  };
};

struct ElasticMember {
  uint64_t pool = 0;          // what it holds charged
  uint64_t request = 0;       // its guaranteed share
  uint64_t member_limit = 0;  // the most it may hold (0: the budget)
  uint64_t waiting = 0;       // bytes an allocation of it waits for (0: not waiting)
  uint64_t ticket = 0;        // its place among waiters (smaller: older), when waiting
};

struct ElasticVerdict {
  bool ok = false;
  RefusalReasons::Reason reason = RefusalReasons::kBudget;  // when not ok
};

// Whether member `self` may charge `bytes` now, under `budget`.
ElasticVerdict DecideCharge(const std::vector<ElasticMember>& members, size_t self, uint64_t bytes,
                            uint64_t budget);

// For a charge DecideCharge refused with kBudget: kBudget if the member may wait for room,
// kNeverFits or kDeadlock if it is to be refused at once. `waiting`: whether the member waits
// (its entry's waiting and ticket are then set).
RefusalReasons::Reason WaitVerdict(const std::vector<ElasticMember>& members, size_t self,
                                   uint64_t bytes, uint64_t budget, bool waiting);

// At most this long between two looks at the group while waiting: a member that died holding
// memory is cleared only by a process that takes the ledger's lock, and no release moves the
// ledger's counter for it.
constexpr int kRoomLookMs = 50;

// What a wait for room does, given by its caller (the ledger's own handle, or the interposer's
// member, which lets its lock go while it pauses). The caller marks the wait in the ledger before
// and after (Ledger::BeginWait, EndWait).
struct RoomWaitSteps {
  // True when there is nothing to wait on any more (the process left its group meanwhile); may be
  // left empty.
  std::function<bool()> gone;
  // The ledger's change counter (Ledger::Generation).
  std::function<uint64_t()> generation;
  // One charge under the ledger's lock: true when granted; otherwise *why says why not.
  std::function<bool(RefusalReasons::Reason* why)> attempt;
  // Returns once the counter differs from `seen` or `ms` have passed (Ledger::WaitForChange).
  std::function<void(uint64_t seen, int ms)> pause;
};

struct RoomWaitResult {
  bool granted = false;
  bool gone = false;                                        // steps.gone() said so
  RefusalReasons::Reason reason = RefusalReasons::kBudget;  // when neither granted nor gone
  uint64_t waited_ms = 0;
};

// Tries the charge, and while it is refused for the budget alone pauses until the ledger changes
// (at most kRoomLookMs) and tries again, for up to wait_ms: granted; refused for another reason
// (kDeadlock once this waiter is the newest of a group that only waits, kNeverFits, ...); kTimeout
// when wait_ms passed without room; or gone. The counter is read before each try, so that a
// release between a try and the pause wakes the pause at once. If a step throws, the exception
// passes through and *waited_ms (when given) holds the time waited until then.
RoomWaitResult WaitForRoom(int64_t wait_ms, const RoomWaitSteps& steps,
                           uint64_t* waited_ms = nullptr);

}  // namespace cm::core
