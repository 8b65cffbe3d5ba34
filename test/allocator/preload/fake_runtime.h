/* The stand-in runtime's API (fake_runtime.c): the CUDA runtime's names and out-of-memory code
 * (cudaErrorMemoryAllocation = 2, as CUDA_ERROR_OUT_OF_MEMORY is the driver's). */
#include <stddef.h>
int cudaMalloc(void** p, size_t n);
int cudaFree(void* p);
int cudaMallocManaged(void** p, size_t n, unsigned flags);
int cudaMallocPitch(void** p, size_t* pitch, size_t w, size_t h);
int cudaMallocAsync(void** p, size_t n, void* stream);
int cudaMallocAsync_ptsz(void** p, size_t n, void* stream);
int cudaMallocFromPoolAsync(void** p, size_t n, void* pool, void* stream);
int cudaFreeAsync(void* p, void* stream);
int cudaSetDevice(int dev);
int cudaDeviceReset(void);
int cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
int cudaGetDriverEntryPoint(const char* name, void** f);
int cudaGetDriverEntryPointByVersion(const char* name, void** f, unsigned version,
                                     unsigned long long flags, int* status);
unsigned long long fakeDeviceUsed(int dev);
