// DockerRuntime: argv building, CLI calls and parsing of their output.
#include "runtime/docker_runtime.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

namespace hf::runtime {
namespace {

using nlohmann::json;

constexpr std::string_view kNamePrefix = "hf-task-";

bool Contains(std::string_view text, std::string_view needle) {
  return text.find(needle) != std::string_view::npos;
}

std::string_view Trim(std::string_view text) {
  const std::size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos) return {};
  const std::size_t stop = text.find_last_not_of(" \t\r\n");
  return text.substr(start, stop - start + 1);
}

std::string JoinArgs(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& arg : args) {
    if (!out.empty()) out += ' ';
    out += arg;
  }
  return out;
}

std::optional<std::int64_t> ParseTaskId(std::string_view text) {
  std::int64_t id = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, id);
  if (ec != std::errc() || ptr != end || id <= 0) return std::nullopt;
  return id;
}

// How `docker inspect`'s State object maps onto a TaskStatus.
TaskStatus StatusFromState(const json& state) {
  const std::string status = state.value("Status", std::string());
  const int exit_code = state.value("ExitCode", 0);
  const std::string error = state.value("Error", std::string());
  const bool oom = state.value("OOMKilled", false);
  TaskStatus out;
  out.message = error;
  if (status == "running" || status == "paused" || status == "restarting" ||
      status == "removing") {
    out.state = TaskState::kRunning;
    if (status != "running") out.message = status;
    return out;
  }
  if (status == "created") {
    // A container whose start failed stays "created" with the error.
    if (exit_code != 0 || !error.empty()) {
      out.state = TaskState::kFailed;
      out.exit_code = exit_code;
      return out;
    }
    out.state = TaskState::kRunning;
    out.message = "created, not yet started";
    return out;
  }
  if (status == "exited") {
    out.exit_code = exit_code;
    if (oom) {
      out.state = TaskState::kSignaled;
      out.signal = 9;
      out.oom_killed = true;
    } else if (!error.empty() && (exit_code == 126 || exit_code == 127)) {
      out.state = TaskState::kFailed;
    } else if (exit_code > 128 && exit_code <= 128 + 64) {
      out.state = TaskState::kSignaled;
      out.signal = exit_code - 128;
    } else {
      out.state = TaskState::kExited;
    }
    return out;
  }
  out.state = TaskState::kLost;
  out.message = status == "dead" ? "the engine marks the container dead"
                                 : "unknown container status '" + status + "'";
  if (!error.empty()) out.message += ": " + error;
  return out;
}

}  // namespace

StatusOr<std::vector<InspectedContainer>> ParseDockerInspect(
    std::string_view json_text) {
  const json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_array()) {
    return Status::Internal("docker inspect printed no JSON array: " +
                            std::string(Trim(json_text).substr(0, 200)));
  }
  std::vector<InspectedContainer> containers;
  try {
    for (const json& item : doc) {
      InspectedContainer container;
      container.id = item.value("Id", std::string());
      container.name = item.value("Name", std::string());
      if (container.name.starts_with('/')) container.name.erase(0, 1);
      const auto config = item.find("Config");
      if (config != item.end() && config->is_object()) {
        const auto labels = config->find("Labels");
        if (labels != config->end() && labels->is_object()) {
          for (const auto& [key, value] : labels->items()) {
            if (value.is_string()) container.labels[key] = value;
          }
        }
      }
      const auto state = item.find("State");
      if (state == item.end() || !state->is_object()) {
        return Status::Internal("docker inspect: container " + container.id +
                                " has no State");
      }
      container.status = StatusFromState(*state);
      containers.push_back(std::move(container));
    }
  } catch (const json::exception& e) {
    return Status::Internal(std::string("docker inspect: unexpected JSON: ") +
                            e.what());
  }
  return containers;
}

Status ClassifyDockerError(std::string_view what, int exit_code,
                           std::string_view output) {
  std::string detail;
  for (std::string_view rest = output; !rest.empty();) {
    const std::size_t newline = rest.find('\n');
    const std::string_view line = Trim(rest.substr(0, newline));
    // The CLI's "See/Run 'docker run --help'" hints say nothing here.
    if (!line.empty() && !line.starts_with("See 'docker") &&
        !line.starts_with("Run 'docker")) {
      if (!detail.empty()) detail += "; ";
      detail += line;
    }
    if (newline == std::string_view::npos) break;
    rest.remove_prefix(newline + 1);
  }
  const std::string message = std::string(what) + " failed (exit " +
                              std::to_string(exit_code) + "): " + detail;
  if (Contains(output, "Cannot connect to the Docker daemon") ||
      Contains(output, "Is the docker daemon running") ||
      Contains(output, "error during connect")) {
    return Status::Unavailable(message);
  }
  if (Contains(output, "No such container") ||
      Contains(output, "No such object")) {
    return Status::NotFound(message);
  }
  if (Contains(output, "Conflict.") && Contains(output, "already in use")) {
    return Status::AlreadyExists(message);
  }
  if (Contains(output, "Unable to find image") ||
      Contains(output, "No such image") ||
      Contains(output, "pull access denied") ||
      Contains(output, "manifest unknown") ||
      Contains(output, "container is running") ||
      Contains(output, "cannot remove a running container")) {
    return Status::FailedPrecondition(message);
  }
  return Status::Internal(message);
}

