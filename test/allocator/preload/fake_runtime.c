/* A stand-in for the CUDA runtime, reaching the driver as the real one does: it dlopens
 * libcuda.so.1, looks up cuGetProcAddress_v2 with dlsym, and takes every other entry point from
 * it. Built as a shared library (libcudart.so.13, the dynamically linked runtime) and compiled
 * into a program (the static runtime, nvcc's default). With -DDIRECT_DRIVER it calls the driver's
 * exported symbols instead, as a program linked with -lcuda does. As the real runtime, it retains
 * the primary context of each device it is set to (device 0 first), and cudaDeviceReset resets
 * the current one (cuDevicePrimaryCtxReset_v2). */
#define _GNU_SOURCE
#include "fake_runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*gpa_t)(const char*, void**, int, unsigned long long, int*);
static struct {
  int (*alloc)(unsigned long long*, size_t);
  int (*free_)(unsigned long long);
  int (*managed)(unsigned long long*, size_t, unsigned);
  int (*pitch)(unsigned long long*, size_t*, size_t, size_t, unsigned);
  int (*async)(unsigned long long*, size_t, void*);
  int (*async_ptsz)(unsigned long long*, size_t, void*);
  int (*pool)(unsigned long long*, size_t, void*, void*);
  int (*free_async)(unsigned long long, void*);
  int (*mem_get_info)(size_t*, size_t*);
  int (*retain)(void**, int);
  int (*reset)(int);
  gpa_t gpa;
  void (*set_device)(int);
  unsigned long long (*used)(int);
} d;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int current_device;
static int retained[8];
/* The runtime's one reference to a device's primary context, taken when it is first used. */
static void use(int dev) {
  if (dev < 0 || dev >= 8 || retained[dev]) return;
  void* ctx;
  if (d.retain(&ctx, dev) == 0) retained[dev] = 1;
}

#ifdef DIRECT_DRIVER
int cuMemAlloc_v2(unsigned long long*, size_t);
int cuMemFree_v2(unsigned long long);
int cuMemAllocManaged(unsigned long long*, size_t, unsigned);
int cuMemAllocPitch_v2(unsigned long long*, size_t*, size_t, size_t, unsigned);
int cuMemAllocAsync(unsigned long long*, size_t, void*);
int cuMemAllocAsync_ptsz(unsigned long long*, size_t, void*);
int cuMemAllocFromPoolAsync(unsigned long long*, size_t, void*, void*);
int cuMemFreeAsync(unsigned long long, void*);
int cuMemGetInfo_v2(size_t*, size_t*);
int cuGetProcAddress_v2(const char*, void**, int, unsigned long long, int*);
int cuDevicePrimaryCtxRetain(void**, int);
int cuDevicePrimaryCtxReset_v2(int);
void fakeCudaSetDevice(int);
unsigned long long fakeCudaUsed(int);
static void init(void) {
  d.alloc = cuMemAlloc_v2;
  d.free_ = cuMemFree_v2;
  d.managed = cuMemAllocManaged;
  d.pitch = cuMemAllocPitch_v2;
  d.async = cuMemAllocAsync;
  d.async_ptsz = cuMemAllocAsync_ptsz;
  d.pool = cuMemAllocFromPoolAsync;
  d.free_async = cuMemFreeAsync;
  d.mem_get_info = cuMemGetInfo_v2;
  d.retain = cuDevicePrimaryCtxRetain;
  d.reset = cuDevicePrimaryCtxReset_v2;
  d.gpa = cuGetProcAddress_v2;
  d.set_device = fakeCudaSetDevice;
  d.used = fakeCudaUsed;
  use(0);
}
#else
static void* entry(const char* name, unsigned long long flags) {
  void* f = NULL;
  int status;
  if (d.gpa(name, &f, 13000, flags, &status) != 0 || !f) {
    fprintf(stderr, "fake runtime: no %s\n", name);
    abort();
  }
  return f;
}
static void init(void) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    fprintf(stderr, "fake runtime: %s\n", dlerror());
    abort();
  }
  d.gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
  d.alloc = entry("cuMemAlloc", 0);
  d.free_ = entry("cuMemFree", 0);
  d.managed = entry("cuMemAllocManaged", 0);
  d.pitch = entry("cuMemAllocPitch", 0);
  d.async = entry("cuMemAllocAsync", 0);
  d.async_ptsz = entry("cuMemAllocAsync", 2);
  d.pool = entry("cuMemAllocFromPoolAsync", 0);
  d.free_async = entry("cuMemFreeAsync", 0);
  d.mem_get_info = entry("cuMemGetInfo", 0);
  d.retain = entry("cuDevicePrimaryCtxRetain", 0);
  d.reset = entry("cuDevicePrimaryCtxReset", 0);
  d.set_device = (void (*)(int))dlsym(h, "fakeCudaSetDevice");
  d.used = (unsigned long long (*)(int))dlsym(h, "fakeCudaUsed");
  use(0);
}
#endif

#define INIT pthread_once(&once, init)
int cudaMalloc(void** p, size_t n) {
  INIT;
  return d.alloc((unsigned long long*)p, n);
}
int cudaFree(void* p) {
  INIT;
  return d.free_((unsigned long long)p);
}
int cudaMallocManaged(void** p, size_t n, unsigned flags) {
  INIT;
  return d.managed((unsigned long long*)p, n, flags);
}
int cudaMallocPitch(void** p, size_t* pitch, size_t w, size_t h) {
  INIT;
  return d.pitch((unsigned long long*)p, pitch, w, h, 4);
}
int cudaMallocAsync(void** p, size_t n, void* stream) {
  INIT;
  return d.async((unsigned long long*)p, n, stream);
}
int cudaMallocAsync_ptsz(void** p, size_t n, void* stream) {
  INIT;
  return d.async_ptsz((unsigned long long*)p, n, stream);
}
int cudaMallocFromPoolAsync(void** p, size_t n, void* pool, void* stream) {
  INIT;
  return d.pool((unsigned long long*)p, n, pool, stream);
}
int cudaFreeAsync(void* p, void* stream) {
  INIT;
  return d.free_async((unsigned long long)p, stream);
}
int cudaSetDevice(int dev) {
  INIT;
  d.set_device(dev);
  current_device = dev;
  use(dev);
  return 0;
}
int cudaDeviceReset(void) {
  INIT;
  return d.reset(current_device);
}
int cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  INIT;
  return d.mem_get_info(free_bytes, total_bytes);
}
int cudaGetDriverEntryPoint(const char* name, void** f) {
  INIT;
  int status;
  return d.gpa(name, f, 13000, 0, &status);
}
int cudaGetDriverEntryPointByVersion(const char* name, void** f, unsigned version,
                                     unsigned long long flags, int* status) {
  INIT;
  return d.gpa(name, f, (int)version, flags, status);
}
unsigned long long fakeDeviceUsed(int dev) {
  INIT;
  return d.used(dev);
}
