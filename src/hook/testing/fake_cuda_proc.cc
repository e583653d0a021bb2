// fake_cuda_proc.cc: cuGetProcAddress for the fake driver. Base names
// ("cuMemAlloc") resolve the way the real driver resolves them: to the
// newest variant whose ABI the requested CUDA version has (cuMemAlloc_v2
// since 3.2), to the _ptsz/_ptds variant when the flags ask for per-thread
// default stream semantics, and to nothing (CUDA_ERROR_NOT_FOUND) for names
// the driver lacks. The versions are those of the PFN_<name>_v<version>
// typedefs in cudaTypedefs.h (CUDA 13.0).
//
// Resolution goes through the static table below, which holds the fake's
// own entry points (the library is linked with -Bsymbolic, so these are its
// definitions even when an LD_PRELOADed library defines the same names):
// never through dlsym, so a hook that fails to substitute its wrappers for
// what cuGetProcAddress returns is caught by its tests.
#include <string.h>

#include "hook/testing/fake_cuda_internal.h"

namespace hf::fake_cuda {
namespace {

struct ProcEntry {
  const char* name;  // base name, as callers ask for it
  int version;       // the CUDA version that introduced this variant
  bool per_thread;   // a _ptsz / _ptds variant
  void* fn;
};

// NOLINTBEGIN(bugprone-macro-parentheses): `fn` is a function name.
#define HF_PROC(base, version, fn) \
  { base, version, false, reinterpret_cast<void*>(&fn) }
#define HF_PROC_PT(base, version, fn) \
  { base, version, true, reinterpret_cast<void*>(&fn) }
// NOLINTEND(bugprone-macro-parentheses)

const ProcEntry kProcTable[] = {
    HF_PROC("cuInit", 2000, cuInit),
    HF_PROC("cuDriverGetVersion", 2020, cuDriverGetVersion),
    HF_PROC("cuGetErrorName", 6000, cuGetErrorName),
    HF_PROC("cuGetErrorString", 6000, cuGetErrorString),
    HF_PROC("cuGetProcAddress", 11030, cuGetProcAddress),
    HF_PROC("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    // Devices
    HF_PROC("cuDeviceGet", 2000, cuDeviceGet),
    HF_PROC("cuDeviceGetCount", 2000, cuDeviceGetCount),
    HF_PROC("cuDeviceGetName", 2000, cuDeviceGetName),
    HF_PROC("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    HF_PROC("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    HF_PROC("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    HF_PROC("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    HF_PROC("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    HF_PROC("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    HF_PROC("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    // Contexts
    HF_PROC("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    HF_PROC("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    HF_PROC("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    HF_PROC("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    HF_PROC("cuCtxCreate", 3020, cuCtxCreate_v2),
    HF_PROC("cuCtxCreate", 11040, cuCtxCreate_v3),
    HF_PROC("cuCtxCreate", 12050, cuCtxCreate_v4),
    HF_PROC("cuCtxDestroy", 2000, cuCtxDestroy),
    HF_PROC("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    HF_PROC("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    HF_PROC("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    HF_PROC("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    HF_PROC("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    HF_PROC("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    HF_PROC("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    HF_PROC("cuCtxGetDevice", 2000, cuCtxGetDevice),
    HF_PROC("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    HF_PROC("cuCtxSynchronize", 2000, cuCtxSynchronize),
    HF_PROC("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    // Memory
    HF_PROC("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    HF_PROC("cuMemAlloc", 3020, cuMemAlloc_v2),
    HF_PROC("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    HF_PROC("cuMemAllocManaged", 6000, cuMemAllocManaged),
    HF_PROC("cuMemFree", 3020, cuMemFree_v2),
    HF_PROC("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    HF_PROC("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    HF_PROC("cuMemFreeHost", 2000, cuMemFreeHost),
    HF_PROC("cuMemHostAlloc", 2020, cuMemHostAlloc),
    HF_PROC("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    HF_PROC_PT("cuMemcpyHtoD", 7000, cuMemcpyHtoD_v2_ptds),
    HF_PROC("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    HF_PROC_PT("cuMemcpyDtoH", 7000, cuMemcpyDtoH_v2_ptds),
    HF_PROC("cuMemsetD8", 3020, cuMemsetD8_v2),
    HF_PROC_PT("cuMemsetD8", 7000, cuMemsetD8_v2_ptds),
    // Stream-ordered allocation and pools
    HF_PROC("cuMemAllocAsync", 11020, cuMemAllocAsync),
    HF_PROC_PT("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
    HF_PROC("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    HF_PROC_PT("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
    HF_PROC("cuMemFreeAsync", 11020, cuMemFreeAsync),
    HF_PROC_PT("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    HF_PROC("cuMemPoolCreate", 11020, cuMemPoolCreate),
    HF_PROC("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    HF_PROC("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    HF_PROC("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    HF_PROC("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    HF_PROC("cuMemGetDefaultMemPool", 13000, cuMemGetDefaultMemPool),
    HF_PROC("cuMemGetMemPool", 13000, cuMemGetMemPool),
    HF_PROC("cuMemSetMemPool", 13000, cuMemSetMemPool),
    // Virtual memory management
    HF_PROC("cuMemGetAllocationGranularity", 10020,
            cuMemGetAllocationGranularity),
    HF_PROC("cuMemCreate", 10020, cuMemCreate),
    HF_PROC("cuMemRelease", 10020, cuMemRelease),
    HF_PROC("cuMemAddressReserve", 10020, cuMemAddressReserve),
    HF_PROC("cuMemAddressFree", 10020, cuMemAddressFree),
    HF_PROC("cuMemMap", 10020, cuMemMap),
    HF_PROC("cuMemUnmap", 10020, cuMemUnmap),
    HF_PROC("cuMemSetAccess", 10020, cuMemSetAccess),
    HF_PROC("cuMemExportToShareableHandle", 10020,
            cuMemExportToShareableHandle),
    HF_PROC("cuMemImportFromShareableHandle", 10020,
            cuMemImportFromShareableHandle),
    HF_PROC("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    HF_PROC("cuMemGetAllocationPropertiesFromHandle", 10020,
            cuMemGetAllocationPropertiesFromHandle),
    // Arrays
    HF_PROC("cuArrayCreate", 3020, cuArrayCreate_v2),
    HF_PROC("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    HF_PROC("cuArrayDestroy", 2000, cuArrayDestroy),
    HF_PROC("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate),
    HF_PROC("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy),
    // IPC
    HF_PROC("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    HF_PROC("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    HF_PROC("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    HF_PROC("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    // Streams
    HF_PROC("cuStreamCreate", 2000, cuStreamCreate),
    HF_PROC("cuStreamDestroy", 2000, cuStreamDestroy),
    HF_PROC("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    HF_PROC("cuStreamSynchronize", 2000, cuStreamSynchronize),
    HF_PROC_PT("cuStreamSynchronize", 7000, cuStreamSynchronize_ptsz),
    HF_PROC("cuStreamQuery", 2000, cuStreamQuery),
    HF_PROC_PT("cuStreamQuery", 7000, cuStreamQuery_ptsz),
    HF_PROC("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    HF_PROC_PT("cuStreamIsCapturing", 10000, cuStreamIsCapturing_ptsz),
    // Events
    HF_PROC("cuEventCreate", 2000, cuEventCreate),
    HF_PROC("cuEventDestroy", 2000, cuEventDestroy),
    HF_PROC("cuEventDestroy", 4000, cuEventDestroy_v2),
    HF_PROC("cuEventRecord", 2000, cuEventRecord),
    HF_PROC_PT("cuEventRecord", 7000, cuEventRecord_ptsz),
    HF_PROC("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags),
    HF_PROC_PT("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags_ptsz),
    HF_PROC("cuEventQuery", 2000, cuEventQuery),
    HF_PROC("cuEventSynchronize", 2000, cuEventSynchronize),
    HF_PROC("cuEventElapsedTime", 2000, cuEventElapsedTime),
    HF_PROC("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    // Modules and launches
    HF_PROC("cuModuleLoadData", 2000, cuModuleLoadData),
    HF_PROC("cuModuleGetFunction", 2000, cuModuleGetFunction),
    HF_PROC("cuModuleUnload", 2000, cuModuleUnload),
    HF_PROC("cuLaunchKernel", 4000, cuLaunchKernel),
    HF_PROC_PT("cuLaunchKernel", 7000, cuLaunchKernel_ptsz),
    HF_PROC("cuLaunchKernelEx", 11060, cuLaunchKernelEx),
    HF_PROC_PT("cuLaunchKernelEx", 11060, cuLaunchKernelEx_ptsz),
    HF_PROC("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel),
    HF_PROC_PT("cuLaunchCooperativeKernel", 9000,
               cuLaunchCooperativeKernel_ptsz),
    // Graphs
    HF_PROC("cuGraphCreate", 10000, cuGraphCreate),
    HF_PROC("cuGraphInstantiate", 10000, cuGraphInstantiate),
    HF_PROC("cuGraphInstantiate", 11000, cuGraphInstantiate_v2),
    HF_PROC("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    HF_PROC("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    HF_PROC("cuGraphDestroy", 10000, cuGraphDestroy),
    HF_PROC("cuGraphLaunch", 10000, cuGraphLaunch),
    HF_PROC_PT("cuGraphLaunch", 10000, cuGraphLaunch_ptsz),
};

#undef HF_PROC
#undef HF_PROC_PT

// The newest variant of `symbol` with the given stream semantics that
// `version` has, or null.
const ProcEntry* Newest(const char* symbol, int version, bool per_thread) {
  const ProcEntry* best = nullptr;
  for (const ProcEntry& e : kProcTable) {
    if (e.per_thread != per_thread || e.version > version ||
        strcmp(e.name, symbol) != 0) {
      continue;
    }
    if (best == nullptr || e.version > best->version) best = &e;
  }
  return best;
}

bool Known(const char* symbol) {
  for (const ProcEntry& e : kProcTable) {
    if (strcmp(e.name, symbol) == 0) return true;
  }
  return false;
}

CUresult GetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                        cuuint64_t flags,
                        CUdriverProcAddressQueryResult* symbolStatus) {
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM |
      CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (symbol == nullptr || pfn == nullptr || (flags & ~kKnownFlags) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // "If the specified CUDA version is greater than the driver version, the
  // API will return CUDA_ERROR_INVALID_VALUE."
  if (cudaVersion > kDriverVersion) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread =
      (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  // "If a per-thread version is not found, the API will return the legacy
  // version of the driver function."
  const ProcEntry* found =
      per_thread ? Newest(symbol, cudaVersion, true) : nullptr;
  if (found == nullptr) found = Newest(symbol, cudaVersion, false);
  if (found == nullptr) {
    *pfn = nullptr;
    if (symbolStatus != nullptr) {
      *symbolStatus = Known(symbol) ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                    : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = found->fn;
  if (symbolStatus != nullptr) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace hf::fake_cuda

// The CUDA 11.3 signature (no status), what older runtimes look up.
HF_FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn,
                                         int cudaVersion, cuuint64_t flags) {
  return hf::fake_cuda::GetProcAddress(symbol, pfn, cudaVersion, flags,
                                       nullptr);
}

HF_FAKE_EXPORT CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult* symbolStatus) {
  return hf::fake_cuda::GetProcAddress(symbol, pfn, cudaVersion, flags,
                                       symbolStatus);
}
