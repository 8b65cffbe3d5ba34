#include "core/allocator/policy.h"

#include <cmath>
#include <cstdio>

#include "core/allocator/pool.h"

namespace cm::core {

uint64_t DefaultReserve(uint64_t free_bytes, int cc_major) {
  constexpr uint64_t MiB = 1ull << 20;
  if (free_bytes < (2ull << 30)) return 225 * MiB;
  if (cc_major <= 6) return 500 * MiB;
  if (cc_major == 7) return 1050 * MiB;
  if (cc_major == 8) return 1536 * MiB;
  return 1800 * MiB;
}

namespace {
// Limits are whole 256-byte blocks; when that changes the figure asked for, the source says so
// (nothing is clamped silently).
void RoundDown(ResolvedLimit* out) {
  uint64_t rounded = out->bytes / kMinBlock * kMinBlock;
  if (rounded != out->bytes)
    out->source += ", " + std::to_string(out->bytes) + " bytes rounded down to " +
                   std::to_string(rounded) + " (a multiple of 256)";
  out->bytes = rounded;
}
}  // namespace

ResolvedLimit FractionLimit(double fraction, uint64_t total) {
  if (!(fraction >= 0 && fraction <= 1))
    throw std::invalid_argument("memoryFraction must be a number in [0, 1], got " +
                                std::to_string(fraction));
  ResolvedLimit out;
  out.bytes = static_cast<uint64_t>(std::floor(fraction * static_cast<double>(total)));
  char text[160];
  std::snprintf(text, sizeof text, "memoryFraction %g of %s total", fraction,
                FormatBytes(total).c_str());
  out.source = text;
  RoundDown(&out);
  return out;
}

namespace {
// Refuses a limit above the device's memory unless the options allow oversubscription, and one
// above what the device and the host hold together.
void CheckOversubscription(const PolicyOptions& options, uint64_t limit, uint64_t total,
                           const std::string& what) {
  if (limit <= total) return;
  if (!options.managed)
    throw OversubscriptionRefused(
        what + " is above the device's total memory of " + FormatBytes(total) +
        "; only a managed allocator (managed: true) can oversubscribe the device, and only "
        "with oversubscribe: true");
  if (!options.oversubscribe)
    throw OversubscriptionRefused(
        what + " is above the device's total memory of " + FormatBytes(total) +
        ": that oversubscribes the device, with host memory as its swap space; pass "
        "oversubscribe: true to ask for it");
  if (options.host_bytes && limit - total > options.host_bytes)
    throw OversubscriptionRefused(what + " is above the device's " + FormatBytes(total) +
                                  " and the host's " + FormatBytes(options.host_bytes) +
                                  " together");
}
}  // namespace

void CheckPlatformCap(const PolicyOptions& options, uint64_t bytes, const std::string& what) {
  if (!options.platform_cap || bytes <= *options.platform_cap) return;
  throw std::invalid_argument(
      what + " (" + FormatBytes(bytes) + ") is above the platform's limit of " +
      FormatBytes(*options.platform_cap) + " on this device (" + options.platform_cap_source +
      "): allocations past it would fail, so the limit is refused rather "
      "than cut; ask for at most " +
      std::to_string(*options.platform_cap) +
      " bytes, or leave the limit out to get the platform's");
}

ResolvedLimit ResolveLimit(const PolicyOptions& options, const MemInfo& device, int cc_major,
                           int cc_minor) {
  if (options.memory_fraction && options.memory_limit)
    throw std::invalid_argument(
        "memoryFraction and memoryLimit were both given; choose one: memoryFraction is a share "
        "of total device memory, memoryLimit a number of bytes");
  ResolvedLimit out;
  char text[160];
  if (options.memory_fraction) {
    double f = *options.memory_fraction;
    if (!(f > 0 && std::isfinite(f)))
      throw std::invalid_argument("memoryFraction must be a number in (0, 1], got " +
                                  std::to_string(f));
    if (f <= 1) {
      ResolvedLimit fraction = FractionLimit(f, device.total);
      CheckPlatformCap(options, fraction.bytes, fraction.source);
      return fraction;
    }
    std::snprintf(text, sizeof text, "memoryFraction %g", f);
    CheckOversubscription(options, static_cast<uint64_t>(f * static_cast<double>(device.total)),
                          device.total, text);
    out.bytes = static_cast<uint64_t>(std::floor(f * static_cast<double>(device.total)));
    std::snprintf(text, sizeof text, "memoryFraction %g of %s total (oversubscribed)", f,
                  FormatBytes(device.total).c_str());
    out.source = text;
    CheckPlatformCap(options, out.bytes, out.source);
  } else if (options.memory_limit) {
    CheckOversubscription(options, *options.memory_limit, device.total,
                          "memoryLimit " + std::to_string(*options.memory_limit) + " bytes (" +
                              FormatBytes(*options.memory_limit) + ")");
    if (*options.memory_limit < kMinBlock)
      throw std::invalid_argument("memoryLimit must be at least 256 bytes, got " +
                                  std::to_string(*options.memory_limit));
    CheckPlatformCap(options, *options.memory_limit, "memoryLimit");
    out.bytes = *options.memory_limit;
    out.source = "memoryLimit " + FormatBytes(out.bytes);
    if (out.bytes > device.total) out.source += " (oversubscribed)";
  } else {
    uint64_t reserve = DefaultReserve(device.free, cc_major);
    if (device.free <= reserve)
      throw std::invalid_argument("the device has " + FormatBytes(device.free) +
                                  " free, no more than the " + FormatBytes(reserve) +
                                  " reserve left to the driver; give memoryLimit or "
                                  "memoryFraction to use it anyway");
    out.bytes = device.free - reserve;
    std::snprintf(
        text, sizeof text, "default: %s free minus the %s reserve for compute capability %d.%d",
        FormatBytes(device.free).c_str(), FormatBytes(reserve).c_str(), cc_major, cc_minor);
    out.source = text;
    if (options.platform_default && *options.platform_default < out.bytes) {
      out.bytes = *options.platform_default;
      out.source = "the platform's " + options.platform_default_source + " (below the " +
                   std::string(text).substr(9) + ")";
    }
  }
  RoundDown(&out);
  return out;
}

uint64_t ExpandableInitialBytes(uint64_t initial, uint64_t limit, const std::string& limit_source,
                                uint64_t granule) {
  if (initial == 0 || granule == 0) return initial;
  const uint64_t mappable = limit / granule * granule;
  const uint64_t granules = initial / granule + (initial % granule ? 1 : 0);
  if (granules > mappable / granule) {
    std::string rounding = initial % granule
                               ? " rounds up to whole " + FormatBytes(granule) + " granules, " +
                                     FormatBytes(granules * granule) + ", which is"
                               : " is";
    throw std::invalid_argument("initialPoolBytes (" + FormatBytes(initial) + ")" + rounding +
                                " more than expandable segments can map under the limit of " +
                                FormatBytes(limit) + " (" + limit_source + "): at most " +
                                FormatBytes(mappable) + ", whole granules of " +
                                FormatBytes(granule));
  }
  return granules * granule;
}

}  // namespace cm::core
