// Copies between two devices: directly over peer access (device/peers.h enables it), or staged
// through pinned host memory for pairs that cannot reach each other (or when asked), on the
// schedule of core/transfer/peer_schedule.h.
#pragma once

#include <cstddef>

#include "binding/errors.h"
#include "binding/instance.h"

namespace cm {

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

}  // namespace cm
