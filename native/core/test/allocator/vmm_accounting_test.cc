// VmmAccounting: a cuMemCreate handle's memory lives while it is referenced or mapped, whatever
// the order of release and unmap. No Node, no GPU.
#include "core/allocator/vmm_accounting.h"

#include "core/test/check.h"

using namespace cm::core;

constexpr uint64_t MiB = 1ull << 20;

int main() {
  VmmAccounting v;
  VmmAccounting::Gone gone;
  std::vector<VmmAccounting::Gone> unmapped;

  // Released while unreferenced and unmapped: gone at once.
  CHECK(v.Created(1, 2 * MiB, true));
  CHECK(v.Released(1, &gone) && gone.first == 1 && gone.second.bytes == 2 * MiB);
  CHECK(v.handles() == 0);

  // llama.cpp's pool: create, map, release at once; the memory lives until the last unmap.
  CHECK(v.Created(2, 40 * MiB, true));
  CHECK(v.Mapped(0x1000000, 40 * MiB, 2));
  CHECK(!v.Released(2, &gone));
  CHECK(v.Find(2) && v.Find(2)->refs == 0 && v.Find(2)->mappings == 1);
  v.Unmapped(0x1000000, 40 * MiB, &unmapped);
  CHECK(unmapped.size() == 1 && unmapped[0].first == 2 && unmapped[0].second.charged);
  CHECK(v.handles() == 0 && v.mappings() == 0);
  unmapped.clear();

  // Mapped twice, retained once: freed only by the last of two unmaps and two releases.
  CHECK(v.Created(3, 4 * MiB, false));
  CHECK(v.Mapped(0x10000000, 4 * MiB, 3) && v.Mapped(0x20000000, 4 * MiB, 3));
  CHECK(v.Retained(3));
  CHECK(!v.Released(3, &gone));
  v.Unmapped(0x10000000, 4 * MiB, &unmapped);
  CHECK(unmapped.empty());
  CHECK(!v.Released(3, &gone));  // no reference left, one mapping
  v.Unmapped(0x20000000, 4 * MiB, &unmapped);
  CHECK(unmapped.size() == 1 && !unmapped[0].second.charged);
  unmapped.clear();

  // One unmap over several mappings (of two handles), and a range that starts before them.
  CHECK(v.Created(4, 2 * MiB, true) && v.Created(5, 2 * MiB, true));
  CHECK(v.Mapped(0x40000000, 2 * MiB, 4) && v.Mapped(0x40200000, 2 * MiB, 5));
  CHECK(!v.Released(4, &gone) && !v.Released(5, &gone));
  v.Unmapped(0x3ff00000, 6 * MiB, &unmapped);
  CHECK(unmapped.size() == 2 && v.handles() == 0 && v.mappings() == 0);
  unmapped.clear();

  // Untracked handles (another device's, an imported one): nothing is counted or given back.
  CHECK(!v.Retained(99));
  CHECK(!v.Released(99, &gone));
  CHECK(!v.Mapped(0x50000000, MiB, 99));
  v.Unmapped(0x50000000, MiB, &unmapped);
  CHECK(unmapped.empty());

  // A range at the top of the address space does not wrap.
  CHECK(v.Created(6, 2 * MiB, true) && v.Mapped(UINT64_MAX - 4 * MiB, 2 * MiB, 6));
  CHECK(!v.Released(6, &gone));
  v.Unmapped(UINT64_MAX - 4 * MiB, 8 * MiB, &unmapped);
  CHECK(unmapped.size() == 1);
  unmapped.clear();

  // Clear forgets everything.
  CHECK(v.Created(7, MiB, true) && v.Mapped(0x60000000, MiB, 7));
  v.Clear();
  CHECK(v.handles() == 0 && v.mappings() == 0 && !v.Released(7, &gone));
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