DockerRuntime::DockerRuntime(DockerRuntimeOptions options)
    : options_(std::move(options)) {}

std::string DockerRuntime::ContainerName(std::int64_t task_id) {
  return std::string(kNamePrefix) + std::to_string(task_id);
}

CommandOptions DockerRuntime::DefaultCommandOptions() const {
  CommandOptions command;
  command.timeout = options_.command_timeout;
  return command;
}

StatusOr<CommandResult> DockerRuntime::Docker(
    std::vector<std::string> args, const CommandOptions& options) const {
  args.insert(args.begin(), options_.docker);
  StatusOr<CommandResult> result = RunCommand(args, options);
  if (!result.ok()) {
    return result.status().WithContext("docker " + JoinArgs(args));
  }
  return result;
}

std::vector<std::string> DockerRuntime::RunArgv(const TaskSpec& spec) const {
  std::vector<std::string> argv = {options_.docker, "run", "-d", "--name",
                                   ContainerName(spec.task_id)};
  for (const auto& [key, value] : TaskLabels(spec)) {
    argv.push_back("--label");
    argv.push_back(KeyValue(key, value));
  }
  if (!VisibleDevices(spec).empty()) {
    argv.push_back("--runtime=" + options_.gpu_runtime);
  }
  if (!spec.mps_pipe_dir.empty()) {
    argv.push_back("-v");
    argv.push_back(spec.mps_pipe_dir + ":" + spec.mps_pipe_dir);
    argv.push_back("--ipc=host");
  }
  if (!spec.preload_library.empty()) {
    argv.push_back("-v");
    argv.push_back(spec.preload_library + ":" + spec.preload_library + ":ro");
    if (spec.preload_route != PreloadRoute::kEnv) {
      // Read-only: the container's processes cannot drop the hook from it.
      argv.push_back("-v");
      argv.push_back(spec.preload_file + ":/etc/ld.so.preload:ro");
    }
  }
  if (!spec.hook_region.empty()) {
    // Read-write: the task's processes account their memory in it.
    argv.push_back("-v");
    argv.push_back(spec.hook_region + ":" + spec.hook_region);
  }
  if (!spec.hook_gpu_region.empty()) {
    // Read-write: every slice on the GPU takes its turns through it.
    argv.push_back("-v");
    argv.push_back(spec.hook_gpu_region + ":" + spec.hook_gpu_region);
  }
  for (const auto& [name, value] :
       ComposeTaskEnv(spec, /*base=*/{}, EnvTarget::kContainer)) {
    argv.push_back("-e");
    argv.push_back(KeyValue(name, value));
  }
  argv.push_back(spec.image);
  argv.insert(argv.end(), spec.command.begin(), spec.command.end());
  return argv;
}

Status DockerRuntime::Start(const TaskSpec& spec) {
  HF_RETURN_IF_ERROR(ValidateTaskSpec(spec, EnvTarget::kContainer));
  std::vector<std::string> argv = RunArgv(spec);
  argv.erase(argv.begin());
  StatusOr<CommandResult> run = Docker(argv, DefaultCommandOptions());
  if (!run.ok()) return run.status();
  if (run->exit_code == 0) return Status::Ok();
  Status error = ClassifyDockerError(
      "docker run " + ContainerName(spec.task_id), run->exit_code, run->err);
  if (error.code() != StatusCode::kAlreadyExists &&
      error.code() != StatusCode::kUnavailable && Poll(spec.task_id).ok()) {
    // The engine created the container but could not start it (command
    // missing from the image, runtime refused the device, ...): the
    // container holds the reason, and Poll reports the task as kFailed.
    return Status::Ok();
  }
  return error;
}

StatusOr<std::vector<InspectedContainer>> DockerRuntime::Inspect(
    const std::vector<std::string>& containers) const {
  std::vector<std::string> args = {"inspect", "--type", "container"};
  args.insert(args.end(), containers.begin(), containers.end());
  StatusOr<CommandResult> result = Docker(args, DefaultCommandOptions());
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    // With several names, the CLI prints the ones it found and fails for
    // the rest: keep what it found unless it found nothing.
    if (containers.size() > 1) {
      StatusOr<std::vector<InspectedContainer>> found =
          ParseDockerInspect(result->out);
      if (found.ok() && !found->empty()) return found;
    }
    return ClassifyDockerError("docker inspect", result->exit_code,
                               result->err);
  }
  return ParseDockerInspect(result->out);
}

