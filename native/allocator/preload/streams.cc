// Streams: each takes memory of the driver's beside its context, which the driver keeps when the
// stream is destroyed, for the next one (core/allocator/stream_slots.h). A context on the group's
// device is charged for the most streams it has had live at once, each as it is created, and
// gives that back at its end (reset, last release, destroy). A stream the budget cannot afford is
// not created: the call answers CUDA_ERROR_OUT_OF_MEMORY, as the driver does when it has no memory
// left for one.
#include <mutex>
#include <unordered_map>

#include "allocator/preload/areas.h"
#include "allocator/preload/charge.h"
#include "core/allocator/stream_slots.h"

using namespace cm::preload;

namespace {

// One lock for the contexts' slots and the streams, held across the driver's call.
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

template <typename Forward>
CUresult Create(void* caller, CUstream* stream, const char* api, Forward forward) {
  if (!stream || !Active() || !Tracked(CurrentDevice())) return forward();
  std::lock_guard<std::mutex> lock(g_mutex);
  CUcontext context = LivingContext();
  cm::core::StreamSlots& slots = g_slots[context];
  uint64_t charge = slots.ToCharge(), charged = 0;
  Member& m = Member::Get();
  if (charge) {
    Member::Verdict v = m.Take(charge, api, GroupDevice(), LibraryCharging(caller));
    if (v == Member::Verdict::kRefused) {
      Recorder::Get().Oom(charge);
      return kCudaErrorOutOfMemory;
    }
    if (v == Member::Verdict::kCharged) charged = charge;
  }
  CUresult r = forward();
  if (r != kCudaSuccess) {
    if (charged) m.Give(charged);
    return r;
  }
  try {
    g_streams[*stream] = context;
  } catch (...) {
    // Not counted live: its destroy passes, and its slot stays charged until the context ends.
  }
  uint64_t before = slots.charged();
  slots.Created(charge, charged);
  Trace(context, before, slots.charged());
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

void StreamsAfterContextEnd(void* context) noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_mutex);
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
  return Create(__builtin_return_address(0), stream, "cuStreamCreate",
                [&] { return Call<kStreamCreate>(stream, flags); });
}

CM_WRAPPER CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return Create(__builtin_return_address(0), stream, "cuStreamCreateWithPriority",
                [&] { return Call<kStreamCreateWithPriority>(stream, flags, priority); });
}

CM_WRAPPER CUresult cuStreamDestroy_v2(CUstream stream) {
  return Destroy(stream, [&] { return Call<kStreamDestroyV2>(stream); });
}

CM_WRAPPER CUresult cuStreamDestroy(CUstream stream) {
  return Destroy(stream, [&] { return Call<kStreamDestroy>(stream); });
}
