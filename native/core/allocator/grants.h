// A member's charge to its group ledger taken in grants, for a process that allocates and frees
// device memory one call at a time (what the preloaded interposer sees). A ledger operation takes
// the file's lock and reads the whole ledger (a few microseconds, under a lock every member
// shares); a CUDA program may make a cudaMalloc+cudaFree pair per step. So a member charges the
// ledger only when its allocations outgrow what it already holds, then with a grant on top, and
// gives back only what it holds beyond its use past two grants, keeping one (GrantFor says how
// large a grant is).
//
// The budget holds exactly: every byte in use was charged, and a grant is taken only when the group
// can afford it (else only the shortfall is charged). The cost is that a member may hold up to two
// grants it does not use; the ledger shows them as the member's pool bytes, beside its bytes in
// use. Not thread-safe: the caller serialises, as it does for the Ledger.
#pragma once

#include <cstdint>

#include "core/allocator/ledger.h"
#include "core/allocator/upstream.h"  // MemInfo

namespace cm::core {

// What cuMemGetInfo tells a process whose allocations its group charges: the device as the
// budget leaves it to that process, so that a program sizing itself by the free memory (a
// llama.cpp server fitting its layers, vLLM taking a share of the total) sizes itself by the
// budget. Total: the budget, if smaller than the device. Free: the least of the device's free
// memory and what the group can still charge (budget - charged, never below 0) plus `own_spare`,
// the bytes this process holds charged and unused (its grants), which are its to use.
MemInfo GroupMemInfo(MemInfo device, uint64_t budget, uint64_t charged, uint64_t own_spare);

class GrantedCharge {
 public:
  // The grant for a group of this budget: a 2048th of it, at most 64 MiB, so that what members
  // hold charged and unused stays a small share of the budget however many there are: a member
  // keeps at most two grants it does not use, and a full ledger (128 members) of idle ones holds
  // at most an eighth of the budget (40 idle members of a 128 MiB group, 5 MiB).
  static uint64_t GrantFor(uint64_t budget);

  explicit GrantedCharge(uint64_t grant) : grant_(grant) {}

  // Takes `bytes` for an allocation: from what this member holds beyond its use, else by charging
  // the shortfall plus a grant, or the shortfall alone when the group cannot afford the grant.
  // False when it cannot afford the shortfall (*refusal says why). Throws ShmError as
  // Ledger::Charge does; nothing is taken then.
  bool Take(Ledger& ledger, uint64_t bytes, GroupRefusal* refusal);
  // Gives back the bytes of an allocation (at most what is in use). Never throws. release: false
  // keeps everything held, for when the ledger's lock is known to be out of reach (a Release
  // would wait for it); a later Give gives back what is spare then.
  void Give(Ledger& ledger, uint64_t bytes, bool release = true) noexcept;

  uint64_t held() const { return held_; }           // charged to the ledger
  uint64_t spare() const { return held_ - used_; }  // charged and not in use
  uint64_t used() const { return used_; }           // in use by allocations
  uint64_t grant() const { return grant_; }

 private:
  uint64_t grant_;
  uint64_t held_ = 0, used_ = 0;
};

}  // namespace cm::core
