/* NVML's structures the stand-in NVML (fake_nvml.c) and the test program (nvml.c) pass each
 * other, laid out as nvml.h lays them out. */
#pragma once

/* nvmlMemory_t, nvmlMemory_v2_t (its version: nvmlMemory_v2) and nvmlProcessInfo_t */
typedef struct {
  unsigned long long total, free, used;
} memory_t;
typedef struct {
  unsigned version;
  unsigned long long total, reserved, free, used;
} memory_v2_t;
#define MEMORY_V2 ((unsigned)(sizeof(memory_v2_t) | 2u << 24))
typedef struct {
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId, computeInstanceId;
} process_t;
