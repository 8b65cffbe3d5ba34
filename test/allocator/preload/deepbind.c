/* A loader that opens the test program built as a shared library (program.c with
 * -Dmain=program_main) by its name, found only through this loader's own RUNPATH ($ORIGIN/deep),
 * with RTLD_DEEPBIND when its first argument says so (as a runtime compiled into a module, or a
 * module linked with the driver, is loaded by frameworks that keep its symbols to itself), and runs
 * it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  int mode = RTLD_NOW | (argc > 1 && !strcmp(argv[1], "deep") ? RTLD_DEEPBIND : 0);
  const char* name = argc > 2 ? argv[2] : "libprogram.so";
  void* h = dlopen(name, mode);
  if (!h) {
    fprintf(stderr, "deepbind: %s\n", dlerror());
    return 3;
  }
  int (*run)(void) = (int (*)(void))dlsym(h, "program_main");
  if (!run) {
    fprintf(stderr, "deepbind: %s\n", dlerror());
    return 4;
  }
  return run();
}
