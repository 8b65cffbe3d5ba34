/* A stand-in for NVML (libnvidia-ml.so.1) that the interposer's tests build: no GPU,
 * FAKE_NVML_DEVICES devices (default 2) with the stand-in driver's uuids
 * (GPU-11111111-1111-1111-1111-111111111111, GPU-22222222-...), each of FAKE_NVML_TOTAL bytes
 * (default 1 GiB) of which FAKE_NVML_RESERVED (default 4 MiB) are the driver's own and
 * FAKE_NVML_USED (default 0) are in use, answered with NVML's names, signatures, structures and
 * codes, as NVML of driver 580 answers on the H200:
 * - nvmlDeviceGetMemoryInfo: used counts the reserved memory (free + used = total);
 *   nvmlDeviceGetMemoryInfo_v2 (version nvmlMemory_v2, else NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
 *   gives it apart (reserved + free + used = total);
 * - nvmlDeviceGetName, nvmlDeviceGetComputeRunningProcesses_v3 (one process: the caller, with
 *   FAKE_NVML_PROCESS_BYTES, default 518 MiB: a bare CUDA context on the H200), which the
 *   interposer must pass through as they are;
 * - a NULL pointer or handle, or an index out of range: NVML_ERROR_INVALID_ARGUMENT; any call
 *   before nvmlInit_v2: NVML_ERROR_UNINITIALIZED. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_nvml.h"

#define EXPORT __attribute__((visibility("default")))
enum { SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, INSUFFICIENT_SIZE = 7, VERSION_MISMATCH = 25 };


struct device {
  int index;
};
static struct device devices[8] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static int initialised;

static uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* t = getenv(name);
  return t && *t ? strtoull(t, NULL, 10) : fallback;
}
static int count(void) {
  uint64_t n = env_u64("FAKE_NVML_DEVICES", 2);
  return n > 8 ? 8 : (int)n;
}
static int known(const struct device* d) {
  return d && d >= devices && d < devices + count();
}

EXPORT int nvmlInit_v2(void) {
  initialised = 1;
  return SUCCESS;
}
EXPORT int nvmlInit(void) { return nvmlInit_v2(); }
EXPORT int nvmlShutdown(void) {
  initialised = 0;
  return SUCCESS;
}
EXPORT int nvmlDeviceGetCount_v2(unsigned* n) {
  if (!initialised) return UNINITIALIZED;
  if (!n) return INVALID_ARGUMENT;
  *n = (unsigned)count();
  return SUCCESS;
}
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, struct device** d) {
  if (!initialised) return UNINITIALIZED;
  if (!d || i >= (unsigned)count()) return INVALID_ARGUMENT;
  *d = &devices[i];
  return SUCCESS;
}
EXPORT int nvmlDeviceGetUUID(struct device* d, char* uuid, unsigned length) {
  if (!initialised) return UNINITIALIZED;
  if (!known(d) || !uuid) return INVALID_ARGUMENT;
  char text[64];
  unsigned digit = (unsigned)d->index + 1;
  snprintf(text, sizeof text, "GPU-%1$08x-%2$04x-%2$04x-%2$04x-%3$08x%2$04x", 0x11111111u * digit,
           0x1111u * digit, 0x11111111u * digit);
  if (length < strlen(text) + 1) return INSUFFICIENT_SIZE;
  strcpy(uuid, text);
  return SUCCESS;
}
EXPORT int nvmlDeviceGetName(struct device* d, char* name, unsigned length) {
  if (!initialised) return UNINITIALIZED;
  if (!known(d) || !name || length < 32) return INVALID_ARGUMENT;
  snprintf(name, length, "Stand-in H200 %d", d->index);
  return SUCCESS;
}

static void figures(unsigned long long* total, unsigned long long* reserved,
                    unsigned long long* free, unsigned long long* used) {
  *total = env_u64("FAKE_NVML_TOTAL", 1ull << 30);
  *reserved = env_u64("FAKE_NVML_RESERVED", 4ull << 20);
  *used = env_u64("FAKE_NVML_USED", 0);
  /* FAKE_NVML_FREE: a free figure of its own, which may be above the total (a hostile driver). */
  *free = env_u64("FAKE_NVML_FREE", *total - *reserved - *used);
}
EXPORT int nvmlDeviceGetMemoryInfo(struct device* d, memory_t* m) {
  if (!initialised) return UNINITIALIZED;
  if (!known(d) || !m) return INVALID_ARGUMENT;
  unsigned long long reserved, used;
  figures(&m->total, &reserved, &m->free, &used);
  m->used = used + reserved;
  return SUCCESS;
}
EXPORT int nvmlDeviceGetMemoryInfo_v2(struct device* d, memory_v2_t* m) {
  if (!initialised) return UNINITIALIZED;
  if (!known(d) || !m) return INVALID_ARGUMENT;
  if (m->version != MEMORY_V2) return VERSION_MISMATCH;
  figures(&m->total, &m->reserved, &m->free, &m->used);
  return SUCCESS;
}
EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(struct device* d, unsigned* n, process_t* p) {
  if (!initialised) return UNINITIALIZED;
  if (!known(d) || !n) return INVALID_ARGUMENT;
  if (*n < 1) {
    *n = 1;
    return INSUFFICIENT_SIZE;
  }
  *n = 1;
  if (!p) return INVALID_ARGUMENT;
  p[0].pid = (unsigned)getpid();
  p[0].usedGpuMemory = env_u64("FAKE_NVML_PROCESS_BYTES", 518ull << 20);
  p[0].gpuInstanceId = p[0].computeInstanceId = 0xffffffffu;
  return SUCCESS;
}
