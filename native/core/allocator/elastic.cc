#include "core/allocator/elastic.h"

#include <algorithm>
#include <chrono>

namespace cm::core {

namespace {
// What a member claims of the budget: what it holds, or its request if more.
uint64_t Claim(uint64_t pool, uint64_t request) { return std::max(pool, request); }
}  // namespace

ElasticVerdict DecideCharge(const std::vector<ElasticMember>& members, size_t self, uint64_t bytes,
                            uint64_t budget) {
  const ElasticMember& me = members[self];
  uint64_t after = 0;
  if (__builtin_add_overflow(me.pool, bytes, &after)) return {false, RefusalReasons::kNeverFits};
  if (me.member_limit && after > me.member_limit) return {false, RefusalReasons::kMemberLimit};
  // Sums with the others' figures, each checked against overflow (a ledger's figures are checked
  // to sum within the budget, but a request may be anything a member joined with).
  uint64_t charged = after, claimed = Claim(after, me.request);
  for (size_t j = 0; j < members.size(); ++j) {
    if (j == self) continue;
    if (__builtin_add_overflow(charged, members[j].pool, &charged) ||
        __builtin_add_overflow(claimed, Claim(members[j].pool, members[j].request), &claimed))
      return {false, RefusalReasons::kBudget};
  }
  if (charged > budget) return {false, RefusalReasons::kBudget};
  if (after <= me.request) return {true, RefusalReasons::kBudget};  // its own share
  if (claimed > budget) return {false, RefusalReasons::kBudget};  // others' requests hold the rest
  const uint64_t mine = me.waiting ? me.ticket : UINT64_MAX;
  for (size_t j = 0; j < members.size(); ++j) {
    const ElasticMember& m = members[j];
    // An older waiter that would borrow goes first.
    if (j != self && m.waiting && m.ticket < mine && m.pool + m.waiting > m.request)
      return {false, RefusalReasons::kBudget};
  }
  return {true, RefusalReasons::kBudget};
}

RefusalReasons::Reason WaitVerdict(const std::vector<ElasticMember>& members, size_t self,
                                   uint64_t bytes, uint64_t budget, bool waiting) {
  const ElasticMember& me = members[self];
  uint64_t others = 0;
  for (size_t j = 0; j < members.size(); ++j)
    if (j != self && __builtin_add_overflow(others, members[j].request, &others))
      return RefusalReasons::kNeverFits;
  const uint64_t most = budget > others ? budget - others : 0;
  if (me.pool > most || bytes > most - me.pool) return RefusalReasons::kNeverFits;
  if (!waiting) return RefusalReasons::kBudget;
  // Every member that holds memory waits: the newest waiter is refused.
  bool anyone_holds = false, a_holder_runs = false;
  uint64_t newest = 0;
  for (size_t j = 0; j < members.size(); ++j) {
    const ElasticMember& m = members[j];
    if (m.pool > 0) {
      anyone_holds = true;
      if (!m.waiting) a_holder_runs = true;
    }
    if (m.waiting) newest = std::max(newest, m.ticket);
  }
  if (anyone_holds && !a_holder_runs && me.ticket == newest) return RefusalReasons::kDeadlock;
  return RefusalReasons::kBudget;
}

RoomWaitResult WaitForRoom(int64_t wait_ms, const RoomWaitSteps& steps, uint64_t* waited_ms) {
  const auto start = std::chrono::steady_clock::now();
  RoomWaitResult r;
  auto waited = [&] {
    r.waited_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::now() - start)
                                            .count());
    if (waited_ms) *waited_ms = r.waited_ms;
    return r.waited_ms;
  };
  for (;;) {
    if (steps.gone && steps.gone()) {
      r.gone = true;
      waited();
      return r;
    }
    const uint64_t seen = steps.generation();
    r.granted = false;
    try {
      r.granted = steps.attempt(&r.reason);
    } catch (...) {
      waited();
      throw;
    }
    if (r.granted || r.reason != RefusalReasons::kBudget) {
      waited();
      return r;
    }
    const int64_t left = wait_ms - static_cast<int64_t>(waited());
    if (left <= 0) {
      r.reason = RefusalReasons::kTimeout;
      return r;
    }
    try {
      steps.pause(seen, static_cast<int>(std::min<int64_t>(left, kRoomLookMs)));
    } catch (...) {
      waited();
      throw;
    }
  }
}

}  // namespace cm::core
