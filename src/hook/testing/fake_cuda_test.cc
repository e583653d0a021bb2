// Tests of fake_cuda, the stand-in libcuda.so.1 (see fake_cuda.cc and
// docs/FAKE_CUDA.md). Each test dlopens its own copy of the library (a copy
// in a fresh directory is a separate instance, with its own driver state),
// so every test starts before cuInit with the configuration it sets.
//
// This executable also defines (and exports) a cuMemAlloc_v2 of its own, the
// way an LD_PRELOADed hook does: the fake must never hand that one out from
// cuGetProcAddress nor call it itself.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hook/cuda_sizes.h"

// Base names cuda.h #defines to a variant; the tests name variants exactly.
#undef cuGetProcAddress
#undef cuDeviceGetUuid
#undef cuEventDestroy
#undef cuEventElapsedTime

extern "C" {
// Prototypes cuda.h does not give in its public mode (old or per-thread
// variants); used only for their types.
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                          cuuint64_t flags);
CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);
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
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuEventDestroy(CUevent hEvent);
CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                     unsigned int flags);
CUresult cuStreamIsCapturing_ptsz(CUstream hStream,
                                  CUstreamCaptureStatus* captureStatus);
uint64_t hfFakeCudaLaunchCount(void);
uint64_t hfFakeCudaBusyNs(int device);
uint64_t hfFakeCudaDeviceUsedBytes(int device);

// The interposer (see the file comment).
__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr* dptr,
                                                              size_t bytesize) {
  (void)bytesize;
  if (dptr != nullptr) *dptr = 0xbad;
  return CUDA_ERROR_UNKNOWN;
}
}

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = 1024ULL * 1024ULL;
constexpr uint64_t kGran = 2 * kMiB;

#define HF_FAKE_API(X)              \
  X(cuInit)                         \
  X(cuDriverGetVersion)             \
  X(cuGetErrorName)                 \
  X(cuGetErrorString)               \
  X(cuGetProcAddress)               \
  X(cuGetProcAddress_v2)            \
  X(cuDeviceGet)                    \
  X(cuDeviceGetCount)               \
  X(cuDeviceGetName)                \
  X(cuDeviceTotalMem_v2)            \
  X(cuDeviceGetAttribute)           \
  X(cuDeviceGetUuid)                \
  X(cuDeviceGetUuid_v2)             \
  X(cuDevicePrimaryCtxRetain)       \
  X(cuDevicePrimaryCtxRelease_v2)   \
  X(cuCtxCreate_v2)                 \
  X(cuCtxCreate_v4)                 \
  X(cuCtxDestroy_v2)                \
  X(cuCtxSetCurrent)                \
  X(cuCtxGetCurrent)                \
  X(cuCtxGetDevice)                 \
  X(cuCtxPushCurrent_v2)            \
  X(cuCtxPopCurrent_v2)             \
  X(cuCtxSynchronize)               \
  X(cuMemGetInfo_v2)                \
  X(cuMemAlloc_v2)                  \
  X(cuMemAllocPitch_v2)             \
  X(cuMemAllocManaged)              \
  X(cuMemFree_v2)                   \
  X(cuMemGetAddressRange_v2)        \
  X(cuMemAllocHost_v2)              \
  X(cuMemHostAlloc)                 \
  X(cuMemFreeHost)                  \
  X(cuMemcpyHtoD_v2)                \
  X(cuMemcpyDtoH_v2)                \
  X(cuMemsetD8_v2)                  \
  X(cuStreamCreate)                 \
  X(cuStreamDestroy_v2)             \
  X(cuStreamSynchronize)            \
  X(cuStreamQuery)                  \
  X(cuStreamIsCapturing)            \
  X(cuStreamIsCapturing_ptsz)       \
  X(cuEventCreate)                  \
  X(cuEventDestroy)                 \
  X(cuEventDestroy_v2)              \
  X(cuEventRecord)                  \
  X(cuEventRecord_ptsz)             \
  X(cuEventRecordWithFlags)         \
  X(cuEventRecordWithFlags_ptsz)    \
  X(cuEventQuery)                   \
  X(cuEventSynchronize)             \
  X(cuEventElapsedTime)             \
  X(cuEventElapsedTime_v2)          \
  X(cuDeviceGetDefaultMemPool)      \
  X(cuDeviceGetMemPool)             \
  X(cuDeviceSetMemPool)             \
  X(cuMemPoolCreate)                \
  X(cuMemPoolDestroy)               \
  X(cuMemPoolTrimTo)                \
  X(cuMemPoolGetAttribute)          \
  X(cuMemAllocAsync)                \
  X(cuMemAllocAsync_ptsz)           \
  X(cuMemAllocFromPoolAsync)        \
  X(cuMemAllocFromPoolAsync_ptsz)   \
  X(cuMemFreeAsync)                 \
  X(cuMemFreeAsync_ptsz)            \
  X(cuMemGetAllocationGranularity)  \
  X(cuMemCreate)                    \
  X(cuMemRelease)                   \
  X(cuMemAddressReserve)            \
  X(cuMemAddressFree)               \
  X(cuMemMap)                       \
  X(cuMemUnmap)                     \
  X(cuMemSetAccess)                 \
  X(cuMemExportToShareableHandle)   \
  X(cuMemImportFromShareableHandle) \
  X(cuMemRetainAllocationHandle)    \
  X(cuArrayCreate_v2)               \
  X(cuArray3DCreate_v2)             \
  X(cuArrayDestroy)                 \
  X(cuMipmappedArrayCreate)         \
  X(cuMipmappedArrayDestroy)        \
  X(cuIpcGetMemHandle)              \
  X(cuModuleLoadData)               \
  X(cuModuleGetFunction)            \
  X(cuModuleUnload)                 \
  X(cuLaunchKernel)                 \
  X(cuLaunchKernel_ptsz)            \
  X(cuLaunchKernelEx)               \
  X(cuLaunchCooperativeKernel)      \
  X(cuGraphCreate)                  \
  X(cuGraphInstantiateWithFlags)    \
  X(cuGraphExecDestroy)             \
  X(cuGraphDestroy)                 \
  X(cuGraphLaunch)                  \
  X(cuGraphLaunch_ptsz)             \
  X(hfFakeCudaLaunchCount)          \
  X(hfFakeCudaBusyNs)               \
  X(hfFakeCudaDeviceUsedBytes)

// One loaded copy of the fake and its entry points (found with dlsym on its
// handle, so they are the fake's own even where this executable defines the
// same name).
struct Fake {
  void* handle = nullptr;
#define HF_MEMBER(name) decltype(&::name) name = nullptr;
  HF_FAKE_API(HF_MEMBER)
#undef HF_MEMBER

  void* Sym(const char* name) const { return dlsym(handle, name); }

  // A context made current on device `dev` (the test fails without one).
  CUcontext NewContext(CUdevice dev = 0) const {
    CUcontext ctx = nullptr;
    EXPECT_EQ(cuCtxCreate_v4(&ctx, nullptr, 0, dev), CUDA_SUCCESS);
    return ctx;
  }

  uint64_t Used(int dev = 0) const { return hfFakeCudaDeviceUsedBytes(dev); }

  uint64_t Free() const {
    size_t free = 0, total = 0;
    EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
    return free;
  }
};

const char* const kConfigVars[] = {
    "HF_FAKE_CUDA_DEVICES", "HF_FAKE_CUDA_MEMORY_MB", "HF_FAKE_CUDA_CONTEXT_MB",
    "HF_FAKE_CUDA_KERNEL_US"};

using Env = std::map<std::string, std::string>;

class FakeCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (fs::temp_directory_path() / "hf-fake-cuda-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    for (const char* var : kConfigVars) unsetenv(var);
  }

  void TearDown() override {
    for (const char* var : kConfigVars) unsetenv(var);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A fresh copy of the fake, not yet initialized.
  std::unique_ptr<Fake> Load() {
    const fs::path copy_dir = dir_ / ("copy" + std::to_string(copies_++));
    fs::create_directories(copy_dir);
    const fs::path copy = copy_dir / "libcuda.so.1";
    fs::copy_file(HF_FAKE_CUDA_PATH, copy);
    auto fake = std::make_unique<Fake>();
    fake->handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(fake->handle, nullptr) << dlerror();
    if (fake->handle == nullptr) return fake;
#define HF_LOAD(name)                                                    \
  fake->name = reinterpret_cast<decltype(fake->name)>(fake->Sym(#name)); \
  EXPECT_NE(fake->name, nullptr) << #name;
    HF_FAKE_API(HF_LOAD)
#undef HF_LOAD
    return fake;
  }

  // cuInit(0) with `env` in the environment.
  static CUresult InitWith(const Fake& fake, const Env& env) {
    for (const auto& [name, value] : env)
      setenv(name.c_str(), value.c_str(), 1);
    const CUresult rc = fake.cuInit(0);
    for (const auto& [name, value] : env) unsetenv(name.c_str());
    return rc;
  }

  // A copy initialized with `env`, the primary context of device 0 current.
  std::unique_ptr<Fake> Start(const Env& env = {}) {
    auto fake = Load();
    EXPECT_EQ(InitWith(*fake, env), CUDA_SUCCESS);
    CUcontext primary = nullptr;
    EXPECT_EQ(fake->cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
    EXPECT_EQ(fake->cuCtxSetCurrent(primary), CUDA_SUCCESS);
    return fake;
  }

  fs::path dir_;
  int copies_ = 0;
};

// ---- Initialization ----

TEST_F(FakeCudaTest, EverythingButAFewCallsNeedsCuInit) {
  auto fake = Load();
  int count = -1;
  CUdeviceptr p = 0;
  CUcontext ctx = nullptr;
  size_t free = 0, total = 0;
  EXPECT_EQ(fake->cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(fake->cuMemAlloc_v2(&p, kMiB), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(fake->cuMemFree_v2(0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(fake->cuMemGetInfo_v2(&free, &total), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(fake->cuCtxCreate_v4(&ctx, nullptr, 0, 0),
            CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(fake->cuDevicePrimaryCtxRetain(&ctx, 0),
            CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(fake->cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(fake->cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,
                                 nullptr),
            CUDA_ERROR_NOT_INITIALIZED);

  // These work before cuInit.
  int version = 0;
  EXPECT_EQ(fake->cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
  const char* text = nullptr;
  EXPECT_EQ(fake->cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text),
            CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(fake->cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text),
            CUDA_SUCCESS);
  EXPECT_STREQ(text, "out of memory");
  // A code no enumerator names, inside CUresult's range (0..1023: a value
  // outside it is undefined behaviour in C++, which clang's UBSan reports).
  EXPECT_EQ(fake->cuGetErrorName(static_cast<CUresult>(998), &text),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(text, nullptr);
  void* fn = nullptr;
  EXPECT_EQ(fake->cuGetProcAddress_v2("cuInit", &fn, 13000, 0, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(fn, fake->Sym("cuInit"));

  EXPECT_EQ(fake->cuInit(1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
}

// Every entry point but cuInit, cuDriverGetVersion, cuGetErrorName,
// cuGetErrorString and cuGetProcAddress*, and the IPC opens (which take a
// 64-byte struct by value and so cannot be called generically).
const char* const kNeedInit[] = {
    "cuArray3DCreate_v2",
    "cuArrayCreate_v2",
    "cuArrayDestroy",
    "cuCtxCreate_v2",
    "cuCtxCreate_v3",
    "cuCtxCreate_v4",
    "cuCtxDestroy",
    "cuCtxDestroy_v2",
    "cuCtxGetCurrent",
    "cuCtxGetDevice",
    "cuCtxGetDevice_v2",
    "cuCtxPopCurrent",
    "cuCtxPopCurrent_v2",
    "cuCtxPushCurrent",
    "cuCtxPushCurrent_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuCtxSynchronize_v2",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetCount",
    "cuDeviceGetDefaultMemPool",
    "cuDeviceGetMemPool",
    "cuDeviceGetName",
    "cuDeviceGetUuid",
    "cuDeviceGetUuid_v2",
    "cuDevicePrimaryCtxGetState",
    "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDeviceSetMemPool",
    "cuDeviceTotalMem_v2",
    "cuEventCreate",
    "cuEventDestroy",
    "cuEventDestroy_v2",
    "cuEventElapsedTime",
    "cuEventElapsedTime_v2",
    "cuEventQuery",
    "cuEventRecord",
    "cuEventRecordWithFlags",
    "cuEventRecordWithFlags_ptsz",
    "cuEventRecord_ptsz",
    "cuEventSynchronize",
    "cuGraphCreate",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuGraphInstantiate",
    "cuGraphInstantiateWithFlags",
    "cuGraphInstantiate_v2",
    "cuGraphLaunch",
    "cuGraphLaunch_ptsz",
    "cuIpcCloseMemHandle",
    "cuIpcGetMemHandle",
    "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel_ptsz",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz",
    "cuLaunchKernel_ptsz",
    "cuMemAddressFree",
    "cuMemAddressReserve",
    "cuMemAllocAsync",
    "cuMemAllocAsync_ptsz",
    "cuMemAllocFromPoolAsync",
    "cuMemAllocFromPoolAsync_ptsz",
    "cuMemAllocHost_v2",
    "cuMemAllocManaged",
    "cuMemAllocPitch_v2",
    "cuMemAlloc_v2",
    "cuMemCreate",
    "cuMemExportToShareableHandle",
    "cuMemFreeAsync",
    "cuMemFreeAsync_ptsz",
    "cuMemFreeHost",
    "cuMemFree_v2",
    "cuMemGetAddressRange_v2",
    "cuMemGetAllocationGranularity",
    "cuMemGetAllocationPropertiesFromHandle",
    "cuMemGetDefaultMemPool",
    "cuMemGetInfo_v2",
    "cuMemGetMemPool",
    "cuMemHostAlloc",
    "cuMemImportFromShareableHandle",
    "cuMemMap",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolGetAttribute",
    "cuMemPoolSetAttribute",
    "cuMemPoolTrimTo",
    "cuMemRelease",
    "cuMemRetainAllocationHandle",
    "cuMemSetAccess",
    "cuMemSetMemPool",
    "cuMemUnmap",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoH_v2_ptds",
    "cuMemcpyHtoD_v2",
    "cuMemcpyHtoD_v2_ptds",
    "cuMemsetD8_v2",
    "cuMemsetD8_v2_ptds",
    "cuMipmappedArrayCreate",
    "cuMipmappedArrayDestroy",
    "cuModuleGetFunction",
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuStreamCreate",
    "cuStreamDestroy",
    "cuStreamDestroy_v2",
    "cuStreamIsCapturing",
    "cuStreamIsCapturing_ptsz",
    "cuStreamQuery",
    "cuStreamQuery_ptsz",
    "cuStreamSynchronize",
    "cuStreamSynchronize_ptsz",
};

using AnyEntryPoint = CUresult (*)(uintptr_t, uintptr_t, uintptr_t, uintptr_t,
                                   uintptr_t, uintptr_t, uintptr_t, uintptr_t);

// Calls an entry point with all-zero arguments (null pointers, zero sizes,
// null handles) whatever its signature; harmless on x86-64 and AArch64,
// where extra integer arguments are ignored.
#if defined(__clang__)
__attribute__((no_sanitize("function")))
#endif
CUresult
CallWithZeros(void* fn) {
  return reinterpret_cast<AnyEntryPoint>(fn)(0, 0, 0, 0, 0, 0, 0, 0);
}

TEST_F(FakeCudaTest, EveryEntryPointChecksInitializationFirst) {
  auto fake = Load();
  for (const char* name : kNeedInit) {
    void* fn = fake->Sym(name);
    ASSERT_NE(fn, nullptr) << name << " is not exported";
    EXPECT_EQ(CallWithZeros(fn), CUDA_ERROR_NOT_INITIALIZED) << name;
  }
  ASSERT_EQ(fake->cuInit(0), CUDA_SUCCESS);
  // After cuInit the same null arguments are refused for what they are.
  EXPECT_EQ(CallWithZeros(fake->Sym("cuMemAlloc_v2")),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(CallWithZeros(fake->Sym("cuDeviceGetCount")),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeCudaTest, DevicesAreConfigurable) {
  auto fake = Load();
  ASSERT_EQ(InitWith(*fake, {{"HF_FAKE_CUDA_DEVICES", "3"},
                             {"HF_FAKE_CUDA_MEMORY_MB", "256"}}),
            CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ(fake->cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 3);
  CUdevice dev = -1;
  EXPECT_EQ(fake->cuDeviceGet(&dev, 2), CUDA_SUCCESS);
  EXPECT_EQ(dev, 2);
  EXPECT_EQ(fake->cuDeviceGet(&dev, 3), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(fake->cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);

  char name[64];
  EXPECT_EQ(fake->cuDeviceGetName(name, sizeof(name), 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "HeteroFlow Fake GPU");
  EXPECT_EQ(fake->cuDeviceGetName(name, sizeof(name), 3),
            CUDA_ERROR_INVALID_DEVICE);
  size_t total = 0;
  EXPECT_EQ(fake->cuDeviceTotalMem_v2(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, 256 * kMiB);

  int value = 0;
  EXPECT_EQ(fake->cuDeviceGetAttribute(
                &value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(value, 9);
  EXPECT_EQ(fake->cuDeviceGetAttribute(
                &value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(value, 0);
  EXPECT_EQ(fake->cuDeviceGetAttribute(
                &value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 2),
            CUDA_SUCCESS);
  EXPECT_EQ(value, 132);
  // An attribute no enumerator names, inside the enum's range (0..255
  // while the largest is below 256; beyond it the value is undefined
  // behaviour, which clang's UBSan reports).
  EXPECT_EQ(fake->cuDeviceGetAttribute(&value,
                                       static_cast<CUdevice_attribute>(255), 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuDeviceGetAttribute(
                &value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 3),
            CUDA_ERROR_INVALID_DEVICE);

  CUuuid a{}, b{}, c{};
  EXPECT_EQ(fake->cuDeviceGetUuid(&a, 1), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuDeviceGetUuid_v2(&b, 1), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuDeviceGetUuid_v2(&c, 2), CUDA_SUCCESS);
  EXPECT_EQ(memcmp(a.bytes, b.bytes, sizeof(a.bytes)), 0);
  EXPECT_NE(memcmp(b.bytes, c.bytes, sizeof(b.bytes)), 0);
}

TEST_F(FakeCudaTest, BadConfigurationFailsCuInitAndNamesTheVariable) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"HF_FAKE_CUDA_DEVICES", "two"},
      {"HF_FAKE_CUDA_DEVICES", "65"},
      {"HF_FAKE_CUDA_MEMORY_MB", "0"},
      {"HF_FAKE_CUDA_MEMORY_MB", "-5"},
      {"HF_FAKE_CUDA_MEMORY_MB", "1GB"},
      {"HF_FAKE_CUDA_CONTEXT_MB", ""},
      {"HF_FAKE_CUDA_KERNEL_US", "1e3"},
      {"HF_FAKE_CUDA_KERNEL_US", "99999999999999999999999"},
  };
  auto fake = Load();
  for (const auto& [var, value] : bad) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(InitWith(*fake, {{var, value}}), CUDA_ERROR_INVALID_VALUE)
        << var << "=" << value;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(var), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    int count = 0;
    EXPECT_EQ(fake->cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  }
  // No devices is a valid configuration, with the real driver's answer.
  EXPECT_EQ(InitWith(*fake, {{"HF_FAKE_CUDA_DEVICES", "0"}}),
            CUDA_ERROR_NO_DEVICE);
  // A later cuInit reads the environment again.
  EXPECT_EQ(InitWith(*fake, {{"HF_FAKE_CUDA_MEMORY_MB", "32"}}), CUDA_SUCCESS);
  size_t total = 0;
  EXPECT_EQ(fake->cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, 32 * kMiB);
}

// ---- Contexts ----

TEST_F(FakeCudaTest, AllocationsNeedACurrentContext) {
  auto fake = Load();
  ASSERT_EQ(fake->cuInit(0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  size_t pitch = 0, free = 0, total = 0;
  void* host = nullptr;
  CUarray array = nullptr;
  CUDA_ARRAY_DESCRIPTOR desc{64, 64, CU_AD_FORMAT_FLOAT, 1};
  EXPECT_EQ(fake->cuMemAlloc_v2(&p, kMiB), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuMemAllocPitch_v2(&p, &pitch, 100, 100, 4),
            CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuMemAllocManaged(&p, kMiB, CU_MEM_ATTACH_GLOBAL),
            CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuMemAllocHost_v2(&host, kMiB), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuMemAllocAsync(&p, kMiB, nullptr),
            CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuArrayCreate_v2(&array, &desc), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuMemGetInfo_v2(&free, &total), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext current = reinterpret_cast<CUcontext>(1);
  EXPECT_EQ(fake->cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);
  CUdevice dev = -1;
  EXPECT_EQ(fake->cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  // VMM and pools are not tied to a context.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(fake->cuMemCreate(&handle, kGran, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemRelease(handle), CUDA_SUCCESS);

  CUcontext ctx = fake->NewContext();
  EXPECT_EQ(fake->cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx);
  EXPECT_EQ(fake->cuMemAlloc_v2(&p, kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, ContextStackFollowsTheDriverRules) {
  auto fake = Load();
  ASSERT_EQ(InitWith(*fake, {{"HF_FAKE_CUDA_DEVICES", "2"}}), CUDA_SUCCESS);
  CUcontext a = nullptr, b = nullptr, popped = nullptr, current = nullptr;
  ASSERT_EQ(fake->cuCtxCreate_v2(&a, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuCtxCreate_v4(&b, nullptr, 0, 1), CUDA_SUCCESS);
  CUdevice dev = -1;
  EXPECT_EQ(fake->cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(fake->cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, b);
  EXPECT_EQ(fake->cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, a);
  EXPECT_EQ(fake->cuCtxPushCurrent_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuCtxSetCurrent(a), CUDA_SUCCESS);  // replaces the top
  EXPECT_EQ(fake->cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, a);
  EXPECT_EQ(fake->cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, a);
  EXPECT_EQ(fake->cuCtxPopCurrent_v2(&popped), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuCtxCreate_v4(&b, nullptr, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(fake->cuCtxCreate_v4(&b, nullptr, 0x100, 0),
            CUDA_ERROR_INVALID_VALUE);

  // Destroying the current context pops it; another thread that still has
  // it current gets CONTEXT_IS_DESTROYED.
  EXPECT_EQ(fake->cuCtxPushCurrent_v2(a), CUDA_SUCCESS);
  std::atomic<int> stage{0};
  CUresult other_before = CUDA_SUCCESS, other_after = CUDA_SUCCESS;
  std::thread other([&] {
    CUdeviceptr p = 0;
    other_before = fake->cuMemAlloc_v2(&p, kMiB);  // nothing current yet
    fake->cuCtxSetCurrent(a);
    stage = 1;
    while (stage != 2) std::this_thread::yield();
    other_after = fake->cuMemAlloc_v2(&p, kMiB);
  });
  while (stage != 1) std::this_thread::yield();
  EXPECT_EQ(fake->cuCtxDestroy_v2(a), CUDA_SUCCESS);
  stage = 2;
  other.join();
  EXPECT_EQ(other_before, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(other_after, CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(fake->cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);
  EXPECT_EQ(fake->cuCtxDestroy_v2(a), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuCtxSetCurrent(a), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuCtxDestroy_v2(nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeCudaTest, PrimaryContextIsRetainedAndReset) {
  auto fake = Load();
  ASSERT_EQ(InitWith(*fake, {{"HF_FAKE_CUDA_MEMORY_MB", "64"}}), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext p1 = nullptr, p2 = nullptr;
  ASSERT_EQ(fake->cuDevicePrimaryCtxRetain(&p1, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuDevicePrimaryCtxRetain(&p2, 0), CUDA_SUCCESS);
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(fake->cuDevicePrimaryCtxRetain(&p2, 1), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(fake->cuCtxSetCurrent(p1), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(fake->cuMemAlloc_v2(&p, 8 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuCtxDestroy_v2(p1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(fake->cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 8 * kMiB);
  // The last release resets it: its memory goes, the handle stays.
  EXPECT_EQ(fake->cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 0u);
  EXPECT_EQ(fake->cuMemAlloc_v2(&p, kMiB), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  ASSERT_EQ(fake->cuDevicePrimaryCtxRetain(&p2, 0), CUDA_SUCCESS);
  EXPECT_EQ(p2, p1);
  EXPECT_EQ(fake->cuMemAlloc_v2(&p, kMiB), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, ContextsTakeTheConfiguredMemory) {
  auto fake = Load();
  ASSERT_EQ(InitWith(*fake, {{"HF_FAKE_CUDA_MEMORY_MB", "1024"},
                             {"HF_FAKE_CUDA_CONTEXT_MB", "300"}}),
            CUDA_SUCCESS);
  CUcontext primary = nullptr, again = nullptr, mine = nullptr;
  ASSERT_EQ(fake->cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuCtxSetCurrent(primary), CUDA_SUCCESS);
  EXPECT_EQ(fake->Free(), 724 * kMiB);  // the primary context counts once
  mine = fake->NewContext();
  EXPECT_EQ(fake->Free(), 424 * kMiB);
  CUcontext third = nullptr, fourth = nullptr;
  ASSERT_EQ(fake->cuCtxCreate_v4(&third, nullptr, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(fake->Free(), 124 * kMiB);
  EXPECT_EQ(fake->cuCtxCreate_v4(&fourth, nullptr, 0, 0),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(fake->cuCtxDestroy_v2(third), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuCtxDestroy_v2(mine), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuCtxSetCurrent(primary), CUDA_SUCCESS);
  EXPECT_EQ(fake->Free(), 724 * kMiB);
  EXPECT_EQ(fake->cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 300 * kMiB);
  EXPECT_EQ(fake->cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 0u);
}

TEST_F(FakeCudaTest, DestroyingAContextFreesWhatItOwns) {
  auto fake = Load();
  ASSERT_EQ(fake->cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = fake->NewContext();
  CUdeviceptr a = 0, b = 0, async = 0;
  size_t pitch = 0;
  CUarray array = nullptr;
  CUDA_ARRAY_DESCRIPTOR desc{256, 256, CU_AD_FORMAT_FLOAT, 4};
  ASSERT_EQ(fake->cuMemAlloc_v2(&a, 3 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemAllocPitch_v2(&b, &pitch, 1000, 100, 4), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuArrayCreate_v2(&array, &desc), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemAllocAsync(&async, 2 * kMiB, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  // Stream-ordered allocations belong to their pool, not the context.
  EXPECT_EQ(fake->Used(), 2 * kMiB);
  EXPECT_EQ(fake->cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuArrayDestroy(array), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuMemFree_v2(async), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 0u);
}

// ---- Device memory ----

TEST_F(FakeCudaTest, OutOfMemoryExactlyAtTheDeviceSize) {
  auto fake = Start({{"HF_FAKE_CUDA_MEMORY_MB", "64"}});
  std::vector<CUdeviceptr> ptrs;
  for (int i = 0; i < 64; ++i) {
    CUdeviceptr p = 0;
    ASSERT_EQ(fake->cuMemAlloc_v2(&p, kMiB), CUDA_SUCCESS) << i;
    ptrs.push_back(p);
  }
  CUdeviceptr p = 0;
  EXPECT_EQ(fake->cuMemAlloc_v2(&p, kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(fake->cuMemAlloc_v2(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
  size_t free = 1, total = 0;
  EXPECT_EQ(fake->cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, 0u);
  EXPECT_EQ(total, 64 * kMiB);
  // Freeing returns the memory.
  EXPECT_EQ(fake->cuMemFree_v2(ptrs.back()), CUDA_SUCCESS);
  ptrs.pop_back();
  EXPECT_EQ(fake->Free(), kMiB);
  ASSERT_EQ(fake->cuMemAlloc_v2(&p, kMiB), CUDA_SUCCESS);
  ptrs.push_back(p);
  for (CUdeviceptr q : ptrs) EXPECT_EQ(fake->cuMemFree_v2(q), CUDA_SUCCESS);
  EXPECT_EQ(fake->Free(), 64 * kMiB);
  EXPECT_EQ(fake->Used(), 0u);
  // One allocation of the whole device fits; one byte more does not.
  EXPECT_EQ(fake->cuMemAlloc_v2(&p, 64 * kMiB + 1), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(fake->cuMemAlloc_v2(&p, 64 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, FreeingFollowsTheDriverRules) {
  auto fake = Start();
  CUdeviceptr p = 0;
  EXPECT_EQ(fake->cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemAlloc_v2(nullptr, kMiB), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemFree_v2(0), CUDA_SUCCESS);  // like free(NULL)
  ASSERT_EQ(fake->cuMemAlloc_v2(&p, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemFree_v2(p + 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemFree_v2(0x1234), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->Used(), 4 * kMiB);
  EXPECT_EQ(fake->cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->Used(), 0u);
  void* host = nullptr;
  EXPECT_EQ(fake->cuMemFreeHost(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemAllocHost_v2(&host, kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemFree_v2(reinterpret_cast<CUdeviceptr>(host)),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemFreeHost(host), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeCudaTest, MemoryHoldsDataAndKnowsItsRanges) {
  auto fake = Start();
  CUdeviceptr p = 0;
  ASSERT_EQ(fake->cuMemAlloc_v2(&p, 8192), CUDA_SUCCESS);
  std::vector<unsigned char> in(8192), out(8192);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7);
  ASSERT_EQ(fake->cuMemcpyHtoD_v2(p, in.data(), in.size()), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemsetD8_v2(p + 100, 0xAB, 10), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemcpyDtoH_v2(out.data(), p, out.size()), CUDA_SUCCESS);
  for (size_t i = 0; i < 10; ++i) in[100 + i] = 0xAB;
  EXPECT_EQ(in, out);
  EXPECT_EQ(fake->cuMemcpyHtoD_v2(p + 1, in.data(), in.size()),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemcpyDtoH_v2(out.data(), 0x1000, 16),
            CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(fake->cuMemGetAddressRange_v2(&base, &size, p + 4000),
            CUDA_SUCCESS);
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 8192u);
  EXPECT_EQ(fake->cuMemGetAddressRange_v2(&base, &size, p + 8192),
            CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(fake->cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, ClassicAllocationPathsChargeWhatTheyAllocate) {
  auto fake = Start();
  CUdeviceptr p = 0;
  size_t pitch = 0;
  // Pitch: rows rounded up to 512 bytes.
  ASSERT_EQ(fake->cuMemAllocPitch_v2(&p, &pitch, 1000, 300, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(fake->Used(), 1024u * 300);
  EXPECT_EQ(fake->cuMemFree_v2(p), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemAllocPitch_v2(&p, &pitch, 512, 2, 16), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 512u);
  EXPECT_EQ(fake->cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemAllocPitch_v2(&p, &pitch, 1000, 300, 3),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemAllocPitch_v2(&p, &pitch, 0, 300, 4),
            CUDA_ERROR_INVALID_VALUE);
  // Managed memory is charged to the device in full.
  ASSERT_EQ(fake->cuMemAllocManaged(&p, 5 * kMiB, CU_MEM_ATTACH_GLOBAL),
            CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 5 * kMiB);
  EXPECT_EQ(fake->cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemAllocManaged(&p, kMiB, 0), CUDA_ERROR_INVALID_VALUE);
  // Pinned host memory is not device memory.
  void* host = nullptr;
  void* host2 = nullptr;
  ASSERT_EQ(fake->cuMemAllocHost_v2(&host, 64 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemHostAlloc(&host2, 8 * kMiB, CU_MEMHOSTALLOC_PORTABLE),
            CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 0u);
  memset(host2, 1, 4096);
  EXPECT_EQ(fake->cuMemHostAlloc(&host2, kMiB, 0x80), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemFreeHost(host), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemFreeHost(host2), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, StreamOrderedAllocationsAndPools) {
  auto fake =
      Start({{"HF_FAKE_CUDA_DEVICES", "2"}, {"HF_FAKE_CUDA_MEMORY_MB", "64"}});
  CUmemoryPool def = nullptr, current = nullptr;
  ASSERT_EQ(fake->cuDeviceGetDefaultMemPool(&def, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuDeviceGetMemPool(&current, 0), CUDA_SUCCESS);
  EXPECT_EQ(def, current);
  CUstream stream = nullptr;
  ASSERT_EQ(fake->cuStreamCreate(&stream, 0), CUDA_SUCCESS);

  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_EQ(fake->cuMemAllocAsync(&a, 4 * kMiB, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemAllocAsync_ptsz(&b, 2 * kMiB, stream), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 6 * kMiB);
  cuuint64_t used = 0, reserved = 0;
  EXPECT_EQ(
      fake->cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
      CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemPoolGetAttribute(
                def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved),
            CUDA_SUCCESS);
  EXPECT_EQ(used, 6 * kMiB);
  EXPECT_EQ(reserved, 6 * kMiB);
  // Frees take effect at once (no caching in the pool).
  EXPECT_EQ(fake->cuMemFreeAsync(a, stream), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemFreeAsync_ptsz(b, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemFreeAsync(b, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->Used(), 0u);
  EXPECT_EQ(
      fake->cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &used),
      CUDA_SUCCESS);
  EXPECT_EQ(used, 6 * kMiB);
  EXPECT_EQ(fake->cuMemPoolTrimTo(def, 0), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemAllocAsync(&a, 65 * kMiB, nullptr),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(fake->cuMemAllocAsync(&a, 0, nullptr), CUDA_ERROR_INVALID_VALUE);

  // An explicit pool on device 1, with a size limit.
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  props.maxSize = 8 * kMiB;
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(fake->cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemAllocFromPoolAsync(&c, 6 * kMiB, pool, stream),
            CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(0), 0u);
  EXPECT_EQ(fake->Used(1), 6 * kMiB);
  EXPECT_EQ(fake->cuMemAllocFromPoolAsync_ptsz(&a, 4 * kMiB, pool, nullptr),
            CUDA_ERROR_OUT_OF_MEMORY);  // past maxSize
  // The pool can be destroyed with allocations out; they keep their memory.
  EXPECT_EQ(fake->cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemAllocFromPoolAsync(&a, kMiB, pool, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->Used(1), 6 * kMiB);
  EXPECT_EQ(fake->cuMemFree_v2(c), CUDA_SUCCESS);  // cuMemFree works too
  EXPECT_EQ(fake->Used(1), 0u);
  EXPECT_EQ(fake->cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);

  // A pool in host memory charges no device.
  props.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  props.maxSize = 0;
  ASSERT_EQ(fake->cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemAllocFromPoolAsync(&c, 32 * kMiB, pool, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(0) + fake->Used(1), 0u);
  EXPECT_EQ(fake->cuMemFreeAsync(c, nullptr), CUDA_SUCCESS);
  props.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0};
  EXPECT_EQ(fake->cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);

  // The current pool of a device is what cuMemAllocAsync uses.
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  props.maxSize = 2 * kMiB;
  ASSERT_EQ(fake->cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuDeviceSetMemPool(0, pool), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemAllocAsync(&a, 3 * kMiB, nullptr),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(fake->cuMemPoolDestroy(pool), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuDeviceGetMemPool(&current, 0), CUDA_SUCCESS);
  EXPECT_EQ(current, def);
  EXPECT_EQ(fake->cuStreamDestroy_v2(stream), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemAllocAsync(&a, kMiB, stream), CUDA_ERROR_INVALID_HANDLE);
}

CUmemAllocationProp VmmProp(CUmemLocationType type, int id,
                            bool exportable = false) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {type, id};
  if (exportable) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  }
  return prop;
}

TEST_F(FakeCudaTest, VirtualMemoryChargesDeviceLocationsOnly) {
  auto fake = Start({{"HF_FAKE_CUDA_MEMORY_MB", "64"}});
  size_t gran = 0;
  CUmemAllocationProp dev_prop = VmmProp(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_EQ(fake->cuMemGetAllocationGranularity(
                &gran, &dev_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(gran, kGran);

  CUmemGenericAllocationHandle dev = 0, host = 0, numa = 0, bad = 0;
  EXPECT_EQ(fake->cuMemCreate(&bad, kGran + 4096, &dev_prop, 0),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(fake->cuMemCreate(&dev, 3 * kGran, &dev_prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 3 * kGran);
  const CUmemAllocationProp host_prop = VmmProp(CU_MEM_LOCATION_TYPE_HOST, 0);
  const CUmemAllocationProp numa_prop =
      VmmProp(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
  ASSERT_EQ(fake->cuMemCreate(&host, 4 * kGran, &host_prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemCreate(&numa, 4 * kGran, &numa_prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 3 * kGran);
  // As documented for cuMemCreate: HOST_NUMA_CURRENT is refused, and HOST
  // memory cannot be exportable.
  const CUmemAllocationProp current_prop =
      VmmProp(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0);
  EXPECT_EQ(fake->cuMemCreate(&bad, kGran, &current_prop, 0),
            CUDA_ERROR_INVALID_VALUE);
  const CUmemAllocationProp host_export =
      VmmProp(CU_MEM_LOCATION_TYPE_HOST, 0, true);
  EXPECT_EQ(fake->cuMemCreate(&bad, kGran, &host_export, 0),
            CUDA_ERROR_INVALID_VALUE);
  const CUmemAllocationProp dev_7 = VmmProp(CU_MEM_LOCATION_TYPE_DEVICE, 7);
  EXPECT_EQ(fake->cuMemCreate(&bad, kGran, &dev_7, 0),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(fake->cuMemCreate(&bad, 40 * kGran, &dev_prop, 0),
            CUDA_ERROR_OUT_OF_MEMORY);

  // Map, use, unmap.
  CUdeviceptr va = 0;
  ASSERT_EQ(fake->cuMemAddressReserve(&va, 8 * kGran, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(va % kGran, 0u);
  ASSERT_EQ(fake->cuMemMap(va, 3 * kGran, 0, dev, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemMap(va + 3 * kGran, 4 * kGran, 0, host, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemMap(va, kGran, 0, dev, 0), CUDA_ERROR_INVALID_VALUE);
  CUmemAccessDesc access{};
  access.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_EQ(fake->cuMemSetAccess(va, 7 * kGran, &access, 1), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemSetAccess(va, 8 * kGran, &access, 1),
            CUDA_ERROR_INVALID_VALUE);  // the last granule is not mapped
  const char msg[] = "across two mappings";
  const CUdeviceptr edge = va + 3 * kGran - 5;
  ASSERT_EQ(fake->cuMemcpyHtoD_v2(edge, msg, sizeof(msg)), CUDA_SUCCESS);
  char back[sizeof(msg)] = {};
  ASSERT_EQ(fake->cuMemcpyDtoH_v2(back, edge, sizeof(msg)), CUDA_SUCCESS);
  EXPECT_STREQ(back, msg);
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(fake->cuMemGetAddressRange_v2(&base, &size, va + kGran),
            CUDA_SUCCESS);
  EXPECT_EQ(base, va);
  EXPECT_EQ(size, 3 * kGran);

  // Releasing the handle keeps the memory while it is mapped.
  EXPECT_EQ(fake->cuMemRelease(dev), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 3 * kGran);
  CUmemGenericAllocationHandle retained = 0;
  ASSERT_EQ(fake->cuMemRetainAllocationHandle(
                &retained, reinterpret_cast<void*>(va + kGran)),
            CUDA_SUCCESS);
  EXPECT_EQ(retained, dev);
  EXPECT_EQ(fake->cuMemRelease(retained), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemAddressFree(va, 8 * kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemUnmap(va, kGran), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(fake->cuMemUnmap(va, 7 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 0u);
  EXPECT_EQ(fake->cuMemRelease(dev), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemAddressFree(va, 4 * kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemAddressFree(va, 8 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemRelease(host), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemRelease(numa), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, ImportingAnExportedHandleSharesTheAllocation) {
  auto fake = Start({{"HF_FAKE_CUDA_MEMORY_MB", "64"}});
  const CUmemAllocationProp prop =
      VmmProp(CU_MEM_LOCATION_TYPE_DEVICE, 0, true);
  CUmemGenericAllocationHandle mine = 0, imported = 0, plain = 0;
  ASSERT_EQ(fake->cuMemCreate(&mine, 2 * kGran, &prop, 0), CUDA_SUCCESS);
  int fd = -1;
  ASSERT_EQ(fake->cuMemExportToShareableHandle(
                &fd, mine, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fake->cuMemImportFromShareableHandle(
                &imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_SUCCESS);
  close(fd);
  EXPECT_EQ(fake->Used(), 2 * kGran);  // no new memory

  // Both handles reach the same bytes.
  CUdeviceptr va = 0;
  ASSERT_EQ(fake->cuMemAddressReserve(&va, 4 * kGran, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemMap(va, 2 * kGran, 0, mine, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemMap(va + 2 * kGran, 2 * kGran, 0, imported, 0),
            CUDA_SUCCESS);
  ASSERT_EQ(fake->cuMemsetD8_v2(va + 10, 0x5A, 1), CUDA_SUCCESS);
  unsigned char byte = 0;
  ASSERT_EQ(fake->cuMemcpyDtoH_v2(&byte, va + 2 * kGran + 10, 1), CUDA_SUCCESS);
  EXPECT_EQ(byte, 0x5A);
  ASSERT_EQ(fake->cuMemUnmap(va, 4 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemAddressFree(va, 4 * kGran), CUDA_SUCCESS);

  // The memory goes with the last handle.
  EXPECT_EQ(fake->cuMemRelease(mine), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 2 * kGran);
  EXPECT_EQ(fake->cuMemRelease(imported), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 0u);

  // Only handles created exportable can be exported.
  const CUmemAllocationProp local = VmmProp(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  ASSERT_EQ(fake->cuMemCreate(&plain, kGran, &local, 0), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemExportToShareableHandle(
                &fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMemExportToShareableHandle(&fd, plain,
                                               CU_MEM_HANDLE_TYPE_FABRIC, 0),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(fake->cuMemRelease(plain), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMemImportFromShareableHandle(
                &imported, reinterpret_cast<void*>(intptr_t{0}),
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_ERROR_INVALID_VALUE);  // stdin is no fake allocation
}

TEST_F(FakeCudaTest, ArraysChargeTheirComputedSize) {
  auto fake = Start();
  using hf::hook::ArrayBytes;
  using hf::hook::MipmappedArrayBytes;
  CUarray a2 = nullptr, a3 = nullptr, sparse = nullptr, bad = nullptr;
  CUmipmappedArray mip = nullptr;
  const CUDA_ARRAY_DESCRIPTOR d2{1024, 512, CU_AD_FORMAT_FLOAT, 4};
  ASSERT_EQ(fake->cuArrayCreate_v2(&a2, &d2), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 1024u * 512 * 16);
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = 256;
  d3.Height = 256;
  d3.Depth = 16;
  d3.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  d3.NumChannels = 2;
  ASSERT_EQ(fake->cuArray3DCreate_v2(&a3, &d3), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 1024u * 512 * 16 + 256 * 256 * 16 * 2);
  CUDA_ARRAY3D_DESCRIPTOR dm{};
  dm.Width = 512;
  dm.Height = 512;
  dm.Format = CU_AD_FORMAT_HALF;
  dm.NumChannels = 1;
  ASSERT_EQ(fake->cuMipmappedArrayCreate(&mip, &dm, 4), CUDA_SUCCESS);
  const uint64_t mip_bytes = 2u * (512 * 512 + 256 * 256 + 128 * 128 + 64 * 64);
  EXPECT_EQ(MipmappedArrayBytes(512, 512, 0, CU_AD_FORMAT_HALF, 1, 4),
            mip_bytes);
  EXPECT_EQ(fake->Used(),
            ArrayBytes(1024, 512, 0, CU_AD_FORMAT_FLOAT, 4) +
                ArrayBytes(256, 256, 16, CU_AD_FORMAT_UNSIGNED_INT8, 2) +
                mip_bytes);
  // Sparse arrays take their memory later, from mapped handles.
  CUDA_ARRAY3D_DESCRIPTOR ds = d3;
  ds.Flags = CUDA_ARRAY3D_SPARSE;
  const uint64_t before = fake->Used();
  ASSERT_EQ(fake->cuArray3DCreate_v2(&sparse, &ds), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), before);
  // Invalid descriptors.
  const CUDA_ARRAY_DESCRIPTOR zero_width{0, 16, CU_AD_FORMAT_FLOAT, 1};
  const CUDA_ARRAY_DESCRIPTOR bad_format{16, 16,
                                         static_cast<CUarray_format>(0x77), 1};
  const CUDA_ARRAY_DESCRIPTOR bad_channels{16, 16, CU_AD_FORMAT_FLOAT, 3};
  EXPECT_EQ(fake->cuArrayCreate_v2(&bad, &zero_width),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuArrayCreate_v2(&bad, &bad_format),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuArrayCreate_v2(&bad, &bad_channels),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMipmappedArrayCreate(&mip, &dm, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuMipmappedArrayCreate(&mip, &dm, 11),
            CUDA_ERROR_INVALID_VALUE);  // 512 has 10 levels
  // A too-large array is out of memory.
  const CUDA_ARRAY_DESCRIPTOR huge{65536, 65536, CU_AD_FORMAT_FLOAT, 4};
  EXPECT_EQ(fake->cuArrayCreate_v2(&bad, &huge), CUDA_ERROR_OUT_OF_MEMORY);
  // Destroying returns the memory.
  EXPECT_EQ(fake->cuArrayDestroy(a2), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuArrayDestroy(a3), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuArrayDestroy(sparse), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuMipmappedArrayDestroy(mip), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), 0u);
  EXPECT_EQ(fake->cuArrayDestroy(a2), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuMipmappedArrayDestroy(mip), CUDA_ERROR_INVALID_HANDLE);
}

TEST(CudaSizesTest, ArrayBytesFollowsTheFormats) {
  using hf::hook::ArrayBytes;
  using hf::hook::MipmappedArrayBytes;
  EXPECT_EQ(ArrayBytes(100, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1), 100u);
  EXPECT_EQ(ArrayBytes(100, 10, 0, CU_AD_FORMAT_SIGNED_INT16, 2), 4000u);
  EXPECT_EQ(ArrayBytes(8, 8, 8, CU_AD_FORMAT_FLOAT, 4), 8u * 8 * 8 * 16);
  EXPECT_EQ(ArrayBytes(8, 8, 0, CU_AD_FORMAT_UNORM_INT16X4, 1), 8u * 8 * 8);
  EXPECT_EQ(ArrayBytes(8, 8, 0, CU_AD_FORMAT_BC1_UNORM, 4), 4u * 8);
  EXPECT_EQ(ArrayBytes(9, 9, 0, CU_AD_FORMAT_BC7_UNORM, 4), 9u * 16);
  EXPECT_EQ(ArrayBytes(1920, 1080, 0, CU_AD_FORMAT_NV12, 3),
            1920u * 1080 * 3 / 2);
  EXPECT_EQ(ArrayBytes(1920, 1080, 0, CU_AD_FORMAT_P016, 3), 1920u * 1080 * 3);
  EXPECT_EQ(ArrayBytes(0, 8, 0, CU_AD_FORMAT_FLOAT, 1), 0u);
  EXPECT_EQ(ArrayBytes(8, 8, 0, CU_AD_FORMAT_FLOAT, 3), 0u);
  EXPECT_EQ(ArrayBytes(8, 8, 0, static_cast<CUarray_format>(0x77), 1), 0u);
  EXPECT_EQ(
      ArrayBytes(1ULL << 40, 1ULL << 40, 1ULL << 40, CU_AD_FORMAT_FLOAT, 4),
      UINT64_MAX);
  // Layered: the depth (layers) does not shrink.
  EXPECT_EQ(MipmappedArrayBytes(4, 4, 3, CU_AD_FORMAT_UNSIGNED_INT8, 1, 3,
                                CUDA_ARRAY3D_LAYERED),
            3u * (16 + 4 + 1));
  EXPECT_EQ(MipmappedArrayBytes(4, 4, 4, CU_AD_FORMAT_UNSIGNED_INT8, 1, 3),
            64u + 8 + 1);
  EXPECT_EQ(MipmappedArrayBytes(4, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 4),
            0u);  // 4 has 3 levels
  static_assert(ArrayBytes(2, 2, 0, CU_AD_FORMAT_HALF, 2) == 16);
  EXPECT_TRUE(hf::hook::ArrayTakesMemory(CUDA_ARRAY3D_LAYERED));
  EXPECT_FALSE(hf::hook::ArrayTakesMemory(CUDA_ARRAY3D_DEFERRED_MAPPING));
}

TEST_F(FakeCudaTest, LegacyIpcIsNotSupported) {
  auto fake = Start();
  CUipcMemHandle handle{};
  EXPECT_EQ(fake->cuIpcGetMemHandle(&handle, 0), CUDA_ERROR_NOT_SUPPORTED);
}

// ---- cuGetProcAddress ----

struct ProcCase {
  const char* base;
  int version;
  cuuint64_t flags;
  const char* variant;  // the symbol it must resolve to
};

TEST_F(FakeCudaTest, GetProcAddressResolvesBaseNamesToTheirVariants) {
  auto fake = Load();  // works before cuInit
  const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const cuuint64_t legacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  const ProcCase cases[] = {
      {"cuInit", 2000, 0, "cuInit"},
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
      {"cuMemAlloc", 13000, pt, "cuMemAlloc_v2"},  // no per-thread variant
      {"cuMemFree", 12000, 0, "cuMemFree_v2"},
      {"cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2"},
      {"cuMemAllocPitch", 12000, 0, "cuMemAllocPitch_v2"},
      {"cuMemAllocHost", 12000, 0, "cuMemAllocHost_v2"},
      {"cuMemAllocManaged", 12000, 0, "cuMemAllocManaged"},
      {"cuDeviceTotalMem", 12000, 0, "cuDeviceTotalMem_v2"},
      {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
      {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
      {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4"},
      {"cuCtxDestroy", 3020, 0, "cuCtxDestroy"},
      {"cuCtxDestroy", 4000, 0, "cuCtxDestroy_v2"},
      {"cuCtxSynchronize", 12080, 0, "cuCtxSynchronize"},
      {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"},
      {"cuDevicePrimaryCtxRelease", 10020, 0, "cuDevicePrimaryCtxRelease"},
      {"cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2"},
      {"cuDeviceGetUuid", 11040, 0, "cuDeviceGetUuid_v2"},
      {"cuStreamDestroy", 13000, pt, "cuStreamDestroy_v2"},
      {"cuStreamSynchronize", 13000, 0, "cuStreamSynchronize"},
      {"cuStreamSynchronize", 13000, pt, "cuStreamSynchronize_ptsz"},
      {"cuStreamSynchronize", 13000, legacy, "cuStreamSynchronize"},
      {"cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"},
      {"cuMemAllocAsync", 11020, pt, "cuMemAllocAsync_ptsz"},
      {"cuMemAllocFromPoolAsync", 12000, pt, "cuMemAllocFromPoolAsync_ptsz"},
      {"cuMemFreeAsync", 12000, 0, "cuMemFreeAsync"},
      {"cuMemFreeAsync", 12000, pt, "cuMemFreeAsync_ptsz"},
      {"cuMemcpyHtoD", 12000, 0, "cuMemcpyHtoD_v2"},
      {"cuMemcpyHtoD", 12000, pt, "cuMemcpyHtoD_v2_ptds"},
      {"cuMemsetD8", 6050, pt, "cuMemsetD8_v2"},  // ptds came with 7.0
      {"cuLaunchKernel", 12000, 0, "cuLaunchKernel"},
      {"cuLaunchKernel", 12000, pt, "cuLaunchKernel_ptsz"},
      {"cuLaunchKernelEx", 12000, pt, "cuLaunchKernelEx_ptsz"},
      {"cuLaunchCooperativeKernel", 12000, pt,
       "cuLaunchCooperativeKernel_ptsz"},
      {"cuGraphLaunch", 12000, 0, "cuGraphLaunch"},
      {"cuGraphLaunch", 12000, pt, "cuGraphLaunch_ptsz"},
      {"cuGraphInstantiate", 12000, 0, "cuGraphInstantiate_v2"},
      {"cuIpcOpenMemHandle", 12000, 0, "cuIpcOpenMemHandle_v2"},
      {"cuMemCreate", 10020, 0, "cuMemCreate"},
      {"cuArrayCreate", 12000, 0, "cuArrayCreate_v2"},
      {"cuArray3DCreate", 12000, 0, "cuArray3DCreate_v2"},
      {"cuEventCreate", 13000, pt, "cuEventCreate"},
      {"cuEventDestroy", 3020, 0, "cuEventDestroy"},
      {"cuEventDestroy", 4000, 0, "cuEventDestroy_v2"},
      {"cuEventRecord", 6050, pt, "cuEventRecord"},
      {"cuEventRecord", 13000, 0, "cuEventRecord"},
      {"cuEventRecord", 13000, pt, "cuEventRecord_ptsz"},
      {"cuEventRecordWithFlags", 11010, 0, "cuEventRecordWithFlags"},
      {"cuEventRecordWithFlags", 11010, pt, "cuEventRecordWithFlags_ptsz"},
      {"cuEventQuery", 13000, pt, "cuEventQuery"},
      {"cuEventSynchronize", 13000, 0, "cuEventSynchronize"},
      {"cuEventElapsedTime", 12000, 0, "cuEventElapsedTime"},
      {"cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2"},
      {"cuStreamIsCapturing", 10000, 0, "cuStreamIsCapturing"},
      {"cuStreamIsCapturing", 13000, pt, "cuStreamIsCapturing_ptsz"},
      {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
  };
  for (const ProcCase& c : cases) {
    SCOPED_TRACE(std::string(c.base) + " @" + std::to_string(c.version) +
                 " flags " + std::to_string(c.flags));
    void* want = fake->Sym(c.variant);
    ASSERT_NE(want, nullptr) << c.variant << " is not exported";
    void* got = nullptr;
    CUdriverProcAddressQueryResult status =
        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(
        fake->cuGetProcAddress_v2(c.base, &got, c.version, c.flags, &status),
        CUDA_SUCCESS);
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    EXPECT_EQ(got, want) << "expected " << c.variant;
    got = nullptr;
    EXPECT_EQ(fake->cuGetProcAddress(c.base, &got, c.version, c.flags),
              CUDA_SUCCESS);
    EXPECT_EQ(got, want) << "expected " << c.variant << " (v1 call)";
  }

  void* got = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(fake->cuGetProcAddress_v2("cuNoSuchThing", &got, 13000, 0, &status),
            CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(got, nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  // A variant name is not a base name.
  EXPECT_EQ(fake->cuGetProcAddress_v2("cuMemAlloc_v2", &got, 13000, 0, &status),
            CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(
      fake->cuGetProcAddress_v2("cuMemAllocAsync", &got, 11010, 0, &status),
      CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(fake->cuGetProcAddress("cuNoSuchThing", &got, 13000, 0),
            CUDA_ERROR_NOT_FOUND);
  // Newer than the driver, or bad arguments.
  EXPECT_EQ(fake->cuGetProcAddress_v2("cuMemAlloc", &got, 13010, 0, &status),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuGetProcAddress_v2("cuMemAlloc", &got, 13000, 4, &status),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuGetProcAddress_v2(nullptr, &got, 13000, 0, &status),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeCudaTest, GetProcAddressIgnoresInterposers) {
  // This executable exports a cuMemAlloc_v2 (see the top of the file); it is
  // what the global symbol scope finds first.
  void* interposer = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  ASSERT_NE(interposer, nullptr);
  auto fake = Start();
  void* own = fake->Sym("cuMemAlloc_v2");
  ASSERT_NE(own, interposer);
  void* got = nullptr;
  ASSERT_EQ(fake->cuGetProcAddress_v2("cuMemAlloc", &got, 13000, 0, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(got, own);
  EXPECT_NE(got, interposer);
  auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(got);
  CUdeviceptr p = 0;
  EXPECT_EQ(alloc(&p, kMiB), CUDA_SUCCESS);
  EXPECT_EQ(fake->Used(), kMiB);
  EXPECT_EQ(fake->cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(FakeCudaTest, OnlyDriverAndTestEntryPointsAreExported) {
  auto fake = Load();
  EXPECT_NE(fake->Sym("cuMemAlloc_v2"), nullptr);
  EXPECT_NE(fake->Sym("hfFakeCudaBusyNs"), nullptr);
  // Internal helpers (hf::fake_cuda::S(), CurrentContext) stay hidden.
  EXPECT_EQ(fake->Sym("_ZN2hf9fake_cuda1SEv"), nullptr);
  EXPECT_EQ(fake->Sym("_ZN2hf9fake_cuda14CurrentContextEPP8CUctx_st"), nullptr);
}

// ---- Launches ----

TEST_F(FakeCudaTest, LaunchesQueueGpuTimeAndSynchronizeWaitsForIt) {
  auto fake = Start({{"HF_FAKE_CUDA_KERNEL_US", "20000"}});
  static const char kImage[] = "not really a cubin";
  CUmodule mod = nullptr;
  CUfunction fn = nullptr, same = nullptr;
  ASSERT_EQ(fake->cuModuleLoadData(&mod, kImage), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuModuleGetFunction(&fn, mod, "kernel"), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuModuleGetFunction(&same, mod, "kernel"), CUDA_SUCCESS);
  EXPECT_NE(fn, nullptr);
  EXPECT_EQ(fn, same);
  EXPECT_EQ(fake->cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,
                                 nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuLaunchKernel(fn, 1, 1, 1, 2048, 1, 1, 0, nullptr, nullptr,
                                 nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(
      fake->cuLaunchKernel(fn, 0, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
      CUDA_ERROR_INVALID_VALUE);
  CUgraphExec no_exec = nullptr;
  EXPECT_EQ(fake->cuGraphLaunch(no_exec, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->hfFakeCudaLaunchCount(), 0u);

  CUstream stream = nullptr;
  ASSERT_EQ(fake->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING),
            CUDA_SUCCESS);
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_EQ(fake->cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;

  // Six launches, one per path: they return at once (asynchronous) and
  // queue 6 x 20 ms on the device's timeline.
  const auto start = Clock::now();
  ASSERT_EQ(fake->cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, nullptr, nullptr,
                                 nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(fake->cuLaunchKernel_ptsz(fn, 4, 1, 1, 256, 1, 1, 0, stream,
                                      nullptr, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(fake->cuLaunchKernelEx(&config, fn, nullptr, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(fake->cuLaunchCooperativeKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream,
                                            nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(fake->cuGraphLaunch(exec, stream), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuGraphLaunch_ptsz(exec, nullptr), CUDA_SUCCESS);
  const auto queued = Clock::now();
  EXPECT_LT(queued - start, std::chrono::milliseconds(60));
  EXPECT_EQ(fake->hfFakeCudaLaunchCount(), 6u);
  if (Clock::now() - start < std::chrono::milliseconds(100)) {
    EXPECT_LT(fake->hfFakeCudaBusyNs(0), 120'000'000u);  // still running
  }

  ASSERT_EQ(fake->cuStreamSynchronize(stream), CUDA_SUCCESS);
  const auto synced = Clock::now();
  EXPECT_GE(synced - start, std::chrono::milliseconds(119));
  EXPECT_EQ(fake->hfFakeCudaBusyNs(0), 120'000'000u);
  EXPECT_EQ(fake->hfFakeCudaBusyNs(1), 0u);  // no such device

  // Launches queue behind each other; an idle device starts from now.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const auto again = Clock::now();
  ASSERT_EQ(
      fake->cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr),
      CUDA_SUCCESS);
  ASSERT_EQ(fake->cuCtxSynchronize(), CUDA_SUCCESS);
  const auto done = Clock::now();
  EXPECT_GE(done - again, std::chrono::milliseconds(19));
  EXPECT_LT(done - again, std::chrono::milliseconds(200));
  EXPECT_EQ(fake->hfFakeCudaBusyNs(0), 140'000'000u);
  EXPECT_EQ(fake->hfFakeCudaLaunchCount(), 7u);

  // An unloaded module's functions cannot be launched.
  ASSERT_EQ(fake->cuModuleUnload(mod), CUDA_SUCCESS);
  EXPECT_EQ(
      fake->cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
      CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuGraphLaunch(exec, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuStreamDestroy_v2(stream), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuStreamSynchronize(stream), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(FakeCudaTest, EachDeviceHasItsOwnTimeline) {
  auto fake = Start(
      {{"HF_FAKE_CUDA_DEVICES", "2"}, {"HF_FAKE_CUDA_KERNEL_US", "1000"}});
  CUmodule mod0 = nullptr, mod1 = nullptr;
  CUfunction f0 = nullptr, f1 = nullptr;
  ASSERT_EQ(fake->cuModuleLoadData(&mod0, "x"), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuModuleGetFunction(&f0, mod0, "k"), CUDA_SUCCESS);
  CUcontext ctx1 = fake->NewContext(1);
  ASSERT_EQ(fake->cuModuleLoadData(&mod1, "x"), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuModuleGetFunction(&f1, mod1, "k"), CUDA_SUCCESS);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(fake->cuLaunchKernel(f1, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,
                                   nullptr),
              CUDA_SUCCESS);
  }
  ASSERT_EQ(fake->cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuCtxDestroy_v2(ctx1), CUDA_SUCCESS);
  ASSERT_EQ(
      fake->cuLaunchKernel(f0, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
      CUDA_SUCCESS);
  ASSERT_EQ(fake->cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(fake->hfFakeCudaBusyNs(0), 1'000'000u);
  EXPECT_EQ(fake->hfFakeCudaBusyNs(1), 3'000'000u);
  EXPECT_EQ(fake->hfFakeCudaLaunchCount(), 4u);
}

// ---- Events ----

// Loads module "x" and returns its kernel "k" in the current context.
CUfunction Kernel(const Fake& fake) {
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  EXPECT_EQ(fake.cuModuleLoadData(&mod, "x"), CUDA_SUCCESS);
  EXPECT_EQ(fake.cuModuleGetFunction(&fn, mod, "k"), CUDA_SUCCESS);
  return fn;
}

CUresult Launch(const Fake& fake, CUfunction fn, CUstream stream = nullptr) {
  return fake.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, nullptr,
                             nullptr);
}

TEST_F(FakeCudaTest, EventsFollowTheDriverRules) {
  auto fake = Start();
  CUcontext primary = nullptr;
  ASSERT_EQ(fake->cuCtxGetCurrent(&primary), CUDA_SUCCESS);
  CUevent ev = nullptr, other = nullptr;
  EXPECT_EQ(fake->cuEventCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuEventCreate(&ev, 0x8), CUDA_ERROR_INVALID_VALUE);
  // CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING.
  EXPECT_EQ(fake->cuEventCreate(&ev, CU_EVENT_INTERPROCESS),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(fake->cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventCreate(&ev, 0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(fake->cuCtxSetCurrent(primary), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventCreate(&ev, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventCreate(&other, 0), CUDA_SUCCESS);
  CUevent untimed = nullptr, ipc = nullptr;
  ASSERT_EQ(fake->cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING),
            CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventCreate(
                &ipc, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING),
            CUDA_SUCCESS);

  // Never recorded: an empty set of work, done, but without a time.
  EXPECT_EQ(fake->cuEventQuery(ev), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventSynchronize(ev), CUDA_SUCCESS);
  float ms = -1;
  EXPECT_EQ(fake->cuEventElapsedTime_v2(&ms, ev, other),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(fake->cuEventRecord(ev, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventElapsedTime_v2(&ms, ev, other),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventElapsedTime(&ms, other, ev),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(fake->cuEventRecord(other, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventElapsedTime_v2(nullptr, ev, other),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuEventElapsedTime_v2(&ms, ev, other), CUDA_SUCCESS);
  EXPECT_GE(ms, 0.0f);
  EXPECT_LT(ms, 50.0f);
  // Without timing data.
  ASSERT_EQ(fake->cuEventRecord(untimed, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventQuery(untimed), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventElapsedTime_v2(&ms, ev, untimed),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventElapsedTime_v2(&ms, untimed, ev),
            CUDA_ERROR_INVALID_HANDLE);

  // Record flags: only the default outside stream capture.
  EXPECT_EQ(fake->cuEventRecordWithFlags(ev, nullptr, CU_EVENT_RECORD_DEFAULT),
            CUDA_SUCCESS);
  EXPECT_EQ(
      fake->cuEventRecordWithFlags_ptsz(ev, nullptr, CU_EVENT_RECORD_EXTERNAL),
      CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuEventRecordWithFlags(ev, nullptr, 0x10),
            CUDA_ERROR_INVALID_VALUE);

  // A stream of another context than the event's.
  CUcontext second = fake->NewContext();
  CUstream theirs = nullptr;
  ASSERT_EQ(fake->cuStreamCreate(&theirs, 0), CUDA_SUCCESS);
  CUevent their_event = nullptr;
  ASSERT_EQ(fake->cuEventCreate(&their_event, 0), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventRecord(ev, nullptr), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(fake->cuCtxPopCurrent_v2(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventRecord(ev, theirs), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventRecord_ptsz(ev, theirs), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventRecord(their_event, theirs), CUDA_SUCCESS);
  // Without a current context there is no default stream to record on.
  ASSERT_EQ(fake->cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventRecord(ev, nullptr), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(fake->cuCtxSetCurrent(primary), CUDA_SUCCESS);
  // Destroying a context destroys its events.
  ASSERT_EQ(fake->cuCtxDestroy_v2(second), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventQuery(their_event), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventRecord(ev, theirs), CUDA_ERROR_INVALID_HANDLE);

  // Null and destroyed events.
  EXPECT_EQ(fake->cuEventRecord(nullptr, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventQuery(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventDestroy_v2(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventDestroy_v2(other), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventDestroy(other), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventQuery(other), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventSynchronize(other), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventRecord(other, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventElapsedTime_v2(&ms, ev, other),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(fake->cuEventDestroy(ev), CUDA_SUCCESS);

  // No stream is ever capturing in the fake.
  CUstream stream = nullptr;
  ASSERT_EQ(fake->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING),
            CUDA_SUCCESS);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  EXPECT_EQ(fake->cuStreamIsCapturing(stream, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  EXPECT_EQ(fake->cuStreamIsCapturing_ptsz(nullptr, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(fake->cuStreamIsCapturing(stream, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake->cuStreamIsCapturing(theirs, &status),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(fake->cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuStreamIsCapturing(nullptr, &status),
            CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(FakeCudaTest, EventsTimeKernelsOnTheTimeline) {
  auto fake = Start({{"HF_FAKE_CUDA_KERNEL_US", "10000"}});
  const CUfunction fn = Kernel(*fake);
  CUstream stream = nullptr;
  ASSERT_EQ(fake->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING),
            CUDA_SUCCESS);
  CUevent start = nullptr, end = nullptr;
  ASSERT_EQ(fake->cuEventCreate(&start, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventCreate(&end, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);

  // 5 launches of 10 ms between the events: 50 ms of the device.
  const auto wall = Clock::now();
  ASSERT_EQ(fake->cuEventRecord_ptsz(start, stream), CUDA_SUCCESS);
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(Launch(*fake, fn, stream), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventRecordWithFlags(end, stream, 0), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventQuery(start), CUDA_SUCCESS);  // nothing before it
  EXPECT_EQ(fake->cuEventQuery(end), CUDA_ERROR_NOT_READY);
  float ms = -1;
  EXPECT_EQ(fake->cuEventElapsedTime_v2(&ms, start, end), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fake->cuEventSynchronize(end), CUDA_SUCCESS);
  EXPECT_GE(Clock::now() - wall, std::chrono::milliseconds(49));
  EXPECT_EQ(fake->cuEventQuery(end), CUDA_SUCCESS);
  // Asked later, the answer is still when the work finished, not now.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ASSERT_EQ(fake->cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 49.9f);
  EXPECT_LT(ms, 56.0f);
  float v1 = -1;
  ASSERT_EQ(fake->cuEventElapsedTime(&v1, start, end), CUDA_SUCCESS);
  EXPECT_EQ(v1, ms);
  ASSERT_EQ(fake->cuEventElapsedTime(&v1, end, start), CUDA_SUCCESS);
  EXPECT_EQ(v1, -ms);

  // Not looked at until long after the work is done: still 50 ms.
  ASSERT_EQ(fake->cuEventRecord(start, stream), CUDA_SUCCESS);
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(Launch(*fake, fn, stream), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventRecord(end, stream), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(90));
  ASSERT_EQ(fake->cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 49.9f);
  EXPECT_LT(ms, 56.0f);

  // Recording again re-captures: on the legacy default stream of the same
  // context, around one launch, with the stream synchronized instead.
  ASSERT_EQ(fake->cuEventRecord(start, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(Launch(*fake, fn), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventRecord(end, CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventQuery(end), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fake->cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventQuery(end), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 9.9f);
  EXPECT_LT(ms, 16.0f);
  // With no work between them, two events are (almost) simultaneous.
  ASSERT_EQ(fake->cuEventRecord(start, stream), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventRecord(end, stream), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventQuery(end), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 0.0f);
  EXPECT_LT(ms, 5.0f);
}

TEST_F(FakeCudaTest, EventsCountTheTimeAnotherProcessHadTheDevice) {
  const std::string gpus = (dir_ / "gpus").string();
  fs::create_directories(gpus);
  const Env env = {{"HF_FAKE_CUDA_GPU_DIR", gpus},
                   {"HF_FAKE_CUDA_KERNEL_US", "10000"}};
  auto neighbour = Load();  // the other process's copy, initialized there
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Another process on the same device: 300 ms of kernels queued, then
    // waited for.
    bool ok = InitWith(*neighbour, env) == CUDA_SUCCESS;
    CUcontext ctx = nullptr;
    ok = ok && neighbour->cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS &&
         neighbour->cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
    const CUfunction fn = ok ? Kernel(*neighbour) : nullptr;
    for (int i = 0; ok && i < 30; ++i) ok = Launch(*neighbour, fn) == 0;
    const char c = ok ? 'y' : 'n';
    ok = write(ready[1], &c, 1) == 1 && ok;
    ok = ok && neighbour->cuCtxSynchronize() == CUDA_SUCCESS;
    _exit(ok ? 0 : 1);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  close(ready[0]);
  close(ready[1]);

  auto fake = Start(env);
  const CUfunction fn = Kernel(*fake);
  CUevent start = nullptr, end = nullptr;
  ASSERT_EQ(fake->cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventCreate(&end, 0), CUDA_SUCCESS);
  // 10 launches of 10 ms, time-sliced against the neighbour's work: about
  // 200 ms of the device go by before they are done.
  ASSERT_EQ(fake->cuEventRecord(start, nullptr), CUDA_SUCCESS);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(Launch(*fake, fn), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventRecord(end, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake->cuEventQuery(end), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fake->cuEventSynchronize(end), CUDA_SUCCESS);
  float ms = -1;
  ASSERT_EQ(fake->cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 180.0f);
  EXPECT_LT(ms, 225.0f);

  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  // The device to itself again: the same launches measure 100 ms.
  ASSERT_EQ(fake->cuEventRecord(start, nullptr), CUDA_SUCCESS);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(Launch(*fake, fn), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventRecord(end, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventSynchronize(end), CUDA_SUCCESS);
  ASSERT_EQ(fake->cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GE(ms, 99.9f);
  EXPECT_LT(ms, 112.0f);
}

// ---- Threads ----

TEST_F(FakeCudaTest, ConcurrentAllocationsAreAccountedExactly) {
  auto fake = Start({{"HF_FAKE_CUDA_MEMORY_MB", "64"}});
  CUcontext primary = nullptr;
  ASSERT_EQ(fake->cuCtxGetCurrent(&primary), CUDA_SUCCESS);
  constexpr int kThreads = 8;
  std::atomic<int> errors{0};
  std::atomic<uint64_t> peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (fake->cuCtxSetCurrent(primary) != CUDA_SUCCESS) ++errors;
      std::vector<CUdeviceptr> held;
      for (int i = 0; i < 300; ++i) {
        CUdeviceptr p = 0;
        const CUresult rc = (i + t) % 3 == 0
                                ? fake->cuMemAllocAsync(&p, kMiB, nullptr)
                                : fake->cuMemAlloc_v2(&p, kMiB);
        if (rc != CUDA_SUCCESS) ++errors;
        held.push_back(p);
        uint64_t used = fake->Used();
        uint64_t seen = peak.load();
        while (used > seen && !peak.compare_exchange_weak(seen, used)) {
        }
        if (held.size() == 4) {
          for (CUdeviceptr q : held) {
            if (fake->cuMemFree_v2(q) != CUDA_SUCCESS) ++errors;
          }
          held.clear();
        }
      }
      for (CUdeviceptr q : held) {
        if (fake->cuMemFree_v2(q) != CUDA_SUCCESS) ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors, 0);
  EXPECT_LE(peak, 32 * kMiB);
  EXPECT_EQ(fake->Used(), 0u);
}

}  // namespace
