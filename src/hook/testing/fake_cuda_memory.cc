// fake_cuda_memory.cc: the fake driver's memory entry points. Device memory
// is real host memory (mmap, MAP_NORESERVE, so untouched pages cost nothing)
// charged against a per-process, per-device budget of HF_FAKE_CUDA_MEMORY_MB;
// VMM allocations (cuMemCreate) are memfds so that every mapping of one
// handle, and every handle imported from its exported fd, share the pages.
// See fake_cuda.cc and docs/FAKE_CUDA.md.
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hook/cuda_sizes.h"
#include "hook/testing/fake_cuda_internal.h"

namespace hf::fake_cuda {

namespace {

constexpr char kMemfdPrefix[] = "hf-fake-cuda-vmm-";

// The entry of `allocs` whose [base, base + size) holds `ptr`, or end().
template <typename Map, typename SizeOf>
typename Map::iterator FindContaining(Map& allocs, uint64_t ptr,
                                      SizeOf size_of) {
  auto it = allocs.upper_bound(ptr);
  if (it == allocs.begin()) return allocs.end();
  --it;
  return ptr - it->first < size_of(it->second) ? it : allocs.end();
}

std::map<uint64_t, DeviceAlloc>::iterator FindDeviceAlloc(uint64_t ptr) {
  return FindContaining(S().device_allocs, ptr,
                        [](const DeviceAlloc& a) { return a.size; });
}

std::map<uint64_t, Mapping>::iterator FindMapping(uint64_t ptr) {
  return FindContaining(S().mappings, ptr,
                        [](const Mapping& m) { return m.size; });
}

// Is [ptr, ptr + bytes) covered by back-to-back VMM mappings?
bool MappedRange(uint64_t ptr, uint64_t bytes) {
  if (bytes == 0 || ptr + bytes < ptr) return false;
  uint64_t cur = ptr;
  while (cur < ptr + bytes) {
    auto it = FindMapping(cur);
    if (it == S().mappings.end()) return false;
    cur = it->first + it->second.size;
  }
  return true;
}

// Allocates `size` bytes of device (or, device < 0, host-pool) memory.
CUresult NewDeviceAlloc(uint64_t size, int device, AllocKind kind,
                        CUctx_st* ctx, CUmemPoolHandle_st* pool,
                        CUdeviceptr* out) {
  if (device >= 0 && !Charge(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = MapAnonymous(size);
  if (p == nullptr) {
    if (device >= 0) Uncharge(device, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  DeviceAlloc alloc;
  alloc.size = size;
  alloc.map_size = PageRound(size);
  alloc.device = device;
  alloc.kind = kind;
  alloc.ctx = ctx;
  alloc.pool = pool;
  const uint64_t base = reinterpret_cast<uint64_t>(p);
  S().device_allocs.emplace(base, alloc);
  *out = base;
  return CUDA_SUCCESS;
}

CUresult AllocInCurrentContext(CUdeviceptr* dptr, uint64_t size,
                               AllocKind kind) {
  HF_FAKE_LOCK_INITIALIZED();
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  return NewDeviceAlloc(size, ctx->device, kind, ctx, nullptr, dptr);
}

// Pools: a live pool handle, or null.
CUmemPoolHandle_st* LivePool(CUmemoryPool pool) {
  if (pool == nullptr || S().pools.count(pool) == 0 || !pool->live) {
    return nullptr;
  }
  return pool;
}

CUresult AllocFromPool(CUdeviceptr* dptr, uint64_t size,
                       CUmemPoolHandle_st* pool) {
  if (pool->max_size != 0 && size > pool->max_size - pool->used) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult rc = NewDeviceAlloc(size, pool->device, AllocKind::kAsync,
                                     nullptr, pool, dptr);
  if (rc != CUDA_SUCCESS) return rc;
  pool->used += size;
  if (pool->used > pool->used_high) pool->used_high = pool->used;
  // The fake frees at once, so reserved memory is always the used memory.
  if (pool->used > pool->reserved_high) pool->reserved_high = pool->used;
  return CUDA_SUCCESS;
}

CUresult AllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  HF_FAKE_LOCK_INITIALIZED();
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  const CUresult rc = StreamDevice(hStream, &device);
  if (rc != CUDA_SUCCESS) return rc;
  return AllocFromPool(dptr, bytesize, st.devices[device].current_pool);
}

CUresult AllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                            CUmemoryPool pool, CUstream hStream) {
  HF_FAKE_LOCK_INITIALIZED();
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  CUmemPoolHandle_st* live = LivePool(pool);
  if (live == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  const CUresult rc = StreamDevice(hStream, &device);
  if (rc != CUDA_SUCCESS) return rc;
  return AllocFromPool(dptr, bytesize, live);
}

CUresult FreeAsync(CUdeviceptr dptr, CUstream hStream) {
  HF_FAKE_LOCK_INITIALIZED();
  int device = 0;
  const CUresult rc = StreamDevice(hStream, &device);
  if (rc != CUDA_SUCCESS) return rc;
  if (dptr == 0) return CUDA_SUCCESS;
  auto it = st.device_allocs.find(dptr);
  if (it == st.device_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  FreeDeviceAlloc(it);  // at once: the fake does not defer frees
  return CUDA_SUCCESS;
}

CUresult CopyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  if (bytes == 0) return CUDA_SUCCESS;
  if (src == nullptr || !DeviceRangeValid(dst, bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return CUDA_SUCCESS;
}

CUresult CopyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == nullptr || !DeviceRangeValid(src, bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A copy to the host returns once earlier work on the device is done.
  WaitForContext(lock, ctx);
  if (!DeviceRangeValid(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

CUresult SetD8(CUdeviceptr dst, unsigned char value, size_t count) {
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  if (count == 0) return CUDA_SUCCESS;
  if (!DeviceRangeValid(dst, count)) return CUDA_ERROR_INVALID_VALUE;
  memset(reinterpret_cast<void*>(dst), value, count);
  return CUDA_SUCCESS;
}

CUresult HostAllocate(void** pp, size_t bytesize) {
  HF_FAKE_LOCK_INITIALIZED();
  if (pp == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  void* p = MapAnonymous(bytesize);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  HostAlloc alloc;
  alloc.map_size = PageRound(bytesize);
  alloc.ctx = ctx;
  st.host_allocs.emplace(reinterpret_cast<uint64_t>(p), alloc);
  *pp = p;
  return CUDA_SUCCESS;
}

// Pool properties (cuMemPoolCreate): the device the pool charges (-1 for a
// host pool) or an error.
CUresult CheckPoolProps(const CUmemPoolProps* props, int* device) {
  if (props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const unsigned int types = props->handleTypes;
  if ((types & ~static_cast<unsigned int>(
                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) != 0) {
    return CUDA_ERROR_NOT_SUPPORTED;  // Win32 or fabric handles
  }
  switch (props->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (!ValidDevice(props->location.id)) return CUDA_ERROR_INVALID_VALUE;
      *device = props->location.id;
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
      // "not IPC capable and handleTypes must be 0"
      if (types != 0) return CUDA_ERROR_INVALID_VALUE;
      *device = -1;
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      if (props->location.id != 0) return CUDA_ERROR_INVALID_VALUE;
      *device = -1;
      return CUDA_SUCCESS;
    default:  // including HOST_NUMA_CURRENT, which pools refuse
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// A (location, type) pair of cuMemGetDefaultMemPool & co.: the device, or an
// error. The fake has device pools only.
CUresult PoolLocationDevice(const CUmemLocation* location,
                            CUmemAllocationType type, int* device) {
  if (location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool known_type = type == CU_MEM_ALLOCATION_TYPE_PINNED ||
                          type == CU_MEM_ALLOCATION_TYPE_MANAGED;
  const bool known_location =
      location->type == CU_MEM_LOCATION_TYPE_DEVICE ||
      location->type == CU_MEM_LOCATION_TYPE_HOST ||
      location->type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
      (type == CU_MEM_ALLOCATION_TYPE_MANAGED &&
       location->type == CU_MEM_LOCATION_TYPE_NONE);
  if (!known_type || !known_location) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      location->type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (!ValidDevice(location->id)) return CUDA_ERROR_INVALID_DEVICE;
  *device = location->id;
  return CUDA_SUCCESS;
}

CUresult SetDevicePool(int device, CUmemoryPool pool) {
  CUmemPoolHandle_st* live = LivePool(pool);
  if (live == nullptr || live->device != device) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  S().devices[device].current_pool = live;
  return CUDA_SUCCESS;
}

// VMM allocation properties (cuMemCreate, cuMemGetAllocationGranularity):
// the device charged (-1 for host memory) or an error.
CUresult CheckAllocationProp(const CUmemAllocationProp* prop, int* device) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const unsigned int types = prop->requestedHandleTypes;
  if ((types & ~static_cast<unsigned int>(
                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) != 0) {
    return CUDA_ERROR_NOT_SUPPORTED;  // Win32 or fabric handles
  }
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (!ValidDevice(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
      *device = prop->location.id;
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
      // "HOST allocations are not IPC capable and requestedHandleTypes must
      // be 0, any other value will result in CUDA_ERROR_INVALID_VALUE."
      if (types != 0) return CUDA_ERROR_INVALID_VALUE;
      *device = -1;
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      // One NUMA node (0), as on a machine without NUMA.
      if (prop->location.id != 0) return CUDA_ERROR_INVALID_VALUE;
      *device = -1;
      return CUDA_SUCCESS;
    default:
      // "Specifying CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT as the
      // CUmemLocation::type will result in CUDA_ERROR_INVALID_VALUE."
      return CUDA_ERROR_INVALID_VALUE;
  }
}

void DropPhysRef(PhysAlloc* phys) {
  if (--phys->refs > 0) return;
  close(phys->fd);
  phys->fd = -1;
  if (phys->device >= 0) Uncharge(phys->device, phys->charged);
}

CUmemGenericAllocationHandle NewHandle(PhysAlloc* phys) {
  State& st = S();
  const CUmemGenericAllocationHandle handle = st.next_handle++;
  st.handles[handle] = HandleRec{phys, 1};
  ++phys->refs;
  return handle;
}

// The device a memfd made by cuMemCreate belongs to, from its name
// ("/memfd:hf-fake-cuda-vmm-<device or host> (deleted)"); false when `fd`
// is not such a memfd.
bool FakeMemfdDevice(int fd, int* device) {
  char link[64];
  char target[256];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  const char* prefix = "/memfd:";
  if (strncmp(target, prefix, strlen(prefix)) != 0) return false;
  const char* name = target + strlen(prefix);
  if (strncmp(name, kMemfdPrefix, strlen(kMemfdPrefix)) != 0) return false;
  name += strlen(kMemfdPrefix);
  if (strncmp(name, "host", 4) == 0) {
    *device = -1;
    return true;
  }
  int parsed = 0;
  if (sscanf(name, "%d", &parsed) != 1 || parsed < 0) return false;
  *device = parsed;
  return true;
}

CUresult CreateArray(CUarray* pHandle, uint64_t bytes, bool charge) {
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t charged = charge ? bytes : 0;
  if (!Charge(ctx->device, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto array = std::make_unique<CUarray_st>();
  array->ctx = ctx;
  array->device = ctx->device;
  array->charged = charged;
  *pHandle = array.get();
  st.arrays.emplace(array.get(), std::move(array));
  return CUDA_SUCCESS;
}

constexpr unsigned int kKnownArrayFlags =
    CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP |
    CUDA_ARRAY3D_TEXTURE_GATHER | CUDA_ARRAY3D_DEPTH_TEXTURE |
    CUDA_ARRAY3D_COLOR_ATTACHMENT | CUDA_ARRAY3D_SPARSE |
    CUDA_ARRAY3D_DEFERRED_MAPPING | CUDA_ARRAY3D_VIDEO_ENCODE_DECODE;

// Shape rules of CUDA_ARRAY3D_DESCRIPTOR beyond the element size.
bool ValidArray3DShape(const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if ((desc->Flags & ~kKnownArrayFlags) != 0) return false;
  const bool layered = (desc->Flags & CUDA_ARRAY3D_LAYERED) != 0;
  if (desc->Height == 0 && desc->Depth != 0 && !layered) return false;
  if ((desc->Flags & CUDA_ARRAY3D_CUBEMAP) != 0) {
    if (desc->Width != desc->Height) return false;
    if (layered ? desc->Depth == 0 || desc->Depth % 6 != 0 : desc->Depth != 6) {
      return false;
    }
  }
  return true;
}

}  // namespace

void FreeDeviceAlloc(std::map<uint64_t, DeviceAlloc>::iterator it) {
  State& st = S();
  DeviceAlloc& alloc = it->second;
  Unmap(reinterpret_cast<void*>(it->first), alloc.map_size);
  if (alloc.device >= 0) Uncharge(alloc.device, alloc.size);
  if (alloc.pool != nullptr) {
    alloc.pool->used =
        alloc.size > alloc.pool->used ? 0 : alloc.pool->used - alloc.size;
  }
  st.device_allocs.erase(it);
}

bool DeviceRangeValid(uint64_t ptr, uint64_t bytes) {
  if (bytes == 0 || ptr + bytes < ptr) return false;
  auto it = FindDeviceAlloc(ptr);
  if (it != S().device_allocs.end()) {
    return ptr + bytes <= it->first + it->second.size;
  }
  return MappedRange(ptr, bytes);
}

}  // namespace hf::fake_cuda

using namespace hf::fake_cuda;

// ---- Device memory ----

HF_FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  HF_FAKE_LOCK_INITIALIZED();
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  // The whole card's usage, every process's (the real driver's answer).
  hf::fake_gpu::SharedDevice* gpu = st.devices[ctx->device].gpu.get();
  const uint64_t total_bytes = gpu->memory_bytes();
  const uint64_t used = gpu->used_bytes();
  *total = total_bytes;
  *free = used >= total_bytes ? 0 : total_bytes - used;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return AllocInCurrentContext(dptr, bytesize, AllocKind::kDevice);
}

HF_FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch,
                                           size_t WidthInBytes, size_t Height,
                                           unsigned int ElementSizeBytes) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 ||
      Height == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 &&
      ElementSizeBytes != 16) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (WidthInBytes > 2147483647) return CUDA_ERROR_INVALID_VALUE;  // MAX_PITCH
  const uint64_t pitch =
      (WidthInBytes + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  if (Height > UINT64_MAX / pitch) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc =
      AllocInCurrentContext(dptr, pitch * Height, AllocKind::kPitch);
  if (rc == CUDA_SUCCESS) *pPitch = pitch;
  return rc;
}

HF_FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                          unsigned int flags) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return AllocInCurrentContext(dptr, bytesize, AllocKind::kManaged);
}

HF_FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  HF_FAKE_LOCK_INITIALIZED();
  if (dptr == 0) return CUDA_SUCCESS;  // as the real driver: free(NULL)
  auto it = st.device_allocs.find(dptr);
  if (it == st.device_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  FreeDeviceAlloc(it);
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase,
                                                size_t* psize,
                                                CUdeviceptr dptr) {
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  uint64_t base = 0, size = 0;
  auto alloc = FindDeviceAlloc(dptr);
  if (alloc != st.device_allocs.end()) {
    base = alloc->first;
    size = alloc->second.size;
  } else {
    auto mapping = FindMapping(dptr);
    if (mapping == st.mappings.end()) return CUDA_ERROR_NOT_FOUND;
    base = mapping->first;
    size = mapping->second.size;
  }
  if (pbase != nullptr) *pbase = base;
  if (psize != nullptr) *psize = size;
  return CUDA_SUCCESS;
}

// ---- Host (pinned) memory: not device memory ----

HF_FAKE_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return HostAllocate(pp, bytesize);
}

HF_FAKE_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize,
                                       unsigned int Flags) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  constexpr unsigned int kKnown = CU_MEMHOSTALLOC_PORTABLE |
                                  CU_MEMHOSTALLOC_DEVICEMAP |
                                  CU_MEMHOSTALLOC_WRITECOMBINED;
  if ((Flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  return HostAllocate(pp, bytesize);
}

HF_FAKE_EXPORT CUresult cuMemFreeHost(void* p) {
  HF_FAKE_LOCK_INITIALIZED();
  if (p == nullptr) return CUDA_SUCCESS;  // as the real driver: free(NULL)
  auto it = st.host_allocs.find(reinterpret_cast<uint64_t>(p));
  if (it == st.host_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  Unmap(p, it->second.map_size);
  st.host_allocs.erase(it);
  return CUDA_SUCCESS;
}

// ---- Copies and memset (synchronous) ----

HF_FAKE_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice,
                                        const void* srcHost, size_t ByteCount) {
  return CopyHtoD(dstDevice, srcHost, ByteCount);
}

HF_FAKE_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice,
                                             const void* srcHost,
                                             size_t ByteCount) {
  return CopyHtoD(dstDevice, srcHost, ByteCount);
}

HF_FAKE_EXPORT CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice,
                                        size_t ByteCount) {
  return CopyDtoH(dstHost, srcDevice, ByteCount);
}

HF_FAKE_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void* dstHost,
                                             CUdeviceptr srcDevice,
                                             size_t ByteCount) {
  return CopyDtoH(dstHost, srcDevice, ByteCount);
}

HF_FAKE_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc,
                                      size_t N) {
  return SetD8(dstDevice, uc, N);
}

HF_FAKE_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice,
                                           unsigned char uc, size_t N) {
  return SetD8(dstDevice, uc, N);
}

// ---- Stream-ordered allocation and pools ----

HF_FAKE_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out,
                                                  CUdevice dev) {
  HF_FAKE_LOCK_INITIALIZED();
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool_out = st.devices[dev].default_pool;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  HF_FAKE_LOCK_INITIALIZED();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = st.devices[dev].current_pool;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  HF_FAKE_LOCK_INITIALIZED();
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return SetDevicePool(dev, pool);
}

HF_FAKE_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool* pool_out,
                                               CUmemLocation* location,
                                               CUmemAllocationType type) {
  HF_FAKE_LOCK_INITIALIZED();
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  const CUresult rc = PoolLocationDevice(location, type, &device);
  if (rc != CUDA_SUCCESS) return rc;
  *pool_out = st.devices[device].default_pool;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemGetMemPool(CUmemoryPool* pool,
                                        CUmemLocation* location,
                                        CUmemAllocationType type) {
  HF_FAKE_LOCK_INITIALIZED();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  const CUresult rc = PoolLocationDevice(location, type, &device);
  if (rc != CUDA_SUCCESS) return rc;
  *pool = st.devices[device].current_pool;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemSetMemPool(CUmemLocation* location,
                                        CUmemAllocationType type,
                                        CUmemoryPool pool) {
  HF_FAKE_LOCK_INITIALIZED();
  int device = 0;
  const CUresult rc = PoolLocationDevice(location, type, &device);
  if (rc != CUDA_SUCCESS) return rc;
  return SetDevicePool(device, pool);
}

HF_FAKE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool,
                                        const CUmemPoolProps* poolProps) {
  HF_FAKE_LOCK_INITIALIZED();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = -1;
  const CUresult rc = CheckPoolProps(poolProps, &device);
  if (rc != CUDA_SUCCESS) return rc;
  auto created = std::make_unique<CUmemPoolHandle_st>();
  created->device = device;
  created->max_size = poolProps->maxSize;
  *pool = created.get();
  st.pools.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  HF_FAKE_LOCK_INITIALIZED();
  CUmemPoolHandle_st* live = LivePool(pool);
  if (live == nullptr || live->is_default) return CUDA_ERROR_INVALID_VALUE;
  // "Destroying the current mempool of a device sets the default mempool of
  // that device as the current mempool for that device." Allocations still
  // out keep their memory until freed.
  if (live->device >= 0 && st.devices[live->device].current_pool == live) {
    st.devices[live->device].current_pool =
        st.devices[live->device].default_pool;
  }
  live->live = false;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool,
                                        size_t minBytesToKeep) {
  HF_FAKE_LOCK_INITIALIZED();
  (void)minBytesToKeep;  // nothing is cached: frees return memory at once
  return LivePool(pool) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

HF_FAKE_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool,
                                              CUmemPool_attribute attr,
                                              void* value) {
  HF_FAKE_LOCK_INITIALIZED();
  CUmemPoolHandle_st* p = LivePool(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      *static_cast<int*>(value) = p->reuse_follow_event_dependencies;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      *static_cast<int*>(value) = p->reuse_allow_opportunistic;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = p->reuse_allow_internal_dependencies;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *static_cast<cuuint64_t*>(value) = p->release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *static_cast<cuuint64_t*>(value) = p->used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = p->reserved_high;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = p->used_high;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

HF_FAKE_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool,
                                              CUmemPool_attribute attr,
                                              void* value) {
  HF_FAKE_LOCK_INITIALIZED();
  CUmemPoolHandle_st* p = LivePool(pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      p->reuse_follow_event_dependencies = *static_cast<int*>(value) != 0;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      p->reuse_allow_opportunistic = *static_cast<int*>(value) != 0;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      p->reuse_allow_internal_dependencies = *static_cast<int*>(value) != 0;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      // "It is illegal to set this attribute to a non-zero value."
      if (*static_cast<cuuint64_t*>(value) != 0) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) {
        p->used_high = p->used;
      } else {
        p->reserved_high = p->used;
      }
      return CUDA_SUCCESS;
    default:  // the *_CURRENT attributes are read-only
      return CUDA_ERROR_INVALID_VALUE;
  }
}

HF_FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize,
                                        CUstream hStream) {
  return AllocAsync(dptr, bytesize, hStream);
}

HF_FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                             CUstream hStream) {
  return AllocAsync(dptr, bytesize, hStream);
}

HF_FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr,
                                                size_t bytesize,
                                                CUmemoryPool pool,
                                                CUstream hStream) {
  return AllocFromPoolAsync(dptr, bytesize, pool, hStream);
}

HF_FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr,
                                                     size_t bytesize,
                                                     CUmemoryPool pool,
                                                     CUstream hStream) {
  return AllocFromPoolAsync(dptr, bytesize, pool, hStream);
}

HF_FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return FreeAsync(dptr, hStream);
}

