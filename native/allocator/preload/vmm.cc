// CUDA virtual memory (cuMemCreate, cuMemMap, cuMemUnmap, cuMemRetainAllocationHandle,
// cuMemRelease): a handle's physical memory is charged from its creation for as long as it has a
// reference or a mapping (core/allocator/vmm_accounting.h), so a pool that maps and releases at
// once, as llama.cpp's does, stays charged until its last unmap. Memory exported to another process
// (cuMemExportToShareableHandle) lives on there after this process lets go of it, uncharged: the
// exporter's charge ends with its own last reference and mapping.
#include <mutex>

#include "allocator/preload/areas.h"
#include "allocator/preload/charge.h"
#include "core/allocator/footprint.h"
#include "core/allocator/vmm_accounting.h"

using namespace cm::preload;

namespace {

// Held across each driver call and the accounting it changes, so that the two never disagree
// (VMM calls are a pool's growth and shrinking, not a hot path).
std::mutex g_vmm_mutex;
cm::core::VmmAccounting& g_vmm = *new cm::core::VmmAccounting;

void GiveBackHandle(const cm::core::VmmAccounting::Gone& gone) {
  if (gone.second.charged) Member::Get().Give(gone.second.bytes);
  Recorder::Get().Free("handle", gone.first, gone.second.bytes);
}

}  // namespace

namespace cm::preload {
void VmmBeforeFork() { g_vmm_mutex.lock(); }
void VmmAfterForkParent() { g_vmm_mutex.unlock(); }
void VmmAfterForkChild() {
  g_vmm.Clear();
  g_vmm_mutex.unlock();
}
}  // namespace cm::preload

CM_WRAPPER CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                                const void* prop, unsigned long long flags) {
  auto forward = [&] { return Call<kMemCreate>(handle, bytes, prop, flags); };
  const auto* head = static_cast<const CUmemAllocationPropHead*>(prop);
  CUdevice dev = head && head->location.type == kMemLocationTypeDevice ? head->location.id : -1;
  if (!Active() || !Tracked(dev)) return forward();
  uint64_t charge =
      cm::core::DeviceFootprint(bytes, GroupDevice() == "simulated" ? 1 : DevicePage(dev));
  Member& m = Member::Get();
  Member::Verdict v =
      TakeOrTrim(charge, "cuMemCreate", LibraryCharging(__builtin_return_address(0)));
  if (v == Member::Verdict::kRefused) {
    Recorder::Get().Oom(charge);
    return kCudaErrorOutOfMemory;
  }
  bool charged = v == Member::Verdict::kCharged;
  std::unique_lock<std::mutex> lock(g_vmm_mutex);
  CUresult r = forward();
  bool tracked = r == kCudaSuccess && g_vmm.Created(*handle, charge, charged);
  lock.unlock();
  if (r != kCudaSuccess) {
    if (charged) m.Give(charge);
    if (r == kCudaErrorOutOfMemory) Recorder::Get().Oom(charge);
    return r;
  }
  if (!tracked) {
    if (charged) m.Give(charge);
    m.FailOpen("ERR_PRELOAD_UNTRACKED",
               "memory ran out for the interposer's table of handles: one went on uncharged",
               charge, GroupDevice());
    return r;
  }
  Recorder::Get().Alloc("handle", *handle, charge);
  return r;
}

CM_WRAPPER CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (!Active()) return Call<kMemRelease>(handle);
  cm::core::VmmAccounting::Gone gone;
  std::unique_lock<std::mutex> lock(g_vmm_mutex);
  CUresult r = Call<kMemRelease>(handle);
  bool freed = r == kCudaSuccess && g_vmm.Released(handle, &gone);
  lock.unlock();
  if (freed) GiveBackHandle(gone);
  return r;
}

CM_WRAPPER CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (!Active()) return Call<kMemMap>(ptr, size, offset, handle, flags);
  std::lock_guard<std::mutex> lock(g_vmm_mutex);
  CUresult r = Call<kMemMap>(ptr, size, offset, handle, flags);
  if (r == kCudaSuccess) g_vmm.Mapped(ptr, size, handle);
  return r;
}

CM_WRAPPER CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (!Active()) return Call<kMemUnmap>(ptr, size);
  std::vector<cm::core::VmmAccounting::Gone> gone;
  std::unique_lock<std::mutex> lock(g_vmm_mutex);
  CUresult r = Call<kMemUnmap>(ptr, size);
  if (r == kCudaSuccess) g_vmm.Unmapped(ptr, size, &gone);
  lock.unlock();
  uint64_t charged = 0;  // one ledger operation for all that the unmap freed
  for (const auto& g : gone) {
    if (g.second.charged) charged += g.second.bytes;
    Recorder::Get().Free("handle", g.first, g.second.bytes);
  }
  if (charged) Member::Get().Give(charged);
  return r;
}

CM_WRAPPER CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (!Active()) return Call<kMemRetainAllocationHandle>(handle, addr);
  std::lock_guard<std::mutex> lock(g_vmm_mutex);
  CUresult r = Call<kMemRetainAllocationHandle>(handle, addr);
  if (r == kCudaSuccess && handle) g_vmm.Retained(*handle);
  return r;
}
