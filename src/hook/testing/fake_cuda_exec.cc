// fake_cuda_exec.cc: the fake driver's streams, events, modules, kernel
// launches and graphs. Nothing runs: a launch only queues
// HF_FAKE_CUDA_KERNEL_US of simulated GPU time on its context's channel of
// the device's timeline (fake_gpu.h: one timeline per device, shared by every
// process, which time-slices between the contexts with work), synchronizing
// sleeps until the context's work queued so far has run, and an event
// completes at the simulated instant the channel's work crossed the point it
// recorded. See fake_cuda.cc and docs/FAKE_CUDA.md.
#include <algorithm>
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

CUresult StreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  HF_FAKE_LOCK_INITIALIZED();
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* target = nullptr;
  const CUresult rc = StreamContext(stream, &target);
  if (rc != CUDA_SUCCESS) return rc;
  // The fake has no stream capture (no cuStreamBeginCapture), so no stream
  // is ever capturing.
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

// ---- Events ----

bool LiveEvent(CUevent event) {
  return event != nullptr && S().events.count(event) != 0 && event->live;
}

fake_gpu::SharedDevice* EventDevice(const CUevent_st* event) {
  return S().devices[event->ctx->device].gpu.get();
}

// Whether the work the event captured is done; the first time it is seen
// done, notes when that happened on the device's timeline (never before the
// event was recorded: the device reaches an event only once it is
// submitted).
bool EventDone(CUevent_st* event) {
  if (!event->recorded || event->done) return true;
  int64_t at = 0;
  if (!EventDevice(event)->ReachedAt(event->channel, event->mark, &at)) {
    return false;
  }
  event->done = true;
  event->done_ns = std::max(at, event->recorded_ns);
  return true;
}

