// Streams: each takes memory of the driver's beside its context, which the driver keeps when the
// stream is destroyed, for the next one (core/allocator/stream_slots.h). A context on the group's
// device is charged for the most streams it has had live at once, each as it is created, and
// gives that back at its end (reset, last release, destroy). A stream the budget cannot afford is
// not created: the call answers CUDA_ERROR_OUT_OF_MEMORY, as the driver does when it has no memory
// left for one. A stream that waits for room waits without the lock; a green context's streams
// (cuGreenCtxStreamCreate) are counted as its device's primary context's.
#include <mutex>
#include <unordered_map>

#include "allocator/preload/areas.h"
#include "allocator/preload/charge.h"
#include "core/allocator/stream_slots.h"

using namespace cm::preload;

namespace {

// One lock for the contexts' slots and the streams, held across the driver's call, and across a
// context's end (StreamsHeld) until its streams' charge is given back.
std::mutex g_mutex;
auto& g_slots = *new std::unordered_map<CUcontext, cm::core::StreamSlots>;
auto& g_streams = *new std::unordered_map<CUstream, CUcontext>;  // each counted stream's context

// The trace holds what a context's streams keep as one live id, "stream 0x<context>".
void Trace(CUcontext context, uint64_t before, uint64_t after) {
  if (before == after) return;
  uint64_t id = reinterpret_cast<uintptr_t>(context);
  if (before) Recorder::Get().Free("stream", id, before);
  if (after) Recorder::Get().Alloc("stream", id, after);
}

// Where a stream is made: its device, and the context whose end its memory goes with.
struct Place {
  CUdevice device = -1;
  CUcontext context = nullptr;
};

// A stream on the current context (a green one's memory goes with its device's primary).
Place Current() { return {CurrentDevice(), LivingContext()}; }

// A stream on a green context, made current or not. Where its device's primary context is not
// active, the stream is counted under no context, and its charge stays until the process ends.
Place OfGreen(CUgreenCtx green) {
  CUcontext c = nullptr;
  if (Call<kCtxFromGreenCtx>(&c, green) != kCudaSuccess || !c) return {};
  NoteGreenContext(c);
  CUdevice dev = DeviceOfContext(c);
  return {dev, PrimaryContext(dev)};
}

// With g_mutex held: the slots of `context` (null where memory ran out for them).
cm::core::StreamSlots* SlotsOf(CUcontext context) {
  try {
    return &g_slots[context];
  } catch (...) {
    return nullptr;
  }
}

// `where` is asked with the lock held, and again after a wait without it (the context may have
// ended meanwhile).
template <typename Where, typename Forward>
CUresult Create(void* caller, CUstream* stream, const char* api, Where where, Forward forward) {
  if (!stream || !Active()) return forward();
  std::unique_lock<std::mutex> lock(g_mutex);
  Place at = where();
  if (!Tracked(at.device)) {
    lock.unlock();
    return forward();
  }
  const char* library = LibraryCharging(caller);
  Member& m = Member::Get();
  cm::core::StreamSlots* slots = SlotsOf(at.context);
  if (!slots) return forward();  // not counted: its destroy passes
  uint64_t charge = slots->ToCharge();
  Member::Verdict v = Member::Verdict::kUncharged;
  if (charge) v = m.Take(charge, api, GroupDevice(), library, /*quiet=*/true);
  if (v == Member::Verdict::kRefused) {
    Recorder::Get().Oom(charge);
    return kCudaErrorOutOfMemory;
  }
  if (v == Member::Verdict::kNoRoom) {
    // No room now. The trim of the process's pools and the try that may wait and is said run
    // without this lock, so that the process's other threads destroy streams, end contexts and
    // fork meanwhile.
    Prepaid prepaid;  // given back unless this stream still takes a slot of its own
    if (!prepaid.Take(lock, charge, api, library)) {
      Recorder::Get().Oom(charge);
      return kCudaErrorOutOfMemory;
    }
    at = where();  // the context may have ended meanwhile
    slots = SlotsOf(at.context);
    if (!slots) return forward();
    charge = slots->ToCharge();
    v = charge && prepaid.Keep() ? Member::Verdict::kCharged : Member::Verdict::kUncharged;
  }
  const uint64_t charged = v == Member::Verdict::kCharged ? charge : 0;
  CUresult r = forward();
  if (r != kCudaSuccess) {
    if (charged) m.Give(charged);
    if (r == kCudaErrorOutOfMemory) Recorder::Get().Oom(cm::core::kStreamBytes);
    return r;
  }
  try {
    g_streams[*stream] = at.context;
  } catch (...) {
    // Not counted live: its destroy passes, and its slot stays charged until the context ends.
  }
  uint64_t before = slots->charged();
  // A slot is kept only where it is charged: one that failed open is not the next stream's.
  slots->Created(charged, charged);
  Trace(at.context, before, slots->charged());
  return r;
}

template <typename Forward>
CUresult Destroy(CUstream stream, Forward forward) {
  if (!Active()) return forward();
  std::lock_guard<std::mutex> lock(g_mutex);
  CUresult r = forward();
  if (r != kCudaSuccess) return r;
  auto it = g_streams.find(stream);
  if (it == g_streams.end()) return r;
  auto s = g_slots.find(it->second);
  if (s != g_slots.end()) s->second.Destroyed();
  g_streams.erase(it);
  return r;
}

}  // namespace

namespace cm::preload {

StreamsHeld::StreamsHeld() { g_mutex.lock(); }
StreamsHeld::~StreamsHeld() { g_mutex.unlock(); }

void StreamsAfterContextEnd(void* context) noexcept {
  try {
    CUcontext c = static_cast<CUcontext>(context);
    auto it = g_slots.find(c);
    if (it == g_slots.end()) return;
    uint64_t charged = it->second.charged();
    if (charged) Member::Get().Give(charged);
    Trace(c, charged, 0);
    g_slots.erase(it);
    for (auto s = g_streams.begin(); s != g_streams.end();)
      s = s->second == c ? g_streams.erase(s) : std::next(s);
  } catch (...) {
  }
}

void StreamsBeforeFork() { g_mutex.lock(); }
void StreamsAfterForkParent() { g_mutex.unlock(); }
void StreamsAfterForkChild() {
  g_slots.clear();
  g_streams.clear();
  g_mutex.unlock();
}

}  // namespace cm::preload

CM_WRAPPER CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  return Create(__builtin_return_address(0), stream, "cuStreamCreate", Current,
                [&] { return Call<kStreamCreate>(stream, flags); });
}

CM_WRAPPER CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return Create(__builtin_return_address(0), stream, "cuStreamCreateWithPriority", Current,
                [&] { return Call<kStreamCreateWithPriority>(stream, flags, priority); });
}

CM_WRAPPER CUresult cuGreenCtxStreamCreate(CUstream* stream, CUgreenCtx green, unsigned int flags,
                                           int priority) {
  return Create(
      __builtin_return_address(0), stream, "cuGreenCtxStreamCreate", [&] { return OfGreen(green); },
      [&] { return Call<kGreenCtxStreamCreate>(stream, green, flags, priority); });
}

CM_WRAPPER CUresult cuStreamDestroy_v2(CUstream stream) {
  return Destroy(stream, [&] { return Call<kStreamDestroyV2>(stream); });
}

CM_WRAPPER CUresult cuStreamDestroy(CUstream stream) {
  return Destroy(stream, [&] { return Call<kStreamDestroy>(stream); });
}
