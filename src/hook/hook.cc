// libhfhook.so: the CUDA driver-API entry points the hook interposes
// (docs/HOOK.md lists them, and the ones passed through on purpose).
//
// How a call reaches us, whichever way the program finds the driver:
//  - linked against libcuda: LD_PRELOAD puts our exported symbols first;
//  - dlopen + dlsym (the CUDA runtime, PyTorch, NCCL): our dlsym returns
//    our wrapper for every name we interpose (resolution.cc);
//  - cuGetProcAddress / cuGetProcAddress_v2 (the CUDA 12/13 runtime): we
//    call the driver's, then swap the pointer it returns for our wrapper
//    when it is one of the real functions we wrap, so the ABI variant the
//    driver chose is always the one we wrap.
// Each wrapper calls the real function through a pointer resolved once from
// libcuda.so.1 (HookState::real).
//
// Memory: quota is reserved in the slice region BEFORE the real allocation
// and returned if it fails; a free forgets the pointer before the real free
// (so a pointer the driver hands out again at once is never confused with
// the old one) and puts it back if the free fails. Frees return the real
// CUresult, always.
//
// No exceptions cross the C ABI (the library is built with
// -fno-exceptions), no C++ runtime state at load time (state is built on
// the first intercepted call), only libc, libdl and libpthread.
#include <unistd.h>

#include <cstring>

#include "hook/cuda_sizes.h"
#include "hook/hook_state.h"
#include "hook/log.h"

using hf::hook::AllocKind;
using hf::hook::HookState;

