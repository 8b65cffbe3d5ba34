/* A loader that opens the test program built as a shared library (program.c with
 * -Dmain=program_main) by its name, found only through this loader's own RUNPATH ($ORIGIN/deep),
 * and runs it: plainly ("plain"), with RTLD_DEEPBIND ("deep": as a runtime compiled into a module,
 * or a module linked with the driver, is loaded by frameworks that keep its symbols to itself), or
 * into a link-map namespace of its own ("newlm": dlmopen; a program with a second C library of its
 * own cannot share the first one's standard input, so that one is not run: the loader answers
 * "ok loaded" to each line instead, until its input ends). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  const char* how = argc > 1 ? argv[1] : "plain";
  const char* name = argc > 2 ? argv[2] : "libprogram.so";
  void* h = !strcmp(how, "newlm") ? dlmopen(LM_ID_NEWLM, name, RTLD_NOW)
                                  : dlopen(name, RTLD_NOW | (!strcmp(how, "deep") ? RTLD_DEEPBIND : 0));
  if (!h) {
    fprintf(stderr, "deepbind: %s\n", dlerror());
    return 3;
  }
  if (!strcmp(how, "newlm")) {
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
      if (!strncmp(line, "exit", 4)) return 0;
      printf("ok loaded\n");
      fflush(stdout);
    }
    return 0;
  }
  int (*run)(void) = (int (*)(void))dlsym(h, "program_main");
  if (!run) {
    fprintf(stderr, "deepbind: %s\n", dlerror());
    return 4;
  }
  return run();
}
