// How long the physical memory of a CUDA virtual-memory handle lives, so that a charge lasts
// exactly as long: from cuMemCreate while the handle has a reference (its creation's, and one for
// each cuMemRetainAllocationHandle) or is mapped anywhere (cuMemMap). cuMemRelease drops a
// reference without freeing mapped memory ("the memory will be freed when all outstanding mappings
// to the memory are unmapped", CUDA driver API, cuMemRelease), so a pool that maps and then
// releases at once (llama.cpp's) keeps its memory until the last cuMemUnmap. No Node, no CUDA; not
// thread-safe (the caller serialises, holding its lock across the driver call and the update).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cm::core {

class VmmAccounting {
 public:
  struct Handle {
    uint64_t bytes = 0;
    bool charged = false;  // what the caller charged for it (false: tracked, not charged)
    uint32_t refs = 1;     // cuMemCreate's, and the retains not yet released
    uint32_t mappings = 0;
  };
  using Gone = std::pair<uint64_t, Handle>;  // a handle whose memory is freed, and what it held

  // A handle that cuMemCreate made. False if memory ran out (then it is not tracked).
  bool Created(uint64_t handle, uint64_t bytes, bool charged) noexcept;
  // cuMemRetainAllocationHandle answered `handle`: one reference more. False: not tracked.
  bool Retained(uint64_t handle) noexcept;
  // cuMemRelease(handle) succeeded: one reference less. True, with *gone, when that freed the
  // memory (no reference and no mapping left).
  bool Released(uint64_t handle, Gone* gone) noexcept;
  // cuMemMap(address, size, offset, handle) succeeded. False: the handle is not tracked, or memory
  // ran out (the mapping is then not counted, and the handle's memory is given back at its last
  // release as if it had never been mapped).
  bool Mapped(uint64_t address, uint64_t size, uint64_t handle) noexcept;
  // cuMemUnmap(address, size) succeeded: every mapping that starts in [address, address + size) is
  // gone, and the handles whose memory that freed are appended to *gone.
  void Unmapped(uint64_t address, uint64_t size, std::vector<Gone>* gone) noexcept;
  // Every handle still tracked (at fork, the child forgets them: Clear).
  void Clear() noexcept;

  const Handle* Find(uint64_t handle) const;
  size_t handles() const { return handles_.size(); }
  size_t mappings() const { return mappings_.size(); }

 private:
  struct Mapping {
    uint64_t size, handle;
  };
  std::unordered_map<uint64_t, Handle> handles_;
  std::map<uint64_t, Mapping> mappings_;  // by address
};

}  // namespace cm::core
