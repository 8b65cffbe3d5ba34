/* The driver's structures the stand-in driver (fake_driver.c) and the test program (program.c)
 * pass each other, laid out as cuda.h lays them out. */
#pragma once
#include <stddef.h>

/* CUmemPoolProps */
struct fake_pool_props {
  int alloc_type, handle_types, location_type, location_id;
  void* win32;
  size_t max_size;
  unsigned short usage;
  unsigned char reserved[54];
};
/* CUDA_MEM_ALLOC_NODE_PARAMS */
struct fake_mem_node_params {
  struct fake_pool_props pool;
  const void* access;
  size_t access_count;
  size_t bytesize;
  unsigned long long dptr;
};
/* CUDA_ARRAY_DESCRIPTOR and CUDA_ARRAY3D_DESCRIPTOR */
struct fake_array2d {
  size_t width, height;
  int format;
  unsigned channels;
};
struct fake_array3d {
  size_t width, height, depth;
  int format;
  unsigned channels, flags;
};
