/* A stand-in for the CUDA driver (libcuda.so.1) that the interposer's tests build: no GPU, host
 * memory behind every "device" allocation (so a freed size is known), FAKE_CUDA_TOTAL bytes of
 * device memory per device (default 1 GiB), FAKE_CUDA_DEVICES devices (default 2) whose uuids are
 * GPU-11111111-1111-1111-1111-111111111111, GPU-22222222-..., and the entry points the interposer
 * wraps, with the driver's names, signatures and out-of-memory code, behaving as an H200 with
 * driver 580 was seen to:
 * - cuGetProcAddress answers as the driver does: a base name and a version give the versioned
 *   entry point ("cuMemAlloc" at 3020 or later is cuMemAlloc_v2, below it the 32-bit v1 one), and
 *   the per-thread default stream flag gives the _ptsz form.
 * - Each device has a primary context, counted by cuDevicePrimaryCtxRetain and Release and current
 *   for its device while retained; resetting it (cuDevicePrimaryCtxReset_v2, or its last release)
 *   frees what cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged and the array calls made in it, and
 *   in its device's green contexts (cuGreenCtxDestroy frees nothing); cuCtxDestroy_v2 does the same
 *   for the one context a thread may make with cuCtxCreate_v2. Stream-ordered allocations and
 *   cuMemCreate's handles outlive contexts (FAKE_CUDA_RESET_FAILS=1: a reset fails instead).
 * - cuMemCreate's memory lives while its handle is referenced (creation, cuMemRetainAllocationHandle)
 *   or mapped (cuMemMap), whatever the order of cuMemRelease and cuMemUnmap.
 * - Stream-ordered pools (each device's default pool, and cuMemPoolCreate's, on a device or in host
 *   memory) reserve device memory in whole 2 MiB pages, at least FAKE_CUDA_POOL_CHUNK bytes at a
 *   time (default 0; an H200 reserves 32 MiB for a small allocation), keep freed memory reserved
 *   until a synchronisation trims them to their release threshold (default 0), or cuMemPoolTrimTo.
 *   FAKE_CUDA_POOL_PIECES=1: the free reserve is in pieces, and every allocation grows the pool by
 *   itself (as an H200's pool grew by 416 MiB for 394 while it held 373 MiB free).
 * - A graph's memory nodes reserve device memory at its upload or first launch, kept until
 *   cuDeviceGraphMemTrim.
 * - The v1 entry points (32-bit pointers) answer CUDA_ERROR_INVALID_CONTEXT, as the H200's did,
 *   unless FAKE_CUDA_V1=1, when they serve small allocations. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define EXPORT __attribute__((visibility("default")))
#define MiB (1ull << 20)

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_CONTEXT = 201, NOT_FOUND = 500 };

static uint64_t used[8];
static __thread int current;
static char primary[8];     /* the primary contexts' handles: &primary[device] */
static __thread void* made; /* a context of cuCtxCreate_v2 made current on this thread */
static __thread int made_device;
static int primary_refs[8];
static pthread_mutex_t blocks_mutex = PTHREAD_MUTEX_INITIALIZER;

static uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* t = getenv(name);
  return t && *t ? strtoull(t, NULL, 10) : fallback;
}
static uint64_t total(void) { return env_u64("FAKE_CUDA_TOTAL", 1ull << 30); }
static int devices(void) { return (int)env_u64("FAKE_CUDA_DEVICES", 2); }
static int valid(int d) { return d >= 0 && d < devices(); }
static uint64_t pages(uint64_t n) { return (n + 2 * MiB - 1) / (2 * MiB) * (2 * MiB); }

/* Device memory taken and given back, per device. */
static int take_device(int device, uint64_t size) {
  if (__atomic_add_fetch(&used[device], size, __ATOMIC_SEQ_CST) > total()) {
    __atomic_sub_fetch(&used[device], size, __ATOMIC_SEQ_CST);
    return 0;
  }
  return 1;
}
static void give_device(int device, uint64_t size) { __atomic_sub_fetch(&used[device], size, __ATOMIC_SEQ_CST); }

/* Green contexts: each has a context handle of its own, current on a thread once pushed. */
struct green {
  char context; /* its context's handle: &g->context */
  int device;
};
static __thread struct green* pushed;
static struct green* green_of(void* ctx);

struct pool;

/* A block: its size, device and context ahead of the address handed out, in a list of all. */
struct head {
  uint64_t size;
  int device;
  int outlives; /* stream-ordered or cuMemCreate: not freed with its context */
  void* context;
  struct pool* pool; /* a stream-ordered block: its pool holds the device memory */
  int refs, mappings, green_device;
  struct head *prev, *next;
  int pad[2]; /* the address handed out is aligned as the driver's are, and more */
};
static struct head blocks = {0, 0, 0, NULL, NULL, 0, 0, -1, &blocks, &blocks};

