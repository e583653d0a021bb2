// The CUDA driver API as the hook sees it: cuda.h from the CUDA toolkit,
// plus the exported variants cuda.h declares only for the driver's own
// build (per-thread-default-stream `_ptsz` entry points, older context
// creation, the CUDA 12.0-12.4 cuGetProcAddress). Signatures are those of
// cuda.h's internal section (CUDA 13.0) and of cudaTypedefs.h.
#ifndef HF_HOOK_CUDA_API_H_
#define HF_HOOK_CUDA_API_H_

#include <cuda.h>

// cuda.h maps cuGetProcAddress to cuGetProcAddress_v2; the driver exports
// both names, with different signatures.
#undef cuGetProcAddress

extern "C" {
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                          cuuint64_t flags);
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray,
                        int numParams, unsigned int flags, CUdevice dev);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                              CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                      CUmemoryPool pool, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                             unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream,
                             void** kernelParams, void** extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                               void** kernelParams, void** extra);
CUresult cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
    void** kernelParams);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
}

#endif  // HF_HOOK_CUDA_API_H_
