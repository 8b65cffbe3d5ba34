// What the stand-alone measuring programs of scripts/ (built with nvcc, outside the addon) share:
// exiting on a CUDA error with one line on stderr, their command-line options, and medians.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                   \
  do {                                                             \
    cudaError_t e = (x);                                           \
    if (e != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); \
      std::exit(1);                                                \
    }                                                              \
  } while (0)

namespace measure {

// The text after `name` on the command line, else null.
inline const char* Text(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], name)) return argv[i + 1];
  return nullptr;
}

// Whether `name` is on the command line.
inline bool Flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], name)) return true;
  return false;
}

// The integer after `name` on the command line, else `fallback`.
inline int Arg(int argc, char** argv, const char* name, int fallback) {
  const char* v = Text(argc, argv, name);
  return v ? std::atoi(v) : fallback;
}

// The comma-separated numbers after `name` on the command line (such as 20,30,46) in place of
// *out's; false where one is not a number or is negative. Without `name`, *out stays as it was.
inline bool List(int argc, char** argv, const char* name, std::vector<double>* out) {
  const char* p = Text(argc, argv, name);
  if (!p) return true;
  out->clear();
  while (*p) {
    char* end = nullptr;
    const double x = std::strtod(p, &end);
    if (end == p || x < 0) return false;
    out->push_back(x);
    p = *end == ',' ? end + 1 : end;
  }
  return true;
}

// The median (the upper one of an even count); 0 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace measure