/* The calling thread's current context on `device`: a green one pushed, one it made, else the
 * device's primary context while retained. */
static void* context_of(int device) {
  if (pushed && pushed->device == device) return &pushed->context;
  if (made && made_device == device) return made;
  return __atomic_load_n(&primary_refs[device], __ATOMIC_SEQ_CST) > 0 ? &primary[device] : NULL;
}

static struct head* new_block(uint64_t size, int device, int outlives, struct pool* pool) {
  struct head* h = malloc(sizeof(struct head) + (size ? 1 : 0));
  if (!h) return NULL;
  memset(h, 0, sizeof *h);
  h->size = size;
  h->device = device;
  h->outlives = outlives;
  h->pool = pool;
  h->refs = 1;
  h->green_device = -1;
  h->context = context_of(device >= 0 ? device : 0);
  if (pushed && h->context == &pushed->context) h->green_device = pushed->device;
  pthread_mutex_lock(&blocks_mutex);
  h->next = blocks.next;
  h->prev = &blocks;
  blocks.next->prev = h;
  blocks.next = h;
  pthread_mutex_unlock(&blocks_mutex);
  return h;
}

static CUresult take_as(CUdeviceptr* p, uint64_t size, int device, int outlives) {
  if (!p) return INVALID_VALUE;
  if (!valid(device)) return INVALID_VALUE;
  if (!take_device(device, size)) return OUT_OF_MEMORY;
  struct head* h = new_block(size, device, outlives, NULL);
  if (!h) {
    give_device(device, size);
    return OUT_OF_MEMORY;
  }
  *p = (CUdeviceptr)(uintptr_t)(h + 1);
  return OK;
}
static CUresult take(CUdeviceptr* p, uint64_t size, int device) { return take_as(p, size, device, 0); }

static void release_to_pool(struct head* h);

/* With blocks_mutex held. */
static void drop(struct head* h) {
  h->prev->next = h->next;
  h->next->prev = h->prev;
  if (h->pool)
    release_to_pool(h);
  else if (h->device >= 0)
    give_device(h->device, h->size);
  free(h);
}

static CUresult give(CUdeviceptr p) {
  if (!p) return OK;
  pthread_mutex_lock(&blocks_mutex);
  drop((struct head*)(uintptr_t)p - 1);
  pthread_mutex_unlock(&blocks_mutex);
  return OK;
}

/* Frees what was allocated in `context` (or in a green context of `green_device`) and does not
 * outlive it. */
static void end(void* context, int green_device) {
  pthread_mutex_lock(&blocks_mutex);
  for (struct head *h = blocks.next, *next; h != &blocks; h = next) {
    next = h->next;
    if (h->outlives) continue;
    if (h->context == context || (green_device >= 0 && h->green_device == green_device)) drop(h);
  }
  pthread_mutex_unlock(&blocks_mutex);
}
static void graph_reset(int device);
static void reset(int device) {
  end(&primary[device], device);
  graph_reset(device);
}

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
  end(ctx, -1);
  free(made);
  made = NULL;
  return OK;
}
EXPORT CUresult cuCtxGetCurrent(void** ctx) {
  *ctx = context_of(current);
  return OK;
}
EXPORT CUresult cuCtxGetDevice_v2(int* d, void* ctx) {
  for (int i = 0; i < 8; ++i)
    if (ctx == &primary[i]) return *d = i, OK;
  if (ctx && ctx == made) return *d = made_device, OK;
  if (green_of(ctx)) return *d = green_of(ctx)->device, OK;
  return INVALID_CONTEXT;
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
EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, int d) {
  if (!bytes || !valid(d)) return INVALID_VALUE;
  *bytes = total();
  return OK;
}
/* CUDA before 3.2: 32 bits, cut as the driver cuts them. */
EXPORT CUresult cuDeviceTotalMem(unsigned* bytes, int d) {
  if (!bytes || !valid(d)) return INVALID_VALUE;
  *bytes = total() > 0xffffffffu ? 0xffffffffu : (unsigned)total();
  return OK;
}
EXPORT CUresult cuMemGetAllocationGranularity(size_t* g, const void* prop, int option) {
  *g = 2 * MiB;
  return OK;
}

/* Green contexts. Not a driver function: a green context on device d (the driver makes them from
 * SM resources, which the stand-in has none of). */
