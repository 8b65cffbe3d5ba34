// The charge of memory the driver keeps in reserve behind allocations, which is more than the
// allocations themselves: a stream-ordered memory pool (cudaMallocAsync's) keeps freed memory until
// a synchronisation trims it to its release threshold, reserves a whole chunk for a small
// allocation (32 MiB on an H200), and keeps a whole peak once the threshold is raised (as RMM's
// async resource and PyTorch's cudaMallocAsync backend raise it); graph memory nodes keep the
// device's graph reserve from a graph's upload or first launch until cudaDeviceGraphMemTrim. The
// group is charged what the reserve is as the driver reports it
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), never less than
// the allocations that live in it, and an allocation is charged before it is made, as every other
// one is. No Node, no CUDA; not thread-safe (the caller holds its lock across the driver call).
#pragma once

#include <cstdint>
#include <functional>

namespace cm::core {

// What a stream-ordered pool takes from the device at a time: an H200 with driver 580 reserved
// 32 MiB for a 4 KiB allocation, and grew a pool by 416 MiB for one of 394 MiB while its reserve
// held 373 MiB free.
constexpr uint64_t kPoolChunk = 32ull << 20;

// What a ReserveCharge needs from the group and the driver.
struct ReserveOps {
  std::function<bool(uint64_t)> take;       // charges bytes to the group; false: refused
  std::function<void(uint64_t)> give;       // gives bytes back
  std::function<bool(uint64_t*)> reserved;  // the reserve now; false: the driver cannot say
};

class ReserveCharge {
 public:
  // Before an allocation of `bytes`: charges what the charge lacks for the live allocations with
  // this one (rounded up to `page`), and for the reserve as it is now, whichever is more, so that
  // a reserve the group could not afford is charged before the pool may take more; false when the
  // group refuses (nothing more is charged then). Trimming the process's pools may make room, and
  // is the caller's to try before it refuses.
  // `chunk` > 0: a stream-ordered pool, which may grow by the whole allocation rounded up to
  // `chunk` although its reserve holds that much free (the free part is in pieces, or not yet
  // reusable in stream order): the reserve plus that growth is charged too, so that the pool
  // never holds more than its charge, not even until Done. 0: the reserve grows only by what the
  // live allocations with this one lack beyond it (the graph reserve's bound).
  bool Prepare(uint64_t bytes, uint64_t page, uint64_t chunk, const ReserveOps& ops);
  // After the driver's answer to that allocation: counted live if `ok`, and the charge trued to the
  // reserve. False when the reserve grew past what the group affords: the caller frees the
  // allocation (Freed) and refuses it.
  bool Done(bool ok, uint64_t bytes, const ReserveOps& ops);
  // An allocation of `bytes` freed: no longer live; the charge follows the reserve down.
  void Freed(uint64_t bytes, const ReserveOps& ops);
  // The charge trued to max(reserve, live): down always, up as far as the group affords (false
  // where it does not). A reserve the driver cannot report counts as none.
  bool Refresh(const ReserveOps& ops);
  // Everything this charge holds given back (its pool destroyed, a context reset); live
  // allocations stay counted until their frees.
  void GiveBackUnused(const ReserveOps& ops);

  uint64_t live() const { return live_; }
  uint64_t charged() const { return charged_; }

 private:
  bool TakeUpTo(uint64_t target, const ReserveOps& ops);
  uint64_t live_ = 0, charged_ = 0;
};

}  // namespace cm::core
