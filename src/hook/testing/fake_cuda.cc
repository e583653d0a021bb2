// fake_cuda: a stand-in for libcuda.so.1 (the CUDA driver API) backed by
// host memory, so the CUDA interception hook (libhfhook.so) can be tested on
// machines without a GPU. Built as <build>/src/hook/testing/fake-cuda/
// libcuda.so.1; a program linked with -lcuda, or one that dlopens
// libcuda.so.1, gets it through LD_LIBRARY_PATH.
//
// It behaves like the real driver, failures included (NOT_INITIALIZED before
// cuInit, INVALID_CONTEXT without a current context, OUT_OF_MEMORY past the
// device's memory, INVALID_VALUE for a bad free, ...), with the documented
// differences listed in docs/FAKE_CUDA.md; the most important is that memory
// is accounted per process, not per device.
//
// This file: configuration and cuInit, error strings, devices, contexts and
// the test-only hfFakeCuda* exports. fake_cuda_memory.cc has allocations,
// pools, VMM and arrays; fake_cuda_exec.cc streams, events, modules,
// launches and graphs; fake_cuda_proc.cc cuGetProcAddress.
//
// Configuration (environment, read by the first successful cuInit):
//   HF_FAKE_CUDA_DEVICES    number of devices, 0..64 (default 1; 0 makes
//                           cuInit fail with CUDA_ERROR_NO_DEVICE)
//   HF_FAKE_CUDA_MEMORY_MB  memory per device in MiB, 1..16777216 (1024)
//   HF_FAKE_CUDA_CONTEXT_MB device memory each context takes, 0..16777216 (0)
//   HF_FAKE_CUDA_KERNEL_US  simulated GPU time per launch, 0..60000000 (0)
//   HF_FAKE_CUDA_GPU_DIR    where the devices live, shared by every process
//                           that names the same directory (unset: private)
//   HF_FAKE_CUDA_TIMESLICE_US how long the device runs one context before
//                           switching to another with work, 1..1000000 (2000)
// A bad value makes cuInit print one line naming the variable to stderr and
// return CUDA_ERROR_INVALID_VALUE (a later cuInit reads the variables again).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>

#include "hook/testing/fake_cuda_internal.h"

