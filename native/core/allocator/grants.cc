#include "core/allocator/grants.h"

#include <algorithm>

namespace cm::core {

MemInfo GroupMemInfo(MemInfo device, uint64_t budget, uint64_t charged, uint64_t own_spare) {
  uint64_t left = budget > charged ? budget - charged : 0;
  uint64_t mine = std::min(budget, left > UINT64_MAX - own_spare ? UINT64_MAX : left + own_spare);
  return {std::min(device.free, mine), std::min(device.total, budget)};
}

uint64_t GrantedCharge::GrantFor(uint64_t budget) {
  return std::min<uint64_t>(budget / (16 * Ledger::kSlots), 64ull << 20);
}

bool GrantedCharge::Take(Ledger& ledger, uint64_t bytes, GroupRefusal* refusal) {
  uint64_t spare = this->spare();
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
  if (release && spare() > 2 * grant_) {
    uint64_t back = spare() - grant_;
    ledger.Release(back);
    held_ -= back;
  }
  ledger.PublishInUse(used_);
}

}  // namespace cm::core
