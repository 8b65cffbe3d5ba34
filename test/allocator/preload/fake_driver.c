/* A stand-in for the CUDA driver (libcuda.so.1) that the interposer's tests build: no GPU, host
 * memory behind every "device" allocation (so a freed size is known), FAKE_CUDA_TOTAL bytes of
 * device memory per device (default 1 GiB), FAKE_CUDA_DEVICES devices (default 2) whose uuids are
 * GPU-11111111-1111-1111-1111-111111111111, GPU-22222222-..., and the entry points the interposer
 * wraps, with the driver's names, signatures and out-of-memory code. cuGetProcAddress answers as
 * the driver does: a base name and a version give the versioned entry point ("cuMemAlloc" at
 * 3020 or later is cuMemAlloc_v2), and the per-thread default stream flag gives the _ptsz form.
 * Each device has a primary context, counted by cuDevicePrimaryCtxRetain and Release and current
 * for its device while retained; resetting it (cuDevicePrimaryCtxReset_v2, or its last release)
 * frees what cuMemAlloc, cuMemAllocPitch and cuMemAllocManaged made in it, as the driver does
 * (so does cuCtxDestroy_v2 for the one context a thread may make with cuCtxCreate_v2),
 * and leaves stream-ordered allocations and cuMemCreate's handles, which outlive contexts
 * (FAKE_CUDA_RESET_FAILS=1: a reset fails instead). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define EXPORT __attribute__((visibility("default")))

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_FOUND = 500 };

static uint64_t used[8];
static __thread int current;
static char primary[8];    /* the primary contexts' handles: &primary[device] */
static __thread void* made; /* a context of cuCtxCreate_v2 made current on this thread */
static __thread int made_device;
static int primary_refs[8];
static pthread_mutex_t blocks_mutex = PTHREAD_MUTEX_INITIALIZER;

static uint64_t total(void) {
  const char* t = getenv("FAKE_CUDA_TOTAL");
  return t ? strtoull(t, NULL, 10) : (1ull << 30);
}
static int devices(void) {
  const char* d = getenv("FAKE_CUDA_DEVICES");
  return d ? atoi(d) : 2;
}

/* A block: its size, device and context ahead of the address handed out, in a list of all. */
struct head {
  uint64_t size;
  int device;
  int outlives; /* stream-ordered or cuMemCreate: not freed with its context */
  void* context;
  struct head *prev, *next;
  int pad[6]; /* 64 bytes: the address handed out is aligned as the driver's are, and more */
};
static struct head blocks = {0, 0, 0, NULL, &blocks, &blocks};

/* The calling thread's current context on `device`: one it made, else the device's primary
 * context while retained. */
static void* context_of(int device) {
  if (made && made_device == device) return made;
  return __atomic_load_n(&primary_refs[device], __ATOMIC_SEQ_CST) > 0 ? &primary[device] : NULL;
}

static CUresult take_as(CUdeviceptr* p, uint64_t size, int device, int outlives) {
  if (!p) return INVALID_VALUE;
  if (device < 0 || device >= devices()) return INVALID_VALUE;
  if (__atomic_add_fetch(&used[device], size, __ATOMIC_SEQ_CST) > total()) {
    __atomic_sub_fetch(&used[device], size, __ATOMIC_SEQ_CST);
    return OUT_OF_MEMORY;
  }
  struct head* h = malloc(sizeof(struct head) + (size ? 1 : 0));
  if (!h) return OUT_OF_MEMORY;
  h->size = size;
  h->device = device;
  h->outlives = outlives;
  h->context = context_of(device);
  pthread_mutex_lock(&blocks_mutex);
  h->next = blocks.next;
  h->prev = &blocks;
  blocks.next->prev = h;
  blocks.next = h;
  pthread_mutex_unlock(&blocks_mutex);
  *p = (CUdeviceptr)(uintptr_t)(h + 1);
  return OK;
}
static CUresult take(CUdeviceptr* p, uint64_t size, int device) { return take_as(p, size, device, 0); }

static void drop(struct head* h) {
  h->prev->next = h->next;
  h->next->prev = h->prev;
  __atomic_sub_fetch(&used[h->device], h->size, __ATOMIC_SEQ_CST);
  free(h);
}

static CUresult give(CUdeviceptr p) {
  if (!p) return OK;
  pthread_mutex_lock(&blocks_mutex);
  drop((struct head*)(uintptr_t)p - 1);
  pthread_mutex_unlock(&blocks_mutex);
  return OK;
}

/* Frees what was allocated in `context` and does not outlive it. */
static void end(void* context) {
  pthread_mutex_lock(&blocks_mutex);
  for (struct head *h = blocks.next, *next; h != &blocks; h = next) {
    next = h->next;
    if (h->context == context && !h->outlives) drop(h);
  }
  pthread_mutex_unlock(&blocks_mutex);
}
static void reset(int device) { end(&primary[device]); }

