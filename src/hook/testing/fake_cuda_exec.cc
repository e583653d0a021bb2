// fake_cuda_exec.cc: the fake driver's streams, modules, kernel launches and
// graphs. Nothing runs: a launch only queues HF_FAKE_CUDA_KERNEL_US of
// simulated GPU time on its context's channel of the device's timeline
// (fake_gpu.h: one timeline per device, shared by every process, which
// time-slices between the contexts with work), and synchronizing sleeps
// until the context's work queued so far has run. See fake_cuda.cc and
// docs/FAKE_CUDA.md.
#include <string>
#include <utility>

#include "hook/testing/fake_cuda_internal.h"

namespace hf::fake_cuda {

namespace {

// (module, kernel name) -> its function handle, so that looking the same
// name up twice gives the same handle. Guarded by S().mu.
std::map<std::pair<CUmod_st*, std::string>, CUfunc_st*>& FunctionNames() {
  static auto* const names =
      new std::map<std::pair<CUmod_st*, std::string>, CUfunc_st*>();
  return *names;
}

bool IsDefaultStream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY ||
         stream == CU_STREAM_PER_THREAD;
}

// The grid and block limits of cuDeviceGetAttribute (MAX_GRID_DIM_*,
// MAX_BLOCK_DIM_*, MAX_THREADS_PER_BLOCK, MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).
bool ValidLaunchShape(unsigned int gx, unsigned int gy, unsigned int gz,
                      unsigned int bx, unsigned int by, unsigned int bz,
                      unsigned int shared_bytes) {
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) {
    return false;
  }
  if (gx > 2147483647U || gy > 65535 || gz > 65535) return false;
  if (bx > 1024 || by > 1024 || bz > 64) return false;
  if (static_cast<uint64_t>(bx) * by * bz > 1024) return false;
  return shared_bytes <= 232448;
}

CUresult LaunchKernel(CUfunction f, unsigned int gx, unsigned int gy,
                      unsigned int gz, unsigned int bx, unsigned int by,
                      unsigned int bz, unsigned int shared_bytes,
                      CUstream stream) {
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* ctx = nullptr;
  CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  if (f == nullptr || st.functions.count(f) == 0 || !f->module->live) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!ValidLaunchShape(gx, gy, gz, bx, by, bz, shared_bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUctx_st* target = nullptr;
  rc = StreamContext(stream, &target);
  if (rc != CUDA_SUCCESS) return rc;
  QueueKernel(lock, target);
  return CUDA_SUCCESS;
}

CUresult LaunchKernelEx(const CUlaunchConfig* config, CUfunction f) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return LaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ,
                      config->blockDimX, config->blockDimY, config->blockDimZ,
                      config->sharedMemBytes, config->hStream);
}

CUresult GraphLaunch(CUgraphExec exec, CUstream stream) {
  HF_FAKE_LOCK_INITIALIZED();
  if (exec == nullptr || st.graph_execs.count(exec) == 0 || !exec->live) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUctx_st* target = nullptr;
  const CUresult rc = StreamContext(stream, &target);
  if (rc != CUDA_SUCCESS) return rc;
  QueueKernel(lock, target);  // a graph counts as one kernel's worth of time
  return CUDA_SUCCESS;
}

CUresult Instantiate(CUgraphExec* exec, CUgraph graph,
                     unsigned long long flags) {
  HF_FAKE_LOCK_INITIALIZED();
  constexpr unsigned long long kKnown =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
      CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
      CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (exec == nullptr || graph == nullptr || st.graphs.count(graph) == 0 ||
      !graph->live || (flags & ~kKnown) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto created = std::make_unique<CUgraphExec_st>();
  *exec = created.get();
  st.graph_execs.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

CUresult InstantiateWithLog(CUgraphExec* exec, CUgraph graph,
                            CUgraphNode* error_node, char* log,
                            size_t log_size) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (error_node != nullptr) *error_node = nullptr;
  if (log != nullptr && log_size > 0) log[0] = '\0';
  return Instantiate(exec, graph, 0);
}

CUresult DestroyStream(CUstream stream) {
  HF_FAKE_LOCK_INITIALIZED();
  if (IsDefaultStream(stream) || st.streams.count(stream) == 0 ||
      !stream->live) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  stream->live = false;
  return CUDA_SUCCESS;
}

CUresult SynchronizeStream(CUstream stream) {
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* target = nullptr;
  const CUresult rc = StreamContext(stream, &target);
  if (rc != CUDA_SUCCESS) return rc;
  WaitForContext(lock, target);
  return CUDA_SUCCESS;
}

CUresult QueryStream(CUstream stream) {
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* target = nullptr;
  const CUresult rc = StreamContext(stream, &target);
  if (rc != CUDA_SUCCESS) return rc;
  return ContextIdle(target) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

}  // namespace

CUresult StreamContext(CUstream stream, CUctx_st** ctx) {
  if (IsDefaultStream(stream)) return CurrentContext(ctx);
  if (S().streams.count(stream) == 0 || !stream->live) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *ctx = stream->ctx;
  return CUDA_SUCCESS;
}

CUresult StreamDevice(CUstream stream, int* device) {
  if (IsDefaultStream(stream)) {
    CUctx_st* ctx = nullptr;
    const CUresult rc = CurrentContext(&ctx);
    if (rc != CUDA_SUCCESS) return rc;
    *device = ctx->device;
    return CUDA_SUCCESS;
  }
  if (S().streams.count(stream) == 0 || !stream->live) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *device = stream->ctx->device;
  return CUDA_SUCCESS;
}

}  // namespace hf::fake_cuda

