/* A CUDA program for the interposer's tests, driven line by line on stdin, answering one line per
 * command on stdout ("ok ..." or "err CODE"):
 *   alloc API BYTES    API: malloc managed pitch async async_ptsz pool create v1; prints the
 *                      address (or handle), and for pitch the pitch too; async and pool on the
 *                      program's stream, pool from the program's pool (the device's default one
 *                      unless "pool use" picked another)
 *   free API ADDRESS   API: malloc (cudaFree), async (cudaFreeAsync), create (cuMemRelease), v1,
 *                      array, mip
 *   device N           the current device
 *   used N             the stand-in driver's bytes in use on device N
 *   meminfo            cudaMemGetInfo on the current device: prints free and total bytes
 *   totalmem [v1]      cuDeviceTotalMem of the current device (as cudaGetDeviceProperties asks
 *                      it for totalGlobalMem), or its 32-bit form of CUDA before 3.2
 *   nvml I             nvmlDeviceGetMemoryInfo of NVML's device I, through dlopen and dlsym (as
 *                      pynvml asks it): prints total, free and used bytes
 *   reset              cudaDeviceReset (the current device's primary context)
 *   ctx retain|release cuDevicePrimaryCtxRetain / cuDevicePrimaryCtxRelease of the current device
 *   ctx create|destroy cuCtxCreate (a context of the program's own, made current) / cuCtxDestroy
 *   stream             a stream on the current device, the program's from now on (stream none:
 *                      the NULL stream again; stream destroy: the program's destroyed, then NULL;
 *                      stream green: cuGreenCtxStreamCreate on a new green context of the device)
 *   sync [ctx]         cuStreamSynchronize of the program's stream (cuCtxSynchronize)
 *   pool create device N | host    cuMemPoolCreate; prints the pool
 *   pool use P | default           the pool "alloc pool" takes from
 *   pool threshold P BYTES | trim P BYTES | destroy P | reserved P
 *   vmm reserve BYTES  an address range; vmm map ADDRESS BYTES HANDLE; vmm unmap ADDRESS BYTES;
 *                      vmm retain ADDRESS (prints the handle)
 *   array 2d W H | 3d W H D FLAGS | mip W H LEVELS    float4 arrays; prints the handle
 *   graph BYTES [child]  a graph with one memory node of BYTES on the current device (inside a
 *                      child graph), instantiated: prints the executable graph
 *   graph launch|upload|destroy EXEC; graph trim; graph reserved
 *   green on|off       a green context of the current device made current / popped again
 *   alarm-exit MS      in MS milliseconds a signal handler calls exit(0)
 *   threads T N BYTES  T threads, each N cudaMalloc+cudaFree pairs; prints the errors seen
 *   bg stream | bg alloc API BYTES | bg launch EXEC   a thread creates a stream on the current
 *                      device, allocates as "alloc" does, or launches a graph (the program's other
 *                      commands go on meanwhile); join: waits for it, and answers as "stream",
 *                      "alloc" or "graph launch" does
 *   pairs N BYTES      N cudaMalloc+cudaFree pairs, timed; prints nanoseconds per pair
 *   fork BYTES         a child allocates BYTES and answers "child PID ok|err CODE" through the
 *                      parent; it holds them until "release", then exits
 *   release            lets the child go; prints its exit status
 *   exit
 * Built three ways over the same stand-in runtime: linked with libcudart.so.13, with the runtime
 * compiled in (static), and calling the driver's symbols (-DDIRECT_DRIVER); and as a shared
 * library (-Dmain=program_main) for a loader that opens it with RTLD_DEEPBIND (deepbind.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "fake_runtime.h"

struct prop {
  int type, handle_types, location_type, location_id;
  void* win32;
  unsigned char flags[8];
};
static int device;
static void* own; /* the context "ctx create" made */
static void* stream;  /* the program's stream (NULL: the NULL stream) */
static void* pool;    /* the program's pool (NULL: the current device's default pool) */

/* A driver entry point: by its symbol where the program is linked with the driver, else through
 * the runtime (cuGetProcAddress), as real programs get them. */
