// cuda_sizes.h: the device memory a CUDA array or mipmapped array occupies,
// computed from its descriptor. Shared by the hook (which charges arrays to a
// quota before it lets cuArrayCreate & co. through) and by the fake driver in
// testing/ (which consumes that much of its fake device memory), so both
// always agree on a size.
//
// Header-only, constexpr, no libstdc++ runtime: the hook includes it too.
//
// Element sizes come from the CUarray_format documentation in cuda.h (CUDA
// 13.0): the basic formats are a scalar per channel (NumChannels 1, 2 or 4),
// the UNORM/SNORM_INT{8,16}X{1,2,4} and UNORM_INT_101010_2 formats have a
// fixed texel size, the block-compressed BC1..BC7 formats store 4x4 texel
// blocks (8 bytes for BC1/BC4, 16 for the others) and the YUV formats store
// their planes at the documented bit depth and chroma subsampling (4:2:0
// keeps a quarter-size chroma pair: 1.5 samples per pixel; 4:2:2 keeps 2;
// 4:4:4 keeps 3). The real driver pads arrays (alignment, tiling); these are
// the exact payload sizes, a lower bound of what the driver takes.
#ifndef HF_HOOK_CUDA_SIZES_H_
#define HF_HOOK_CUDA_SIZES_H_

#include <cuda.h>
#include <stdint.h>

namespace hf::hook {

namespace cuda_sizes_detail {

// How a format stores its texels. kind: 0 unknown, 1 per channel (bytes is
// the size of one channel), 2 fixed (num/den bytes per texel), 3 4x4 blocks
// (bytes per block).
struct FormatLayout {
  int kind;
  uint64_t num;
  uint64_t den;
};

constexpr FormatLayout LayoutOf(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return {1, 1, 1};
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return {1, 2, 1};
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return {1, 4, 1};
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
      return {2, 1, 1};
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
      return {2, 2, 1};
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2:
    case CU_AD_FORMAT_UNORM_INT_101010_2:
      return {2, 4, 1};
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4:
      return {2, 8, 1};
    case CU_AD_FORMAT_BC1_UNORM:
    case CU_AD_FORMAT_BC1_UNORM_SRGB:
    case CU_AD_FORMAT_BC4_UNORM:
    case CU_AD_FORMAT_BC4_SNORM:
      return {3, 8, 1};
    case CU_AD_FORMAT_BC2_UNORM:
    case CU_AD_FORMAT_BC2_UNORM_SRGB:
    case CU_AD_FORMAT_BC3_UNORM:
    case CU_AD_FORMAT_BC3_UNORM_SRGB:
    case CU_AD_FORMAT_BC5_UNORM:
    case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16:
    case CU_AD_FORMAT_BC6H_SF16:
    case CU_AD_FORMAT_BC7_UNORM:
    case CU_AD_FORMAT_BC7_UNORM_SRGB:
      return {3, 16, 1};
    case CU_AD_FORMAT_NV12:  // 8-bit 4:2:0: 1.5 bytes per pixel
      return {2, 3, 2};
    case CU_AD_FORMAT_P010:  // 10/16-bit 4:2:0 in 16-bit samples
    case CU_AD_FORMAT_P016:
      return {2, 3, 1};
    case CU_AD_FORMAT_NV16:  // 8-bit 4:2:2 planar
    case CU_AD_FORMAT_YUY2:  // 8-bit 4:2:2 packed
      return {2, 2, 1};
    case CU_AD_FORMAT_P210:  // 10/16-bit 4:2:2 in 16-bit samples
    case CU_AD_FORMAT_P216:
    case CU_AD_FORMAT_Y210:
    case CU_AD_FORMAT_Y216:
    case CU_AD_FORMAT_AYUV:  // 8-bit 4:4:4 packed with alpha
    case CU_AD_FORMAT_Y410:  // 10-bit 4:4:4 packed in 32 bits
      return {2, 4, 1};
    case CU_AD_FORMAT_Y416:  // 16-bit 4:4:4 packed with alpha
      return {2, 8, 1};
    case CU_AD_FORMAT_Y444_PLANAR8:
    case CU_AD_FORMAT_YUV444_8bit_SemiPlanar:
      return {2, 3, 1};
    case CU_AD_FORMAT_Y444_PLANAR10:
    case CU_AD_FORMAT_YUV444_16bit_SemiPlanar:
      return {2, 6, 1};
    default:
      return {0, 0, 1};
  }
}

constexpr uint64_t kSaturated = ~uint64_t{0};

// a * b, saturating at 2^64 - 1 (an absurd size the caller then refuses).
constexpr uint64_t Mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > kSaturated / a) return kSaturated;
  return a * b;
}

