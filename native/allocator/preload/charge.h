// The paths every wrapper shares: an allocation charged to the group before the driver makes it
// and remembered for its free, a free giving back what was charged, a context's end giving back
// what lived in it. The tables of what is live are here too.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "allocator/preload/allocations.h"
#include "allocator/preload/driver.h"
#include "allocator/preload/member.h"
#include "allocator/preload/recorder.h"
#include "core/allocator/reserve_charge.h"

namespace cm::preload {

// Never destroyed: a runtime may free, release or reset from an exit handler that runs after the
// static destructors of this library.
extern Allocations&
    g_pointers;                // cuMemAlloc (both), cuMemAllocPitch, cuMemAllocManaged, by address
extern Allocations& g_arrays;  // CUDA arrays and mipmapped arrays, by handle

// Where an allocation lives: in the context current when it was made, freed when that context is
// reset or destroyed (cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, arrays), or outside any
// context (stream-ordered pools' allocations and cuMemCreate's handles, which a reset or a destroy
// leaves, as cuCtxDestroy's documentation says and the H100 showed).
enum class Lives { kInContext, kOutsideContexts };

// The ledger file (its name, without the folder) that the cuda-memory addon is charging a region
// to on this thread right now, if `caller` is in the addon; null otherwise. The library's group
// allocators charge their own regions, so the interposer leaves exactly those uncharged, and
// charges everything else the addon takes (a plain DeviceBuffer, another group's regions).
const char* LibraryCharging(void* caller);
// Whether `caller` (a return address) is in the cuda-memory addon.
bool LibraryCaller(void* caller);

// The context an allocation made now lives in, for the end of that context to take it: the
// current one, or for a green context (which frees nothing when destroyed: its allocations go with
// its device's primary context, as the H200 showed) the primary context of its device.
CUcontext LivingContext();
// cuCtxFromGreenCtx answered `context` for a green context.
void NoteGreenContext(CUcontext context);

// A charge of `bytes` through `api`: a quiet first try; where it does not fit, the process's
// stream-ordered pools are trimmed of what no allocation uses (their reserve is charged to the same
// group) and the try that may wait and is said comes after. Called with none of the interposer's
// locks held (the pools' comes first of them).
Member::Verdict TakeOrTrim(uint64_t bytes, const char* api, const char* library);
// The trim and the try that may wait, after a quiet try that found no room (kNoRoom).
Member::Verdict TakeAfterTrim(uint64_t bytes, const char* api, const char* library);

// Bytes a quiet try under the caller's lock found no room for, taken with the lock let go (the
// process's pools trimmed, then the try that may wait and is said), for the charge made once the
// lock is had again to draw on. What is left of them is given back when this goes.
class Prepaid {
 public:
  Prepaid() = default;
  Prepaid(const Prepaid&) = delete;
  Prepaid& operator=(const Prepaid&) = delete;
  ~Prepaid() {
    if (charged_ && left_) Member::Get().Give(left_);
  }

  // False where refused (the lock is not had again then).
  template <typename Lock>
  bool Take(Lock& lock, uint64_t bytes, const char* api, const char* library) {
    lock.unlock();
    Member::Verdict v = TakeAfterTrim(bytes, api, library);
    if (v == Member::Verdict::kRefused) return false;
    lock.lock();
    left_ = bytes;
    charged_ = v == Member::Verdict::kCharged;
    return true;
  }
  // `ops` whose takes draw on what is left first, counting what was let through uncharged
  // (failing open) in `*uncharged` as the ops' own uncharged takes are; beyond it, `ops`' own
  // take (a quiet one: the caller holds its lock).
  cm::core::ReserveOps Drawing(cm::core::ReserveOps ops, uint64_t* uncharged);
  // All of it kept by the caller, not given back: whether it was charged.
  bool Keep() {
    left_ = 0;
    return charged_;
  }

 private:
  uint64_t left_ = 0;
  bool charged_ = false;
};

// An allocation charged `bytes` (what the device takes for it) on `dev` through `api`: charged
// before alloc() runs, given back if it fails, then remembered under key() for its free. `kind`
// names it in a trace ("" for an address).
template <typename Alloc, typename Key>
CUresult Allocate(void* caller, Allocations& table, const char* kind, Lives lives, CUdevice dev,
                  uint64_t bytes, const char* api, Alloc alloc, Key key) {
  if (!Active() || !Tracked(dev)) return alloc();
  Member& m = Member::Get();
  Member::Verdict v = TakeOrTrim(bytes, api, LibraryCharging(caller));
  if (v == Member::Verdict::kRefused) {
    Recorder::Get().Oom(bytes);
    return kCudaErrorOutOfMemory;
  }
  CUresult r = alloc();
  if (r != kCudaSuccess) {
    if (v == Member::Verdict::kCharged) m.Give(bytes);
    if (r == kCudaErrorOutOfMemory) Recorder::Get().Oom(bytes);
    return r;
  }
  uint64_t k = key();
  void* context = lives == Lives::kInContext ? LivingContext() : nullptr;  // for EndContext
  if (!table.Insert(k, {bytes, v == Member::Verdict::kCharged, context})) {
    if (v == Member::Verdict::kCharged) m.Give(bytes);
    m.FailOpen("ERR_PRELOAD_UNTRACKED",
               "memory ran out for the interposer's table of allocations: one went on uncharged",
               bytes, GroupDevice());
    return r;
  }
  Recorder::Get().Alloc(kind, k, bytes);
  return r;
}

// A free of `key`: what it was charged comes back once the driver has freed it.
template <typename Free>
CUresult Release(Allocations& table, const char* kind, uint64_t key, Free free) {
  if (!Active()) return free();
  Allocation a;
  // Out of the table before the free: once freed, another thread may get the same address.
  bool known = table.Remove(key, &a);
  CUresult r = free();
  if (!known) return r;
  if (r != kCudaSuccess) {
    table.Insert(key, a);
    return r;
  }
  if (a.charged) Member::Get().Give(a.bytes);
  Recorder::Get().Free(kind, key, a.bytes);
  return r;
}

// What a context's end freed, given back in one ledger operation.
void GiveBack(const std::vector<std::pair<uint64_t, Allocation>>& gone, const char* kind);

// Around fork (the child forgets every table).
void ChargeBeforeFork();
void ChargeAfterForkParent();
void ChargeAfterForkChild();

}  // namespace cm::preload
