// The table of numbers that stand for buffers in JavaScript: a handle is slot + generation * 2^24,
// a plain Number, far cheaper to make than an External with a finalizer (docs/internals.md gives
// the figures), which is what lets a pooled alloc+free cost well under a microsecond. The
// generation makes a stale or forged number miss instead of reaching another buffer.
//
// Nothing wears out. A handle must stay below 2^53 to be a safe integer, so a slot lives for 2^29
// generations and is then retired: never handed out again, so that no old number can ever match
// it. With the freed slot reused first, a hot alloc/free loop on one slot retires it after 2^29
// pairs (minutes at 0.5 µs a pair) and moves on to a fresh slot; the 2^24 slots give 2^53 pairs
// in all, over a century at that rate, and a retired slot costs the table 16 bytes. More than
// 2^24 live buffers at once are refused (Add returns a negative number) rather than aliased.
//
// No Node, no CUDA: the entries are T*, and the core's tests drive it directly.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/safe_size.h"

namespace cm::core {

template <typename T>
class HandleTable {
 public:
  static constexpr uint64_t kSlotSpan = 1ull << 24;     // slots
  static constexpr uint64_t kGenerations = 1ull << 29;  // per slot: kSlotSpan * kGenerations = 2^53
  static constexpr uint32_t kNoSlot = UINT32_MAX;

  // `first_generation` and `max_slots` exist for tests: a fresh slot starts at that generation
  // (near the wrap), and the table holds at most that many slots.
  explicit HandleTable(uint32_t first_generation = 0, uint64_t max_slots = kSlotSpan)
      : first_generation_(first_generation),
        max_slots_(max_slots < kSlotSpan ? max_slots : kSlotSpan) {}

  // Enters `entry` and returns its handle (and its slot through *slot), or -1 with *slot =
  // kNoSlot when max_slots entries are live already.
  double Add(T* entry, uint32_t* slot) {
    uint32_t s;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else if (slots_.size() < max_slots_) {
      s = static_cast<uint32_t>(slots_.size());
      slots_.push_back(Slot{nullptr, first_generation_});
    } else {
      *slot = kNoSlot;
      return -1;
    }
    slots_[s].entry = entry;
    *slot = s;
    ++live_;
    return static_cast<double>(s + kSlotSpan * slots_[s].generation);
  }

  // The entry behind `handle`, or nullptr; *stale is set when the number was a handle once (of a
  // slot that has moved on since).
  T* Find(double handle, bool* stale) const {
    *stale = false;
    if (!IsSafeSize(handle)) return nullptr;
    uint64_t h = static_cast<uint64_t>(handle);
    uint64_t slot = h % kSlotSpan, generation = h / kSlotSpan;
    if (slot >= slots_.size()) return nullptr;
    const Slot& s = slots_[slot];
    if (s.generation == generation && s.entry) return s.entry;
    *stale = generation < s.generation;
    return nullptr;
  }

  // Frees the slot of `entry` (entered at `slot`); nothing if it is not there.
  void Remove(T* entry, uint32_t slot) {
    if (slot >= slots_.size() || slots_[slot].entry != entry) return;
    Slot& s = slots_[slot];
    s.entry = nullptr;
    if (++s.generation < kGenerations) free_.push_back(slot);
    --live_;
  }

  std::vector<T*> Live() const {
    std::vector<T*> out;
    for (const Slot& s : slots_)
      if (s.entry) out.push_back(s.entry);
    return out;
  }
  size_t size() const { return live_; }
  // Slots retired for good (their generations used up).
  size_t retired() const { return slots_.size() - live_ - free_.size(); }

 private:
  struct Slot {
    T* entry;
    uint32_t generation;
  };
  uint32_t first_generation_;
  uint64_t max_slots_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  size_t live_ = 0;
};

}  // namespace cm::core