constexpr uint64_t Add(uint64_t a, uint64_t b) {
  return a > kSaturated - b ? kSaturated : a + b;
}

constexpr uint64_t CeilDiv(uint64_t a, uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

constexpr uint64_t Shrink(uint64_t extent, unsigned level) {
  if (extent == 0) return 0;  // an absent dimension stays absent
  const uint64_t shrunk = level >= 64 ? 0 : extent >> level;
  return shrunk == 0 ? 1 : shrunk;
}

constexpr unsigned Log2Floor(uint64_t v) {
  unsigned r = 0;
  while (v > 1) {
    v >>= 1;
    ++r;
  }
  return r;
}

}  // namespace cuda_sizes_detail

// Bytes of a CUDA array of width x height x depth elements of `format` with
// `channels` channels (the fields of CUDA_ARRAY_DESCRIPTOR /
// CUDA_ARRAY3D_DESCRIPTOR; a height or depth of 0 counts as 1, as for 1D and
// 2D arrays; for layered arrays depth is the number of layers, for cubemaps
// the number of faces). 0 means the descriptor is invalid: width 0, an
// unknown format, or channels other than 1, 2 or 4 for the per-channel
// formats (formats with a fixed texel size take channels 1..4 and ignore it).
// Sizes too large for 64 bits saturate at UINT64_MAX.
constexpr uint64_t ArrayBytes(uint64_t width, uint64_t height, uint64_t depth,
                              CUarray_format format, unsigned int channels) {
  using namespace cuda_sizes_detail;
  const FormatLayout layout = LayoutOf(format);
  if (width == 0 || layout.kind == 0) return 0;
  if (layout.kind == 1 && channels != 1 && channels != 2 && channels != 4) {
    return 0;
  }
  if (layout.kind != 1 && (channels < 1 || channels > 4)) return 0;
  const uint64_t h = height == 0 ? 1 : height;
  const uint64_t d = depth == 0 ? 1 : depth;
  uint64_t slice = 0;
  switch (layout.kind) {
    case 1:
      slice = Mul(Mul(width, h), Mul(layout.num, channels));
      break;
    case 2: {
      const uint64_t texels = Mul(width, h);
      const uint64_t scaled = Mul(texels, layout.num);
      slice = scaled == kSaturated ? kSaturated : CeilDiv(scaled, layout.den);
      break;
    }
    default:  // 4x4 blocks
      slice = Mul(Mul(CeilDiv(width, 4), CeilDiv(h, 4)), layout.num);
      break;
  }
  return Mul(slice, d);
}

// Whether a CUDA_ARRAY3D_DESCRIPTOR::Flags array takes device memory when it
// is created. Sparse (CUDA_ARRAY3D_SPARSE) and deferred-mapping
// (CUDA_ARRAY3D_DEFERRED_MAPPING) arrays do not: their memory comes later
// from cuMemCreate handles mapped with cuMemMapArrayAsync.
constexpr bool ArrayTakesMemory(unsigned int flags) {
  return (flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) == 0;
}

// Bytes of a mipmapped array with `levels` levels (cuMipmappedArrayCreate):
// the sum of ArrayBytes over the levels, each level halving width, height
// and (unless `flags` has CUDA_ARRAY3D_LAYERED or CUDA_ARRAY3D_CUBEMAP, where
// depth counts layers or faces) depth, none below 1. 0 means invalid: as for
// ArrayBytes, or levels 0, or more levels than
// 1 + floor(log2(largest extent)).
constexpr uint64_t MipmappedArrayBytes(uint64_t width, uint64_t height,
                                       uint64_t depth, CUarray_format format,
                                       unsigned int channels,
                                       unsigned int levels,
                                       unsigned int flags = 0) {
  using namespace cuda_sizes_detail;
  if (ArrayBytes(width, height, depth, format, channels) == 0) return 0;
  const bool fixed_depth =
      (flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  uint64_t largest = width;
  if (height > largest) largest = height;
  if (!fixed_depth && depth > largest) largest = depth;
  if (levels == 0 || levels > Log2Floor(largest) + 1) return 0;
  uint64_t total = 0;
  for (unsigned level = 0; level < levels; ++level) {
    const uint64_t d = fixed_depth ? depth : Shrink(depth, level);
    total = Add(total, ArrayBytes(Shrink(width, level), Shrink(height, level),
                                  d, format, channels));
  }
  return total;
}

}  // namespace hf::hook

#endif  // HF_HOOK_CUDA_SIZES_H_
