// Linked into the prebuilt binary only (binding.gyp, static_cxx). The C++ runtime linked in
// statically refers to arc4random (for std::random_device, which this addon never uses), and that
// symbol exists only from glibc 2.36 on. This hidden definition satisfies the reference inside the
// binary, so the prebuilt binary loads on glibc 2.34 and 2.35 too (Ubuntu 22.04, RHEL 9).
#include <sys/random.h>

#include <cstdint>
#include <cstdlib>

extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random(void) {
  uint32_t v = 0;
  for (int tries = 0; tries < 100; ++tries)
    if (getrandom(&v, sizeof v, 0) == static_cast<ssize_t>(sizeof v)) return v;
  std::abort();  // as glibc's own arc4random does when no entropy can be had
}
