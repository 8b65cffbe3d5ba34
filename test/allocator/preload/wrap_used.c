/* Another preloaded library, loaded after the interposer, that wraps a function of the program's
 * runtime and finds the wrapped one with dlsym(RTLD_NEXT): if the interposer's dlsym answered
 * RTLD_NEXT as if asked from itself, this would find its own wrapper and recurse until the stack
 * runs out. */
#define _GNU_SOURCE
#include <dlfcn.h>

unsigned long long fakeDeviceUsed(int dev) {
  unsigned long long (*next)(int) = (unsigned long long (*)(int))dlsym(RTLD_NEXT, "fakeDeviceUsed");
  return next(dev) + 1; /* +1: the answer went through this wrapper */
}