namespace hf::fake_cuda {

namespace {

constexpr int kMaxContextStack = 256;

// The calling thread's context stack (trivially destructible on purpose: no
// thread-exit hooks in a library that tests dlopen).
struct ContextStack {
  CUctx_st* items[kMaxContextStack];
  int depth;
};
thread_local ContextStack tls_stack = {};

CUctx_st* StackTop() {
  return tls_stack.depth > 0 ? tls_stack.items[tls_stack.depth - 1] : nullptr;
}

bool StackPush(CUctx_st* ctx) {
  if (tls_stack.depth >= kMaxContextStack) return false;
  tls_stack.items[tls_stack.depth++] = ctx;
  return true;
}

CUctx_st* StackPop() {
  if (tls_stack.depth == 0) return nullptr;
  return tls_stack.items[--tls_stack.depth];
}

// Parses an environment variable as a decimal integer in [lo, hi]; unset
// keeps *out. Prints one line and returns false for anything else.
bool ReadEnv(const char* name, uint64_t lo, uint64_t hi, uint64_t* out) {
  const char* value = getenv(name);
  if (value == nullptr) return true;
  bool ok = *value != '\0' && strlen(value) <= 20;
  uint64_t parsed = 0;
  for (const char* p = value; ok && *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') {
      ok = false;
      break;
    }
    const uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (parsed > (UINT64_MAX - digit) / 10) {
      ok = false;
      break;
    }
    parsed = parsed * 10 + digit;
  }
  if (!ok || parsed < lo || parsed > hi) {
    fprintf(stderr,
            "fake libcuda: %s=\"%s\" is not an integer in [%llu, %llu]; "
            "cuInit returns CUDA_ERROR_INVALID_VALUE\n",
            name, value, static_cast<unsigned long long>(lo),
            static_cast<unsigned long long>(hi));
    return false;
  }
  *out = parsed;
  return true;
}

bool ReadConfig(Config* config) {
  uint64_t devices = 1, memory_mb = 1024, context_mb = 0, kernel_us = 0;
  uint64_t timeslice_us = fake_gpu::kDefaultTimesliceNs / 1000;
  constexpr uint64_t kMaxMb = 16ULL * 1024 * 1024;  // 16 TiB
  if (!ReadEnv("HF_FAKE_CUDA_DEVICES", 0, kMaxDevices, &devices) ||
      !ReadEnv("HF_FAKE_CUDA_MEMORY_MB", 1, kMaxMb, &memory_mb) ||
      !ReadEnv("HF_FAKE_CUDA_CONTEXT_MB", 0, kMaxMb, &context_mb) ||
      !ReadEnv("HF_FAKE_CUDA_KERNEL_US", 0, 60ULL * 1000 * 1000, &kernel_us) ||
      !ReadEnv("HF_FAKE_CUDA_TIMESLICE_US", 1, 1000ULL * 1000, &timeslice_us)) {
    return false;
  }
  const char* dir = getenv("HF_FAKE_CUDA_GPU_DIR");
  if (dir != nullptr && dir[0] != '/') {
    fprintf(stderr,
            "fake libcuda: HF_FAKE_CUDA_GPU_DIR=\"%s\" is not an absolute "
            "path; cuInit returns CUDA_ERROR_INVALID_VALUE\n",
            dir);
    return false;
  }
  config->gpu_dir = dir != nullptr ? dir : "";
  config->timeslice_ns = timeslice_us * 1000;
  config->devices = static_cast<int>(devices);
  config->memory_bytes = memory_mb * kMiB;
  config->context_bytes = context_mb * kMiB;
  config->kernel_ns = kernel_us * 1000;
  return true;
}

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

// The strings the real driver gives for the codes the fake returns.
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
     "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED",
     "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE",
     "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE",
     "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE",
     "device kernel image is invalid"},
    {CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,
     "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
     "the provided execution affinity is not supported"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT",
     "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE",
     "invalid resource handle"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
     "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED",
     "context is destroyed"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED",
     "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED",
     "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* FindError(CUresult code) {
  for (const ErrorText& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

// Activates a device's primary context (first retain): charges its memory.
CUresult ActivatePrimary(int device) {
  State& st = S();
  Device& dev = st.devices[device];
  if (!Charge(device, st.config.context_bytes)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  dev.gpu->ContextOpened();
  dev.primary->live = true;
  return CUDA_SUCCESS;
}

// A new (non-primary) context on `device`, current to the calling thread.
CUresult CreateContext(CUcontext* pctx, unsigned int flags, CUdevice device) {
  HF_FAKE_LOCK_INITIALIZED();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  if ((flags & ~static_cast<unsigned int>(CU_CTX_FLAGS_MASK)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (tls_stack.depth >= kMaxContextStack) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!Charge(device, st.config.context_bytes)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  st.devices[device].gpu->ContextOpened();
  auto ctx = std::make_unique<CUctx_st>();
  ctx->device = device;
  ctx->live = true;
  ctx->flags = flags;
  CUctx_st* raw = ctx.get();
  st.contexts.emplace(raw, std::move(ctx));
  StackPush(raw);
  *pctx = raw;
  return CUDA_SUCCESS;
}

CUresult DestroyContext(CUcontext ctx) {
  HF_FAKE_LOCK_INITIALIZED();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto it = st.contexts.find(ctx);
  if (it == st.contexts.end() || ctx->primary || !ctx->live) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  ReleaseContextResources(ctx);
  Uncharge(ctx->device, st.config.context_bytes);
  CloseContextOnDevice(ctx);
  ctx->live = false;
  if (StackTop() == ctx) StackPop();
  return CUDA_SUCCESS;
}

CUresult ReleasePrimary(CUdevice device) {
  HF_FAKE_LOCK_INITIALIZED();
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  Device& dev = st.devices[device];
  if (dev.primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--dev.primary_refs == 0) {
    // "The context is automatically reset once the last reference to it is
    // released": everything in it goes, the handle stays valid.
    ReleaseContextResources(dev.primary);
    Uncharge(device, st.config.context_bytes);
    CloseContextOnDevice(dev.primary);
    dev.primary->live = false;
  }
  return CUDA_SUCCESS;
}

CUresult PushContext(CUcontext ctx) {
  HF_FAKE_LOCK_INITIALIZED();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto it = st.contexts.find(ctx);
  if (it == st.contexts.end() || (!ctx->primary && !ctx->live)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (!StackPush(ctx)) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

CUresult PopContext(CUcontext* pctx) {
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* top = StackPop();
  if (top == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = top;
  return CUDA_SUCCESS;
}

CUresult ContextDevice(CUdevice* device, CUcontext ctx) {
  HF_FAKE_LOCK_INITIALIZED();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* target = ctx;
  if (target == nullptr) {
    const CUresult rc = CurrentContext(&target);
    if (rc != CUDA_SUCCESS) return rc;
  } else {
    const CUresult rc = CheckContext(target);
    if (rc != CUDA_SUCCESS) return rc;
  }
  *device = target->device;
  return CUDA_SUCCESS;
}

CUresult SynchronizeContext(CUcontext ctx) {
  HF_FAKE_LOCK_INITIALIZED();
  CUctx_st* target = ctx;
  const CUresult rc =
      target == nullptr ? CurrentContext(&target) : CheckContext(target);
  if (rc != CUDA_SUCCESS) return rc;
  WaitForContext(lock, target);
  return CUDA_SUCCESS;
}

CUresult DeviceUuid(CUuuid* uuid, CUdevice device) {
  HF_FAKE_LOCK_INITIALIZED();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  // "HFFAKEGPU" + zeros + the ordinal: stable and distinct per device.
  static constexpr char kPrefix[] = "HFFAKEGPU";
  memset(uuid->bytes, 0, sizeof(uuid->bytes));
  memcpy(uuid->bytes, kPrefix, sizeof(kPrefix) - 1);
  uuid->bytes[15] = static_cast<char>(device);
  return CUDA_SUCCESS;
}

// cuDeviceGetAttribute values: an H100-class device (compute capability 9.0,
// 132 SMs). Attributes not listed answer CUDA_ERROR_INVALID_VALUE.
struct AttributeValue {
  CUdevice_attribute attribute;
  int value;
};

constexpr AttributeValue kAttributes[] = {
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
    {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536},
    {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1980000},
    {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 2619000},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120},
    {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 52428800},
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32},
    {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
    {CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0},
    {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT},
    {CU_DEVICE_ATTRIBUTE_INTEGRATED, 0},
    {CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, 0},
    {CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0},
    {CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD, 0},
    {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0},
    {CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0},
    {CU_DEVICE_ATTRIBUTE_MPS_ENABLED, 0},
    {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
    {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1},
    {CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1},
    {CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES,
     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR},
};

bool DeviceAttribute(CUdevice_attribute attrib, int device, int* value) {
  if (attrib == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) {
    *value = device + 1;  // distinct per device
    return true;
  }
  for (const AttributeValue& a : kAttributes) {
    if (a.attribute == attrib) {
      *value = a.value;
      return true;
    }
  }
  return false;
}

}  // namespace

State& S() {
  // Leaked on purpose: no destructor races with threads still calling in
  // at exit (the real driver never tears down either).
  static State* const state = new State();
  return *state;
}

CUresult CurrentContext(CUctx_st** out) {
  CUctx_st* top = StackTop();
  if (top == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!top->live) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = top;
  return CUDA_SUCCESS;
}

CUresult CheckContext(CUcontext ctx) {
  if (ctx == nullptr || S().contexts.count(ctx) == 0) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return ctx->live ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

bool ValidDevice(CUdevice dev) {
  return dev >= 0 && dev < static_cast<int>(S().devices.size());
}

bool Charge(int device, uint64_t bytes) {
  Device& dev = S().devices[device];
  if (bytes == 0) return true;
  if (!dev.gpu->Charge(bytes)) return false;  // the card is full
  dev.used += bytes;
  return true;
}

void Uncharge(int device, uint64_t bytes) {
  Device& dev = S().devices[device];
  const uint64_t taken = bytes > dev.used ? dev.used : bytes;
  dev.used -= taken;
  if (taken > 0) dev.gpu->Uncharge(taken);
}

uint64_t PageRound(uint64_t bytes) {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (bytes > UINT64_MAX - page) return 0;
  return (bytes + page - 1) / page * page;
}

// Small blocks come from the C heap, which reuses them without a syscall:
// the hook's benchmark and its no-syscall test measure the hook against
// this fake, and an mmap per allocation would drown what they measure.
constexpr uint64_t kHeapLimit = uint64_t{64} * 1024;

void* MapAnonymous(uint64_t bytes) {
  const uint64_t mapped = PageRound(bytes);
  if (mapped == 0) return nullptr;
  if (mapped <= kHeapLimit) return calloc(1, mapped);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void Unmap(void* base, uint64_t bytes) {
  const uint64_t mapped = PageRound(bytes);
  if (mapped <= kHeapLimit) {
    free(base);
  } else {
    munmap(base, mapped);
  }
}

void ReleaseContextResources(CUctx_st* ctx) {
  State& st = S();
  for (auto it = st.device_allocs.begin(); it != st.device_allocs.end();) {
    auto next = std::next(it);
    if (it->second.ctx == ctx) FreeDeviceAlloc(it);
    it = next;
  }
  for (auto it = st.host_allocs.begin(); it != st.host_allocs.end();) {
    if (it->second.ctx == ctx) {
      Unmap(reinterpret_cast<void*>(it->first), it->second.map_size);
      it = st.host_allocs.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [handle, array] : st.arrays) {
    if (array->live && array->ctx == ctx) {
      Uncharge(array->device, array->charged);
      array->live = false;
    }
  }
  for (auto& [handle, array] : st.mipmapped_arrays) {
    if (array->live && array->ctx == ctx) {
      Uncharge(array->device, array->charged);
      array->live = false;
    }
  }
  for (auto& [handle, module] : st.modules) {
    if (module->ctx == ctx) module->live = false;
  }
  for (auto& [handle, stream] : st.streams) {
    if (stream->ctx == ctx) stream->live = false;
  }
  for (auto& [handle, event] : st.events) {
    if (event->ctx == ctx) event->live = false;
  }
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

// The context's channel on its device, opened on first use (-1: the device
// has no channel free, and its work then takes no time).
int ChannelOf(CUctx_st* ctx) {
  State& st = S();
  if (ctx->channel < 0) {
    ctx->channel = st.devices[ctx->device].gpu->OpenChannel(
        reinterpret_cast<uint64_t>(ctx), st.config.kernel_ns);
  }
  return ctx->channel;
}

}  // namespace

void QueueKernel(std::unique_lock<std::mutex>& lock, CUctx_st* ctx) {
  State& st = S();
  ++st.launch_count;
  const int channel = ChannelOf(ctx);
  if (channel < 0) return;
  fake_gpu::SharedDevice* gpu = st.devices[ctx->device].gpu.get();
  const uint64_t ns = st.config.kernel_ns;
  // Enqueue may wait for room on the channel: never with the lock held.
  lock.unlock();
  gpu->Enqueue(channel, ns);
  lock.lock();
}

void WaitForContext(std::unique_lock<std::mutex>& lock, CUctx_st* ctx) {
  if (ctx->channel < 0) return;
  fake_gpu::SharedDevice* gpu = S().devices[ctx->device].gpu.get();
  const int channel = ctx->channel;
  const uint64_t mark = gpu->Mark(channel);
  if (gpu->Reached(channel, mark)) return;
  lock.unlock();
  gpu->WaitFor(channel, mark);
  lock.lock();
}

bool ContextIdle(CUctx_st* ctx) {
  if (ctx->channel < 0) return true;
  fake_gpu::SharedDevice* gpu = S().devices[ctx->device].gpu.get();
  return gpu->Reached(ctx->channel, gpu->Mark(ctx->channel));
}

void CloseContextOnDevice(CUctx_st* ctx) {
  fake_gpu::SharedDevice* gpu = S().devices[ctx->device].gpu.get();
  if (ctx->channel >= 0) gpu->CloseChannel(ctx->channel);
  ctx->channel = -1;
  gpu->ContextClosed();
}

}  // namespace hf::fake_cuda

using namespace hf::fake_cuda;

// ---- Initialization, version, errors ----

HF_FAKE_EXPORT CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(S().mu);
  State& st = S();
  if (st.initialized) return CUDA_SUCCESS;
  Config config;
  if (!ReadConfig(&config)) return CUDA_ERROR_INVALID_VALUE;
  if (config.devices == 0) return CUDA_ERROR_NO_DEVICE;
  std::vector<Device> devices(static_cast<size_t>(config.devices));
  for (int i = 0; i < config.devices; ++i) {
    hf::fake_gpu::DeviceOptions options;
    options.memory_bytes = config.memory_bytes;
    options.timeslice_ns = config.timeslice_ns;
    auto gpu = std::make_unique<hf::fake_gpu::SharedDevice>();
    std::string error;
    if (!gpu->Open(config.gpu_dir, i, options, &error)) {
      fprintf(stderr,
              "fake libcuda: device %d: %s; cuInit returns "
              "CUDA_ERROR_OPERATING_SYSTEM\n",
              i, error.c_str());
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
    devices[static_cast<size_t>(i)].gpu = std::move(gpu);
  }
  st.config = config;
  st.devices = std::move(devices);
  for (int i = 0; i < config.devices; ++i) {
    auto primary = std::make_unique<CUctx_st>();
    primary->device = i;
    primary->primary = true;
    primary->live = false;
    st.devices[i].primary = primary.get();
    st.contexts.emplace(primary.get(), std::move(primary));
    auto pool = std::make_unique<CUmemPoolHandle_st>();
    pool->device = i;
    pool->is_default = true;
    st.devices[i].default_pool = pool.get();
    st.devices[i].current_pool = pool.get();
    st.pools.emplace(pool.get(), std::move(pool));
  }
  st.initialized = true;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = kDriverVersion;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = FindError(error);
  *pStr = e != nullptr ? e->name : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

HF_FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = FindError(error);
  *pStr = e != nullptr ? e->text : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- Devices ----

HF_FAKE_EXPORT CUresult cuDeviceGetCount(int* count) {
  HF_FAKE_LOCK_INITIALIZED();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(st.devices.size());
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  HF_FAKE_LOCK_INITIALIZED();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  HF_FAKE_LOCK_INITIALIZED();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, static_cast<size_t>(len), "%s", kDeviceName);
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  HF_FAKE_LOCK_INITIALIZED();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = st.devices[dev].gpu->memory_bytes();
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib,
                                             CUdevice dev) {
  HF_FAKE_LOCK_INITIALIZED();
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return DeviceAttribute(attrib, dev, pi) ? CUDA_SUCCESS
                                          : CUDA_ERROR_INVALID_VALUE;
}

HF_FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  return DeviceUuid(uuid, dev);
}

HF_FAKE_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  return DeviceUuid(uuid, dev);
}

// ---- Contexts ----

HF_FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx,
                                                 CUdevice dev) {
  HF_FAKE_LOCK_INITIALIZED();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Device& device = st.devices[dev];
  if (device.primary_refs == 0) {
    const CUresult rc = ActivatePrimary(dev);
    if (rc != CUDA_SUCCESS) return rc;
  }
  ++device.primary_refs;
  *pctx = device.primary;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return ReleasePrimary(dev);
}

HF_FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return ReleasePrimary(dev);
}

HF_FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev,
                                                   unsigned int* flags,
                                                   int* active) {
  HF_FAKE_LOCK_INITIALIZED();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = st.devices[dev].primary->flags;
  *active = st.devices[dev].primary->live ? 1 : 0;
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags,
                                       CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}

HF_FAKE_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx,
                                       CUexecAffinityParam* paramsArray,
                                       int numParams, unsigned int flags,
                                       CUdevice dev) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Execution affinity (SM limits) needs MPS on the real driver.
  if (numParams > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  return CreateContext(pctx, flags, dev);
}

HF_FAKE_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx,
                                       CUctxCreateParams* ctxCreateParams,
                                       unsigned int flags, CUdevice dev) {
  if (!Initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctxCreateParams != nullptr) {
    if (ctxCreateParams->numExecAffinityParams < 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (ctxCreateParams->numExecAffinityParams > 0) {
      return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    }
    if (ctxCreateParams->cigParams != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CreateContext(pctx, flags, dev);
}

HF_FAKE_EXPORT CUresult cuCtxDestroy(CUcontext ctx) {
  return DestroyContext(ctx);
}

HF_FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  return DestroyContext(ctx);
}

HF_FAKE_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) {
  return PushContext(ctx);
}

HF_FAKE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  return PushContext(ctx);
}

HF_FAKE_EXPORT CUresult cuCtxPopCurrent(CUcontext* pctx) {
  return PopContext(pctx);
}

HF_FAKE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  return PopContext(pctx);
}

HF_FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  HF_FAKE_LOCK_INITIALIZED();
  if (ctx == nullptr) {
    StackPop();  // "equivalent to popping the top" (no-op when empty)
    return CUDA_SUCCESS;
  }
  auto it = st.contexts.find(ctx);
  if (it == st.contexts.end() || (!ctx->primary && !ctx->live)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (tls_stack.depth == 0) {
    StackPush(ctx);
  } else {
    tls_stack.items[tls_stack.depth - 1] = ctx;
  }
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  HF_FAKE_LOCK_INITIALIZED();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = StackTop();
  return CUDA_SUCCESS;
}

HF_FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  return ContextDevice(device, nullptr);
}

