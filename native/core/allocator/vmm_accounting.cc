#include "core/allocator/vmm_accounting.h"

namespace cm::core {

bool VmmAccounting::Created(uint64_t handle, uint64_t bytes, bool charged) noexcept {
  try {
    handles_[handle] = Handle{bytes, charged, 1, 0};
    return true;
  } catch (...) {
    return false;
  }
}

bool VmmAccounting::Retained(uint64_t handle) noexcept {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return false;
  ++it->second.refs;
  return true;
}

bool VmmAccounting::Released(uint64_t handle, Gone* gone) noexcept {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return false;
  Handle& h = it->second;
  if (h.refs) --h.refs;
  if (h.refs || h.mappings) return false;
  *gone = {handle, h};
  handles_.erase(it);
  return true;
}

bool VmmAccounting::Mapped(uint64_t address, uint64_t size, uint64_t handle) noexcept {
  auto it = handles_.find(handle);
  if (it == handles_.end()) return false;
  try {
    mappings_[address] = Mapping{size, handle};
  } catch (...) {
    return false;
  }
  ++it->second.mappings;
  return true;
}

void VmmAccounting::Unmapped(uint64_t address, uint64_t size, std::vector<Gone>* gone) noexcept {
  uint64_t end = address + size < address ? UINT64_MAX : address + size;
  for (auto m = mappings_.lower_bound(address); m != mappings_.end() && m->first < end;) {
    auto h = handles_.find(m->second.handle);
    m = mappings_.erase(m);
    if (h == handles_.end()) continue;
    if (h->second.mappings) --h->second.mappings;
    if (h->second.refs || h->second.mappings) continue;
    try {
      gone->emplace_back(h->first, h->second);
    } catch (...) {
      continue;  // kept: charged until the process ends, never given back twice
    }
    handles_.erase(h);
  }
}

void VmmAccounting::Clear() noexcept {
  handles_.clear();
  mappings_.clear();
}

const VmmAccounting::Handle* VmmAccounting::Find(uint64_t handle) const {
  auto it = handles_.find(handle);
  return it == handles_.end() ? nullptr : &it->second;
}

}  // namespace cm::core
