// DeviceFootprint and ArrayBytes: what the device takes for an allocation, as an H200 with driver
// 580 showed it (docs/internals.md). No Node, no GPU.
#include "core/allocator/footprint.h"

#include "core/test/check.h"

using namespace cm::core;

constexpr uint64_t KiB = 1ull << 10, MiB = 1ull << 20;

int main() {
  // Up to half a page: as asked (shared pages); above: whole pages.
  CHECK(DeviceFootprint(512) == 512);
  CHECK(DeviceFootprint(MiB) == MiB);
  CHECK(DeviceFootprint(MiB + 1) == 2 * MiB);
  CHECK(DeviceFootprint(3 * MiB / 2) == 2 * MiB);
  CHECK(DeviceFootprint(2 * MiB) == 2 * MiB);
  CHECK(DeviceFootprint(2 * MiB + 1) == 4 * MiB);
  CHECK(DeviceFootprint(4 * MiB + 1) == 6 * MiB);
  CHECK(DeviceFootprint(17 * MiB) == 18 * MiB);
  CHECK(DeviceFootprint(32 * MiB + 1) == 34 * MiB);
  // Another page size; none (a simulated device): exact.
  CHECK(DeviceFootprint(65 * KiB, 64 * KiB) == 128 * KiB);
  CHECK(DeviceFootprint(3 * MiB + 7, 0) == 3 * MiB + 7);
  CHECK(DeviceFootprint(3 * MiB + 7, 1) == 3 * MiB + 7);
  // Saturates.
  CHECK(DeviceFootprint(UINT64_MAX) == UINT64_MAX);
  CHECK(DeviceFootprint(UINT64_MAX - MiB) == UINT64_MAX);

  // Arrays: 1024 x 1024 x 16 float4 is 256 MiB; 4096 x 4096 float4 with 8 levels is the H200's
  // 341.33 MiB of texels (342 MiB once rounded to pages).
  CHECK(ArrayBytes(1024, 1024, 16, 16) == 256 * MiB);
  uint64_t mip = ArrayBytes(4096, 4096, 0, 16, 8);
  CHECK(mip == 16 * (4096ull * 4096 + 2048 * 2048 + 1024 * 1024 + 512 * 512 + 256 * 256 +
                     128 * 128 + 64 * 64 + 32 * 32));
  CHECK(DeviceFootprint(mip) == 342 * MiB);
  // 1D and 2D: a missing extent counts as 1 and is not halved.
  CHECK(ArrayBytes(1000, 0, 0, 4) == 4000);
  CHECK(ArrayBytes(8, 0, 0, 1, 4) == 8 + 4 + 2 + 1);
  CHECK(ArrayBytes(8, 4, 0, 1, 2) == 32 + 8);
  // Layered: the layers are not halved.
  CHECK(ArrayBytes(4, 4, 3, 1, 2, true) == 48 + 12);
  // Levels past 1 x 1 cost one texel each, however many are asked for.
  CHECK(ArrayBytes(2, 0, 0, 1, 5) == 2 + 1 + 1 + 1 + 1);
  CHECK(ArrayBytes(1, 1, 1, 4, 4000000000u) == 4ull * 4000000000u);
  // Saturates.
  CHECK(ArrayBytes(1ull << 40, 1ull << 40, 1, 16) == UINT64_MAX);
  CHECK(ArrayBytes(UINT64_MAX, 1, 1, 1, 2) == UINT64_MAX);
  if (failures) std::fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
