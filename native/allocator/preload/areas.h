// What the wrappers of one API area offer the others and the process's life (interpose.cc): the
// stream-ordered pools' and the graph reserve's charges, trued to the driver's reserves, and the
// memory a context's streams keep.
#pragma once

namespace cm::preload {

// Every pool's charge trued down to its reserve (a synchronisation may have trimmed it), before a
// question about free memory or a refusal.
void RefreshPools() noexcept;
// Before a refusal: the process's pools trimmed of what no allocation uses, their charges trued;
// true if that gave anything back (the refused charge is then worth trying again).
bool TrimPools() noexcept;

void PoolsBeforeFork();
void PoolsAfterForkParent();
void PoolsAfterForkChild();
void VmmBeforeFork();
void VmmAfterForkParent();
void VmmAfterForkChild();
void GraphsBeforeFork();
void GraphsAfterForkParent();
void GraphsAfterForkChild();

// A context's end (reset, release, destroy) on `dev`: the graph reserve may have gone with it.
void GraphsAfterContextEnd(int dev) noexcept;
// Held across a context's end (reset, last release, destroy), from before the driver's call until
// StreamsAfterContextEnd, so that no stream is counted meanwhile in a context handle that the end
// may hand out again. Taken before the tables' locks and the member's, let go before the graphs'.
class StreamsHeld {
 public:
  StreamsHeld();
  ~StreamsHeld();
  StreamsHeld(const StreamsHeld&) = delete;
  StreamsHeld& operator=(const StreamsHeld&) = delete;
};
// With StreamsHeld, after the end of `context`: the memory its streams kept goes with it.
void StreamsAfterContextEnd(void* context) noexcept;

void StreamsBeforeFork();
void StreamsAfterForkParent();
void StreamsAfterForkChild();

}  // namespace cm::preload
