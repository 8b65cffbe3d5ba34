// A GPU's uuid as CUDA's 16 bytes and as text, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", the way
// nvidia-smi -L prints it: the key of a device in the group ledgers.
#pragma once

#include <cstdio>
#include <string>

namespace cm::core {

inline std::string GpuUuid(const unsigned char* u) {
  char s[48];
  std::snprintf(s, sizeof s,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return s;
}

}  // namespace cm::core