#ifdef DIRECT_DRIVER
int cuStreamCreate(), cuStreamDestroy_v2(), cuStreamSynchronize(), cuCtxSynchronize(), cuMemPoolCreate(),
    cuMemPoolSetAttribute(), cuMemPoolGetAttribute(), cuMemPoolTrimTo(), cuMemPoolDestroy(),
    cuDeviceGetDefaultMemPool(), cuMemAddressReserve(), cuMemMap(), cuMemUnmap(),
    cuMemRetainAllocationHandle(), cuMemCreate(), cuMemRelease(), cuArrayCreate_v2(),
    cuArray3DCreate_v2(), cuMipmappedArrayCreate(), cuArrayDestroy(), cuMipmappedArrayDestroy(),
    cuGraphCreate(), cuGraphAddMemAllocNode(), cuGraphAddChildGraphNode(),
    cuGraphInstantiateWithFlags(), cuGraphLaunch(), cuGraphUpload(), cuGraphExecDestroy(),
    cuDeviceGraphMemTrim(), cuDeviceGetGraphMemAttribute(), cuCtxFromGreenCtx(),
    cuCtxPushCurrent_v2(), cuCtxPopCurrent_v2(), cuMemAlloc(), cuMemFree(),
    cuDevicePrimaryCtxRetain(), cuDevicePrimaryCtxRelease_v2(), cuCtxCreate_v2(), cuGreenCtxStreamCreate(),
    cuCtxDestroy_v2(), cuDeviceTotalMem_v2(), cuDeviceTotalMem();
#define DRV(symbol, base) ((void*)&symbol)
#else
static void* entry(const char* name, unsigned version) {
  void* f = NULL;
  int status;
  cudaGetDriverEntryPointByVersion(name, &f, version, 0, &status);
  return f;
}
#define DRV(symbol, base) entry(base, 13000)
#endif
#define CALL(symbol, base, type, ...) ((type)DRV(symbol, base))(__VA_ARGS__)
typedef int (*v_p)(void**);
typedef int (*v_pu)(void**, unsigned);
typedef int (*v_v)(void);
typedef int (*v_s)(void*);
/* The stand-in driver's own (not a driver function): a green context on device d. */
static void* green_context(int d) {
#ifdef DIRECT_DRIVER
  void* fakeCudaGreenCtx(int);
  return fakeCudaGreenCtx(d);
#else
  void* (*make)(int) = (void* (*)(int))dlsym(RTLD_DEFAULT, "fakeCudaGreenCtx");
  return make ? make(d) : NULL;
#endif
}

