/* A CUDA program for the interposer's tests, driven line by line on stdin, answering one line per
 * command on stdout ("ok ..." or "err CODE"):
 *   alloc API BYTES    API: malloc managed pitch async async_ptsz pool create; prints the address
 *                      (or handle), and for pitch the pitch too
 *   free API ADDRESS   API: malloc (cudaFree), async (cudaFreeAsync), create (cuMemRelease)
 *   device N           the current device
 *   used N             the stand-in driver's bytes in use on device N
 *   meminfo            cudaMemGetInfo on the current device: prints free and total bytes
 *   reset              cudaDeviceReset (the current device's primary context)
 *   ctx retain|release cuDevicePrimaryCtxRetain / cuDevicePrimaryCtxRelease of the current device
 *   ctx create|destroy cuCtxCreate (a context of the program's own, made current) / cuCtxDestroy
 *   threads T N BYTES  T threads, each N cudaMalloc+cudaFree pairs; prints the errors seen
 *   pairs N BYTES      N cudaMalloc+cudaFree pairs, timed; prints nanoseconds per pair
 *   fork BYTES         a child allocates BYTES and answers "child PID ok|err CODE" through the
 *                      parent; it holds them until "release", then exits
 *   release            lets the child go; prints its exit status
 *   exit
 * Built three ways over the same stand-in runtime: linked with libcudart.so.13, with the runtime
 * compiled in (static), and calling the driver's symbols (-DDIRECT_DRIVER). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_runtime.h"

struct prop {
  int type, handle_types, location_type, location_id;
  void* win32;
  unsigned char flags[8];
};
static int device;
static void* own; /* the context "ctx create" made */

static int alloc(const char* api, size_t n, unsigned long long* out, size_t* pitch) {
  void* p = NULL;
  int r;
  if (!strcmp(api, "malloc"))
    r = cudaMalloc(&p, n);
  else if (!strcmp(api, "managed"))
    r = cudaMallocManaged(&p, n, 1);
  else if (!strcmp(api, "pitch"))
    r = cudaMallocPitch(&p, pitch, n, 4);
  else if (!strcmp(api, "async"))
    r = cudaMallocAsync(&p, n, NULL);
  else if (!strcmp(api, "async_ptsz"))
    r = cudaMallocAsync_ptsz(&p, n, NULL);
  else if (!strcmp(api, "pool"))
    r = cudaMallocFromPoolAsync(&p, n, NULL, NULL);
  else if (!strcmp(api, "create")) {
    int (*create)(unsigned long long*, size_t, const struct prop*, unsigned long long);
    cudaGetDriverEntryPoint("cuMemCreate", (void**)&create);
    struct prop pr = {1, 0, 1, device, NULL, {0}};
    return create(out, n, &pr, 0);
  } else
    return -1;
  *out = (unsigned long long)p;
  return r;
}

static int release(const char* api, unsigned long long p) {
  if (!strcmp(api, "async")) return cudaFreeAsync((void*)p, NULL);
  if (!strcmp(api, "create")) {
    int (*rel)(unsigned long long);
    cudaGetDriverEntryPoint("cuMemRelease", (void**)&rel);
    return rel(p);
  }
  return cudaFree((void*)p);
}

