// Peer access between two devices (NVLink or PCIe P2P), enabled once per pair and direction,
// lazily, per environment; and the matrix of what each pair can do. The copies themselves are in
// transfer/peer_copy.h.
#pragma once

#include <napi.h>

#include "binding/instance.h"

namespace cm {

// Enables access from device `from` to device `to` if the pair allows it ("already enabled" is
// success). Returns whether the access is on. Thread-safe.
bool EnablePeer(Instance& inst, int from, int to);
void InitPeer(Napi::Env env, Napi::Object exports);

}  // namespace cm