using namespace hf::fake_cuda;

// ---- Streams ----

HF_FAKE_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  HF_FAKE_LOCK_INITIALIZED();
  if (phStream == nullptr || (Flags & ~CU_STREAM_NON_BLOCKING) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  auto stream = std::make_unique<CUstream_st>();
  stream->ctx = ctx;
  stream->flags = Flags;
  *phStream = stream.get();
  st.streams.emplace(stream.get(), std::move(stream));
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuStreamDestroy(CUstream hStream) {
  return DestroyStream(hStream);
}

HF_FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
  return DestroyStream(hStream);
}

HF_FAKE_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
  return SynchronizeStream(hStream);
}

HF_FAKE_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  return SynchronizeStream(hStream);
}

HF_FAKE_EXPORT CUresult cuStreamQuery(CUstream hStream) {
  return QueryStream(hStream);
}

HF_FAKE_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream) {
  return QueryStream(hStream);
}

// ---- Modules ----

HF_FAKE_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  HF_FAKE_LOCK_INITIALIZED();
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  auto created = std::make_unique<CUmod_st>();
  created->ctx = ctx;
  *module = created.get();
  st.modules.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod,
                                            const char* name) {
  HF_FAKE_LOCK_INITIALIZED();
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (hmod == nullptr || st.modules.count(hmod) == 0 || !hmod->live) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  // The fake cannot read images, so every name is a kernel of the module.
  auto key = std::make_pair(hmod, std::string(name));
  auto it = FunctionNames().find(key);
  if (it == FunctionNames().end()) {
    auto created = std::make_unique<CUfunc_st>();
    created->module = hmod;
    it = FunctionNames().emplace(key, created.get()).first;
    st.functions.emplace(created.get(), std::move(created));
  }
  *hfunc = it->second;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  HF_FAKE_LOCK_INITIALIZED();
  if (hmod == nullptr || st.modules.count(hmod) == 0 || !hmod->live) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  hmod->live = false;
  return CUDA_SUCCESS;
}

// ---- Launches ----

HF_FAKE_EXPORT CUresult cuLaunchKernel(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
    void** kernelParams, void** extra) {
  (void)kernelParams;
  (void)extra;
  return LaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                      blockDimZ, sharedMemBytes, hStream);
}

HF_FAKE_EXPORT CUresult cuLaunchKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
    void** kernelParams, void** extra) {
  (void)kernelParams;
  (void)extra;
  return LaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                      blockDimZ, sharedMemBytes, hStream);
}

HF_FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config,
                                         CUfunction f, void** kernelParams,
                                         void** extra) {
  (void)kernelParams;
  (void)extra;
  return LaunchKernelEx(config, f);
}

HF_FAKE_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config,
                                              CUfunction f, void** kernelParams,
                                              void** extra) {
  (void)kernelParams;
  (void)extra;
  return LaunchKernelEx(config, f);
}

HF_FAKE_EXPORT CUresult cuLaunchCooperativeKernel(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
    void** kernelParams) {
  (void)kernelParams;
  return LaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                      blockDimZ, sharedMemBytes, hStream);
}

HF_FAKE_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
    void** kernelParams) {
  (void)kernelParams;
  return LaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                      blockDimZ, sharedMemBytes, hStream);
}

// ---- Graphs (empty: a launch is one kernel's worth of time) ----

HF_FAKE_EXPORT CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  HF_FAKE_LOCK_INITIALIZED();
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto created = std::make_unique<CUgraph_st>();
  *phGraph = created.get();
  st.graphs.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec,
                                                    CUgraph hGraph,
                                                    unsigned long long flags) {
  return Instantiate(phGraphExec, hGraph, flags);
}

HF_FAKE_EXPORT CUresult cuGraphInstantiate(CUgraphExec* phGraphExec,
                                           CUgraph hGraph,
                                           CUgraphNode* phErrorNode,
                                           char* logBuffer, size_t bufferSize) {
  return InstantiateWithLog(phGraphExec, hGraph, phErrorNode, logBuffer,
                            bufferSize);
}

HF_FAKE_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec,
                                              CUgraph hGraph,
                                              CUgraphNode* phErrorNode,
                                              char* logBuffer,
                                              size_t bufferSize) {
  return InstantiateWithLog(phGraphExec, hGraph, phErrorNode, logBuffer,
                            bufferSize);
}

HF_FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  HF_FAKE_LOCK_INITIALIZED();
  if (hGraphExec == nullptr || st.graph_execs.count(hGraphExec) == 0 ||
      !hGraphExec->live) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  hGraphExec->live = false;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
  HF_FAKE_LOCK_INITIALIZED();
  if (hGraph == nullptr || st.graphs.count(hGraph) == 0 || !hGraph->live) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  hGraph->live = false;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec,
                                      CUstream hStream) {
  return GraphLaunch(hGraphExec, hStream);
}

HF_FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec,
                                           CUstream hStream) {
  return GraphLaunch(hGraphExec, hStream);
}