EXPORT CUresult cuInit(unsigned flags) { return OK; }
EXPORT CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return OK;
}
EXPORT CUresult cuDeviceGetCount(int* n) {
  *n = devices();
  return OK;
}
/* Not a driver function: how the test programs pick the current device. */
EXPORT void fakeCudaSetDevice(int d) { current = d; }
/* Not a driver function: the bytes "in use" on a device, as the driver would count them. */
EXPORT uint64_t fakeCudaUsed(int d) { return __atomic_load_n(&used[d], __ATOMIC_SEQ_CST); }

EXPORT CUresult cuCtxGetDevice(int* d) {
  *d = current;
  return OK;
}
static int valid(int d) { return d >= 0 && d < devices(); }
/* A context of its own on device d, current on this thread until destroyed (one at a time). */
EXPORT CUresult cuCtxCreate_v2(void** ctx, unsigned flags, int d) {
  if (!valid(d) || made) return INVALID_VALUE;
  made = malloc(1);
  made_device = d;
  current = d;
  *ctx = made;
  return made ? OK : OUT_OF_MEMORY;
}
EXPORT CUresult cuCtxDestroy_v2(void* ctx) {
  if (!ctx || ctx != made) return INVALID_VALUE;
  end(ctx);
  free(made);
  made = NULL;
  return OK;
}
EXPORT CUresult cuCtxGetCurrent(void** ctx) {
  *ctx = context_of(current);
  return OK;
}
EXPORT CUresult cuDevicePrimaryCtxGetState(int d, unsigned* flags, int* active) {
  if (!valid(d)) return INVALID_VALUE;
  *flags = 0;
  *active = __atomic_load_n(&primary_refs[d], __ATOMIC_SEQ_CST) > 0;
  return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(void** ctx, int d) {
  if (!valid(d)) return INVALID_VALUE;
  __atomic_add_fetch(&primary_refs[d], 1, __ATOMIC_SEQ_CST);
  *ctx = &primary[d];
  return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int d) {
  if (!valid(d) || __atomic_load_n(&primary_refs[d], __ATOMIC_SEQ_CST) <= 0) return INVALID_VALUE;
  if (__atomic_sub_fetch(&primary_refs[d], 1, __ATOMIC_SEQ_CST) == 0) reset(d);
  return OK;
}
/* FAKE_CUDA_RESET_FAILS=1: resets fail, freeing nothing. */
EXPORT CUresult cuDevicePrimaryCtxReset_v2(int d) {
  if (!valid(d)) return INVALID_VALUE;
  const char* fails = getenv("FAKE_CUDA_RESET_FAILS");
  if (fails && *fails == '1') return 999; /* CUDA_ERROR_UNKNOWN */
  reset(d);
  return OK;
}
EXPORT CUresult cuDeviceGetUuid(unsigned char* uuid, int d) {
  if (d < 0 || d >= devices()) return INVALID_VALUE;
  memset(uuid, 0x11 * (d + 1), 16);
  return OK;
}
EXPORT CUresult cuDeviceGetUuid_v2(unsigned char* uuid, int d) { return cuDeviceGetUuid(uuid, d); }
EXPORT CUresult cuMemGetInfo_v2(size_t* free_, size_t* total_) {
  *total_ = total();
  *free_ = total() - fakeCudaUsed(current);
  return OK;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size) { return take(p, size, current); }
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return give(p); }
EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t size, unsigned flags) {
  return take(p, size, current);
}
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t width, size_t height,
                                   unsigned elem) {
  *pitch = (width + 255) & ~(size_t)255; /* a 256-byte pitch alignment */
  return take(p, (uint64_t)*pitch * height, current);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t size, void* stream) {
  return take_as(p, size, current, 1);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t size, void* stream) {
  return take_as(p, size, current, 1);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t size, void* pool, void* stream) {
  return take_as(p, size, current, 1);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, size_t size, void* pool,
                                             void* stream) {
  return take_as(p, size, current, 1);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, void* stream) { return give(p); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, void* stream) { return give(p); }

struct prop {
  int type, handle_types, location_type, location_id;
};
EXPORT CUresult cuMemCreate(unsigned long long* handle, size_t size, const struct prop* prop,
                            unsigned long long flags) {
  int device = prop->location_type == 1 ? prop->location_id : -1;
  CUdeviceptr p;
  CUresult r = take_as(&p, size, device, 1);
  if (r == OK) *handle = p;
  return r;
}
EXPORT CUresult cuMemRelease(unsigned long long handle) { return give(handle); }

EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                    unsigned long long flags, int* status);
EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                 unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* With FAKE_CUDA_PROC_INTERNAL=1, cuGetProcAddress hands out addresses of its own that no
 * exported symbol has (functions that forward to the exported ones), as a driver may: the
 * interposer must then know the entry point by its name and version. */
