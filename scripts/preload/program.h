// What the CUDA programs of scripts/preload share: reading their --name value options (with
// scripts/measure.h, as the other measuring programs do), failing on a CUDA error with one line on
// stderr, named after the program as it was run, and cudaMemGetInfo.
#pragma once

#include <cuda_runtime.h>
#include <errno.h>  // program_invocation_short_name

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../measure.h"

namespace preload_program {

// The value after `name` on the command line, else `fallback`.
inline const char* ArgText(int argc, char** argv, const char* name, const char* fallback) {
  const char* v = measure::Text(argc, argv, name);
  return v ? v : fallback;
}

// The number after `name` on the command line, else `fallback`: 64 bits, for byte counts.
inline uint64_t Arg(int argc, char** argv, const char* name, uint64_t fallback) {
  const char* v = measure::Text(argc, argv, name);
  return v ? std::strtoull(v, nullptr, 10) : fallback;
}

[[noreturn]] inline void Fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "%s: %s: %s (%s)\n", program_invocation_short_name, what,
               cudaGetErrorName(e), cudaGetErrorString(e));
  std::exit(1);
}

// What cudaMemGetInfo reports for the current device (the interposer's budget, under one).
struct MemInfo {
  size_t free = 0, total = 0;
};

// cudaMemGetInfo, or Fail.
inline MemInfo ReadMemInfo() {
  MemInfo i;
  cudaError_t e = cudaMemGetInfo(&i.free, &i.total);
  if (e != cudaSuccess) Fail("cudaMemGetInfo", e);
  return i;
}

}  // namespace preload_program
