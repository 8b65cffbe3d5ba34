// What an allocation takes on the device, as the driver serves it, so that a budget charges what
// the device really loses and not what was asked for. Measured on an H200 with driver 580
// (docs/internals.md, "What is charged"): cudaMalloc packs allocations of up to 1 MiB into 2 MiB
// chunks of its own, and rounds anything larger up to a whole number of 2 MiB pages (1 MiB + 1
// byte takes 2 MiB, 4 MiB + 1 byte takes 6 MiB); CUDA arrays take their texels, rounded the same
// way. No Node, no CUDA.
#pragma once

#include <cstdint>

namespace cm::core {

// The driver's page for device memory where it cannot be asked (cuMemGetAllocationGranularity
// answers 2 MiB on every GPU since Pascal).
constexpr uint64_t kDevicePage = 2ull << 20;

// The bytes an allocation of `bytes` takes on a device whose page is `page`: above half a page,
// rounded up to whole pages; up to half a page, as asked (such allocations share pages, so at most
// one page per process is partly used and uncounted). A page of 0 or 1 charges exactly what was
// asked (a simulated device). Saturates instead of overflowing.
uint64_t DeviceFootprint(uint64_t bytes, uint64_t page = kDevicePage);

// The texels of a CUDA array, or of a mipmapped array of `levels` levels (each level halving every
// extent that is not layered, down to 1): width × max(height, 1) × max(depth, 1) summed over the
// levels, times `element_bytes`. `layered`: depth counts layers, which a level does not halve.
// Saturates at UINT64_MAX.
uint64_t ArrayBytes(uint64_t width, uint64_t height, uint64_t depth, uint64_t element_bytes,
                    unsigned levels = 1, bool layered = false);

}  // namespace cm::core