static struct green* greens[64];
EXPORT void* fakeCudaGreenCtx(int d) {
  struct green* g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->device = d;
  for (int i = 0; i < 64; ++i)
    if (__sync_bool_compare_and_swap(&greens[i], NULL, g)) break;
  return g;
}
static struct green* green_of(void* ctx) {
  for (int i = 0; i < 64; ++i)
    if (greens[i] && ctx == &greens[i]->context) return greens[i];
  return NULL;
}
EXPORT CUresult cuCtxFromGreenCtx(void** ctx, void* green) {
  if (!green) return INVALID_VALUE;
  *ctx = &((struct green*)green)->context;
  return OK;
}
EXPORT CUresult cuCtxPushCurrent_v2(void* ctx) {
  pushed = green_of(ctx);
  if (pushed) current = pushed->device;
  return OK;
}
EXPORT CUresult cuCtxPopCurrent_v2(void** ctx) {
  if (ctx) *ctx = pushed ? (void*)&pushed->context : context_of(current);
  pushed = NULL;
  return OK;
}
EXPORT CUresult cuGreenCtxDestroy(void* green) { return OK; /* frees nothing, as on the H200 */ }

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

/* The v1 entry points: 32-bit pointers, small tokens here that stand for a block. */
static CUdeviceptr v1_blocks[4096];
static int v1_on(void) { return env_u64("FAKE_CUDA_V1", 0) == 1; }
EXPORT CUresult cuMemAlloc(unsigned* p, unsigned size) {
  if (!v1_on()) return INVALID_CONTEXT;
  CUdeviceptr b;
  CUresult r = take(&b, size, current);
  if (r) return r;
  pthread_mutex_lock(&blocks_mutex);
  for (unsigned i = 0; i < 4096; ++i) {
    if (v1_blocks[i]) continue;
    v1_blocks[i] = b;
    *p = (i + 1) << 12;
    pthread_mutex_unlock(&blocks_mutex);
    return OK;
  }
  pthread_mutex_unlock(&blocks_mutex);
  give(b);
  return OUT_OF_MEMORY;
}
EXPORT CUresult cuMemFree(unsigned p) {
  if (!v1_on()) return INVALID_CONTEXT;
  unsigned i = (p >> 12) - 1;
  if (!p || i >= 4096 || !v1_blocks[i]) return INVALID_VALUE;
  CUdeviceptr b = v1_blocks[i];
  v1_blocks[i] = 0;
  return give(b);
}

/* ---- streams and stream-ordered pools ---- */

struct stream {
  int device;
};
EXPORT CUresult cuStreamCreate(void** s, unsigned flags) {
  struct stream* st = malloc(sizeof *st);
  if (!st) return OUT_OF_MEMORY;
  st->device = current;
  *s = st;
  return OK;
}
EXPORT CUresult cuGreenCtxStreamCreate(void** s, void* green, unsigned flags, int priority) {
  if (!green) return INVALID_VALUE;
  struct stream* st = malloc(sizeof *st);
  if (!st) return OUT_OF_MEMORY;
  st->device = ((struct green*)green)->device;
  *s = st;
  return OK;
}
EXPORT CUresult cuStreamDestroy_v2(void* s) {
  free(s);
  return OK;
}
static int special(void* s) { return (uintptr_t)s <= 2; }
static int stream_device(void* s) { return special(s) ? current : ((struct stream*)s)->device; }
EXPORT CUresult cuStreamGetCtx(void* s, void** ctx) {
  *ctx = special(s) ? context_of(current) : &primary[stream_device(s)];
  return OK;
}

struct pool {
  int device; /* -1: host memory */
  uint64_t reserved, in_use, threshold;
  int destroyed;
  struct pool* next;
};
static struct pool default_pools[8];
static struct pool* current_pools[8];
static struct pool* made_pools; /* cuMemPoolCreate's, in a list */
static pthread_mutex_t pools_mutex = PTHREAD_MUTEX_INITIALIZER;

