// Reading arguments from JavaScript: sizes, bounded integers, and the bytes of a view; and the one
// range check of a number argument. Each throws a TypeError or RangeError naming the argument.
#pragma once

#include <napi.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/base/safe_size.h"

namespace cm {

// The bytes of a TypedArray or DataView (over an ArrayBuffer or a SharedArrayBuffer); false if
// `v` is neither.
bool HostView(Napi::Env env, Napi::Value v, char** data, size_t* length);

// An optional argument left out: undefined or null (one Node-API call).
bool Absent(Napi::Value v);

using core::IsSafeSize;

// Reads a non-negative safe integer (a Number or BigInt) naming `what` in the error.
uint64_t ReadSize(Napi::Env env, Napi::Value v, const char* what);
int ReadInt(Napi::Env env, Napi::Value v, const char* what, int lo, int hi);
std::string ReadString(Napi::Env env, Napi::Value v, const char* what);

// A number as JavaScript prints it (-1, 0.5, NaN, Infinity), for messages.
std::string NumberText(double v);

// Whether a range error's message ends with ", got <value>" (a few never have).
enum class Got { kShown, kLeftOut };

// The RangeError (ERR_OUT_OF_RANGE) "<what> must be <expected>", then ", got <value>" unless
// `value` is empty.
[[noreturn]] void ThrowOutOfRange(Napi::Env env, const char* what, const std::string& expected,
                                  const std::string& value);

// The range check of a number argument, which every hand-written one goes through: `value` from
// `lo` to `hi`, else the RangeError "<what> must be <expected>, got <value>"; `expected` left out
// is "an integer from <lo> to <hi>". A number prints as JavaScript prints it (NumberText). A double
// also fails when it is not a whole, finite number. Inline:
// every copy checks its sizes through it.
template <class V, class B>
inline void CheckRange(Napi::Env env, const char* what, V value, B lo, B hi,
                       const char* expected = nullptr, Got got = Got::kShown) {
  bool in = value >= lo && value <= hi;
  if constexpr (std::is_floating_point_v<V>)
    in = in && std::isfinite(value) && value == std::floor(value);
  if (in) return;
  ThrowOutOfRange(env, what,
                  expected ? std::string(expected)
                           : "an integer from " + std::to_string(lo) + " to " + std::to_string(hi),
                  got == Got::kLeftOut          ? std::string()
                  : std::is_floating_point_v<V> ? NumberText(static_cast<double>(value))
                                                : std::to_string(value));
}

}  // namespace cm
