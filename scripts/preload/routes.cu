// Every route to device memory the interposer charges, one step at a time, for
// scripts/preload/routes-run.js, which runs this program under `cuda-memory run` and reads the
// group's ledger and NVML's per-process figure between the steps. After each step the program
// prints one line, `step NAME {"results":[...]}` (each call's CUresult), and waits for a line on
// its input before the next.
//
// Built three ways, as programs reach the driver: with nvcc's default (the runtime compiled in)
// or `-cudart shared` (libcudart.so), getting every driver entry point from the runtime
// (cudaGetDriverEntryPointByVersion, which asks cuGetProcAddress); and with -DROUTES_DRIVER
// -cudart none -lcuda, calling the driver's symbols by name, with no runtime at all.
//
//   routes [--refuse BYTES]   BYTES: a cuMemAlloc past the budget, to be refused (default 4 GiB)
#include <cuda.h>
#ifndef ROUTES_DRIVER
#include <cuda_runtime.h>
#endif
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifdef ROUTES_DRIVER
#define D(name) (&name)
#else
template <typename F>
F Entry(const char* name) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &f, 13000, cudaEnableDefault, &q) != cudaSuccess || !f) {
    std::fprintf(stderr, "routes: no driver entry point %s\n", name);
    std::exit(3);
  }
  return reinterpret_cast<F>(f);
}
#define D(name) (Entry<decltype(&name)>(#name))
#endif

constexpr size_t MiB = size_t(1) << 20;
static std::vector<int> results;

static int R(CUresult r) {
  results.push_back(static_cast<int>(r));
  return r;
}

// Says the step and waits for the go-ahead.
static void Step(const char* name) {
  std::string list;
  for (size_t i = 0; i < results.size(); ++i) list += (i ? "," : "") + std::to_string(results[i]);
  std::printf("step %s {\"results\":[%s]}\n", name, list.c_str());
  std::fflush(stdout);
  results.clear();
  char line[64];
  if (!std::fgets(line, sizeof line, stdin)) std::exit(0);
}

