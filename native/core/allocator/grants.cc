#include "core/allocator/grants.h"

#include <algorithm>

namespace cm::core {

uint64_t GrantedCharge::GrantFor(uint64_t budget) {
  return std::min<uint64_t>(budget / Ledger::kSlots, 64ull << 20);
}

bool GrantedCharge::Take(Ledger& ledger, uint64_t bytes, GroupRefusal* refusal) {
  uint64_t spare = held_ - used_;
  if (bytes > spare) {
    uint64_t shortfall = bytes - spare;
    // The grant first, then the shortfall alone: a refusal is always about the shortfall.
    uint64_t with_grant = shortfall + grant_;
    bool charged = with_grant >= shortfall && grant_ > 0 && ledger.Charge(with_grant, nullptr);
    if (charged) {
      held_ += with_grant;
    } else {
      if (!ledger.Charge(shortfall, refusal)) return false;
      held_ += shortfall;
    }
  }
  used_ += bytes;
  ledger.PublishInUse(used_);
  return true;
}

void GrantedCharge::Give(Ledger& ledger, uint64_t bytes, bool release) noexcept {
  used_ -= std::min(bytes, used_);
  uint64_t spare = held_ - used_;
  if (release && spare > 2 * grant_) {
    uint64_t back = spare - grant_;
    ledger.Release(back);
    held_ -= back;
  }
  ledger.PublishInUse(used_);
}

}  // namespace cm::core
