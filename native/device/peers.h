// Copies between two devices: peer access (NVLink or PCIe P2P), enabled once per pair and
// direction, lazily, per addon instance; or staging through pinned host memory, for pairs that
// cannot reach each other (or when asked). And the matrix of what each pair can do.
#pragma once

#include <napi.h>

#include "binding/instance.h"

namespace cm {

// Enables access from device `from` to device `to` if the pair allows it ("already enabled" is
// success). Returns whether the access is on. Thread-safe.
bool EnablePeer(Instance& inst, int from, int to);
// Queues dst (on dst_device) <- src (on src_device), n bytes, directly over the peer link, on the
// source device's peer stream, and returns without waiting. With `after` (a stream of the
// caller's), the copy follows the stream's earlier work and the stream's later work follows the
// copy. With `done`, *done is an event, recorded after the copy, that the caller destroys.
Error QueuePeerCopy(Instance& inst, char* dst, int dst_device, const char* src, int src_device,
                    size_t n, cudaStream_t after, cudaEvent_t* done);
// The same, waiting until the bytes have arrived.
Error PeerCopy(Instance& inst, char* dst, int dst_device, const char* src, int src_device, size_t n,
               cudaStream_t after);
// The same through two pinned bounce buffers, the device-to-host copy of one chunk overlapping
// the host-to-device copy of the one before; blocks.
Error HostStagedPeerCopy(Instance& inst, char* dst, int dst_device, const char* src, int src_device,
                         size_t n);
// Frees the bounce buffers and peer streams (the instance's teardown).
void ReleasePeerStaging(Instance& inst) noexcept;
void InitPeer(Napi::Env env, Napi::Object exports);

}  // namespace cm