static CUresult i_alloc(CUdeviceptr* p, size_t n) { return cuMemAlloc_v2(p, n); }
static CUresult i_free(CUdeviceptr p) { return cuMemFree_v2(p); }
static CUresult i_managed(CUdeviceptr* p, size_t n, unsigned f) {
  return cuMemAllocManaged(p, n, f);
}
static CUresult i_pitch(CUdeviceptr* p, size_t* pitch, size_t w, size_t h, unsigned e) {
  return cuMemAllocPitch_v2(p, pitch, w, h, e);
}
static CUresult i_async(CUdeviceptr* p, size_t n, void* s) { return cuMemAllocAsync(p, n, s); }
static CUresult i_async_ptsz(CUdeviceptr* p, size_t n, void* s) {
  return cuMemAllocAsync_ptsz(p, n, s);
}
static CUresult i_pool(CUdeviceptr* p, size_t n, void* pool, void* s) {
  return cuMemAllocFromPoolAsync(p, n, pool, s);
}
static CUresult i_pool_ptsz(CUdeviceptr* p, size_t n, void* pool, void* s) {
  return cuMemAllocFromPoolAsync_ptsz(p, n, pool, s);
}
static CUresult i_free_async(CUdeviceptr p, void* s) { return cuMemFreeAsync(p, s); }
static CUresult i_free_async_ptsz(CUdeviceptr p, void* s) { return cuMemFreeAsync_ptsz(p, s); }
static CUresult i_create(unsigned long long* h, size_t n, const struct prop* pr,
                         unsigned long long f) {
  return cuMemCreate(h, n, pr, f);
}
static CUresult i_release(unsigned long long h) { return cuMemRelease(h); }
static CUresult i_gpa(const char* s, void** p, int v, unsigned long long f, int* st) {
  return cuGetProcAddress_v2(s, p, v, f, st);
}

#define PTDS 2ull /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                    unsigned long long flags, int* status) {
  static const struct {
    const char* name;
    void* legacy;
    void* ptsz;
    void* internal;
    void* internal_ptsz;
  } table[] = {
      {"cuInit", (void*)cuInit, 0},
      {"cuDriverGetVersion", (void*)cuDriverGetVersion, 0},
      {"cuDeviceGetCount", (void*)cuDeviceGetCount, 0},
      {"cuCtxGetDevice", (void*)cuCtxGetDevice, 0},
      {"cuCtxGetCurrent", (void*)cuCtxGetCurrent, 0},
      {"cuDevicePrimaryCtxGetState", (void*)cuDevicePrimaryCtxGetState, 0},
      {"cuDevicePrimaryCtxRetain", (void*)cuDevicePrimaryCtxRetain, 0},
      {"cuDevicePrimaryCtxRelease", (void*)cuDevicePrimaryCtxRelease_v2, 0},
      {"cuDevicePrimaryCtxReset", (void*)cuDevicePrimaryCtxReset_v2, 0},
      {"cuCtxCreate", (void*)cuCtxCreate_v2, 0},
      {"cuCtxDestroy", (void*)cuCtxDestroy_v2, 0},
      {"cuDeviceGetUuid", (void*)cuDeviceGetUuid_v2, 0},
      {"cuMemGetInfo", (void*)cuMemGetInfo_v2, 0},
      {"cuMemAlloc", (void*)cuMemAlloc_v2, 0, (void*)i_alloc, 0},
      {"cuMemFree", (void*)cuMemFree_v2, 0, (void*)i_free, 0},
      {"cuMemAllocManaged", (void*)cuMemAllocManaged, 0, (void*)i_managed, 0},
      {"cuMemAllocPitch", (void*)cuMemAllocPitch_v2, 0, (void*)i_pitch, 0},
      {"cuMemAllocAsync", (void*)cuMemAllocAsync, (void*)cuMemAllocAsync_ptsz, (void*)i_async,
       (void*)i_async_ptsz},
      {"cuMemAllocFromPoolAsync", (void*)cuMemAllocFromPoolAsync, (void*)cuMemAllocFromPoolAsync_ptsz,
       (void*)i_pool, (void*)i_pool_ptsz},
      {"cuMemFreeAsync", (void*)cuMemFreeAsync, (void*)cuMemFreeAsync_ptsz, (void*)i_free_async,
       (void*)i_free_async_ptsz},
      {"cuMemCreate", (void*)cuMemCreate, 0, (void*)i_create, 0},
      {"cuMemRelease", (void*)cuMemRelease, 0, (void*)i_release, 0},
      {"cuGetProcAddress", (void*)cuGetProcAddress_v2, 0, (void*)i_gpa, 0},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
    if (strcmp(symbol, table[i].name) != 0) continue;
    const char* internal = getenv("FAKE_CUDA_PROC_INTERNAL");
    int own = internal && *internal == '1' && table[i].internal;
    void* f = own ? table[i].internal : table[i].legacy;
    if ((flags & PTDS) && table[i].ptsz) f = own ? table[i].internal_ptsz : table[i].ptsz;
    if (strcmp(symbol, "cuGetProcAddress") == 0 && version < 12000) f = (void*)cuGetProcAddress;
    *pfn = f;
    if (status) *status = 0;
    return OK;
  }
  *pfn = NULL;
  if (status) *status = 1;
  return NOT_FOUND;
}
