#include "server/slice_env.h"

#include <iterator>
#include <utility>

namespace hf::server {

using store::Millis;

bool IsReservedEnvName(std::string_view name) {
  return name.starts_with("HETEROFLOW_") || name.starts_with("CUDA_MPS_") ||
         name == "CUDA_VISIBLE_DEVICES" || name == "NVIDIA_VISIBLE_DEVICES";
}

void StripSliceEnv(store::StringMap& env) {
  for (auto it = env.begin(); it != env.end();) {
    it = IsReservedEnvName(it->first) ? env.erase(it) : std::next(it);
  }
}

void StripBindingLabels(store::StringMap& labels) {
  std::erase_if(labels, [](const auto& kv) {
    return kv.first.starts_with("heteroflow.");
  });
}

void UnbindTask(store::TaskRow& task, std::string reason) {
  task.state = store::TaskState::kPending;
  task.slice_id.reset();
  task.node_id.reset();
  task.gpu_indices.clear();
  StripSliceEnv(task.env);
  StripBindingLabels(task.labels);
  task.pending_reason = std::move(reason);
}

store::StringMap SliceEnv(const SliceEnvInput& slice) {
  store::StringMap env;
  env["HETEROFLOW_SLICE_ID"] = std::to_string(slice.slice_id);
  env["HETEROFLOW_GPU_INDEX"] = std::to_string(slice.gpu_index);
  env["HETEROFLOW_GPU_UUID"] = slice.gpu_uuids;
  env["HETEROFLOW_SLICE_QOS"] = slice.qos_level;
  if (slice.whole) return env;
  // No memory asked for: no memory cap (a 0 MB cap would fail every
  // allocation).
  if (slice.memory_mib > 0) {
    env["HETEROFLOW_SLICE_MEMORY_MB"] = std::to_string(slice.memory_mib);
  }
  if (slice.compute_percent > 0) {
    env["HETEROFLOW_SLICE_COMPUTE_PERCENT"] =
        std::to_string(slice.compute_percent);
    // How the hook shares the GPU's time with the other slices on it.
    env["HETEROFLOW_SLICE_COMPUTE_MODE"] =
        std::string(GpuComputeModeName(slice.compute_mode));
  }
  if (slice.vendor != "nvidia") return env;
  if (slice.qos_level == "gold") {
    // The partition is the boundary; the task sees only its MIG device,
    // and only once the agent has created it.
    if (!slice.mig_device_id.empty()) {
      env["NVIDIA_VISIBLE_DEVICES"] = slice.mig_device_id;
      env["CUDA_VISIBLE_DEVICES"] = slice.mig_device_id;
    }
    return env;
  }
  env["NVIDIA_VISIBLE_DEVICES"] = slice.gpu_uuids;
  env["CUDA_VISIBLE_DEVICES"] = slice.gpu_uuids;
  // MPS client limits. The task sees exactly one device (pinned above), so
  // the device ordinal in the pinned-memory limit is always 0. Without an
  // MPS daemon (bronze) the driver ignores them; the hook reads the
  // HETEROFLOW_SLICE_* values instead.
  if (slice.memory_mib > 0) {
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] =
        "0=" + std::to_string(slice.memory_mib) + "M";
  }
  if (slice.compute_percent > 0) {
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] =
        std::to_string(slice.compute_percent);
  }
  return env;
}

void ApplySliceEnv(const SliceEnvInput& slice, store::StringMap& env) {
  StripSliceEnv(env);
  for (auto& [name, value] : SliceEnv(slice)) env[name] = value;
}

}  // namespace hf::server