StatusOr<TaskStatus> DockerRuntime::Poll(std::int64_t task_id) {
  StatusOr<std::vector<InspectedContainer>> found =
      Inspect({ContainerName(task_id)});
  if (!found.ok()) return found.status();
  if (found->size() != 1) {
    return Status::Internal("docker inspect " + ContainerName(task_id) +
                            " described " + std::to_string(found->size()) +
                            " containers");
  }
  return found->front().status;
}

Status DockerRuntime::Kill(std::int64_t task_id,
                           std::chrono::milliseconds grace) {
  const std::int64_t seconds =
      std::max<std::int64_t>(0, (grace.count() + 999) / 1000);
  CommandOptions command = DefaultCommandOptions();
  command.timeout += std::chrono::seconds(seconds);
  const std::string name = ContainerName(task_id);
  StatusOr<CommandResult> result =
      Docker({"stop", "-t", std::to_string(seconds), name}, command);
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    return ClassifyDockerError("docker stop " + name, result->exit_code,
                               result->err);
  }
  return Status::Ok();
}

StatusOr<std::vector<AdoptedTask>> DockerRuntime::Adopt() {
  const std::string filter = "label=" + std::string(kTaskLabel);
  StatusOr<CommandResult> listed =
      Docker({"ps", "-a", "-q", "--no-trunc", "--filter", filter},
             DefaultCommandOptions());
  if (!listed.ok()) return listed.status();
  if (listed->exit_code != 0) {
    return ClassifyDockerError("docker ps", listed->exit_code, listed->err);
  }
  std::vector<std::string> ids;
  std::string_view rest = listed->out;
  while (!rest.empty()) {
    const std::size_t newline = rest.find('\n');
    const std::string_view line = Trim(rest.substr(0, newline));
    if (!line.empty()) ids.emplace_back(line);
    if (newline == std::string_view::npos) break;
    rest.remove_prefix(newline + 1);
  }
  std::vector<AdoptedTask> tasks;
  if (ids.empty()) return tasks;
  StatusOr<std::vector<InspectedContainer>> found = Inspect(ids);
  if (!found.ok()) {
    // Every listed container vanished in between: nothing to adopt.
    if (found.status().code() == StatusCode::kNotFound) return tasks;
    return found.status();
  }
  for (InspectedContainer& container : *found) {
    const auto label = container.labels.find(std::string(kTaskLabel));
    if (label == container.labels.end()) continue;
    const std::optional<std::int64_t> id = ParseTaskId(label->second);
    if (!id || container.name != ContainerName(*id)) continue;  // not ours
    AdoptedTask task;
    task.task_id = *id;
    task.status = std::move(container.status);
    task.labels = std::move(container.labels);
    tasks.push_back(std::move(task));
  }
  std::sort(tasks.begin(), tasks.end(),
            [](const AdoptedTask& a, const AdoptedTask& b) {
              return a.task_id < b.task_id;
            });
  return tasks;
}

Status DockerRuntime::Remove(std::int64_t task_id) {
  const std::string name = ContainerName(task_id);
  StatusOr<CommandResult> result =
      Docker({"rm", name}, DefaultCommandOptions());
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    return ClassifyDockerError("docker rm " + name, result->exit_code,
                               result->err);
  }
  return Status::Ok();
}

StatusOr<LogChunk> DockerRuntime::ReadLog(std::int64_t task_id,
                                          std::int64_t offset,
                                          std::size_t max_bytes) {
  if (offset < 0) {
    return Status::InvalidArgument("log offset must not be negative", "offset");
  }
  constexpr std::size_t kMaxLogChunk = std::size_t{16} << 20;
  max_bytes = std::min(max_bytes, kMaxLogChunk);
  CommandOptions command = DefaultCommandOptions();
  command.merge_stderr = true;
  // Never so small that the CLI's own error message could be cut short and
  // pass for log text.
  constexpr std::size_t kMinCapture = std::size_t{64} << 10;
  command.max_output =
      std::max(static_cast<std::size_t>(offset) + max_bytes, kMinCapture);
  const std::string name = ContainerName(task_id);
  StatusOr<CommandResult> result = Docker({"logs", name}, command);
  if (!result.ok()) return result.status();
  if (result->exit_code != 0 && !result->capped) {
    return ClassifyDockerError("docker logs " + name, result->exit_code,
                               result->out);
  }
  LogChunk chunk;
  const std::size_t start =
      std::min(result->out.size(), static_cast<std::size_t>(offset));
  const std::size_t count = std::min(max_bytes, result->out.size() - start);
  chunk.data = result->out.substr(start, count);
  chunk.next_offset = offset + static_cast<std::int64_t>(count);
  return chunk;
}

}  // namespace hf::runtime