int main(int argc, char** argv) {
  size_t refuse = size_t(4) << 30;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--refuse")) refuse = std::strtoull(argv[i + 1], nullptr, 10);
  const CUdevice dev = 0;
  CUcontext ctx = nullptr;
#ifdef ROUTES_DRIVER
  R(cuInit(0));
  R(cuDevicePrimaryCtxRetain(&ctx, dev));
  R(cuCtxSetCurrent(ctx));
#else
  results.push_back(cudaFree(nullptr));
  R(D(cuCtxGetCurrent)(&ctx));
#endif
  Step("context");

  // Plain allocations: charged what the device takes (4 MiB + 1 byte takes 6 MiB).
  CUdeviceptr a = 0, b = 0;
  R(D(cuMemAlloc)(&a, 100 * MiB));
  R(D(cuMemAlloc)(&b, 4 * MiB + 1));
  Step("cuMemAlloc 100 MiB and 4 MiB + 1 B");
  R(D(cuMemFree)(a));
  R(D(cuMemFree)(b));
  Step("freed");

  // Virtual memory, as llama.cpp's pool uses it: created, mapped, released at once.
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  const size_t vmm = 256 * MiB;
  R(D(cuMemCreate)(&h, vmm, &prop, 0));
  R(D(cuMemAddressReserve)(&va, vmm, 0, 0, 0));
  R(D(cuMemMap)(va, vmm, 0, h, 0));
  CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  R(D(cuMemSetAccess)(va, vmm, &access, 1));
  R(D(cuMemRelease)(h));
  Step("cuMemCreate 256 MiB, mapped, released");
  R(D(cuMemUnmap)(va, vmm));
  R(D(cuMemAddressFree)(va, vmm));
  Step("unmapped");

  // The device's default pool with its release threshold raised (RMM's async resource).
  CUmemoryPool pool = nullptr;
  R(D(cuDeviceGetDefaultMemPool)(&pool, dev));
  cuuint64_t keep = UINT64_MAX, none = 0;
  R(D(cuMemPoolSetAttribute)(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
  CUdeviceptr p = 0;
  R(D(cuMemAllocAsync)(&p, 256 * MiB, nullptr));
  R(D(cuMemFreeAsync)(p, nullptr));
  R(D(cuStreamSynchronize)(nullptr));
  Step("cuMemAllocAsync 256 MiB freed, synchronised, threshold raised");
  R(D(cuMemPoolTrimTo)(pool, 0));
  R(D(cuMemPoolSetAttribute)(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &none));
  Step("pool trimmed");
  R(D(cuMemAllocAsync)(&p, 4096, nullptr));
  R(D(cuStreamSynchronize)(nullptr));
  Step("cuMemAllocAsync 4 KiB");
  R(D(cuMemFreeAsync)(p, nullptr));
  R(D(cuStreamSynchronize)(nullptr));
  Step("freed and synchronised");

  // A pool in host memory: not device memory.
  CUmemPoolProps hp = {};
  hp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  hp.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  CUmemoryPool host = nullptr;
  if (!R(D(cuMemPoolCreate)(&host, &hp))) {
    R(D(cuMemAllocFromPoolAsync)(&p, 256 * MiB, host, nullptr));
    R(D(cuStreamSynchronize)(nullptr));
  }
  Step("host-memory pool 256 MiB");
  if (host) {
    R(D(cuMemFreeAsync)(p, nullptr));
    R(D(cuStreamSynchronize)(nullptr));
    R(D(cuMemPoolDestroy)(host));
  }

  // CUDA arrays: 1024 x 1024 x 16 float4, and a 4096 x 4096 float4 with 8 levels.
  CUarray arr = nullptr;
  CUmipmappedArray mip = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR d3 = {1024, 1024, 16, CU_AD_FORMAT_FLOAT, 4, 0};
  CUDA_ARRAY3D_DESCRIPTOR dm = {4096, 4096, 0, CU_AD_FORMAT_FLOAT, 4, 0};
  R(D(cuArray3DCreate)(&arr, &d3));
  Step("3D array 256 MiB");
  R(D(cuMipmappedArrayCreate)(&mip, &dm, 8));
  Step("mipmapped array 341 MiB");
  R(D(cuArrayDestroy)(arr));
  R(D(cuMipmappedArrayDestroy)(mip));
  Step("arrays destroyed");

  // A graph with a 256 MiB memory node (and its free).
  CUgraph g = nullptr;
  CUgraphExec ge = nullptr;
  CUgraphNode alloc_node = nullptr, free_node = nullptr;
  CUDA_MEM_ALLOC_NODE_PARAMS ap = {};
  ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
  ap.bytesize = 256 * MiB;
  R(D(cuGraphCreate)(&g, 0));
  R(D(cuGraphAddMemAllocNode)(&alloc_node, g, nullptr, 0, &ap));
  R(D(cuGraphAddMemFreeNode)(&free_node, g, &alloc_node, 1, ap.dptr));
  R(D(cuGraphInstantiateWithFlags)(&ge, g, 0));
  Step("graph instantiated");
  R(D(cuGraphLaunch)(ge, nullptr));
  R(D(cuStreamSynchronize)(nullptr));
  Step("graph launched");
  R(D(cuGraphExecDestroy)(ge));
  R(D(cuGraphDestroy)(g));
  Step("graph destroyed");
  R(D(cuDeviceGraphMemTrim)(dev));
  Step("graph memory trimmed");

  // Streams: each takes memory of the driver's beside the context.
  std::vector<CUstream> streams(64);
  for (CUstream& s : streams) R(D(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
  Step("64 streams");
  for (CUstream s : streams) R(D(cuStreamDestroy)(s));
  Step("streams destroyed");
  for (CUstream& s : streams) R(D(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
  Step("64 streams again");
  for (CUstream s : streams) R(D(cuStreamDestroy)(s));
  Step("destroyed again");

  // A green context's allocation (its memory goes with the primary context).
  CUdevResource sm, part, rest;
  unsigned groups = 1;
  CUdevResourceDesc desc;
  CUgreenCtx green = nullptr;
  CUcontext gctx = nullptr;
  CUdeviceptr gp = 0;
  if (!R(D(cuDeviceGetDevResource)(dev, &sm, CU_DEV_RESOURCE_TYPE_SM)) &&
      !R(D(cuDevSmResourceSplitByCount)(&part, &groups, &sm, &rest, 0, 16)) &&
      !R(D(cuDevResourceGenerateDesc)(&desc, &part, 1)) &&
      !R(D(cuGreenCtxCreate)(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)) &&
      !R(D(cuCtxFromGreenCtx)(&gctx, green)) && !R(D(cuCtxPushCurrent)(gctx))) {
    R(D(cuMemAlloc)(&gp, 256 * MiB));
    CUcontext popped;
    R(D(cuCtxPopCurrent)(&popped));
    R(D(cuGreenCtxDestroy)(green));
  }
  Step("green context 256 MiB, destroyed");

  // The v1 entry point, as a driver's cuGetProcAddress hands it out below version 3020.
  void* v1 = nullptr;
  CUdriverProcAddressQueryResult q;
  R(D(cuGetProcAddress)("cuMemAlloc", &v1, 3010, CU_GET_PROC_ADDRESS_DEFAULT, &q));
  unsigned int small = 0;
  if (v1) R(reinterpret_cast<CUresult (*)(unsigned int*, unsigned int)>(v1)(&small, 1 << 20));
  Step("v1 cuMemAlloc 1 MiB");

  // Past the budget: the API's own out-of-memory error.
  CUdeviceptr big = 0;
  if (!R(D(cuMemAlloc)(&big, refuse))) R(D(cuMemFree)(big));
  Step("cuMemAlloc past the budget");

  // The context's end gives back what lived in it (the green context's allocation too).
#ifdef ROUTES_DRIVER
  R(cuDevicePrimaryCtxReset(dev));
#else
  results.push_back(cudaDeviceReset());
#endif
  Step("context reset");
  return 0;
}