static size_t pair_bytes;
static int pair_count;
static void* pairs(void* errors) {
  for (int i = 0; i < pair_count; ++i) {
    void* p;
    if (cudaMalloc(&p, pair_bytes) != 0 || cudaFree(p) != 0) ++*(int*)errors;
  }
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  char line[256], api[32];
  unsigned long long a, b, c;
  int child = -1, to_child = -1;
  while (fgets(line, sizeof line, stdin)) {
    if (sscanf(line, "alloc %31s %llu", api, &a) == 2) {
      unsigned long long p = 0;
      size_t pitch = 0;
      int r = alloc(api, a, &p, &pitch);
      if (r)
        printf("err %d\n", r);
      else if (pitch)
        printf("ok 0x%llx %zu\n", p, pitch);
      else
        printf("ok 0x%llx\n", p);
    } else if (sscanf(line, "free %31s %llx", api, &a) == 2) {
      int r = release(api, a);
      if (r)
        printf("err %d\n", r);
      else
        printf("ok\n");
    } else if (sscanf(line, "device %llu", &a) == 1) {
      device = (int)a;
      cudaSetDevice(device);
      printf("ok\n");
    } else if (!strcmp(line, "meminfo\n") || !strcmp(line, "meminfo")) {
      size_t free_bytes = 0, total_bytes = 0;
      int r = cudaMemGetInfo(&free_bytes, &total_bytes);
      if (r)
        printf("err %d\n", r);
      else
        printf("ok %zu %zu\n", free_bytes, total_bytes);
    } else if (!strcmp(line, "reset\n") || !strcmp(line, "reset")) {
      int r = cudaDeviceReset();
      if (r)
        printf("err %d\n", r);
      else
        printf("ok\n");
    } else if (sscanf(line, "ctx %31s", api) == 1) {
      void* ctx;
      int r = -1;
      if (!strcmp(api, "retain")) {
        int (*retain)(void**, int);
        cudaGetDriverEntryPoint("cuDevicePrimaryCtxRetain", (void**)&retain);
        r = retain(&ctx, device);
      } else if (!strcmp(api, "release")) {
        int (*rel)(int);
        cudaGetDriverEntryPoint("cuDevicePrimaryCtxRelease", (void**)&rel);
        r = rel(device);
      } else if (!strcmp(api, "create")) {
        int (*create)(void**, unsigned, int);
        cudaGetDriverEntryPoint("cuCtxCreate", (void**)&create);
        r = create(&own, 0, device);
      } else if (!strcmp(api, "destroy")) {
        int (*destroy)(void*);
        cudaGetDriverEntryPoint("cuCtxDestroy", (void**)&destroy);
        r = destroy(own);
      }
      if (r)
        printf("err %d\n", r);
      else
        printf("ok\n");
    } else if (sscanf(line, "used %llu", &a) == 1) {
      printf("ok %llu\n", fakeDeviceUsed((int)a));
    } else if (sscanf(line, "threads %llu %llu %llu", &a, &b, &c) == 3) {
      pthread_t t[64];
      int errors[64] = {0}, sum = 0;
      pair_count = (int)b;
      pair_bytes = c;
      for (unsigned i = 0; i < a && i < 64; ++i) pthread_create(&t[i], NULL, pairs, &errors[i]);
      for (unsigned i = 0; i < a && i < 64; ++i) pthread_join(t[i], NULL), sum += errors[i];
      printf("ok %d\n", sum);
    } else if (sscanf(line, "pairs %llu %llu", &a, &b) == 2) {
      struct timespec t0, t1;
      int errors = 0;
      pair_count = (int)a;
      pair_bytes = b;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      pairs(&errors);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
      if (errors)
        printf("err %d\n", errors);
      else
        printf("ok %.1f\n", ns / a);
    } else if (sscanf(line, "fork %llu", &a) == 1) {
      int up[2], down[2];
      if (pipe(up) || pipe(down)) return 1;
      child = fork();
      if (child == 0) {
        void* p;
        int r = cudaMalloc(&p, a);
        char msg[64];
        int n = r ? snprintf(msg, sizeof msg, "child %d err %d\n", getpid(), r)
                  : snprintf(msg, sizeof msg, "child %d ok\n", getpid());
        if (write(up[1], msg, n) != n) _exit(3);
        char x;
        if (read(down[0], &x, 1) != 1) _exit(4);
        exit(0); /* exit handlers run: the child leaves the group */
      }
      close(up[1]);
      close(down[0]);
      to_child = down[1];
      char msg[64] = {0};
      ssize_t n = read(up[0], msg, sizeof msg - 1);
      close(up[0]);
      printf("ok %s", n > 0 ? msg : "no answer\n");
    } else if (!strncmp(line, "release", 7)) {
      int status = -1;
      if (write(to_child, "x", 1) == 1) waitpid(child, &status, 0);
      printf("ok %d\n", status);
    } else if (!strncmp(line, "exit", 4)) {
      return 0;
    } else {
      printf("err unknown command\n");
    }
  }
  return 0;
}
