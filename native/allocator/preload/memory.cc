// Plain device allocations: cuMemAlloc (and its 32-bit v1 form, where a driver still serves it),
// cuMemAllocPitch, cuMemAllocManaged and their frees, each charged what the device takes for it
// (core/allocator/footprint.h), and cuMemGetInfo and cuDeviceTotalMem, which tell a member the
// device as its group leaves it.
#include "allocator/preload/areas.h"
#include "allocator/preload/charge.h"
#include "core/allocator/footprint.h"

using namespace cm::preload;

namespace {

uint64_t Footprint(CUdevice dev, uint64_t bytes) {
  return cm::core::DeviceFootprint(bytes, GroupDevice() == "simulated" ? 1 : DevicePage(dev));
}

}  // namespace

CM_WRAPPER CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  CUdevice dev = CurrentDevice();
  return Allocate(
      __builtin_return_address(0), g_pointers, "", Lives::kInContext, dev, Footprint(dev, bytes),
      "cuMemAlloc", [&] { return Call<kMemAlloc>(dptr, bytes); }, [&] { return *dptr; });
}

CM_WRAPPER CUresult cuMemFree_v2(CUdeviceptr p) {
  return Release(g_pointers, "", p, [&] { return Call<kMemFree>(p); });
}

// The entry points of CUDA before 3.2, with 32-bit device pointers: an H200 with driver 580 has
// the symbol and answers CUDA_ERROR_INVALID_CONTEXT (201); a driver that serves them is charged.
CM_WRAPPER CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytes) {
  CUdevice dev = CurrentDevice();
  return Allocate(
      __builtin_return_address(0), g_pointers, "", Lives::kInContext, dev, Footprint(dev, bytes),
      "cuMemAlloc", [&] { return Call<kMemAllocV1>(dptr, bytes); }, [&] { return *dptr; });
}

CM_WRAPPER CUresult cuMemFree(CUdeviceptr_v1 p) {
  return Release(g_pointers, "", p, [&] { return Call<kMemFreeV1>(p); });
}

CM_WRAPPER CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  CUdevice dev = CurrentDevice();
  return Allocate(
      __builtin_return_address(0), g_pointers, "", Lives::kInContext, dev, Footprint(dev, bytes),
      "cuMemAllocManaged", [&] { return Call<kMemAllocManaged>(dptr, bytes, flags); },
      [&] { return *dptr; });
}

CM_WRAPPER CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                       size_t height, unsigned int element) {
  auto forward = [&] { return Call<kMemAllocPitch>(dptr, pitch, width, height, element); };
  CUdevice dev = CurrentDevice();
  // The pitch is known only afterwards: the row is charged rounded up to 512 bytes (the largest
  // pitch alignment CUDA devices use) before, and the charge trued up to pitch × height after.
  size_t row = width > SIZE_MAX - 511 ? width : (width + 511) & ~size_t(511);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(row), static_cast<uint64_t>(height), &bytes))
    return forward();
  CUresult r = Allocate(__builtin_return_address(0), g_pointers, "", Lives::kInContext, dev,
                        Footprint(dev, bytes), "cuMemAllocPitch", forward, [&] { return *dptr; });
  if (r != kCudaSuccess || !Active() || !pitch) return r;
  Allocation a;
  if (!g_pointers.Remove(*dptr, &a)) return r;
  uint64_t actual = Footprint(dev, static_cast<uint64_t>(*pitch) * height);
  if (a.charged && actual > a.bytes &&
      Member::Get().Take(actual - a.bytes, "cuMemAllocPitch", GroupDevice()) ==
          Member::Verdict::kRefused) {
    Call<kMemFree>(*dptr);
    Member::Get().Give(a.bytes);
    Recorder::Get().Free("", *dptr, a.bytes);
    Recorder::Get().Oom(actual);
    return kCudaErrorOutOfMemory;
  }
  if (a.charged && actual < a.bytes) Member::Get().Give(a.bytes - actual);
  a.bytes = actual;
  g_pointers.Insert(*dptr, a);
  return r;
}

// The device's memory as the group's budget leaves it to this process (Member::MemInfo), on the
// group's device; the addon's own calls get the device's figures, as its allocators account for
// the group themselves and report the device as it is.
CM_WRAPPER CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  CUresult r = Call<kMemGetInfo>(free_bytes, total_bytes);
  if (r != kCudaSuccess || !free_bytes || !total_bytes || !Active() ||
      LibraryCaller(__builtin_return_address(0)) || !Tracked(CurrentDevice()))
    return r;
  RefreshPools();
  cm::core::MemInfo info{*free_bytes, *total_bytes};
  if (Member::Get().MemInfo(GroupDevice(), &info)) {
    *free_bytes = static_cast<size_t>(info.free);
    *total_bytes = static_cast<size_t>(info.total);
  }
  return r;
}

namespace {

// The total of device `dev` as the driver gave it, or on the group's device, for any caller but the
// addon, the total cuMemGetInfo tells the group (the budget, where smaller than the device).
uint64_t GroupTotal(void* caller, CUdevice dev, uint64_t total) {
  if (!Active() || LibraryCaller(caller) || !Tracked(dev)) return total;
  cm::core::MemInfo info{total, total};
  return Member::Get().MemInfo(GroupDevice(), &info) && info.total < total ? info.total : total;
}

}  // namespace

// A device's total memory: what cudaGetDeviceProperties gives as totalGlobalMem (the runtime asks
// cuDeviceTotalMem, which cuGetProcAddress answers with the _v2 entry point), and what a program
// calling the driver reads. On the group's device, the budget where it is smaller.
CM_WRAPPER CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  CUresult r = Call<kDeviceTotalMem>(bytes, dev);
  if (r == kCudaSuccess && bytes)
    *bytes = static_cast<size_t>(GroupTotal(__builtin_return_address(0), dev, *bytes));
  return r;
}

// The 32-bit form of CUDA before 3.2: the same, never more than the driver said.
CM_WRAPPER CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  CUresult r = Call<kDeviceTotalMemV1>(bytes, dev);
  if (r == kCudaSuccess && bytes)
    *bytes = static_cast<unsigned int>(GroupTotal(__builtin_return_address(0), dev, *bytes));
  return r;
}
