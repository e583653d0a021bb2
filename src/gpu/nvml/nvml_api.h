// The part of NVML's C API that HeteroFlow uses, declared here by hand.
//
// No NVML header is installed on build machines and none is vendored: the
// agent opens libnvidia-ml.so.1 with dlopen at run time (NvmlGpuDriver), so
// the build has no NVML dependency. Every type, constant and entry point below
// is declared to match the real ABI byte for byte on LP64 Linux (the layout
// static_asserts at the end hold the sizes we rely on). Each declaration
// cites where it was confirmed:
//
//   [H]  nvml.h of NVML API version 12 (the CUDA 12 "nvml_dev" header,
//        copyright 1993-2023), as mirrored in the XuehaiPan/nvml-dev
//        repository: the typedefs, the #defines and the prototypes, read in
//        the "Device Structs" and "nvmlMultiInstanceGPU" groups.
//   [R]  NVML API Reference Guide, docs.nvidia.com/deploy/nvml-api
//        (R525 and R590 editions): struct reference pages
//        (nvmlMemory_v2_t, nvmlProcessInfo_v2_t), group nvmlConstants.
//   [E]  The nvmlReturn_t enumeration as printed in several bindings and
//        in [H]; NVML_ERROR_RESET_TYPE_NOT_SUPPORTED (30) from the R570-era
//        header.
//
// Only facts (names, values, signatures, layouts) are taken from those
// sources; nothing here is copied text.
//
// The prototypes are declared, never defined, in the driver: NvmlGpuDriver
// resolves them with dlsym and uses `decltype(&nvmlX)` as the pointer type,
// so the signature lives in one place. fake_nvml.cc defines them (with C
// linkage) so the compiler checks the fake against the same declarations.
//
// Thread-safety: declarations only. NVML itself is documented thread-safe
// ([H], file comment: "NVML is thread-safe so it is safe to make
// simultaneous NVML calls from multiple threads").
#pragma once

// [H] `typedef enum nvmlReturn_enum {...} nvmlReturn_t;` values per [E].
enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
  NVML_ERROR_UNKNOWN = 999,
};
using nvmlReturn_t = nvmlReturn_enum;

// [H] Opaque handles: `typedef struct nvmlDevice_st* nvmlDevice_t;` and the
// same shape for GPU and compute instances. The real library never defines
// the structs for its users; fake_nvml.cc defines them for itself.
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlGpuInstance_t = struct nvmlGpuInstance_st*;
using nvmlComputeInstance_t = struct nvmlComputeInstance_st*;

// [H] / [R] group nvmlConstants: buffer sizes guaranteed large enough for
// nvmlDeviceGetUUID and nvmlDeviceGetName (also the profile-name field).
inline constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

// [H] `#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(nvml ##
// data ## _v ## ver ## _t) | (ver << 24U))`.
constexpr unsigned int NvmlStructVersion(unsigned long size, unsigned int ver) {
  return static_cast<unsigned int>(size) | (ver << 24U);
}

// [H] `#define NVML_VALUE_NOT_AVAILABLE (-1)`: a field that is not available,
// e.g. usedGpuMemory under WDDM; as an unsigned long long, all ones.
inline constexpr unsigned long long kNvmlValueNotAvailableUll = ~0ULL;

// [H] nvmlMemory_t (v1): total, free, used, bytes.
struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using nvmlMemory_t = nvmlMemory_st;

// [H], [R] nvmlMemory_v2_t: a version word first, then total, reserved,
// free, used (bytes). `#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)`
// = 0x02000028 (40-byte struct).
struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
using nvmlMemory_v2_t = nvmlMemory_v2_st;
inline constexpr unsigned int nvmlMemory_v2 =
    NvmlStructVersion(sizeof(nvmlMemory_v2_t), 2);

// [H], [R] nvmlProcessInfo_v2_t (also named nvmlProcessInfo_t in API 12):
// pid, usedGpuMemory (bytes), gpuInstanceId, computeInstanceId (both
// 0xFFFFFFFF when MIG is off). The element type of
// nvmlDeviceGetComputeRunningProcesses_v3 ([H]: `#define
// nvmlDeviceGetComputeRunningProcesses
// nvmlDeviceGetComputeRunningProcesses_v3`).
struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
using nvmlProcessInfo_v2_t = nvmlProcessInfo_v2_st;
using nvmlProcessInfo_t = nvmlProcessInfo_v2_st;
// [H] gpuInstanceId / computeInstanceId "set to 0xFFFFFFFF otherwise".
inline constexpr unsigned int kNvmlNoInstanceId = 0xFFFFFFFFU;

// [H], [R] nvmlProcessUtilizationSample_t: one process's utilisation (SM,
// frame buffer, encoder, decoder: percent of the sample period) and the CPU
// timestamp of the sample in microseconds.
struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};
using nvmlProcessUtilizationSample_t = nvmlProcessUtilizationSample_st;

// [H], [R] nvmlUtilization_t: percent of the past sample period during
// which a kernel ran (gpu) and device memory was read or written (memory).
struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
};
using nvmlUtilization_t = nvmlUtilization_st;

// [H] group nvmlMultiInstanceGPU.
inline constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0x0;
inline constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 0x1;

// [H] GPU instance profile selectors passed to
// nvmlDeviceGetGpuInstanceProfileInfo(V). These are NOT the profile IDs
// that the create and list calls take (those come back in info.id).
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_COUNT = 0xA;

// [H] nvmlGpuInstancePlacement_t: start, size (memory slices).
struct nvmlGpuInstancePlacement_st {
  unsigned int start;
  unsigned int size;
};
using nvmlGpuInstancePlacement_t = nvmlGpuInstancePlacement_st;

