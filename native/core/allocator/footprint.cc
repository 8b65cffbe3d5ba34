#include "core/allocator/footprint.h"

#include <algorithm>

namespace cm::core {

uint64_t DeviceFootprint(uint64_t bytes, uint64_t page) {
  if (page <= 1 || bytes <= page / 2) return bytes;
  uint64_t pages = bytes / page + (bytes % page != 0);
  uint64_t out = 0;
  return __builtin_mul_overflow(pages, page, &out) ? UINT64_MAX : out;
}

uint64_t ArrayBytes(uint64_t width, uint64_t height, uint64_t depth, uint64_t element_bytes,
                    unsigned levels, bool layered) {
  uint64_t sum = 0;
  uint64_t w = width, h = std::max<uint64_t>(height, 1), d = std::max<uint64_t>(depth, 1);
  for (unsigned l = 0; l < std::max(levels, 1u); ++l) {
    uint64_t texels = 0, level = 0;
    if (__builtin_mul_overflow(w, h, &texels) || __builtin_mul_overflow(texels, d, &texels) ||
        __builtin_mul_overflow(texels, element_bytes, &level) ||
        __builtin_add_overflow(sum, level, &sum))
      return UINT64_MAX;
    if (w == 1 && h == 1 && (layered || d == 1)) {
      // Every later level is this one again: counted at once, however many levels are asked for.
      uint64_t rest = 0;
      if (__builtin_mul_overflow(level, uint64_t(std::max(levels, 1u) - 1 - l), &rest) ||
          __builtin_add_overflow(sum, rest, &sum))
        return UINT64_MAX;
      break;
    }
    w = std::max<uint64_t>(w / 2, 1);
    if (height) h = std::max<uint64_t>(h / 2, 1);
    if (depth && !layered) d = std::max<uint64_t>(d / 2, 1);
  }
  return sum;
}

}  // namespace cm::core