HF_FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr,
                                            CUstream hStream) {
  return FreeAsync(dptr, hStream);
}

// ---- Virtual memory management ----

HF_FAKE_EXPORT CUresult cuMemGetAllocationGranularity(
    size_t* granularity, const CUmemAllocationProp* prop,
    CUmemAllocationGranularity_flags option) {
  HF_FAKE_LOCK_INITIALIZED();
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int device = -1;
  const CUresult rc = CheckAllocationProp(prop, &device);
  if (rc != CUDA_SUCCESS) return rc;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle,
                                    size_t size,
                                    const CUmemAllocationProp* prop,
                                    unsigned long long flags) {
  HF_FAKE_LOCK_INITIALIZED();
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  int device = -1;
  const CUresult rc = CheckAllocationProp(prop, &device);
  if (rc != CUDA_SUCCESS) return rc;
  if (size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  if (device >= 0 && !Charge(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  char name[64];
  if (device >= 0) {
    snprintf(name, sizeof(name), "%s%d", kMemfdPrefix, device);
  } else {
    snprintf(name, sizeof(name), "%shost", kMemfdPrefix);
  }
  const int fd = memfd_create(name, MFD_CLOEXEC);
  struct stat info;
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      fstat(fd, &info) != 0) {
    if (fd >= 0) close(fd);
    if (device >= 0) Uncharge(device, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto phys = std::make_unique<PhysAlloc>();
  phys->fd = fd;
  phys->size = size;
  phys->device = device;
  phys->charged = device >= 0 ? size : 0;
  phys->st_dev = info.st_dev;
  phys->st_ino = info.st_ino;
  phys->prop = *prop;
  *handle = NewHandle(phys.get());
  st.phys_allocs.push_back(std::move(phys));
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  HF_FAKE_LOCK_INITIALIZED();
  auto it = st.handles.find(handle);
  if (it == st.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  PhysAlloc* phys = it->second.phys;
  if (--it->second.refs == 0) {
    st.handles.erase(it);
    DropPhysRef(phys);
  }
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(
    CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  HF_FAKE_LOCK_INITIALIZED();
  auto it = st.handles.find(handle);
  if (prop == nullptr || it == st.handles.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *prop = it->second.phys->prop;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size,
                                            size_t alignment, CUdeviceptr addr,
                                            unsigned long long flags) {
  HF_FAKE_LOCK_INITIALIZED();
  (void)addr;  // a hint only; the fake lets the kernel choose
  const uint64_t page = PageRound(1);
  if (ptr == nullptr || flags != 0 || size == 0 || size % page != 0 ||
      addr % page != 0 || (alignment & (alignment - 1)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // At least the granularity, so cuMemMap's alignment rules can be met.
  const uint64_t align = alignment > kGranularity ? alignment : kGranularity;
  if (size > UINT64_MAX - align) return CUDA_ERROR_OUT_OF_MEMORY;
  void* raw = mmap(nullptr, size + align, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t start = reinterpret_cast<uint64_t>(raw);
  const uint64_t base = (start + align - 1) / align * align;
  if (base > start) munmap(raw, base - start);
  const uint64_t tail = start + size + align - (base + size);
  if (tail > 0) munmap(reinterpret_cast<void*>(base + size), tail);
  st.reservations[base] = size;
  *ptr = base;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  HF_FAKE_LOCK_INITIALIZED();
  auto it = st.reservations.find(ptr);
  if (it == st.reservations.end() || it->second != size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Still-mapped ranges must be unmapped first (the fake refuses, rather
  // than leak the mappings' references).
  auto mapped = st.mappings.lower_bound(ptr);
  if (mapped != st.mappings.end() && mapped->first < ptr + size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  munmap(reinterpret_cast<void*>(ptr), size);
  st.reservations.erase(it);
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                 CUmemGenericAllocationHandle handle,
                                 unsigned long long flags) {
  HF_FAKE_LOCK_INITIALIZED();
  // "offset ... Note: currently must be zero."
  if (flags != 0 || offset != 0 || size == 0 || ptr % kGranularity != 0 ||
      size % kGranularity != 0 || ptr + size < ptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto h = st.handles.find(handle);
  if (h == st.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  PhysAlloc* phys = h->second.phys;
  if (size > phys->size) return CUDA_ERROR_INVALID_VALUE;
  auto res = FindContaining(st.reservations, ptr,
                            [](uint64_t reserved) { return reserved; });
  if (res == st.reservations.end() || ptr + size > res->first + res->second) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto next = st.mappings.lower_bound(ptr);
  if (next != st.mappings.end() && next->first < ptr + size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (FindMapping(ptr) != st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED, phys->fd, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  st.mappings[ptr] = Mapping{size, handle, phys};
  ++phys->refs;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  HF_FAKE_LOCK_INITIALIZED();
  if (size == 0 || ptr + size < ptr) return CUDA_ERROR_INVALID_VALUE;
  // The range must be whole mappings, back to back.
  uint64_t cur = ptr;
  while (cur < ptr + size) {
    auto it = st.mappings.find(cur);
    if (it == st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    cur += it->second.size;
  }
  if (cur != ptr + size) return CUDA_ERROR_INVALID_VALUE;
  for (cur = ptr; cur < ptr + size;) {
    auto it = st.mappings.find(cur);
    const uint64_t len = it->second.size;
    // Back to a bare reservation (over a range we own, so it cannot fail
    // short of the address space itself failing).
    (void)mmap(reinterpret_cast<void*>(cur), len, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    PhysAlloc* phys = it->second.phys;
    st.mappings.erase(it);
    DropPhysRef(phys);
    cur += len;
  }
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
                                       const CUmemAccessDesc* desc,
                                       size_t count) {
  HF_FAKE_LOCK_INITIALIZED();
  if (desc == nullptr || count == 0 || !MappedRange(ptr, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < count; ++i) {
    const CUmemLocation& where = desc[i].location;
    if (where.type == CU_MEM_LOCATION_TYPE_DEVICE) {
      if (!ValidDevice(where.id)) return CUDA_ERROR_INVALID_DEVICE;
    } else if (where.type != CU_MEM_LOCATION_TYPE_HOST &&
               where.type != CU_MEM_LOCATION_TYPE_HOST_NUMA) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;  // the mapping stays readable and writable by the host
}

HF_FAKE_EXPORT CUresult cuMemExportToShareableHandle(
    void* shareableHandle, CUmemGenericAllocationHandle handle,
    CUmemAllocationHandleType handleType, unsigned long long flags) {
  HF_FAKE_LOCK_INITIALIZED();
  if (shareableHandle == nullptr || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto it = st.handles.find(handle);
  if (it == st.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  PhysAlloc* phys = it->second.phys;
  if ((phys->prop.requestedHandleTypes &
       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    return CUDA_ERROR_INVALID_VALUE;  // not requested at cuMemCreate
  }
  const int fd = fcntl(phys->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuMemImportFromShareableHandle(
    CUmemGenericAllocationHandle* handle, void* osHandle,
    CUmemAllocationHandleType shHandleType) {
  HF_FAKE_LOCK_INITIALIZED();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  // For POSIX fds the handle is the descriptor itself, cast to a pointer.
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  struct stat info;
  if (fd < 0 || fstat(fd, &info) != 0) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& phys : st.phys_allocs) {
    if (phys->refs > 0 && phys->st_dev == info.st_dev &&
        phys->st_ino == info.st_ino) {
      *handle = NewHandle(phys.get());  // the same allocation, not new memory
      return CUDA_SUCCESS;
    }
  }
  // Exported by another process (another copy of the fake): the memory is
  // that process's, so importing it charges nothing here.
  int device = -1;
  if (!FakeMemfdDevice(fd, &device)) return CUDA_ERROR_INVALID_VALUE;
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  auto phys = std::make_unique<PhysAlloc>();
  phys->fd = own;
  phys->size = static_cast<uint64_t>(info.st_size);
  phys->device = device;
  phys->charged = 0;
  phys->st_dev = info.st_dev;
  phys->st_ino = info.st_ino;
  phys->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  phys->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  phys->prop.location.type =
      device >= 0 ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
  phys->prop.location.id = device >= 0 ? device : 0;
  *handle = NewHandle(phys.get());
  st.phys_allocs.push_back(std::move(phys));
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult
cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  HF_FAKE_LOCK_INITIALIZED();
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto mapping = FindMapping(reinterpret_cast<uint64_t>(addr));
  if (mapping == st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  const CUmemGenericAllocationHandle h = mapping->second.handle;
  auto it = st.handles.find(h);
  if (it != st.handles.end()) {
    ++it->second.refs;
  } else {  // every handle was released; the mapping keeps the memory
    st.handles[h] = HandleRec{mapping->second.phys, 1};
    ++mapping->second.phys->refs;
  }
  *handle = h;
  return CUDA_SUCCESS;
}

// ---- CUDA arrays ----

HF_FAKE_EXPORT CUresult cuArrayCreate_v2(
    CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (pHandle == nullptr || pAllocateArray == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t bytes =
      hf::hook::ArrayBytes(pAllocateArray->Width, pAllocateArray->Height, 0,
                           pAllocateArray->Format, pAllocateArray->NumChannels);
  return CreateArray(pHandle, bytes, true);
}

HF_FAKE_EXPORT CUresult cuArray3DCreate_v2(
    CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (pHandle == nullptr || pAllocateArray == nullptr ||
      !ValidArray3DShape(pAllocateArray)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t bytes = hf::hook::ArrayBytes(
      pAllocateArray->Width, pAllocateArray->Height, pAllocateArray->Depth,
      pAllocateArray->Format, pAllocateArray->NumChannels);
  return CreateArray(pHandle, bytes,
                     hf::hook::ArrayTakesMemory(pAllocateArray->Flags));
}

HF_FAKE_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
  HF_FAKE_LOCK_INITIALIZED();
  if (hArray == nullptr || st.arrays.count(hArray) == 0 || !hArray->live) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  Uncharge(hArray->device, hArray->charged);
  hArray->live = false;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult
cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                       const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
                       unsigned int numMipmapLevels) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (pHandle == nullptr || pMipmappedArrayDesc == nullptr ||
      !ValidArray3DShape(pMipmappedArrayDesc)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUDA_ARRAY3D_DESCRIPTOR& desc = *pMipmappedArrayDesc;
  const uint64_t bytes = hf::hook::MipmappedArrayBytes(
      desc.Width, desc.Height, desc.Depth, desc.Format, desc.NumChannels,
      numMipmapLevels, desc.Flags);
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t charged = hf::hook::ArrayTakesMemory(desc.Flags) ? bytes : 0;
  if (!Charge(ctx->device, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto array = std::make_unique<CUmipmappedArray_st>();
  array->ctx = ctx;
  array->device = ctx->device;
  array->charged = charged;
  *pHandle = array.get();
  st.mipmapped_arrays.emplace(array.get(), std::move(array));
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult
cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  HF_FAKE_LOCK_INITIALIZED();
  if (hMipmappedArray == nullptr ||
      st.mipmapped_arrays.count(hMipmappedArray) == 0 ||
      !hMipmappedArray->live) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  Uncharge(hMipmappedArray->device, hMipmappedArray->charged);
  hMipmappedArray->live = false;
  return CUDA_SUCCESS;
}

// ---- Legacy IPC: not supported by the fake ----

HF_FAKE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle,
                                          CUdeviceptr dptr) {
  HF_FAKE_LOCK_INITIALIZED();
  (void)pHandle;
  (void)dptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

HF_FAKE_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr,
                                           CUipcMemHandle handle,
                                           unsigned int Flags) {
  HF_FAKE_LOCK_INITIALIZED();
  (void)pdptr;
  (void)handle;
  (void)Flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}

HF_FAKE_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr,
                                              CUipcMemHandle handle,
                                              unsigned int Flags) {
  HF_FAKE_LOCK_INITIALIZED();
  (void)pdptr;
  (void)handle;
  (void)Flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}

HF_FAKE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  HF_FAKE_LOCK_INITIALIZED();
  (void)dptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
