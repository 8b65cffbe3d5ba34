// CUDA arrays (cuArrayCreate, cuArray3DCreate, cuMipmappedArrayCreate, as cudaMallocArray,
// cudaMalloc3DArray and cudaMallocMipmappedArray reach them): charged their texels, summed over the
// levels of a mipmapped array and rounded up to the device's page, which is what an H200 took for
// them (cuArrayGetMemoryRequirements answers only for arrays made with deferred mapping). Sparse
// and deferred-mapping arrays take no memory until it is mapped into them, and are not charged.
// Arrays live in their context: its end frees them with the rest.
#include <algorithm>
#include <cstdint>

#include "allocator/preload/areas.h"
#include "allocator/preload/charge.h"
#include "core/allocator/footprint.h"

using namespace cm::preload;

namespace {

// Bits per texel of a CUarray_format with `channels` channels (cuda.h's CU_AD_FORMAT_*): the plain
// formats per channel, the others per texel (block-compressed ones per texel of their 4x4 blocks,
// the YUV ones with their subsampled planes); 128 (four 32-bit channels, the largest plain texel)
// for a format not known here, so that none is charged less than it takes.
uint64_t TexelBits(int format, unsigned channels) {
  static const struct {
    int format;
    uint8_t bits;
    bool per_channel;
  } kFormats[] = {
      {0x01, 8, true},   {0x08, 8, true},   {0x02, 16, true},  {0x09, 16, true},  {0x10, 16, true},
      {0x03, 32, true},  {0x0a, 32, true},  {0x20, 32, true},  // integers, half, float
      {0xc0, 8, false},  {0xc6, 8, false},  {0xc1, 16, false}, {0xc7, 16, false},  // 8-bit norm
      {0xc2, 32, false}, {0xc8, 32, false}, {0xc3, 16, false}, {0xc9, 16, false}, {0xc4, 32, false},
      {0xca, 32, false}, {0xc5, 64, false}, {0xcb, 64, false},                    // 16-bit norm
      {0x91, 4, false},  {0x92, 4, false},  {0x97, 4, false},  {0x98, 4, false},  // BC1, BC4
      {0x93, 8, false},  {0x94, 8, false},  {0x95, 8, false},  {0x96, 8, false},  // BC2, BC3
      {0x99, 8, false},  {0x9a, 8, false},  {0x9b, 8, false},  {0x9c, 8, false},  // BC5, BC6H
      {0x9d, 8, false},  {0x9e, 8, false},                                        // BC7
      {0xb0, 12, false}, {0x9f, 24, false}, {0xa1, 24, false},  // NV12, P010, P016 (4:2:0)
      {0xa2, 16, false}, {0xa5, 16, false}, {0xa3, 32, false}, {0xa4, 32, false},  // 4:2:2
      {0xa6, 32, false}, {0xa7, 32, false}, {0xa8, 32, false}, {0xa9, 32, false}, {0x50, 32, false},
      {0xb1, 64, false}, {0xb2, 24, false}, {0xb3, 48, false},  // 4:4:4
  };
  for (const auto& f : kFormats)
    if (f.format == format) return f.per_channel ? uint64_t{f.bits} * channels : f.bits;
  return 128;
}

// What an array of this description takes on `dev`.
uint64_t ArrayFootprint(CUdevice dev, const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  // Layers, and a cubemap's faces (Depth is 6, or 6 per layer), are not halved by a level.
  bool layered = d.Flags & (kArray3dLayered | kArray3dCubemap);
  uint64_t texels = cm::core::ArrayBytes(d.Width, d.Height, d.Depth, 1, levels, layered);
  uint64_t bits = TexelBits(d.Format, d.NumChannels);
  uint64_t bytes = texels > UINT64_MAX / bits ? UINT64_MAX : (texels * bits + 7) / 8;
  return cm::core::DeviceFootprint(bytes, GroupDevice() == "simulated" ? 1 : DevicePage(dev));
}

template <typename Forward>
CUresult Create(void* caller, void** handle, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned levels,
                const char* api, Forward forward) {
  if (!desc || (desc->Flags & (kArray3dSparse | kArray3dDeferredMapping))) return forward();
  CUdevice dev = CurrentDevice();
  return Allocate(caller, g_arrays, "array", Lives::kInContext, dev,
                  ArrayFootprint(dev, *desc, levels), api, forward,
                  [&] { return reinterpret_cast<uint64_t>(*handle); });
}

}  // namespace

CM_WRAPPER CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  auto forward = [&] { return Call<kArrayCreate>(array, desc); };
  if (!desc) return forward();
  CUDA_ARRAY3D_DESCRIPTOR d = {desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, 0};
  return Create(__builtin_return_address(0), array, &d, 1, "cuArrayCreate", forward);
}

CM_WRAPPER CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  return Create(__builtin_return_address(0), array, desc, 1, "cuArray3DCreate",
                [&] { return Call<kArray3DCreate>(array, desc); });
}

CM_WRAPPER CUresult cuMipmappedArrayCreate(CUmipmappedArray* array,
                                           const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                           unsigned int levels) {
  return Create(__builtin_return_address(0), array, desc, levels, "cuMipmappedArrayCreate",
                [&] { return Call<kMipmappedArrayCreate>(array, desc, levels); });
}

CM_WRAPPER CUresult cuArrayDestroy(CUarray array) {
  return Release(g_arrays, "array", reinterpret_cast<uint64_t>(array),
                 [&] { return Call<kArrayDestroy>(array); });
}

CM_WRAPPER CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) {
  return Release(g_arrays, "array", reinterpret_cast<uint64_t>(array),
                 [&] { return Call<kMipmappedArrayDestroy>(array); });
}