static struct pool* default_pool(int d) {
  default_pools[d].device = d;
  return &default_pools[d];
}
EXPORT CUresult cuDeviceGetDefaultMemPool(void** p, int d) {
  if (!valid(d)) return INVALID_VALUE;
  *p = default_pool(d);
  return OK;
}
EXPORT CUresult cuDeviceGetMemPool(void** p, int d) {
  if (!valid(d)) return INVALID_VALUE;
  *p = current_pools[d] ? current_pools[d] : default_pool(d);
  return OK;
}
EXPORT CUresult cuDeviceSetMemPool(int d, void* p) {
  if (!valid(d) || !p || ((struct pool*)p)->device != d) return INVALID_VALUE;
  current_pools[d] = p;
  return OK;
}
EXPORT CUresult cuMemPoolCreate(void** out, const struct fake_pool_props* props) {
  if (!out || !props) return INVALID_VALUE;
  int device = props->location_type == 1 ? props->location_id : -1; /* 2, 3, 4: host memory */
  if (props->location_type == 1 && !valid(device)) return INVALID_VALUE;
  struct pool* p = calloc(1, sizeof *p);
  if (!p) return OUT_OF_MEMORY;
  p->device = device;
  pthread_mutex_lock(&pools_mutex);
  p->next = made_pools;
  made_pools = p;
  pthread_mutex_unlock(&pools_mutex);
  *out = p;
  return OK;
}
/* With pools_mutex held: the reserve cut to `keep` (never below what is in use). */
static void trim(struct pool* p, uint64_t keep) {
  if (keep >= p->reserved) return;
  uint64_t target = pages(p->in_use > keep ? p->in_use : keep);
  if (target >= p->reserved) return;
  if (p->device >= 0) give_device(p->device, p->reserved - target);
  p->reserved = target;
}
EXPORT CUresult cuMemPoolDestroy(void* pool) {
  struct pool* p = pool;
  pthread_mutex_lock(&pools_mutex);
  p->destroyed = 1;
  trim(p, 0);
  pthread_mutex_unlock(&pools_mutex);
  return OK;
}
EXPORT CUresult cuMemPoolTrimTo(void* pool, size_t keep) {
  pthread_mutex_lock(&pools_mutex);
  trim(pool, keep);
  pthread_mutex_unlock(&pools_mutex);
  return OK;
}
EXPORT CUresult cuMemPoolGetAttribute(void* pool, int attr, void* value) {
  struct pool* p = pool;
  pthread_mutex_lock(&pools_mutex);
  uint64_t v = attr == 4 ? p->threshold : attr == 5 ? p->reserved : attr == 7 ? p->in_use : 0;
  pthread_mutex_unlock(&pools_mutex);
  *(uint64_t*)value = v;
  return attr == 4 || attr == 5 || attr == 7 ? OK : INVALID_VALUE;
}
EXPORT CUresult cuMemPoolSetAttribute(void* pool, int attr, void* value) {
  if (attr != 4) return INVALID_VALUE; /* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD */
  pthread_mutex_lock(&pools_mutex);
  ((struct pool*)pool)->threshold = *(uint64_t*)value;
  pthread_mutex_unlock(&pools_mutex);
  return OK;
}
static CUresult pool_take(CUdeviceptr* out, uint64_t size, struct pool* p) {
  if (!out || !p || p->destroyed) return INVALID_VALUE;
  pthread_mutex_lock(&pools_mutex);
  p->in_use += size;
  /* FAKE_CUDA_POOL_PIECES=1: what the reserve holds free is in pieces no allocation can use. */
  int pieces = env_u64("FAKE_CUDA_POOL_PIECES", 0) != 0;
  if (pieces || p->in_use > p->reserved) {
    uint64_t grow = pages(pieces ? size : p->in_use - p->reserved);
    uint64_t chunk = env_u64("FAKE_CUDA_POOL_CHUNK", 0);
    if (grow < chunk) grow = chunk;
    if (p->device >= 0 && !take_device(p->device, grow)) {
      p->in_use -= size;
      pthread_mutex_unlock(&pools_mutex);
      return OUT_OF_MEMORY;
    }
    p->reserved += grow;
  }
  pthread_mutex_unlock(&pools_mutex);
  struct head* h = new_block(size, p->device, 1, p);
  if (!h) return OUT_OF_MEMORY;
  *out = (CUdeviceptr)(uintptr_t)(h + 1);
  return OK;
}
static void release_to_pool(struct head* h) {
  pthread_mutex_lock(&pools_mutex);
  h->pool->in_use -= h->size;
  pthread_mutex_unlock(&pools_mutex);
}
/* A synchronisation: every pool trimmed to its release threshold. */
static void synchronise(void) {
  pthread_mutex_lock(&pools_mutex);
  for (int d = 0; d < 8; ++d) trim(&default_pools[d], default_pools[d].threshold);
  for (struct pool* p = made_pools; p; p = p->next) trim(p, p->threshold);
  pthread_mutex_unlock(&pools_mutex);
}
EXPORT CUresult cuStreamSynchronize(void* s) {
  synchronise();
  return OK;
}
EXPORT CUresult cuStreamSynchronize_ptsz(void* s) { return cuStreamSynchronize(s); }
EXPORT CUresult cuCtxSynchronize(void) {
  synchronise();
  return OK;
}
EXPORT CUresult cuEventSynchronize(void* e) {
  synchronise();
  return OK;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t size, void* stream) {
  void* pool;
  cuDeviceGetMemPool(&pool, stream_device(stream));
  return pool_take(p, size, pool);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t size, void* stream) {
  return cuMemAllocAsync(p, size, stream);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t size, void* pool, void* stream) {
  return pool_take(p, size, pool);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, size_t size, void* pool,
                                             void* stream) {
  return pool_take(p, size, pool);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, void* stream) { return give(p); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, void* stream) { return give(p); }

/* ---- virtual memory ---- */

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
static struct {
  CUdeviceptr at;
  uint64_t size;
  struct head* block;
} mappings[1024];
static CUdeviceptr next_va = 0x7e0000000000ull;
EXPORT CUresult cuMemAddressReserve(CUdeviceptr* p, size_t size, size_t align, CUdeviceptr addr,
                                    unsigned long long flags) {
  pthread_mutex_lock(&blocks_mutex);
  *p = next_va;
  next_va += pages(size) + 2 * MiB;
  pthread_mutex_unlock(&blocks_mutex);
  return OK;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size) { return OK; }
EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void* desc, size_t count) {
  return OK;
}
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, unsigned long long handle,
                         unsigned long long flags) {
  pthread_mutex_lock(&blocks_mutex);
  for (int i = 0; i < 1024; ++i) {
    if (mappings[i].block) continue;
    mappings[i].at = p;
    mappings[i].size = size;
    mappings[i].block = (struct head*)(uintptr_t)handle - 1;
    mappings[i].block->mappings++;
    pthread_mutex_unlock(&blocks_mutex);
    return OK;
  }
  pthread_mutex_unlock(&blocks_mutex);
  return OUT_OF_MEMORY;
}
/* With blocks_mutex held: the memory goes once nothing refers to it. */
static void let_go(struct head* h) {
  if (h->refs <= 0 && h->mappings <= 0) drop(h);
}
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  int found = 0;
  pthread_mutex_lock(&blocks_mutex);
  for (int i = 0; i < 1024; ++i) {
    if (!mappings[i].block || mappings[i].at < p || mappings[i].at >= p + size) continue;
    if (mappings[i].at + mappings[i].size > p + size) continue; /* part of a mapping: refused */
    struct head* h = mappings[i].block;
    mappings[i].block = NULL;
    h->mappings--;
    let_go(h);
    found = 1;
  }
  pthread_mutex_unlock(&blocks_mutex);
  return found ? OK : INVALID_VALUE;
}
EXPORT CUresult cuMemRetainAllocationHandle(unsigned long long* handle, void* addr) {
  CUdeviceptr a = (CUdeviceptr)(uintptr_t)addr;
  pthread_mutex_lock(&blocks_mutex);
  for (int i = 0; i < 1024; ++i) {
    if (!mappings[i].block || a < mappings[i].at || a >= mappings[i].at + mappings[i].size) continue;
    mappings[i].block->refs++;
    *handle = (unsigned long long)(uintptr_t)(mappings[i].block + 1);
    pthread_mutex_unlock(&blocks_mutex);
    return OK;
  }
  pthread_mutex_unlock(&blocks_mutex);
  return INVALID_VALUE;
}
EXPORT CUresult cuMemRelease(unsigned long long handle) {
  pthread_mutex_lock(&blocks_mutex);
  struct head* h = (struct head*)(uintptr_t)handle - 1;
  h->refs--;
  let_go(h);
  pthread_mutex_unlock(&blocks_mutex);
  return OK;
}

/* ---- arrays: their texels, rounded to 2 MiB pages above 1 MiB, as an H200 took them ---- */

static uint64_t texel_bytes(int format, unsigned channels) {
  switch (format) {
    case 0x01: case 0x08: return channels;
    case 0x02: case 0x09: case 0x10: return 2ull * channels;
    default: return 4ull * channels;
  }
}
static uint64_t array_bytes(const struct fake_array3d* d, unsigned levels) {
  uint64_t sum = 0, w = d->width, h = d->height ? d->height : 1, z = d->depth ? d->depth : 1;
  int layered = d->flags & 0x05;
  for (unsigned l = 0; l < (levels ? levels : 1); ++l) {
    sum += w * h * z * texel_bytes(d->format, d->channels);
    w = w > 1 ? w / 2 : 1;
    if (d->height) h = h > 1 ? h / 2 : 1;
    if (d->depth && !layered) z = z > 1 ? z / 2 : 1;
  }
  return sum > MiB ? pages(sum) : sum;
}
static CUresult make_array(void** out, const struct fake_array3d* d, unsigned levels) {
  if (!out || !d) return INVALID_VALUE;
  if (d->flags & 0xc0) return take((CUdeviceptr*)out, 0, current); /* sparse, deferred: nothing */
  return take((CUdeviceptr*)out, array_bytes(d, levels), current);
}
EXPORT CUresult cuArrayCreate_v2(void** out, const struct fake_array2d* d) {
  if (!d) return INVALID_VALUE;
  struct fake_array3d d3 = {d->width, d->height, 0, d->format, d->channels, 0};
  return make_array(out, &d3, 1);
}
EXPORT CUresult cuArray3DCreate_v2(void** out, const struct fake_array3d* d) { return make_array(out, d, 1); }
EXPORT CUresult cuMipmappedArrayCreate(void** out, const struct fake_array3d* d, unsigned levels) {
  return make_array(out, d, levels);
}
EXPORT CUresult cuArrayDestroy(void* a) { return give((CUdeviceptr)(uintptr_t)a); }
EXPORT CUresult cuMipmappedArrayDestroy(void* a) { return give((CUdeviceptr)(uintptr_t)a); }

