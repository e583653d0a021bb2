// Spec validation and environment composition shared by every runtime.
#include "runtime/runtime.h"

#include <cstdlib>
#include <set>

#include "common/task_launch.h"

namespace hf::runtime {
namespace {

bool HasNul(std::string_view text) {
  return text.find('\0') != std::string_view::npos;
}

Status CheckMapKeys(const StringMap& map, const char* what, const char* field) {
  for (const auto& [key, value] : map) {
    if (key.empty() || key.find('=') != std::string::npos || HasNul(key) ||
        HasNul(value)) {
      return Status::InvalidArgument(
          std::string(what) + " '" + key +
              "': names must be non-empty, without '=' or NUL",
          field);
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kRunning:
      return "running";
    case TaskState::kExited:
      return "exited";
    case TaskState::kSignaled:
      return "signaled";
    case TaskState::kFailed:
      return "failed";
    case TaskState::kLost:
      return "lost";
  }
  return "unknown";
}

std::string_view PreloadRouteName(PreloadRoute route) {
  switch (route) {
    case PreloadRoute::kEnv:
      return "env";
    case PreloadRoute::kLdSoPreload:
      return "ld-so-preload";
    case PreloadRoute::kBoth:
      return "both";
  }
  return "env";
}

std::optional<PreloadRoute> ParsePreloadRoute(std::string_view name) {
  for (PreloadRoute route :
       {PreloadRoute::kEnv, PreloadRoute::kLdSoPreload, PreloadRoute::kBoth}) {
    if (PreloadRouteName(route) == name) return route;
  }
  return std::nullopt;
}

std::string DescribeTaskStatus(const TaskStatus& status) {
  std::string out;
  switch (status.state) {
    case TaskState::kRunning:
      out = "running";
      break;
    case TaskState::kExited:
      out = "exited " + std::to_string(status.exit_code);
      break;
    case TaskState::kSignaled:
      out = "killed by signal " + std::to_string(status.signal);
      break;
    case TaskState::kFailed:
      out = "failed " + std::to_string(status.exit_code);
      break;
    case TaskState::kLost:
      out = "lost";
      break;
  }
  if (status.oom_killed) out += " (OOM)";
  if (!status.message.empty()) out += ": " + status.message;
  return out;
}

Status ValidateTaskSpec(const TaskSpec& spec, EnvTarget target) {
  if (spec.task_id <= 0) {
    return Status::InvalidArgument("task id must be positive", "task_id");
  }
  if (target == EnvTarget::kHostProcess) {
    if (!HasStartableCommand(spec.command)) {
      return Status::InvalidArgument("a command is required", "command");
    }
  } else if (!HasStartableImage(spec.image)) {
    return Status::InvalidArgument(
        "an image is required and may not start with '-'", "image");
  }
  if (HasNul(spec.tenant) || HasNul(spec.image)) {
    return Status::InvalidArgument("tenant and image may not contain NUL",
                                   "tenant");
  }
  for (const std::string& arg : spec.command) {
    if (HasNul(arg)) {
      return Status::InvalidArgument("command arguments may not contain NUL",
                                     "command");
    }
  }
  if (!spec.gpu_indices.empty() && !spec.mig_device.empty()) {
    return Status::InvalidArgument(
        "pin either GPU indices or a MIG device, not both", "gpu_indices");
  }
  std::set<int> seen;
  for (int index : spec.gpu_indices) {
    if (index < 0 || !seen.insert(index).second) {
      return Status::InvalidArgument(
          "GPU indices must be non-negative and distinct", "gpu_indices");
    }
  }
  if (!spec.mig_device.empty() &&
      (!spec.mig_device.starts_with("MIG-") || HasNul(spec.mig_device) ||
       spec.mig_device.find(',') != std::string::npos)) {
    return Status::InvalidArgument(
        "MIG device must be one UUID of the form MIG-...", "mig_device");
  }
  if (!spec.mps_pipe_dir.empty() &&
      (spec.mps_pipe_dir.front() != '/' || HasNul(spec.mps_pipe_dir) ||
       spec.mps_pipe_dir.find(':') != std::string::npos)) {
    return Status::InvalidArgument(
        "MPS pipe directory must be an absolute path without ':'",
        "mps_pipe_dir");
  }
  // Both go into a docker -v argument and an environment variable.
  const auto check_path = [](const std::string& path, const char* what,
                             const char* field) {
    if (path.empty() || (path.front() == '/' && !HasNul(path) &&
                         path.find_first_of(": ") == std::string::npos)) {
      return Status::Ok();
    }
    return Status::InvalidArgument(
        std::string(what) + " must be an absolute path without ':' or spaces",
        field);
  };
  HF_RETURN_IF_ERROR(
      check_path(spec.preload_library, "preload library", "preload_library"));
  HF_RETURN_IF_ERROR(
      check_path(spec.hook_region, "hook region", "hook_region"));
  HF_RETURN_IF_ERROR(
      check_path(spec.preload_file, "preload file", "preload_file"));
  if (target == EnvTarget::kContainer && !spec.preload_library.empty() &&
      spec.preload_route != PreloadRoute::kEnv && spec.preload_file.empty()) {
    return Status::InvalidArgument(
        "the preload route '" +
            std::string(PreloadRouteName(spec.preload_route)) +
            "' needs a preload file",
        "preload_file");
  }
  HF_RETURN_IF_ERROR(
      check_path(spec.hook_gpu_region, "hook GPU region", "hook_gpu_region"));
  HF_RETURN_IF_ERROR(CheckMapKeys(spec.env, "environment variable", "env"));
  HF_RETURN_IF_ERROR(CheckMapKeys(spec.labels, "label", "labels"));
  return Status::Ok();
}

std::string VisibleDevices(const TaskSpec& spec) {
  if (!spec.mig_device.empty()) return spec.mig_device;
  std::string out;
  for (int index : spec.gpu_indices) {
    if (!out.empty()) out += ',';
    out += std::to_string(index);
  }
  return out;
}

StringMap ComposeTaskEnv(const TaskSpec& spec, const StringMap& base,
                         EnvTarget target) {
  StringMap env = base;
  for (const auto& [name, value] : spec.env) env[name] = value;
  const std::string devices = VisibleDevices(spec);
  if (!devices.empty()) {
    env["NVIDIA_VISIBLE_DEVICES"] = devices;
    if (target == EnvTarget::kHostProcess) {
      env["CUDA_VISIBLE_DEVICES"] = devices;
    } else {
      env.erase("CUDA_VISIBLE_DEVICES");
    }
  }
  if (!spec.mps_pipe_dir.empty()) {
    env["CUDA_MPS_PIPE_DIRECTORY"] = spec.mps_pipe_dir;
  }
  if (!spec.preload_library.empty() &&
      (target == EnvTarget::kHostProcess ||
       spec.preload_route != PreloadRoute::kLdSoPreload)) {
    auto it = env.find("LD_PRELOAD");
    if (it == env.end() || it->second.empty()) {
      env["LD_PRELOAD"] = spec.preload_library;
    } else {
      it->second = spec.preload_library + ":" + it->second;
    }
  }
  if (!spec.hook_region.empty()) {
    env["HETEROFLOW_HOOK_REGION"] = spec.hook_region;
  }
  if (!spec.hook_gpu_region.empty()) {
    env["HETEROFLOW_HOOK_GPU_REGION"] = spec.hook_gpu_region;
  }
  return env;
}

std::string FindLoaderError(std::string_view output) {
  // What glibc's loader prints (elf/dl-version.c, elf/rtld.c, dl-error),
  // and musl's (ldso/dynlink.c).
  static constexpr std::string_view kMarks[] = {
      "' not found (required by ",               // a version missing
      "error while loading shared libraries: ",  // a library missing
      ": symbol lookup error: ",                 // a symbol missing
      "ERROR: ld.so: object ",                   // a preload skipped
      "Error loading shared library ",           // musl: a library
      "Error relocating ",                       // musl: a symbol
  };
  std::string_view found;
  for (std::string_view rest = output; !rest.empty();) {
    const std::size_t newline = rest.find('\n');
    const std::string_view line = rest.substr(0, newline);
    for (std::string_view mark : kMarks) {
      if (line.find(mark) != std::string_view::npos) {
        found = line;
        break;
      }
    }
    if (newline == std::string_view::npos) break;
    rest.remove_prefix(newline + 1);
  }
  constexpr std::size_t kMaxLine = 500;
  std::string out;
  for (char c : found.substr(0, kMaxLine)) {
    out += (c >= ' ' && c <= '~') ? c : '?';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string LoaderErrorOfTask(Runtime& runtime, std::int64_t task_id,
                              std::int64_t log_size) {
  constexpr std::int64_t kEnd = std::int64_t{64} << 10;
  if (log_size > kEnd) {
    auto tail = runtime.ReadLog(task_id, log_size - kEnd, kEnd);
    if (tail.ok()) {
      std::string line = FindLoaderError(tail->data);
      if (!line.empty()) return line;
    }
  }
  auto head = runtime.ReadLog(task_id, 0, kEnd);
  return head.ok() ? FindLoaderError(head->data) : "";
}

std::string KeyValue(std::string_view key, std::string_view value) {
  std::string out;
  out.reserve(key.size() + 1 + value.size());
  out.append(key).append(1, '=').append(value);
  return out;
}

StringMap TaskLabels(const TaskSpec& spec) {
  StringMap labels = spec.labels;
  labels[std::string(kTaskLabel)] = std::to_string(spec.task_id);
  labels[std::string(kTenantLabel)] = spec.tenant;
  if (spec.slice_id != 0) {
    labels[std::string(kSliceLabel)] = std::to_string(spec.slice_id);
  } else {
    labels.erase(std::string(kSliceLabel));
  }
  return labels;
}

StringMap DefaultBaseEnv() {
  StringMap env;
  env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  // The agent's HOME when it has one: tools such as pip want a writable home.
  const char* home = std::getenv("HOME");
  env["HOME"] = (home != nullptr && home[0] != '\0') ? home : "/";
  env["LANG"] = "C.UTF-8";
  return env;
}

}  // namespace hf::runtime