namespace hf::hook {
namespace {

LogOnce g_quota_oom_once;
LogOnce g_physical_oom_once;
LogOnce g_untracked_free_once;
LogOnce g_table_full_once;
LogOnce g_no_real_once;

inline uint64_t Key(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Counts an allocation: reserve `bytes`, run `alloc` (which returns the
// driver's result and sets `*key`), record or undo. With no region (the hook
// is inactive in this process) it is a plain call.
template <typename Alloc>
CUresult Counted(HookState& s, AllocKind kind, uint64_t bytes, Alloc alloc) {
  if (!s.counting) {
    uint64_t ignored = 0;
    return alloc(&ignored);
  }
  if (s.region.Reserve(bytes) != ReserveResult::kOk) {
    Log(LogLevel::kWarn, &g_quota_oom_once,
        "allocation of %llu bytes refused: the slice quota is %llu bytes and "
        "%llu are in use (quota OOM; later ones are not logged)",
        static_cast<unsigned long long>(bytes),
        static_cast<unsigned long long>(s.region.quota()),
        static_cast<unsigned long long>(s.region.used()));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  uint64_t key = 0;
  const CUresult r = alloc(&key);
  if (r != CUDA_SUCCESS) {
    s.region.Release(bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      s.region.CountPhysicalOom();
      Log(LogLevel::kInfo, &g_physical_oom_once,
          "the driver refused %llu bytes (physical OOM, within the quota)",
          static_cast<unsigned long long>(bytes));
    }
    return r;
  }
  if (!s.table.Insert(kind, key, bytes)) {
    // Out of memory for our own bookkeeping: keep the quota charged (never
    // undercount), lose only the refund at free time.
    Log(LogLevel::kError, &g_table_full_once,
        "cannot record an allocation; its quota stays charged");
  }
  return r;
}

// Forgets (kind, key), runs `release`, and refunds the bytes when the driver
// says the memory is gone; a failed release puts the entry back.
template <typename Free>
CUresult Uncounted(HookState& s, AllocKind kind, uint64_t key, Free release) {
  if (!s.counting) return release();
  uint64_t bytes = 0;
  const bool tracked = s.table.Remove(kind, key, &bytes);
  const CUresult r = release();
  if (!tracked) {
    if (r == CUDA_SUCCESS && key != 0) {
      Log(LogLevel::kDebug, &g_untracked_free_once,
          "freed an allocation the hook did not count");
    }
    return r;
  }
  if (r == CUDA_SUCCESS) {
    s.region.Release(bytes);
  } else if (!s.table.Insert(kind, key, bytes)) {
    // Not freed, and cannot be recorded again: the refund is lost, the
    // count stays on the safe side.
  }
  return r;
}

CUresult NoReal(const char* name) {
  Log(LogLevel::kError, &g_no_real_once,
      "%s: libcuda.so.1 could not be loaded or lacks this entry point", name);
  return CUDA_ERROR_NOT_INITIALIZED;
}

#define HF_REAL(s, name) \
  if ((s).real.name == nullptr) return hf::hook::NoReal(#name)

uint64_t PitchBytes(size_t width, size_t height) {
  // Reserve for the pitch the driver will most likely pick (rows padded to
  // 512 bytes); the difference is settled once the real pitch is known.
  const uint64_t row = (static_cast<uint64_t>(width) + 511) & ~uint64_t{511};
  return row * static_cast<uint64_t>(height);
}

void ChargeContext(HookState& s, CUcontext ctx) {
  if (!s.counting || s.config.context_bytes == 0 || ctx == nullptr) return;
  s.region.Charge(s.config.context_bytes);
  s.table.Insert(AllocKind::kContext, Key(ctx), s.config.context_bytes);
}

void RefundContext(HookState& s, CUcontext ctx) {
  uint64_t bytes = 0;
  if (s.counting && s.table.Remove(AllocKind::kContext, Key(ctx), &bytes)) {
    s.region.Release(bytes);
  }
}

// Primary contexts are reference counted by the driver; charge on the first
// retain per device, refund when the last release or a reset makes it
// inactive.
void AfterPrimaryRelease(HookState& s, CUdevice dev) {
  if (!s.counting || s.real.cuDevicePrimaryCtxGetState == nullptr) return;
  unsigned int flags = 0;
  int active = 1;
  if (s.real.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS &&
      active == 0) {
    uint64_t bytes = 0;
    if (s.table.Remove(AllocKind::kContext, PrimaryKey(dev), &bytes)) {
      s.region.Release(bytes);
    }
  }
}

}  // namespace
}  // namespace hf::hook

using hf::hook::Counted;
using hf::hook::Hook;
using hf::hook::Key;
using hf::hook::Uncounted;

extern "C" {

// ---- Device memory -------------------------------------------------------

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr* dptr,
                                                              size_t bytesize) {
  HookState& s = Hook();
  HF_REAL(s, cuMemAlloc_v2);
  if (dptr == nullptr || bytesize == 0) {
    return s.real.cuMemAlloc_v2(dptr, bytesize);
  }
  return Counted(s, AllocKind::kDevicePointer, bytesize, [&](uint64_t* key) {
    CUresult r = s.real.cuMemAlloc_v2(dptr, bytesize);
    *key = *dptr;
    return r;
  });
}

__attribute__((visibility("default"))) CUresult cuMemAllocPitch_v2(
    CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
    unsigned int ElementSizeBytes) {
  HookState& s = Hook();
  HF_REAL(s, cuMemAllocPitch_v2);
  const uint64_t estimate = hf::hook::PitchBytes(WidthInBytes, Height);
  if (dptr == nullptr || pPitch == nullptr || estimate == 0 || !s.counting) {
    return s.real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height,
                                     ElementSizeBytes);
  }
  CUresult r =
      Counted(s, AllocKind::kDevicePointer, estimate, [&](uint64_t* key) {
        CUresult rr = s.real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes,
                                                Height, ElementSizeBytes);
        *key = *dptr;
        return rr;
      });
  if (r == CUDA_SUCCESS) {
    // Settle the estimate against the pitch the driver chose.
    const uint64_t actual = static_cast<uint64_t>(*pPitch) * Height;
    if (actual != estimate) {
      if (actual > estimate) {
        s.region.Charge(actual - estimate);
      } else {
        s.region.Release(estimate - actual);
      }
      s.table.Insert(AllocKind::kDevicePointer, *dptr, actual);
    }
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemAllocManaged(
    CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  HookState& s = Hook();
  HF_REAL(s, cuMemAllocManaged);
  if (dptr == nullptr || bytesize == 0) {
    return s.real.cuMemAllocManaged(dptr, bytesize, flags);
  }
  return Counted(s, AllocKind::kDevicePointer, bytesize, [&](uint64_t* key) {
    CUresult r = s.real.cuMemAllocManaged(dptr, bytesize, flags);
    *key = *dptr;
    return r;
  });
}

__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr dptr) {
  HookState& s = Hook();
  HF_REAL(s, cuMemFree_v2);
  return Uncounted(s, AllocKind::kDevicePointer, dptr,
                   [&] { return s.real.cuMemFree_v2(dptr); });
}

// ---- Stream-ordered allocation (pools) -----------------------------------

#define HF_ALLOC_ASYNC(name)                                            \
  __attribute__((visibility("default"))) CUresult name(                 \
      CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {           \
    HookState& s = Hook();                                              \
    HF_REAL(s, name);                                                   \
    if (dptr == nullptr || bytesize == 0) {                             \
      return s.real.name(dptr, bytesize, hStream);                      \
    }                                                                   \
    return Counted(s, AllocKind::kDevicePointer, bytesize,              \
                   [&](uint64_t* key) {                                 \
                     CUresult r = s.real.name(dptr, bytesize, hStream); \
                     *key = *dptr;                                      \
                     return r;                                          \
                   });                                                  \
  }
HF_ALLOC_ASYNC(cuMemAllocAsync)
HF_ALLOC_ASYNC(cuMemAllocAsync_ptsz)
#undef HF_ALLOC_ASYNC

#define HF_ALLOC_FROM_POOL(name)                                              \
  __attribute__((visibility("default"))) CUresult name(                       \
      CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,                  \
      CUstream hStream) {                                                     \
    HookState& s = Hook();                                                    \
    HF_REAL(s, name);                                                         \
    if (dptr == nullptr || bytesize == 0) {                                   \
      return s.real.name(dptr, bytesize, pool, hStream);                      \
    }                                                                         \
    return Counted(s, AllocKind::kDevicePointer, bytesize,                    \
                   [&](uint64_t* key) {                                       \
                     CUresult r = s.real.name(dptr, bytesize, pool, hStream); \
                     *key = *dptr;                                            \
                     return r;                                                \
                   });                                                        \
  }
HF_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync)
HF_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz)
#undef HF_ALLOC_FROM_POOL

// The quota comes back when the free is enqueued, not when the stream
// reaches it (docs/HOOK.md: the pool may hold the memory a little longer).
#define HF_FREE_ASYNC(name)                                                \
  __attribute__((visibility("default"))) CUresult name(CUdeviceptr dptr,   \
                                                       CUstream hStream) { \
    HookState& s = Hook();                                                 \
    HF_REAL(s, name);                                                      \
    return Uncounted(s, AllocKind::kDevicePointer, dptr,                   \
                     [&] { return s.real.name(dptr, hStream); });          \
  }
HF_FREE_ASYNC(cuMemFreeAsync)
HF_FREE_ASYNC(cuMemFreeAsync_ptsz)
#undef HF_FREE_ASYNC

// ---- Virtual memory management (VMM; NCCL, expandable segments) ---------

__attribute__((visibility("default"))) CUresult cuMemCreate(
    CUmemGenericAllocationHandle* handle, size_t size,
    const CUmemAllocationProp* prop, unsigned long long flags) {
  HookState& s = Hook();
  HF_REAL(s, cuMemCreate);
  // Only device memory counts; host and NUMA locations are host memory.
  if (handle == nullptr || prop == nullptr || size == 0 ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return s.real.cuMemCreate(handle, size, prop, flags);
  }
  return Counted(s, AllocKind::kVmmHandle, size, [&](uint64_t* key) {
    CUresult r = s.real.cuMemCreate(handle, size, prop, flags);
    *key = *handle;
    return r;
  });
}

__attribute__((visibility("default"))) CUresult cuMemRelease(
    CUmemGenericAllocationHandle handle) {
  HookState& s = Hook();
  HF_REAL(s, cuMemRelease);
  if (!s.counting) return s.real.cuMemRelease(handle);
  // A handle retained again (cuMemRetainAllocationHandle) needs as many
  // releases; the memory is refunded with the last one.
  uint64_t bytes = 0;
  bool tracked = false;
  const bool last =
      s.table.Unref(AllocKind::kVmmHandle, handle, &bytes, &tracked);
  const CUresult r = s.real.cuMemRelease(handle);
  if (last) {
    if (r == CUDA_SUCCESS) {
      s.region.Release(bytes);
    } else {
      s.table.Insert(AllocKind::kVmmHandle, handle, bytes);
    }
  } else if (tracked && r != CUDA_SUCCESS) {
    s.table.AddRef(AllocKind::kVmmHandle, handle);
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemRetainAllocationHandle(
    CUmemGenericAllocationHandle* handle, void* addr) {
  HookState& s = Hook();
  HF_REAL(s, cuMemRetainAllocationHandle);
  const CUresult r = s.real.cuMemRetainAllocationHandle(handle, addr);
  if (r == CUDA_SUCCESS && s.counting && handle != nullptr) {
    s.table.AddRef(AllocKind::kVmmHandle, *handle);
  }
  return r;
}

// ---- Arrays ---------------------------------------------------------------

__attribute__((visibility("default"))) CUresult cuArrayCreate_v2(
    CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  HookState& s = Hook();
  HF_REAL(s, cuArrayCreate_v2);
  const uint64_t bytes =
      desc == nullptr ? 0
                      : hf::hook::ArrayBytes(desc->Width, desc->Height, 0,
                                             desc->Format, desc->NumChannels);
  if (pHandle == nullptr || bytes == 0) {
    return s.real.cuArrayCreate_v2(pHandle, desc);
  }
  return Counted(s, AllocKind::kArray, bytes, [&](uint64_t* key) {
    CUresult r = s.real.cuArrayCreate_v2(pHandle, desc);
    *key = Key(*pHandle);
    return r;
  });
}

__attribute__((visibility("default"))) CUresult cuArray3DCreate_v2(
    CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  HookState& s = Hook();
  HF_REAL(s, cuArray3DCreate_v2);
  // Sparse and deferred-mapping arrays are backed later, by cuMemCreate
  // handles (counted there).
  const uint64_t bytes =
      desc == nullptr || !hf::hook::ArrayTakesMemory(desc->Flags)
          ? 0
          : hf::hook::ArrayBytes(desc->Width, desc->Height, desc->Depth,
                                 desc->Format, desc->NumChannels);
  if (pHandle == nullptr || bytes == 0) {
    return s.real.cuArray3DCreate_v2(pHandle, desc);
  }
  return Counted(s, AllocKind::kArray, bytes, [&](uint64_t* key) {
    CUresult r = s.real.cuArray3DCreate_v2(pHandle, desc);
    *key = Key(*pHandle);
    return r;
  });
}

__attribute__((visibility("default"))) CUresult cuArrayDestroy(CUarray hArray) {
  HookState& s = Hook();
  HF_REAL(s, cuArrayDestroy);
  return Uncounted(s, AllocKind::kArray, Key(hArray),
                   [&] { return s.real.cuArrayDestroy(hArray); });
}

__attribute__((visibility("default"))) CUresult cuMipmappedArrayCreate(
    CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
    unsigned int numMipmapLevels) {
  HookState& s = Hook();
  HF_REAL(s, cuMipmappedArrayCreate);
  const uint64_t bytes =
      desc == nullptr || !hf::hook::ArrayTakesMemory(desc->Flags)
          ? 0
          : hf::hook::MipmappedArrayBytes(
                desc->Width, desc->Height, desc->Depth, desc->Format,
                desc->NumChannels, numMipmapLevels, desc->Flags);
  if (pHandle == nullptr || bytes == 0) {
    return s.real.cuMipmappedArrayCreate(pHandle, desc, numMipmapLevels);
  }
  return Counted(s, AllocKind::kMipmappedArray, bytes, [&](uint64_t* key) {
    CUresult r = s.real.cuMipmappedArrayCreate(pHandle, desc, numMipmapLevels);
    *key = Key(*pHandle);
    return r;
  });
}

__attribute__((visibility("default"))) CUresult cuMipmappedArrayDestroy(
    CUmipmappedArray hMipmappedArray) {
  HookState& s = Hook();
  HF_REAL(s, cuMipmappedArrayDestroy);
  return Uncounted(s, AllocKind::kMipmappedArray, Key(hMipmappedArray), [&] {
    return s.real.cuMipmappedArrayDestroy(hMipmappedArray);
  });
}

// ---- What the program is told about memory ------------------------------

__attribute__((visibility("default"))) CUresult cuMemGetInfo_v2(size_t* free,
                                                                size_t* total) {
  HookState& s = Hook();
  HF_REAL(s, cuMemGetInfo_v2);
  const uint64_t quota = s.counting ? s.region.quota() : hf::hook::kUnlimited;
  if (quota == hf::hook::kUnlimited || free == nullptr || total == nullptr) {
    return s.real.cuMemGetInfo_v2(free, total);
  }
  // The real call answers errors (no context, ...); it costs no syscall to
  // ask the driver for the current context first, so ask that instead.
  CUcontext ctx = nullptr;
  if (s.real.cuCtxGetCurrent == nullptr ||
      s.real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
    return s.real.cuMemGetInfo_v2(free, total);
  }
  const uint64_t used = s.region.used();
  *total = quota;
  *free = used < quota ? quota - used : 0;
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuDeviceTotalMem_v2(
    size_t* bytes, CUdevice dev) {
  HookState& s = Hook();
  HF_REAL(s, cuDeviceTotalMem_v2);
  const CUresult r = s.real.cuDeviceTotalMem_v2(bytes, dev);
  if (r == CUDA_SUCCESS && s.counting) {
    const uint64_t quota = s.region.quota();
    if (quota < *bytes) *bytes = quota;
  }
  return r;
}

// ---- Contexts (their memory is charged when HETEROFLOW_HOOK_CONTEXT_MB
// says how much; docs/HOOK.md) ------------------------------------------

__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRetain(
    CUcontext* pctx, CUdevice dev) {
  HookState& s = Hook();
  HF_REAL(s, cuDevicePrimaryCtxRetain);
  const CUresult r = s.real.cuDevicePrimaryCtxRetain(pctx, dev);
  if (r == CUDA_SUCCESS && s.counting && s.config.context_bytes > 0) {
    uint64_t ignored = 0;
    // The first retain per device charges (a retained-again context is
    // already in the table: Insert would only overwrite it).
    if (!s.table.Remove(AllocKind::kContext, hf::hook::PrimaryKey(dev),
                        &ignored)) {
      s.region.Charge(s.config.context_bytes);
      ignored = s.config.context_bytes;
    }
    s.table.Insert(AllocKind::kContext, hf::hook::PrimaryKey(dev), ignored);
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRelease_v2(
    CUdevice dev) {
  HookState& s = Hook();
  HF_REAL(s, cuDevicePrimaryCtxRelease_v2);
  const CUresult r = s.real.cuDevicePrimaryCtxRelease_v2(dev);
  if (r == CUDA_SUCCESS) hf::hook::AfterPrimaryRelease(s, dev);
  return r;
}

__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxReset_v2(
    CUdevice dev) {
  HookState& s = Hook();
  HF_REAL(s, cuDevicePrimaryCtxReset_v2);
  const CUresult r = s.real.cuDevicePrimaryCtxReset_v2(dev);
  if (r == CUDA_SUCCESS) hf::hook::AfterPrimaryRelease(s, dev);
  return r;
}

__attribute__((visibility("default"))) CUresult cuCtxCreate_v2(
    CUcontext* pctx, unsigned int flags, CUdevice dev) {
  HookState& s = Hook();
  HF_REAL(s, cuCtxCreate_v2);
  const CUresult r = s.real.cuCtxCreate_v2(pctx, flags, dev);
  if (r == CUDA_SUCCESS && pctx != nullptr) {
    hf::hook::ChargeContext(s, *pctx);
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuCtxCreate_v3(
    CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
    unsigned int flags, CUdevice dev) {
  HookState& s = Hook();
  HF_REAL(s, cuCtxCreate_v3);
  const CUresult r =
      s.real.cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev);
  if (r == CUDA_SUCCESS && pctx != nullptr) {
    hf::hook::ChargeContext(s, *pctx);
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuCtxCreate_v4(
    CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags,
    CUdevice dev) {
  HookState& s = Hook();
  HF_REAL(s, cuCtxCreate_v4);
  const CUresult r = s.real.cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev);
  if (r == CUDA_SUCCESS && pctx != nullptr) {
    hf::hook::ChargeContext(s, *pctx);
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuCtxDestroy_v2(CUcontext ctx) {
  HookState& s = Hook();
  HF_REAL(s, cuCtxDestroy_v2);
  const CUresult r = s.real.cuCtxDestroy_v2(ctx);
  if (r == CUDA_SUCCESS) hf::hook::RefundContext(s, ctx);
  return r;
}

}  // extern "C"
