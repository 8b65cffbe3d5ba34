// The one assertion of the core's test programs: a failed CHECK is printed with its place and
// counted, and the program goes on; main() returns non-zero when any failed.
#pragma once

#include <cstdio>

static int failures = 0;
#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                                   \
    }                                                                               \
  } while (0)
