// CUDA virtual memory management for expandable segments: an address range reserved once, and
// device memory mapped into it and out of it a granule at a time (cuMemAddressReserve,
// cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease). The driver API is reached
// at run time through cudaGetDriverEntryPointByVersion, so the addon links only the runtime and
// still needs nothing but the driver.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace cm::vmm {

// What a driver call of this file returned: success, out of memory, or another error with the
// driver's code and the call that failed. The allocator turns it into its upstream's status.
struct Result {
  enum Kind { kOk, kOutOfMemory, kError } kind = kOk;
  int code = 0;      // a CUresult
  std::string call;  // e.g. "cuMemMap"
  bool ok() const { return kind == kOk; }
};

// The device's minimum granularity for device memory (2 MiB on the H100), or 0 with `why`
// filled when the driver or the device cannot do this.
uint64_t Granularity(int device, std::string* why);

// Lets `reader` use what every Space of `owner` has mapped so far (what is mapped later asks
// PeersReading): the virtual-memory half of peer access, which cudaDeviceEnablePeerAccess does
// not reach. Called through the hook of device/peers.h when a pair is turned on.
Result GrantPeer(int reader, int owner);

// One reservation of a device's address space and what is mapped into it.
class Space {
 public:
  Space(int device, uint64_t granule);
  ~Space();
  Space(const Space&) = delete;
  Space& operator=(const Space&) = delete;
  Result Reserve(uint64_t bytes, uint64_t* address);
  void Unreserve(uint64_t address, uint64_t bytes) noexcept;
  // Maps `bytes` at `address` with one physical allocation per granule, readable and writable
  // by the device and by every device granted access to it (GrantPeer); all or nothing.
  Result Map(uint64_t address, uint64_t bytes);
  // Waits for the device (as cudaFree does), then unmaps and releases each granule.
  void Unmap(uint64_t address, uint64_t bytes) noexcept;

 private:
  friend Result GrantPeer(int reader, int owner);
  // Lets `reader` use what is mapped here if this space is `owner`'s; the registry's lock held.
  Result GrantLocked(int owner, int reader);

  int device_;
  uint64_t granule_;
  std::map<uint64_t, unsigned long long> handles_;  // mapped granule -> its allocation handle
  std::map<uint64_t, uint64_t> ranges_;             // reserved base -> size
};

}  // namespace cm::vmm
