/* An NVML program for the interposer's tests, driven line by line on stdin, answering one line per
 * command on stdout ("ok ..." or "err CODE"), as nvidia-smi and pynvml ask NVML:
 *   mem I              nvmlDeviceGetMemoryInfo of device I: prints total, free and used
 *   mem2 I             nvmlDeviceGetMemoryInfo_v2: prints version, total, reserved, free and used
 *   mem null|nohandle  nvmlDeviceGetMemoryInfo of device 0 with NULL figures, or of a NULL handle
 *   mem2 null|nohandle|oldversion   the same for _v2; oldversion: a version field of 1
 *   name I             nvmlDeviceGetName
 *   procs I            nvmlDeviceGetComputeRunningProcesses_v3: prints the count, pid and bytes
 *   exit
 * Built two ways: linked with libnvidia-ml.so.1 (-DLINKED), and opening it with dlopen and taking
 * each function with dlsym on its handle, as pynvml (ctypes) does. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "fake_nvml.h"


#ifdef LINKED
int nvmlInit_v2(void), nvmlDeviceGetHandleByIndex_v2(unsigned, void**),
    nvmlDeviceGetMemoryInfo(void*, memory_t*), nvmlDeviceGetMemoryInfo_v2(void*, memory_v2_t*),
    nvmlDeviceGetName(void*, char*, unsigned),
    nvmlDeviceGetComputeRunningProcesses_v3(void*, unsigned*, process_t*);
#define NVML(symbol) symbol
#else
static void* lib;
#define NVML(symbol) ((__typeof__(&symbol##_t))dlsym(lib, #symbol))
int nvmlInit_v2_t(void), nvmlDeviceGetHandleByIndex_v2_t(unsigned, void**),
    nvmlDeviceGetMemoryInfo_t(void*, memory_t*), nvmlDeviceGetMemoryInfo_v2_t(void*, memory_v2_t*),
    nvmlDeviceGetName_t(void*, char*, unsigned),
    nvmlDeviceGetComputeRunningProcesses_v3_t(void*, unsigned*, process_t*);
#endif

static void* handle(unsigned i) {
  void* d = NULL;
  return NVML(nvmlDeviceGetHandleByIndex_v2)(i, &d) ? NULL : d;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
#ifndef LINKED
  lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 2;
#endif
  if (NVML(nvmlInit_v2)()) return 3;
  char line[256], arg[32];
  unsigned i;
  while (fgets(line, sizeof line, stdin)) {
    int r = -1;
    if (sscanf(line, "mem2 %u", &i) == 1) {
      memory_v2_t m = {MEMORY_V2, 0, 0, 0, 0};
      r = NVML(nvmlDeviceGetMemoryInfo_v2)(handle(i), &m);
      if (!r) printf("ok %u %llu %llu %llu %llu\n", m.version, m.total, m.reserved, m.free, m.used);
    } else if (sscanf(line, "mem2 %31s", arg) == 1) {
      memory_v2_t m = {strcmp(arg, "oldversion") ? MEMORY_V2 : (unsigned)(sizeof m | 1u << 24)};
      r = NVML(nvmlDeviceGetMemoryInfo_v2)(strcmp(arg, "nohandle") ? handle(0) : NULL,
                                           strcmp(arg, "null") ? &m : NULL);
      if (!r) printf("ok %u %llu %llu %llu %llu\n", m.version, m.total, m.reserved, m.free, m.used);
    } else if (sscanf(line, "mem %u", &i) == 1) {
      memory_t m = {0, 0, 0};
      r = NVML(nvmlDeviceGetMemoryInfo)(handle(i), &m);
      if (!r) printf("ok %llu %llu %llu\n", m.total, m.free, m.used);
    } else if (sscanf(line, "mem %31s", arg) == 1) {
      memory_t m = {0, 0, 0};
      r = NVML(nvmlDeviceGetMemoryInfo)(strcmp(arg, "null") ? NULL : handle(0),
                                        strcmp(arg, "null") ? &m : NULL);
    } else if (sscanf(line, "name %u", &i) == 1) {
      char name[96] = "";
      r = NVML(nvmlDeviceGetName)(handle(i), name, sizeof name);
      if (!r) printf("ok %s\n", name);
    } else if (sscanf(line, "procs %u", &i) == 1) {
      process_t p[4];
      unsigned n = 4;
      r = NVML(nvmlDeviceGetComputeRunningProcesses_v3)(handle(i), &n, p);
      if (!r) printf("ok %u %u %llu\n", n, p[0].pid, p[0].usedGpuMemory);
    } else if (!strncmp(line, "exit", 4)) {
      return 0;
    } else {
      printf("err unknown command\n");
      continue;
    }
    if (r) printf("err %d\n", r);
  }
  return 0;
}
