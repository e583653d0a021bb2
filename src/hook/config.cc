#include "hook/config.h"

#include <cstdio>
#include <cstring>

namespace hf::hook {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// Larger than any GPU: a typo, not a quota.
constexpr uint64_t kMaxMemoryMb = uint64_t{1} << 30;

void CopyString(char* dst, size_t size, const char* src) {
  std::snprintf(dst, size, "%s", src);
}

}  // namespace

bool ParseUnsigned(const char* text, uint64_t* value) {
  if (text == nullptr || *text == '\0') return false;
  uint64_t v = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(*p - '0');
    if (v > (~uint64_t{0} - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *value = v;
  return true;
}

HookConfig ReadConfig(EnvLookup lookup, void* ctx) {
  auto get_env = [lookup, ctx](const char* name) { return lookup(name, ctx); };
  HookConfig c;
  const char* disable = get_env(kEnvDisable);
  if (disable != nullptr && std::strcmp(disable, "1") == 0) return c;

  if (const char* log = get_env(kEnvLog)) {
    if (std::strcmp(log, "error") == 0 || std::strcmp(log, "quiet") == 0) {
      c.log_level = LogLevel::kError;
    } else if (std::strcmp(log, "info") == 0) {
      c.log_level = LogLevel::kInfo;
    } else if (std::strcmp(log, "debug") == 0) {
      c.log_level = LogLevel::kDebug;
    }
  }
  auto fail = [&c](const char* var, const char* why) {
    if (c.bad_variable == nullptr) {
      c.bad_variable = var;
      c.bad_reason = why;
    }
  };

  const char* memory = get_env(kEnvMemoryMb);
  const char* compute = get_env(kEnvComputePercent);
  const char* region = get_env(kEnvRegion);
  const char* slice = get_env(kEnvSliceId);
  c.active = memory != nullptr || compute != nullptr || region != nullptr;
  if (!c.active) return c;

  if (memory != nullptr) {
    uint64_t mb = 0;
    if (!ParseUnsigned(memory, &mb) || mb == 0 || mb > kMaxMemoryMb) {
      // Fail closed: a slice whose quota cannot be read gets none.
      fail(kEnvMemoryMb, "must be a whole number of MiB between 1 and 2^30");
      c.quota_bytes = 0;
    } else {
      c.quota_bytes = mb * kMiB;
    }
  }
  if (compute != nullptr) {
    uint64_t pct = 0;
    if (!ParseUnsigned(compute, &pct) || pct == 0 || pct > 100) {
      fail(kEnvComputePercent, "must be a whole percent from 1 to 100");
    } else if (pct < 100) {
      c.compute_percent = static_cast<uint32_t>(pct);
    }
  }
  if (const char* mode = get_env(kEnvComputeMode)) {
    if (std::strcmp(mode, "strict") == 0) {
      c.compute_mode = ComputeMode::kStrict;
    } else if (std::strcmp(mode, "work-conserving") == 0) {
      c.compute_mode = ComputeMode::kWorkConserving;
    } else {
      // Never more than the share when the wish cannot be read.
      c.compute_mode = ComputeMode::kStrict;
      fail(kEnvComputeMode, "must be \"strict\" or \"work-conserving\"");
    }
  }
  if (const char* gpu_region = get_env(kEnvGpuRegion);
      gpu_region != nullptr && *gpu_region != '\0') {
    if (std::strlen(gpu_region) >= sizeof(c.gpu_region_path)) {
      fail(kEnvGpuRegion, "path too long");
    } else {
      CopyString(c.gpu_region_path, sizeof(c.gpu_region_path), gpu_region);
    }
  }
  if (const char* ctx = get_env(kEnvContextMb)) {
    uint64_t mb = 0;
    if (!ParseUnsigned(ctx, &mb) || mb > uint64_t{64} * 1024) {
      fail(kEnvContextMb, "must be a whole number of MiB up to 65536");
    } else {
      c.context_bytes = mb * kMiB;
    }
  }
  if (slice != nullptr && *slice != '\0') {
    if (!ParseUnsigned(slice, &c.slice_id)) {
      c.slice_id = 0;
      fail(kEnvSliceId, "must be a slice id (a whole number)");
    }
  }
  if (region != nullptr && *region != '\0') {
    if (std::strlen(region) >= sizeof(c.region_path)) {
      fail(kEnvRegion, "path too long");
    } else {
      CopyString(c.region_path, sizeof(c.region_path), region);
    }
  } else if (c.slice_id != 0) {
    std::snprintf(c.region_path, sizeof(c.region_path),
                  "/dev/shm/heteroflow-slice-%llu",
                  static_cast<unsigned long long>(c.slice_id));
  }
  if (const char* sampling = get_env(kEnvSampling)) {
    if (std::strcmp(sampling, "off") == 0 || std::strcmp(sampling, "0") == 0) {
      c.sampling = false;
    } else if (std::strcmp(sampling, "on") != 0 &&
               std::strcmp(sampling, "1") != 0) {
      fail(kEnvSampling, "must be \"on\" or \"off\"");
    }
  }
  if (const char* uuid = get_env(kEnvGpuUuid)) {
    // Never cut short: a truncated list could name a GPU it did not. Too
    // long, no UUID is kept (the quota view then applies to every GPU the
    // task sees, which for a slice is its one GPU).
    if (std::strlen(uuid) >= sizeof(c.gpu_uuid)) {
      fail(kEnvGpuUuid, "too long (at most 127 bytes)");
    } else {
      CopyString(c.gpu_uuid, sizeof(c.gpu_uuid), uuid);
    }
  }
  return c;
}

}  // namespace hf::hook
