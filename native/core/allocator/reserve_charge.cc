#include "core/allocator/reserve_charge.h"

#include <algorithm>

#include "core/allocator/footprint.h"

namespace cm::core {

namespace {
uint64_t Add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
uint64_t RoundUp(uint64_t bytes, uint64_t page) {
  if (page <= 1) return bytes;
  uint64_t r = bytes % page;
  return r ? Add(bytes, page - r) : bytes;
}
}  // namespace

bool ReserveCharge::TakeUpTo(uint64_t target, const ReserveOps& ops) {
  if (target <= charged_) return true;
  if (!ops.take(target - charged_)) return false;
  charged_ = target;
  return true;
}

bool ReserveCharge::Refresh(const ReserveOps& ops) {
  uint64_t reserved = 0;
  // A reserve the driver cannot report (a pool gone with its context) holds nothing beyond the
  // allocations still live in it.
  if (!ops.reserved(&reserved)) reserved = live_;
  uint64_t target = std::max(reserved, live_);
  if (target < charged_) {
    ops.give(charged_ - target);
    charged_ = target;
    return true;
  }
  return TakeUpTo(target, ops);
}

bool ReserveCharge::Prepare(uint64_t bytes, uint64_t page, uint64_t chunk, const ReserveOps& ops) {
  // At least the reserve as it is now: a reserve that grew past what the group could afford (a
  // trim cannot always give back what is free in pieces) is charged before the pool may take more.
  uint64_t reserved = 0;
  if (!ops.reserved(&reserved)) reserved = live_;
  uint64_t target = std::max(RoundUp(Add(live_, bytes), page), reserved);
  if (chunk) target = std::max(target, Add(reserved, RoundUp(bytes, std::max(chunk, page))));
  return TakeUpTo(target, ops);
}

bool ReserveCharge::Done(bool ok, uint64_t bytes, const ReserveOps& ops) {
  if (ok) live_ = Add(live_, bytes);
  return Refresh(ops) || !ok;
}

void ReserveCharge::Freed(uint64_t bytes, const ReserveOps& ops) {
  live_ -= std::min(bytes, live_);
  Refresh(ops);
}

void ReserveCharge::GiveBackUnused(const ReserveOps& ops) {
  if (charged_ > live_) {
    ops.give(charged_ - live_);
    charged_ = live_;
  }
}

}  // namespace cm::core
