#include "memory/vmm.h"

#include <mutex>
#include <set>
#include <vector>

#include "base/cuda_api.h"
#include "core/device/peer_grants.h"
#include "device/peers.h"

#ifndef CUDA_MEMORY_NO_CUDA
#include <cuda.h>  // the driver API's types only: every call goes through an entry point
#endif

namespace cm::vmm {

#ifdef CUDA_MEMORY_NO_CUDA

uint64_t Granularity(int, std::string* why) {
  *why = "this build of the addon has no CUDA";
  return 0;
}
Space::Space(int device, uint64_t granule) : device_(device), granule_(granule) {}
Space::~Space() = default;
Result GrantPeer(int, int) { return {}; }
Result Space::Reserve(uint64_t, uint64_t*) { return {Result::kError, 35, "cuMemAddressReserve"}; }
void Space::Unreserve(uint64_t, uint64_t) noexcept {}
Result Space::Map(uint64_t, uint64_t) { return {Result::kError, 35, "cuMemMap"}; }
void Space::Unmap(uint64_t, uint64_t) noexcept {}

#else

namespace {

struct Driver {
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*,
                          CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  std::string missing;  // the first entry point the driver did not give
};

template <typename F>
void Find(const char* name, F* fn, std::string* missing) {
  *fn = DriverEntryPoint<F>(name);
  if (!*fn && missing->empty()) *missing = name;
}

const Driver& Get() {
  static const Driver d = [] {
    Driver x;
    Find("cuDeviceGetAttribute", &x.device_get_attribute, &x.missing);
    Find("cuMemGetAllocationGranularity", &x.granularity, &x.missing);
    Find("cuMemAddressReserve", &x.reserve, &x.missing);
    Find("cuMemAddressFree", &x.address_free, &x.missing);
    Find("cuMemCreate", &x.create, &x.missing);
    Find("cuMemRelease", &x.release, &x.missing);
    Find("cuMemMap", &x.map, &x.missing);
    Find("cuMemUnmap", &x.unmap, &x.missing);
    Find("cuMemSetAccess", &x.set_access, &x.missing);
    return x;
  }();
  return d;
}

CUmemAllocationProp Prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;  // not shareable: see ipc.cc
  return prop;
}

Result Status(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return {};
  return {r == CUDA_ERROR_OUT_OF_MEMORY ? Result::kOutOfMemory : Result::kError,
          static_cast<int>(r), call};
}

// Every live Space, process-wide (peer access belongs to the process's context): a grant
// reaches the mappings of every allocator on the owner, in any environment. The lock guards the
// spaces' granule maps too, which a grant walks.
struct Registry {
  std::mutex mutex;
  std::set<Space*> spaces;
};
Registry& Spaces() {
  static Registry* r = new Registry();  // never destroyed: spaces may outlive static teardown
  return *r;
}

CUmemAccessDesc ReadWrite(int device) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

}  // namespace

Result GrantPeer(int reader, int owner) {
  const Driver& d = Get();
  if (!d.missing.empty()) return {};  // no driver calls: nothing can have been mapped
  Registry& r = Spaces();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (Space* s : r.spaces) {
    Result st = s->GrantLocked(owner, reader);
    if (!st.ok()) return st;
  }
  return {};
}

Space::Space(int device, uint64_t granule) : device_(device), granule_(granule) {
  // From the first mapping on, each pair peer access turns on reaches what is mapped.
  static std::once_flag hooked;
  std::call_once(hooked, [] {
    SetPeerGrantHook([](int reader, int owner) { return GrantPeer(reader, owner).ok(); });
  });
  Registry& r = Spaces();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.spaces.insert(this);
}

Result Space::GrantLocked(int owner, int reader) {
  if (owner != device_ || handles_.empty()) return {};
  const CUmemAccessDesc access = ReadWrite(reader);
  std::vector<uint64_t> starts;
  starts.reserve(handles_.size());
  for (const auto& [address, handle] : handles_) starts.push_back(address);
  for (const core::MappedRun& run : core::MappedRuns(starts, granule_)) {
    Result st = Status(Get().set_access(run.address, run.bytes, &access, 1), "cuMemSetAccess");
    if (!st.ok()) return st;
  }
  return {};
}

uint64_t Granularity(int device, std::string* why) {
  const Driver& d = Get();
  if (!d.missing.empty()) {
    *why =
        "the driver has no " + d.missing + " (virtual memory management needs CUDA 10.2 or later)";
    return 0;
  }
  if (UseDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    *why = "device " + std::to_string(device) + " cannot be made current";
    return 0;
  }
  int supported = 0;
  if (d.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                             device) != CUDA_SUCCESS ||
      !supported) {
    *why = "device " + std::to_string(device) +
           " does not support virtual memory management "
           "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)";
    return 0;
  }
  CUmemAllocationProp prop = Prop(device);
  size_t g = 0;
  if (d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0) {
    *why = "cuMemGetAllocationGranularity failed for device " + std::to_string(device);
    return 0;
  }
  return g;
}

Space::~Space() {
  {
    Registry& r = Spaces();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.spaces.erase(this);
  }
  if (!handles_.empty()) Unmap(handles_.begin()->first, 0);
  for (auto& [base, size] : ranges_) Get().address_free(base, size);
}

Result Space::Reserve(uint64_t bytes, uint64_t* address) {
  CUdeviceptr p = 0;
  UseDevice(device_);
  Result st = Status(Get().reserve(&p, bytes, granule_, 0, 0), "cuMemAddressReserve");
  if (st.ok()) {
    *address = p;
    ranges_[p] = bytes;
  }
  return st;
}

void Space::Unreserve(uint64_t address, uint64_t bytes) noexcept {
  if (ranges_.erase(address)) Get().address_free(address, bytes);
}

Result Space::Map(uint64_t address, uint64_t bytes) {
  const Driver& d = Get();
  UseDevice(device_);
  CUmemAllocationProp prop = Prop(device_);
  uint64_t done = 0;
  Result st;
  Registry& r = Spaces();
  for (; done < bytes; done += granule_) {
    CUmemGenericAllocationHandle h = 0;
    st = Status(d.create(&h, granule_, &prop, 0), "cuMemCreate");
    if (!st.ok()) break;
    st = Status(d.map(address + done, granule_, 0, h, 0), "cuMemMap");
    if (!st.ok()) {
      d.release(h);
      break;
    }
    std::lock_guard<std::mutex> lock(r.mutex);
    handles_[address + done] = h;
  }
  if (st.ok()) {
    // Read after the granules are in handles_: a pair turned on meanwhile is either in this
    // list or its grant (GrantPeer) reaches these granules.
    std::vector<CUmemAccessDesc> access;
    for (int device : PeersReading(device_)) access.push_back(ReadWrite(device));
    st = Status(d.set_access(address, bytes, access.data(), access.size()), "cuMemSetAccess");
  }
  if (!st.ok() && done > 0) Unmap(address, done);
  return st;
}

void Space::Unmap(uint64_t address, uint64_t bytes) noexcept {
  const Driver& d = Get();
  UseDevice(device_);
  cudaDeviceSynchronize();  // nothing queued may still use what goes
  (void)cudaGetLastError();
  // bytes 0: everything (the destructor).
  std::lock_guard<std::mutex> lock(Spaces().mutex);
  auto it = handles_.lower_bound(address);
  while (it != handles_.end() && (bytes == 0 || it->first < address + bytes)) {
    d.unmap(it->first, granule_);
    d.release(it->second);
    it = handles_.erase(it);
  }
}

#endif

}  // namespace cm::vmm
