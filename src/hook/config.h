// The hook's configuration, read once from the slice's environment. The
// agent produces these variables in one function (server/slice_env.cc
// SliceEnv, plus the agent's HETEROFLOW_HOOK_REGION); docs/HOOK.md lists
// them.
//
// No exceptions, no allocation (compiled into libhfhook.so).
#ifndef HF_HOOK_CONFIG_H_
#define HF_HOOK_CONFIG_H_

#include <cstdint>

#include "hook/gpu_region.h"
#include "hook/region.h"

namespace hf::hook {

inline constexpr const char* kEnvMemoryMb = "HETEROFLOW_SLICE_MEMORY_MB";
inline constexpr const char* kEnvComputePercent =
    "HETEROFLOW_SLICE_COMPUTE_PERCENT";
inline constexpr const char* kEnvComputeMode = "HETEROFLOW_SLICE_COMPUTE_MODE";
inline constexpr const char* kEnvSliceId = "HETEROFLOW_SLICE_ID";
inline constexpr const char* kEnvGpuUuid = "HETEROFLOW_GPU_UUID";
inline constexpr const char* kEnvRegion = "HETEROFLOW_HOOK_REGION";
inline constexpr const char* kEnvGpuRegion = "HETEROFLOW_HOOK_GPU_REGION";
inline constexpr const char* kEnvContextMb = "HETEROFLOW_HOOK_CONTEXT_MB";
inline constexpr const char* kEnvLog = "HETEROFLOW_HOOK_LOG";
inline constexpr const char* kEnvDisable = "HETEROFLOW_HOOK_DISABLE";
inline constexpr const char* kEnvSampling = "HETEROFLOW_HOOK_SAMPLING";

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

struct HookConfig {
  // Whether the hook does anything in this process: a slice variable or a
  // region path is set, and HETEROFLOW_HOOK_DISABLE is not.
  bool active = false;
  uint64_t quota_bytes = kUnlimited;
  uint32_t compute_percent = 0;  // 0: no compute limit
  // How the share is kept against the other slices on the GPU.
  ComputeMode compute_mode = ComputeMode::kWorkConserving;
  // The slice the process belongs to (HETEROFLOW_SLICE_ID; 0: none given).
  uint64_t slice_id = 0;
  uint64_t context_bytes = 0;  // charged per context
  // Empty: a region private to this process and the children it forks.
  char region_path[256] = {};
  char gpu_uuid[128] = {};
  // The GPU region (gpu_region.h); empty: one private to this process and
  // the children it forks.
  char gpu_region_path[256] = {};
  LogLevel log_level = LogLevel::kWarn;
  // Whether a sample of kernel launches is timed for the interference
  // measure (HETEROFLOW_HOOK_SAMPLING=off turns it off).
  bool sampling = true;
  // The first variable that could not be parsed (then the quota is 0:
  // fail closed) and why.
  const char* bad_variable = nullptr;
  const char* bad_reason = nullptr;
};

// Reads the configuration through `get_env(name, ctx)`: getenv in the hook,
// the slice's environment map in the agent (which sizes the slice region
// from the same variables, so both read them one way) and in tests. A bad
// memory value fails closed: quota 0, every allocation refused, and
// `bad_variable` says which variable and why.
using EnvLookup = const char* (*)(const char* name, void* ctx);
HookConfig ReadConfig(EnvLookup get_env, void* ctx);

// Parses a decimal unsigned integer with no sign, spaces or suffix.
bool ParseUnsigned(const char* text, uint64_t* value);

}  // namespace hf::hook

#endif  // HF_HOOK_CONFIG_H_