static void* default_pool(void) {
  void* p = NULL;
  CALL(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", int (*)(void**, int), &p, device);
  return p;
}

static void on_alarm(int sig) {
  (void)sig;
  exit(0); /* what a program's own handler may do: exit handlers run, the interposer's too */
}

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
    r = cudaMallocAsync(&p, n, stream);
  else if (!strcmp(api, "async_ptsz"))
    r = cudaMallocAsync_ptsz(&p, n, stream);
  else if (!strcmp(api, "pool"))
    r = cudaMallocFromPoolAsync(&p, n, pool ? pool : default_pool(), stream);
  else if (!strcmp(api, "v1")) {
    unsigned small = 0;
#ifdef DIRECT_DRIVER
    r = cuMemAlloc(&small, (unsigned)n);
#else
    r = ((int (*)(unsigned*, unsigned))entry("cuMemAlloc", 3010))(&small, (unsigned)n);
#endif
    *out = small;
    return r;
  } else if (!strcmp(api, "create")) {
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
  if (!strcmp(api, "async")) return cudaFreeAsync((void*)p, stream);
  if (!strcmp(api, "v1")) {
#ifdef DIRECT_DRIVER
    return cuMemFree((unsigned)p);
#else
    return ((int (*)(unsigned))entry("cuMemFree", 3010))((unsigned)p);
#endif
  }
  if (!strcmp(api, "array")) return CALL(cuArrayDestroy, "cuArrayDestroy", v_s, (void*)p);
  if (!strcmp(api, "mip"))
    return CALL(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", v_s, (void*)p);
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

/* "bg": one thread at a time, on the program's current device; its globals are read by the main
 * thread only after "join". */
static pthread_t bg_thread;
static int bg_running, bg_kind, bg_device, bg_result; /* bg_kind: 's'tream, 'a'lloc, 'l'aunch */
static void *bg_stream, *bg_exec;
static char bg_api[32];
static unsigned long long bg_bytes, bg_address;
static void* background(void* unused) {
  size_t pitch = 0;
  cudaSetDevice(bg_device);
  if (bg_kind == 's')
    bg_result = CALL(cuStreamCreate, "cuStreamCreate", v_pu, &bg_stream, 0);
  else if (bg_kind == 'l')
    bg_result = CALL(cuGraphLaunch, "cuGraphLaunch", int (*)(void*, void*), bg_exec, NULL);
  else
    bg_result = alloc(bg_api, bg_bytes, &bg_address, &pitch);
  return unused;
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
    } else if (!strncmp(line, "totalmem", 8)) {
      size_t bytes = 0;
      unsigned small = 0;
      int r;
      if (strstr(line, "v1")) {
#ifdef DIRECT_DRIVER
        r = cuDeviceTotalMem(&small, device);
#else
        r = ((int (*)(unsigned*, int))entry("cuDeviceTotalMem", 3010))(&small, device);
#endif
        bytes = small;
      } else {
        r = CALL(cuDeviceTotalMem_v2, "cuDeviceTotalMem", int (*)(size_t*, int), &bytes, device);
      }
      if (r)
        printf("err %d\n", r);
      else
        printf("ok %zu\n", bytes);
    } else if (sscanf(line, "nvml %llu", &a) == 1) {
      struct {
        unsigned long long total, free, used;
      } m = {0, 0, 0};
      void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
      void* d = NULL;
      int r = nvml ? 0 : -2;
      if (!r) r = ((int (*)(void))dlsym(nvml, "nvmlInit_v2"))();
      if (!r) r = ((int (*)(unsigned, void**))dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"))((unsigned)a, &d);
      if (!r) r = ((int (*)(void*, void*))dlsym(nvml, "nvmlDeviceGetMemoryInfo"))(d, &m);
      if (r)
        printf("err %d\n", r);
      else
        printf("ok %llu %llu %llu\n", m.total, m.free, m.used);
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
    } else if (!strncmp(line, "stream", 6)) {
      int r = 0;
      if (strstr(line, "none")) {
        stream = NULL;
      } else if (strstr(line, "destroy")) {
        r = CALL(cuStreamDestroy_v2, "cuStreamDestroy", v_s, stream);
        stream = NULL;
      } else if (strstr(line, "green")) {
        r = CALL(cuGreenCtxStreamCreate, "cuGreenCtxStreamCreate", int (*)(void**, void*, unsigned, int),
                 &stream, green_context(device), 0, 0);
      } else
        r = CALL(cuStreamCreate, "cuStreamCreate", v_pu, &stream, 0);
      if (r)
        printf("err %d\n", r);
      else
        printf("ok %p\n", stream);
    } else if (!strncmp(line, "sync", 4)) {
      int r = strstr(line, "ctx") ? CALL(cuCtxSynchronize, "cuCtxSynchronize", v_v)
                                  : CALL(cuStreamSynchronize, "cuStreamSynchronize", v_s, stream);
      printf(r ? "err %d\n" : "ok\n", r);
    } else if (sscanf(line, "pool create %31s %llu", api, &a) >= 1) {
      int host = !strcmp(api, "host");
      struct fake_pool_props props = {1, 0, host ? 3 : 1, host ? 0 : (int)a, NULL, 0, 0, {0}};
      void* p = NULL;
      int r = CALL(cuMemPoolCreate, "cuMemPoolCreate", int (*)(void**, const void*), &p, &props);
      if (r)
        printf("err %d\n", r);
      else
        printf("ok %p\n", p);
    } else if (!strncmp(line, "pool use", 8)) {
      void* p = NULL;
      pool = strstr(line, "default") ? NULL : (sscanf(line, "pool use %p", &p) == 1 ? p : NULL);
      printf("ok\n");
    } else if (sscanf(line, "pool threshold %p %llu", (void**)&b, &a) == 2) {
      uint64_t v = a;
      int r = CALL(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", int (*)(void*, int, void*),
                   (void*)b, 4, &v);
      printf(r ? "err %d\n" : "ok\n", r);
    } else if (sscanf(line, "pool trim %p %llu", (void**)&b, &a) == 2) {
      int r = CALL(cuMemPoolTrimTo, "cuMemPoolTrimTo", int (*)(void*, size_t), (void*)b, a);
      printf(r ? "err %d\n" : "ok\n", r);
    } else if (sscanf(line, "pool destroy %p", (void**)&b) == 1) {
      int r = CALL(cuMemPoolDestroy, "cuMemPoolDestroy", v_s, (void*)b);
      printf(r ? "err %d\n" : "ok\n", r);
    } else if (sscanf(line, "pool reserved %p", (void**)&b) == 1) {
      uint64_t v = 0;
      CALL(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", int (*)(void*, int, void*), (void*)b,
           5, &v);
      printf("ok %llu\n", (unsigned long long)v);
    } else if (sscanf(line, "vmm reserve %llu", &a) == 1) {
      unsigned long long va = 0;
      int r = CALL(cuMemAddressReserve, "cuMemAddressReserve",
                   int (*)(unsigned long long*, size_t, size_t, unsigned long long, unsigned long long),
                   &va, a, 0, 0, 0);
      if (r)
        printf("err %d\n", r);
      else
        printf("ok 0x%llx\n", va);
    } else if (sscanf(line, "vmm map %llx %llu %llx", &a, &b, &c) == 3) {
      int r = CALL(cuMemMap, "cuMemMap",
                   int (*)(unsigned long long, size_t, size_t, unsigned long long, unsigned long long),
                   a, b, 0, c, 0);
      printf(r ? "err %d\n" : "ok\n", r);
    } else if (sscanf(line, "vmm unmap %llx %llu", &a, &b) == 2) {
      int r = CALL(cuMemUnmap, "cuMemUnmap", int (*)(unsigned long long, size_t), a, b);
      printf(r ? "err %d\n" : "ok\n", r);
    } else if (sscanf(line, "vmm retain %llx", &a) == 1) {
      unsigned long long h = 0;
      int r = CALL(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle",
                   int (*)(unsigned long long*, void*), &h, (void*)a);
      if (r)
        printf("err %d\n", r);
      else
        printf("ok 0x%llx\n", h);
    } else if (!strncmp(line, "array ", 6)) {
      struct fake_array3d desc = {0, 0, 0, 0x20, 4, 0};
      unsigned levels = 1;
      void* arr = NULL;
      int r = -1;
      if (sscanf(line, "array 2d %zu %zu", &desc.width, &desc.height) == 2) {
        struct fake_array2d d2 = {desc.width, desc.height, 0x20, 4};
        r = CALL(cuArrayCreate_v2, "cuArrayCreate", int (*)(void**, const void*), &arr, &d2);
      } else if (sscanf(line, "array 3d %zu %zu %zu %u", &desc.width, &desc.height, &desc.depth, &desc.flags) == 4) {
        r = CALL(cuArray3DCreate_v2, "cuArray3DCreate", int (*)(void**, const void*), &arr, &desc);
      } else if (sscanf(line, "array mip %zu %zu %u", &desc.width, &desc.height, &levels) == 3) {
        r = CALL(cuMipmappedArrayCreate, "cuMipmappedArrayCreate",
                 int (*)(void**, const void*, unsigned), &arr, &desc, levels);
      }
      if (r)
        printf("err %d\n", r);
      else
        printf("ok %p\n", arr);
    } else if (!strncmp(line, "graph ", 6)) {
      int r = -1;
      void* e = NULL;
      if (sscanf(line, "graph launch %p", &e) == 1) {
        r = CALL(cuGraphLaunch, "cuGraphLaunch", int (*)(void*, void*), e, stream);
        printf(r ? "err %d\n" : "ok\n", r);
      } else if (sscanf(line, "graph upload %p", &e) == 1) {
        r = CALL(cuGraphUpload, "cuGraphUpload", int (*)(void*, void*), e, stream);
        printf(r ? "err %d\n" : "ok\n", r);
      } else if (sscanf(line, "graph destroy %p", &e) == 1) {
        r = CALL(cuGraphExecDestroy, "cuGraphExecDestroy", v_s, e);
        printf(r ? "err %d\n" : "ok\n", r);
      } else if (!strncmp(line, "graph trim", 10)) {
        r = CALL(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", int (*)(int), device);
        printf(r ? "err %d\n" : "ok\n", r);
      } else if (!strncmp(line, "graph reserved", 14)) {
        uint64_t v = 0;
        CALL(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", int (*)(int, int, void*),
             device, 2, &v);
        printf("ok %llu\n", (unsigned long long)v);
      } else if (sscanf(line, "graph %llu", &a) == 1) {
        void *g = NULL, *outer = NULL, *node = NULL;
        struct fake_mem_node_params params = {{1, 0, 1, device, NULL, 0, 0, {0}}, NULL, 0, a, 0};
        CALL(cuGraphCreate, "cuGraphCreate", v_pu, &g, 0);
        CALL(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode",
             int (*)(void**, void*, const void*, size_t, void*), &node, g, NULL, 0, &params);
        if (strstr(line, "child")) {
          CALL(cuGraphCreate, "cuGraphCreate", v_pu, &outer, 0);
          CALL(cuGraphAddChildGraphNode, "cuGraphAddChildGraphNode",
               int (*)(void**, void*, const void*, size_t, void*), &node, outer, NULL, 0, g);
          g = outer;
        }
        r = CALL(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags",
                 int (*)(void**, void*, unsigned long long), &e, g, 0);
        if (r)
          printf("err %d\n", r);
        else
          printf("ok %p\n", e);
      } else {
        printf("err unknown command\n");
      }
    } else if (!strncmp(line, "green ", 6)) {
      void* ctx = NULL;
      int r;
      if (strstr(line, "on")) {
        r = CALL(cuCtxFromGreenCtx, "cuCtxFromGreenCtx", int (*)(void**, void*), &ctx,
                 green_context(device));
        if (!r) r = CALL(cuCtxPushCurrent_v2, "cuCtxPushCurrent", v_s, ctx);
      } else {
        r = CALL(cuCtxPopCurrent_v2, "cuCtxPopCurrent", v_p, &ctx);
      }
      printf(r ? "err %d\n" : "ok\n", r);
    } else if (sscanf(line, "alarm-exit %llu", &a) == 1) {
      signal(SIGALRM, on_alarm);
      struct itimerval t = {{0, 0}, {(long)(a / 1000), (long)(a % 1000) * 1000}};
      setitimer(ITIMER_REAL, &t, NULL);
      printf("ok\n");
    } else if (sscanf(line, "used %llu", &a) == 1) {
      printf("ok %llu\n", fakeDeviceUsed((int)a));
    } else if (!strncmp(line, "bg ", 3)) {
      if (bg_running) {
        printf("err running\n");
        continue;
      }
      bg_stream = NULL;
      bg_address = 0;
      bg_device = device;
      if (!strncmp(line, "bg stream", 9))
        bg_kind = 's';
      else if (sscanf(line, "bg launch %p", &bg_exec) == 1)
        bg_kind = 'l';
      else if (sscanf(line, "bg alloc %31s %llu", bg_api, &bg_bytes) == 2)
        bg_kind = 'a';
      else
        bg_kind = 0;
      if (!bg_kind)
        printf("err unknown command\n");
      else if (pthread_create(&bg_thread, NULL, background, NULL))
        printf("err thread\n");
      else
        bg_running = 1, printf("ok\n");
    } else if (!strncmp(line, "join", 4)) {
      if (!bg_running) {
        printf("err not running\n");
        continue;
      }
      pthread_join(bg_thread, NULL);
      bg_running = 0;
      if (bg_result)
        printf("err %d\n", bg_result);
      else if (bg_stream)
        printf("ok %p\n", bg_stream);
      else if (bg_address)
        printf("ok 0x%llx\n", bg_address);
      else
        printf("ok\n");
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