/* ---- graphs with memory nodes ---- */

struct node {
  int type; /* 10: a memory node; 4: a child graph */
  uint64_t bytes;
  int location_type, location_id;
  struct graph* child;
};
struct graph {
  struct node nodes[16];
  size_t count;
};
struct exec {
  struct graph* graph;
  int resident;
  struct exec* next;
};
static struct exec* execs;
static uint64_t graph_reserved[8];
EXPORT CUresult cuGraphCreate(void** g, unsigned flags) {
  *g = calloc(1, sizeof(struct graph));
  return *g ? OK : OUT_OF_MEMORY;
}
EXPORT CUresult cuGraphAddMemAllocNode(void** node, void* graph, const void* deps, size_t n,
                                       struct fake_mem_node_params* p) {
  struct graph* g = graph;
  if (g->count == 16) return INVALID_VALUE;
  struct node* x = &g->nodes[g->count++];
  x->type = 10;
  x->bytes = p->bytesize;
  x->location_type = p->pool.location_type;
  x->location_id = p->pool.location_id;
  p->dptr = 0x7d0000000000ull + g->count * 0x100000000ull;
  *node = x;
  return OK;
}
EXPORT CUresult cuGraphAddChildGraphNode(void** node, void* graph, const void* deps, size_t n,
                                         void* child) {
  struct graph* g = graph;
  if (g->count == 16) return INVALID_VALUE;
  struct node* x = &g->nodes[g->count++];
  x->type = 4;
  x->child = child;
  *node = x;
  return OK;
}
EXPORT CUresult cuGraphGetNodes(void* graph, void** nodes, size_t* n) {
  struct graph* g = graph;
  if (nodes)
    for (size_t i = 0; i < *n && i < g->count; ++i) nodes[i] = &g->nodes[i];
  *n = g->count;
  return OK;
}
EXPORT CUresult cuGraphNodeGetType(void* node, int* type) {
  *type = ((struct node*)node)->type;
  return OK;
}
EXPORT CUresult cuGraphMemAllocNodeGetParams(void* node, struct fake_mem_node_params* p) {
  struct node* x = node;
  if (x->type != 10) return INVALID_VALUE;
  memset(p, 0, sizeof *p);
  p->pool.location_type = x->location_type;
  p->pool.location_id = x->location_id;
  p->bytesize = x->bytes;
  return OK;
}
EXPORT CUresult cuGraphChildGraphNodeGetGraph(void* node, void** child) {
  *child = ((struct node*)node)->child;
  return OK;
}
EXPORT CUresult cuGraphInstantiateWithFlags(void** out, void* graph, unsigned long long flags) {
  struct exec* e = calloc(1, sizeof *e);
  if (!e) return OUT_OF_MEMORY;
  e->graph = graph;
  pthread_mutex_lock(&blocks_mutex);
  e->next = execs;
  execs = e;
  pthread_mutex_unlock(&blocks_mutex);
  *out = e;
  return OK;
}
EXPORT CUresult cuGraphInstantiateWithParams(void** out, void* graph, void* params) {
  return cuGraphInstantiateWithFlags(out, graph, 0);
}
EXPORT CUresult cuGraphInstantiateWithParams_ptsz(void** out, void* graph, void* params) {
  return cuGraphInstantiateWithFlags(out, graph, 0);
}
static uint64_t graph_need(const struct graph* g, int device, int depth) {
  uint64_t sum = 0;
  for (size_t i = 0; i < g->count && depth < 8; ++i) {
    const struct node* x = &g->nodes[i];
    if (x->type == 10 && x->location_type == 1 && x->location_id == device) sum += pages(x->bytes);
    if (x->type == 4 && x->child) sum += graph_need(x->child, device, depth + 1);
  }
  return sum;
}
/* An upload or first launch since the last trim reserves the graph's memory on each device. */
static CUresult graph_run(struct exec* e) {
  pthread_mutex_lock(&blocks_mutex);
  if (!e->resident) {
    for (int d = 0; d < devices(); ++d) {
      uint64_t need = graph_need(e->graph, d, 0);
      if (need && !take_device(d, need)) {
        pthread_mutex_unlock(&blocks_mutex);
        return OUT_OF_MEMORY;
      }
      graph_reserved[d] += need;
    }
    e->resident = 1;
  }
  pthread_mutex_unlock(&blocks_mutex);
  return OK;
}
EXPORT CUresult cuGraphUpload(void* e, void* s) { return graph_run(e); }
EXPORT CUresult cuGraphUpload_ptsz(void* e, void* s) { return graph_run(e); }
EXPORT CUresult cuGraphLaunch(void* e, void* s) { return graph_run(e); }
EXPORT CUresult cuGraphLaunch_ptsz(void* e, void* s) { return graph_run(e); }
EXPORT CUresult cuGraphExecDestroy(void* exec) {
  pthread_mutex_lock(&blocks_mutex);
  for (struct exec** p = &execs; *p; p = &(*p)->next)
    if (*p == exec) {
      *p = (*p)->next;
      break;
    }
  pthread_mutex_unlock(&blocks_mutex);
  free(exec); /* its memory stays reserved until a trim */
  return OK;
}
static void graph_trim_locked(int d) {
  give_device(d, graph_reserved[d]);
  graph_reserved[d] = 0;
  for (struct exec* e = execs; e; e = e->next) e->resident = 0;
}
EXPORT CUresult cuDeviceGraphMemTrim(int d) {
  if (!valid(d)) return INVALID_VALUE;
  pthread_mutex_lock(&blocks_mutex);
  graph_trim_locked(d);
  pthread_mutex_unlock(&blocks_mutex);
  return OK;
}
static void graph_reset(int d) {
  pthread_mutex_lock(&blocks_mutex);
  graph_trim_locked(d);
  pthread_mutex_unlock(&blocks_mutex);
}
EXPORT CUresult cuDeviceGetGraphMemAttribute(int d, int attr, void* value) {
  if (!valid(d)) return INVALID_VALUE;
  pthread_mutex_lock(&blocks_mutex);
  *(uint64_t*)value = graph_reserved[d];
  pthread_mutex_unlock(&blocks_mutex);
  return OK;
}

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
static CUresult i_alloc_v1(unsigned* p, unsigned n) { return cuMemAlloc(p, n); }
static CUresult i_free_v1(unsigned p) { return cuMemFree(p); }
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
static CUresult i_map(CUdeviceptr p, size_t n, size_t o, unsigned long long h, unsigned long long f) {
  return cuMemMap(p, n, o, h, f);
}
static CUresult i_unmap(CUdeviceptr p, size_t n) { return cuMemUnmap(p, n); }
static CUresult i_retain(unsigned long long* h, void* a) { return cuMemRetainAllocationHandle(h, a); }
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
    void* v1;
    void* internal_v1;
  } table[] = {
      {"cuInit", (void*)cuInit},
      {"cuDriverGetVersion", (void*)cuDriverGetVersion},
      {"cuDeviceGetCount", (void*)cuDeviceGetCount},
      {"cuCtxGetDevice", (void*)cuCtxGetDevice},
      {"cuCtxGetCurrent", (void*)cuCtxGetCurrent},
      {"cuCtxPushCurrent", (void*)cuCtxPushCurrent_v2},
      {"cuCtxPopCurrent", (void*)cuCtxPopCurrent_v2},
      {"cuCtxFromGreenCtx", (void*)cuCtxFromGreenCtx},
      {"cuGreenCtxDestroy", (void*)cuGreenCtxDestroy},
      {"cuDevicePrimaryCtxGetState", (void*)cuDevicePrimaryCtxGetState},
      {"cuDevicePrimaryCtxRetain", (void*)cuDevicePrimaryCtxRetain},
      {"cuDevicePrimaryCtxRelease", (void*)cuDevicePrimaryCtxRelease_v2},
      {"cuDevicePrimaryCtxReset", (void*)cuDevicePrimaryCtxReset_v2},
      {"cuCtxCreate", (void*)cuCtxCreate_v2},
      {"cuCtxDestroy", (void*)cuCtxDestroy_v2},
      {"cuDeviceGetUuid", (void*)cuDeviceGetUuid_v2},
      {"cuMemGetInfo", (void*)cuMemGetInfo_v2},
      {"cuDeviceTotalMem", (void*)cuDeviceTotalMem_v2, 0, 0, 0, (void*)cuDeviceTotalMem},
      {"cuMemAlloc", (void*)cuMemAlloc_v2, 0, (void*)i_alloc, 0, (void*)cuMemAlloc, (void*)i_alloc_v1},
      {"cuMemFree", (void*)cuMemFree_v2, 0, (void*)i_free, 0, (void*)cuMemFree, (void*)i_free_v1},
      {"cuMemAllocManaged", (void*)cuMemAllocManaged, 0, (void*)i_managed},
      {"cuMemAllocPitch", (void*)cuMemAllocPitch_v2, 0, (void*)i_pitch},
      {"cuMemAllocAsync", (void*)cuMemAllocAsync, (void*)cuMemAllocAsync_ptsz, (void*)i_async,
       (void*)i_async_ptsz},
      {"cuMemAllocFromPoolAsync", (void*)cuMemAllocFromPoolAsync, (void*)cuMemAllocFromPoolAsync_ptsz,
       (void*)i_pool, (void*)i_pool_ptsz},
      {"cuMemFreeAsync", (void*)cuMemFreeAsync, (void*)cuMemFreeAsync_ptsz, (void*)i_free_async,
       (void*)i_free_async_ptsz},
      {"cuStreamCreate", (void*)cuStreamCreate},
      {"cuStreamDestroy", (void*)cuStreamDestroy_v2},
      {"cuGreenCtxStreamCreate", (void*)cuGreenCtxStreamCreate},
      {"cuStreamGetCtx", (void*)cuStreamGetCtx},
      {"cuStreamSynchronize", (void*)cuStreamSynchronize, (void*)cuStreamSynchronize_ptsz},
      {"cuCtxSynchronize", (void*)cuCtxSynchronize},
      {"cuEventSynchronize", (void*)cuEventSynchronize},
      {"cuDeviceGetDefaultMemPool", (void*)cuDeviceGetDefaultMemPool},
      {"cuDeviceGetMemPool", (void*)cuDeviceGetMemPool},
      {"cuDeviceSetMemPool", (void*)cuDeviceSetMemPool},
      {"cuMemPoolCreate", (void*)cuMemPoolCreate},
      {"cuMemPoolDestroy", (void*)cuMemPoolDestroy},
      {"cuMemPoolTrimTo", (void*)cuMemPoolTrimTo},
      {"cuMemPoolGetAttribute", (void*)cuMemPoolGetAttribute},
      {"cuMemPoolSetAttribute", (void*)cuMemPoolSetAttribute},
      {"cuMemCreate", (void*)cuMemCreate, 0, (void*)i_create},
      {"cuMemRelease", (void*)cuMemRelease, 0, (void*)i_release},
      {"cuMemMap", (void*)cuMemMap, 0, (void*)i_map},
      {"cuMemUnmap", (void*)cuMemUnmap, 0, (void*)i_unmap},
      {"cuMemRetainAllocationHandle", (void*)cuMemRetainAllocationHandle, 0, (void*)i_retain},
      {"cuMemAddressReserve", (void*)cuMemAddressReserve},
      {"cuMemAddressFree", (void*)cuMemAddressFree},
      {"cuMemSetAccess", (void*)cuMemSetAccess},
      {"cuMemGetAllocationGranularity", (void*)cuMemGetAllocationGranularity},
      {"cuArrayCreate", (void*)cuArrayCreate_v2},
      {"cuArray3DCreate", (void*)cuArray3DCreate_v2},
      {"cuMipmappedArrayCreate", (void*)cuMipmappedArrayCreate},
      {"cuArrayDestroy", (void*)cuArrayDestroy},
      {"cuMipmappedArrayDestroy", (void*)cuMipmappedArrayDestroy},
      {"cuGraphCreate", (void*)cuGraphCreate},
      {"cuGraphAddMemAllocNode", (void*)cuGraphAddMemAllocNode},
      {"cuGraphAddChildGraphNode", (void*)cuGraphAddChildGraphNode},
      {"cuGraphGetNodes", (void*)cuGraphGetNodes},
      {"cuGraphNodeGetType", (void*)cuGraphNodeGetType},
      {"cuGraphMemAllocNodeGetParams", (void*)cuGraphMemAllocNodeGetParams},
      {"cuGraphChildGraphNodeGetGraph", (void*)cuGraphChildGraphNodeGetGraph},
      {"cuGraphInstantiateWithFlags", (void*)cuGraphInstantiateWithFlags},
      {"cuGraphInstantiateWithParams", (void*)cuGraphInstantiateWithParams,
       (void*)cuGraphInstantiateWithParams_ptsz},
      {"cuGraphUpload", (void*)cuGraphUpload, (void*)cuGraphUpload_ptsz},
      {"cuGraphLaunch", (void*)cuGraphLaunch, (void*)cuGraphLaunch_ptsz},
      {"cuGraphExecDestroy", (void*)cuGraphExecDestroy},
      {"cuDeviceGraphMemTrim", (void*)cuDeviceGraphMemTrim},
      {"cuDeviceGetGraphMemAttribute", (void*)cuDeviceGetGraphMemAttribute},
      {"cuGetProcAddress", (void*)cuGetProcAddress_v2, 0, (void*)i_gpa},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
    if (strcmp(symbol, table[i].name) != 0) continue;
    const char* internal = getenv("FAKE_CUDA_PROC_INTERNAL");
    int own = internal && *internal == '1' && table[i].internal;
    void* f = own ? table[i].internal : table[i].legacy;
    if ((flags & PTDS) && table[i].ptsz) f = own ? table[i].internal_ptsz : table[i].ptsz;
    if (version < 3020 && table[i].v1) f = own ? table[i].internal_v1 : table[i].v1;
    if (strcmp(symbol, "cuGetProcAddress") == 0 && version < 12000) f = (void*)cuGetProcAddress;
    *pfn = f;
    if (status) *status = 0;
    return OK;
  }
  *pfn = NULL;
  if (status) *status = 1;
  return NOT_FOUND;
}
