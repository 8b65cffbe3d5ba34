#include "transfer/pinned_memcpy.h"

#include <cstdint>

namespace cm {

namespace {

// The driver's signatures, with its types spelled out (CUresult is an enum, CUdeviceptr an
// unsigned 64-bit integer), so that this file needs no driver header. In a build without CUDA
// none is found, and every copy goes to the stand-in cudaMemcpy.
using DeviceAddress = unsigned long long;
using ToDevice = int (*)(DeviceAddress dst, const void* src, size_t n);
using ToHost = int (*)(void* dst, DeviceAddress src, size_t n);
using CurrentContext = int (*)(void** context);

struct Entries {
  ToDevice to_device = nullptr;
  ToHost to_host = nullptr;
  CurrentContext current = nullptr;
};

const Entries& Get() {
  static const Entries e = [] {
    Entries x;
    x.to_device = DriverEntryPoint<ToDevice>("cuMemcpyHtoD");
    x.to_host = DriverEntryPoint<ToHost>("cuMemcpyDtoH");
    x.current = DriverEntryPoint<CurrentContext>("cuCtxGetCurrent");
    return x;
  }();
  return e;
}

DeviceAddress Address(const void* p) {
  return static_cast<DeviceAddress>(reinterpret_cast<uintptr_t>(p));
}

}  // namespace

cudaError_t PinnedMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  const Entries& e = Get();
  // A thread with no context current yet (a libuv thread's first copy: the runtime binds its
  // device's primary context on first use) goes to cudaMemcpy, rather than through a driver call
  // bound to fail, which tools such as compute-sanitizer would report as an API error.
  void* context = nullptr;
  if (e.current && e.current(&context) == 0 && context) {
    if (kind == cudaMemcpyHostToDevice && e.to_device && e.to_device(Address(dst), src, n) == 0)
      return cudaSuccess;
    if (kind == cudaMemcpyDeviceToHost && e.to_host && e.to_host(dst, Address(src), n) == 0)
      return cudaSuccess;
  }
  return cudaMemcpy(dst, src, n, kind);
}

PinnedMemcpyEntries PinnedMemcpyFound() {
  const Entries& e = Get();
  PinnedMemcpyEntries found;
  found.to_device = e.to_device != nullptr;
  found.to_host = e.to_host != nullptr;
  found.current = e.current != nullptr;
  return found;
}

}  // namespace cm