HF_FAKE_EXPORT CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  return ContextDevice(device, ctx);
}

HF_FAKE_EXPORT CUresult cuCtxSynchronize(void) {
  return SynchronizeContext(nullptr);
}

HF_FAKE_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  return SynchronizeContext(ctx);
}

// ---- Test-only exports ----

// Kernel and graph launches accepted so far, all devices.
HF_FAKE_EXPORT uint64_t hfFakeCudaLaunchCount(void) {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().launch_count;
}

// Simulated GPU time a device has run so far, every process's work on it
// included (so after a synchronize in the only process using it, it is
// launches x HF_FAKE_CUDA_KERNEL_US). 0 for an unknown device.
HF_FAKE_EXPORT uint64_t hfFakeCudaBusyNs(int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (!S().initialized || !ValidDevice(device)) return 0;
  return S().devices[device].gpu->busy_ns();
}

// Device memory every process holds on a device (a real cuMemGetInfo's
// total - free). 0 for an unknown device.
HF_FAKE_EXPORT uint64_t hfFakeCudaGpuUsedBytes(int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (!S().initialized || !ValidDevice(device)) return 0;
  return S().devices[device].gpu->used_bytes();
}

// Device memory this process holds on a device. 0 for an unknown device.
HF_FAKE_EXPORT uint64_t hfFakeCudaDeviceUsedBytes(int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (!S().initialized || !ValidDevice(device)) return 0;
  return S().devices[device].used;
}