// [H] nvmlGpuInstanceProfileInfo_t (v1, unversioned).
struct nvmlGpuInstanceProfileInfo_st {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};
using nvmlGpuInstanceProfileInfo_t = nvmlGpuInstanceProfileInfo_st;

// [H] nvmlGpuInstanceProfileInfo_v2_t: v1 with a version word first and the
// profile name ("MIG 1g.10gb") last. `#define nvmlGpuInstanceProfileInfo_v2
// NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)`.
struct nvmlGpuInstanceProfileInfo_v2_st {
  unsigned int version;
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
};
using nvmlGpuInstanceProfileInfo_v2_t = nvmlGpuInstanceProfileInfo_v2_st;
inline constexpr unsigned int nvmlGpuInstanceProfileInfo_v2 =
    NvmlStructVersion(sizeof(nvmlGpuInstanceProfileInfo_v2_t), 2);

// [H] nvmlGpuInstanceInfo_t: parent device, instance id, profile id
// (info.id of its profile), placement.
struct nvmlGpuInstanceInfo_st {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};
using nvmlGpuInstanceInfo_t = nvmlGpuInstanceInfo_st;

// [H] Compute instance profile selectors for
// nvmlGpuInstanceGetComputeInstanceProfileInfo, and the engine profile.
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x8;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0;

// [H] nvmlComputeInstancePlacement_t: start, size (compute slices).
struct nvmlComputeInstancePlacement_st {
  unsigned int start;
  unsigned int size;
};
using nvmlComputeInstancePlacement_t = nvmlComputeInstancePlacement_st;

// [H] nvmlComputeInstanceProfileInfo_t (v1, unversioned).
struct nvmlComputeInstanceProfileInfo_st {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};
using nvmlComputeInstanceProfileInfo_t = nvmlComputeInstanceProfileInfo_st;

// [H] nvmlComputeInstanceInfo_t, filled by nvmlComputeInstanceGetInfo_v2.
struct nvmlComputeInstanceInfo_st {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
};
using nvmlComputeInstanceInfo_t = nvmlComputeInstanceInfo_st;

// ---------------------------------------------------------------------------
// Entry points, with C linkage. Signatures per [H] (prototypes, parameter
// types as declared there; `DECLDIR` is empty on Linux).
extern "C" {

// Initialisation and errors ([H] group nvmlInitializationAndCleanup,
// nvmlErrorReporting). nvmlErrorString works without init.
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char* nvmlErrorString(nvmlReturn_t result);

// Device queries ([H] group nvmlDeviceQueries).
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                           nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                               unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                               unsigned int length);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                        nvmlMemory_v2_t* memory);
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                int* minor);
// *infoCount in: capacity of `infos`; out: entries written, or the number
// needed with NVML_ERROR_INSUFFICIENT_SIZE. `infos` may be NULL when
// *infoCount is 0.
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                     unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos);
// One sample per process with non-zero utilisation since
// `lastSeenTimeStamp` (µs); `utilization` NULL asks for the count
// (NVML_ERROR_INSUFFICIENT_SIZE with *processSamplesCount set); none:
// NVML_ERROR_NOT_FOUND.
nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
    unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                           nvmlUtilization_t* utilization);

// Multi-Instance GPU ([H] group nvmlMultiInstanceGPU).
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device,
                                  unsigned int* currentMode,
                                  unsigned int* pendingMode);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(
    nvmlDevice_t device, unsigned int profile,
    nvmlGpuInstanceProfileInfo_t* info);
// Caller sets info->version = nvmlGpuInstanceProfileInfo_v2 first.
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(
    nvmlDevice_t device, unsigned int profile,
    nvmlGpuInstanceProfileInfo_v2_t* info);
// `placements` may be NULL to learn the count.
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId,
    nvmlGpuInstancePlacement_t* placements, unsigned int* count);
nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device,
                                         unsigned int profileId,
                                         nvmlGpuInstance_t* gpuInstance);
nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId,
    const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* gpuInstance);
nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance);
// `gpuInstances` must hold info.instanceCount handles of the profile.
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device,
                                       unsigned int profileId,
                                       nvmlGpuInstance_t* gpuInstances,
                                       unsigned int* count);
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t* gpuInstance);
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                    nvmlGpuInstanceInfo_t* info);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile,
    unsigned int engProfile, nvmlComputeInstanceProfileInfo_t* info);
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    nvmlComputeInstance_t* computeInstance);
nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance);
// `computeInstances` must hold info.instanceCount handles of the profile.
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    nvmlComputeInstance_t* computeInstances, unsigned int* count);
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(
    nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t* info);
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                            unsigned int* count);
// NVML_ERROR_NOT_FOUND when no MIG device sits at `index`.
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                 unsigned int index,
                                                 nvmlDevice_t* migDevice);
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id);
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device,
                                            unsigned int* id);

}  // extern "C"

// The layouts above must equal the real ones; these sizes follow from [H] on
// LP64 (8-byte pointers and unsigned long long, 4-byte unsigned int).
static_assert(sizeof(void*) == 8, "NVML layouts are declared for LP64 only");
static_assert(sizeof(nvmlReturn_t) == 4);
static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(nvmlMemory_v2 == 0x02000028U);  // the value [R]-era bindings use
static_assert(sizeof(nvmlProcessInfo_t) == 24);
static_assert(sizeof(nvmlGpuInstancePlacement_t) == 8);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48);
static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152);
static_assert(nvmlGpuInstanceProfileInfo_v2 == 0x02000098U);
static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24);
static_assert(sizeof(nvmlComputeInstancePlacement_t) == 8);
static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36);
static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32);
