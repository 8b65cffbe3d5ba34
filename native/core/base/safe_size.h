// What a JavaScript number may be when it stands for a byte count, an offset or a handle.
#pragma once

#include <cmath>

namespace cm::core {

// A whole number from 0 to 2^53-1 read as a double (NaN and the infinities are not).
inline bool IsSafeSize(double d) { return d >= 0 && d <= 9007199254740991.0 && d == std::floor(d); }

}  // namespace cm::core