CUresult CreateEvent(CUevent* event, unsigned int flags) {
  HF_FAKE_LOCK_INITIALIZED();
  constexpr unsigned int kKnown =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (event == nullptr || (flags & ~kKnown) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // "CU_EVENT_INTERPROCESS must be specified along with
  // CU_EVENT_DISABLE_TIMING."
  if ((flags & CU_EVENT_INTERPROCESS) != 0 &&
      (flags & CU_EVENT_DISABLE_TIMING) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUctx_st* ctx = nullptr;
  const CUresult rc = CurrentContext(&ctx);
  if (rc != CUDA_SUCCESS) return rc;
  auto created = std::make_unique<CUevent_st>();
  created->ctx = ctx;
  created->flags = flags;
  *event = created.get();
  st.events.emplace(created.get(), std::move(created));
  return CUDA_SUCCESS;
}

CUresult DestroyEvent(CUevent event) {
  HF_FAKE_LOCK_INITIALIZED();
  if (!LiveEvent(event)) return CUDA_ERROR_INVALID_HANDLE;
  // The driver may destroy an event before it completes, without waiting.
  event->live = false;
  return CUDA_SUCCESS;
}

CUresult RecordEvent(CUevent event, CUstream stream, unsigned int flags) {
  HF_FAKE_LOCK_INITIALIZED();
  if (!LiveEvent(event)) return CUDA_ERROR_INVALID_HANDLE;
  // CU_EVENT_RECORD_EXTERNAL "is invalid outside of stream capture", and
  // no stream of the fake is ever capturing.
  if (flags != CU_EVENT_RECORD_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* target = nullptr;
  const CUresult rc = StreamContext(stream, &target);
  if (rc != CUDA_SUCCESS) return rc;
  // "hEvent and hStream must be from the same context otherwise
  // CUDA_ERROR_INVALID_HANDLE is returned."
  if (target != event->ctx) return CUDA_ERROR_INVALID_HANDLE;
  // Every stream of a context feeds its one channel, so "the work queued so
  // far on the stream" is the channel's queued work now. A context that
  // never launched has no channel and nothing to wait for.
  event->recorded = true;
  event->recorded_ns = fake_gpu::SharedDevice::NowNs();
  event->channel = target->channel;
  event->mark = 0;
  event->done = false;
  fake_gpu::SharedDevice* gpu = EventDevice(event);
  if (event->channel >= 0) event->mark = gpu->Mark(event->channel);
  if (event->channel < 0 || gpu->Reached(event->channel, event->mark)) {
    // Nothing ahead of it: done as soon as it is submitted.
    event->done = true;
    event->done_ns = event->recorded_ns;
  }
  return CUDA_SUCCESS;
}

CUresult QueryEvent(CUevent event) {
  HF_FAKE_LOCK_INITIALIZED();
  if (!LiveEvent(event)) return CUDA_ERROR_INVALID_HANDLE;
  return EventDone(event) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult SynchronizeEvent(CUevent event) {
  HF_FAKE_LOCK_INITIALIZED();
  for (;;) {
    // Looked at again after each wait: another thread may have re-recorded
    // the event, or destroyed it or its context, meanwhile.
    if (!LiveEvent(event)) return CUDA_ERROR_INVALID_HANDLE;
    if (EventDone(event)) return CUDA_SUCCESS;
    fake_gpu::SharedDevice* gpu = EventDevice(event);
    const int channel = event->channel;
    const uint64_t mark = event->mark;
    lock.unlock();
    gpu->WaitFor(channel, mark);
    lock.lock();
  }
}

CUresult EventElapsedTime(float* milliseconds, CUevent start, CUevent end) {
  HF_FAKE_LOCK_INITIALIZED();
  if (milliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!LiveEvent(start) || !LiveEvent(end)) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->recorded || !end->recorded ||
      ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) != 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  const bool start_done = EventDone(start);
  const bool end_done = EventDone(end);
  if (!start_done || !end_done) return CUDA_ERROR_NOT_READY;
  *milliseconds = static_cast<float>(
      static_cast<double>(end->done_ns - start->done_ns) / 1e6);
  return CUDA_SUCCESS;
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

HF_FAKE_EXPORT CUresult
cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return StreamIsCapturing(hStream, captureStatus);
}

HF_FAKE_EXPORT CUresult cuStreamIsCapturing_ptsz(
    CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return StreamIsCapturing(hStream, captureStatus);
}

// ---- Events ----

HF_FAKE_EXPORT CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  return CreateEvent(phEvent, Flags);
}

HF_FAKE_EXPORT CUresult cuEventDestroy(CUevent hEvent) {
  return DestroyEvent(hEvent);
}

HF_FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent) {
  return DestroyEvent(hEvent);
}

HF_FAKE_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  return RecordEvent(hEvent, hStream, CU_EVENT_RECORD_DEFAULT);
}

HF_FAKE_EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  return RecordEvent(hEvent, hStream, CU_EVENT_RECORD_DEFAULT);
}

HF_FAKE_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream,
                                               unsigned int flags) {
  return RecordEvent(hEvent, hStream, flags);
}

HF_FAKE_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent,
                                                    CUstream hStream,
                                                    unsigned int flags) {
  return RecordEvent(hEvent, hStream, flags);
}

HF_FAKE_EXPORT CUresult cuEventQuery(CUevent hEvent) {
  return QueryEvent(hEvent);
}

HF_FAKE_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
  return SynchronizeEvent(hEvent);
}

// cuda.h (internal mode) declares both: the v1 name is what callers built
// before CUDA 12.8 link against; CUDA 13's cuda.h #defines the base name to
// _v2. They behave alike.
HF_FAKE_EXPORT CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart,
                                           CUevent hEnd) {
  return EventElapsedTime(pMilliseconds, hStart, hEnd);
}

HF_FAKE_EXPORT CUresult cuEventElapsedTime_v2(float* pMilliseconds,
                                              CUevent hStart, CUevent hEnd) {
  return EventElapsedTime(pMilliseconds, hStart, hEnd);
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
