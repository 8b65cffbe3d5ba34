// copy(), copyAsync() and memset() between device memory, pinned memory and Node buffers, and
// the routing that picks cudaMemcpy, the staged pipeline or a temporary registration.
#pragma once

#include <napi.h>

#include "binding/errors.h"
#include "binding/handles.h"
#include "binding/instance.h"

namespace cm {

// kPeer and kHost apply to copies between two devices: over the peer link, or staged through
// pinned host memory.
enum class Strategy { kAuto, kDriver, kStaged, kRegister, kPeer, kHost };

// One side of a copy, resolved to a raw range. Managed memory is wherever the driver last put
// it: copies to and from it are left to the driver (cudaMemcpyDefault).
struct Endpoint {
  enum Where { kDevice, kPinned, kPageable, kManaged } where = kPageable;
  char* ptr = nullptr;
  size_t length = 0;  // bytes available from ptr
  int device = 0;
  Allocation* alloc = nullptr;  // null for plain Node memory
};

// Resolves a handle or an ArrayBuffer view (JS normalises ArrayBuffer and SharedArrayBuffer to
// views). Throws naming `what`.
Endpoint ResolveEndpoint(Napi::Env env, Napi::Value v, const char* what);

// Copies n bytes; blocks until done. Safe off the JS thread. `stream` may be null.
Error CopyRange(Instance& inst, const Endpoint& dst, const Endpoint& src, size_t n,
                Strategy strategy, cudaStream_t stream);
// Device memory on both sides, on two different devices, and not left to cudaMemcpy
// (strategy 'driver'): a copy that PeerRoute decides.
bool BetweenDevices(const Endpoint& dst, const Endpoint& src, Strategy strategy);
// Whether a copy between two devices goes over the peer link (enabling it on first use) or
// through host memory; an error when `strategy` is kPeer and the pair cannot.
Error PeerRoute(Instance& inst, int dst_device, int src_device, Strategy strategy, bool* peer);
// Reads a strategy name ('auto' when undefined); throws a RangeError for anything else.
Strategy ReadStrategy(Napi::Env env, Napi::Value v);

void InitCopy(Napi::Env env, Napi::Object exports);

}  // namespace cm
