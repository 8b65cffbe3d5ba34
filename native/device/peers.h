// Peer access between two devices (NVLink or PCIe P2P), enabled once per pair and direction,
// lazily, per environment; and the matrix of what each pair can do. The copies themselves are in
// transfer/peer_copy.h.
#pragma once

#include <napi.h>

#include <vector>

#include "binding/instance.h"

namespace cm {

// Enables access from device `from` to device `to` if the pair allows it ("already enabled" is
// success). Returns whether the access is on. Thread-safe.
bool EnablePeer(Instance& inst, int from, int to);

// What must follow peer access for memory mapped with CUDA's virtual memory calls, which
// cudaDeviceEnablePeerAccess does not reach: `grant(reader, owner)` makes what is mapped on
// `owner` usable by `reader`, false if it could not. Set once by the layer that maps such memory
// (memory/vmm); EnablePeer calls it for each pair it turns on, holding its environment's peer
// lock but not the process-wide one that PeersReading takes.
using PeerGrantHook = bool (*)(int reader, int owner);
void SetPeerGrantHook(PeerGrantHook grant);
// The devices with peer access to `owner` on, process-wide (peer access belongs to the process's
// context): the owner first, then the others ascending. What a new mapping on `owner` is made
// accessible to.
std::vector<int> PeersReading(int owner);
void InitPeer(Napi::Env env, Napi::Object exports);

}  // namespace cm
