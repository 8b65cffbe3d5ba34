// TenantFigures over GroupMemInfo: NVML's figures add up (free + used = total), never underflow,
// and hold the budget, for every charge, spare and device figure, hostile ones included.
#include "core/allocator/tenant_view.h"

#include <vector>

#include "core/allocator/grants.h"
#include "core/test/check.h"

using namespace cm::core;

constexpr uint64_t MiB = 1ull << 20;

int main() {
  // A group of 20 MiB on an 80 MiB device with 60 MiB free: used is the group's charge.
  {
    MemInfo device{60 * MiB, 80 * MiB};
    TenantMemory t = TenantFigures(GroupMemInfo(device, 20 * MiB, 15 * MiB, 0));
    CHECK(t.total == 20 * MiB);
    CHECK(t.free == 5 * MiB);
    CHECK(t.used == 15 * MiB);
    // This process's unused grants are its to use: free as cudaMemGetInfo tells it.
    t = TenantFigures(GroupMemInfo(device, 20 * MiB, 15 * MiB, 2 * MiB));
    CHECK(t.free == 7 * MiB);
    CHECK(t.used == 13 * MiB);
    // The device fuller than the budget leaves (memory taken outside the group): free is the
    // device's, used the rest.
    t = TenantFigures(GroupMemInfo({3 * MiB, 80 * MiB}, 20 * MiB, 15 * MiB, 0));
    CHECK(t.free == 3 * MiB);
    CHECK(t.used == 17 * MiB);
    // A charge above a lowered budget: nothing free, used the whole total, no wrap-around.
    t = TenantFigures(GroupMemInfo(device, 20 * MiB, 30 * MiB, 0));
    CHECK(t.total == 20 * MiB);
    CHECK(t.free == 0);
    CHECK(t.used == 20 * MiB);
    // A budget above the device: the device's figures.
    t = TenantFigures(GroupMemInfo(device, 100 * MiB, 0, 0));
    CHECK(t.total == 80 * MiB);
    CHECK(t.free == 60 * MiB);
    CHECK(t.used == 20 * MiB);
  }
  // Hostile figures: a free figure above the total, zeros, the largest values.
  {
    TenantMemory t = TenantFigures({90 * MiB, 80 * MiB});
    CHECK(t.free == 80 * MiB);
    CHECK(t.used == 0);
    t = TenantFigures({0, 0});
    CHECK(t.total == 0 && t.free == 0 && t.used == 0);
    t = TenantFigures(GroupMemInfo({UINT64_MAX, UINT64_MAX}, UINT64_MAX, UINT64_MAX, UINT64_MAX));
    CHECK(t.free + t.used == t.total);
  }
  // Every combination on a grid: the invariants.
  {
    std::vector<uint64_t> v = {0,         1, MiB, 20 * MiB, 80 * MiB, 100 * MiB, UINT64_MAX / 2,
                               UINT64_MAX};
    for (uint64_t dfree : v)
      for (uint64_t dtotal : v)
        for (uint64_t budget : v)
          for (uint64_t charged : v)
            for (uint64_t spare : v) {
              TenantMemory t = TenantFigures(GroupMemInfo({dfree, dtotal}, budget, charged, spare));
              CHECK(t.free + t.used == t.total);
              CHECK(t.free <= t.total && t.used <= t.total);
              CHECK(t.total <= budget && t.total <= dtotal);
              CHECK(t.free <= dfree);
            }
  }
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
