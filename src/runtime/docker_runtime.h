// DockerRuntime: tasks as containers, driven through the `docker` CLI.
//
// Every task is one container named `hf-task-<id>` and labelled with
// TaskLabels(spec) (heteroflow.task=<id>, .tenant, .slice, plus the spec's
// own). The engine keeps all state, so a restarted agent finds its tasks
// again by label (Adopt). GPU pinning uses the NVIDIA runtime:
// `--runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=<indices | MIG-uuid>`; an MPS
// pipe directory is bind-mounted at the same path with `--ipc=host`; a hook
// library is bind-mounted read-only at its own path for LD_PRELOAD, and for
// the ld.so.preload routes the spec's preload file read-only at
// /etc/ld.so.preload (over any the image has).
//
// Errors from the CLI are classified from its stderr once, in
// ClassifyDockerError: an engine that cannot be reached is Unavailable with
// the CLI's message, "No such container/object" NotFound, a name conflict
// AlreadyExists, a missing image or a running container in the way
// FailedPrecondition, anything else Internal.
//
// Exit codes: Docker reports a container whose main process was killed by
// signal N as exit code 128+N. Poll turns 129..192 into kSignaled (N) with
// exit_code kept at 128+N, since that is also what a shell entrypoint
// reports for a killed child; an OOM kill is kSignaled 9 with oom_killed.
//
// ReadLog runs `docker logs` (stdout and stderr interleaved) and slices the
// result, so each call costs the log up to offset + max_bytes.
//
// Thread-safety: the object holds only its options; calls may come from
// several threads at once (the engine serialises what needs it).
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/runtime.h"
#include "runtime/subprocess.h"

namespace hf::runtime {

struct DockerRuntimeOptions {
  // The CLI: a path, or a name looked up on the agent's PATH.
  std::string docker = "docker";
  // The OCI runtime named for GPU tasks (`--runtime=<this>`).
  std::string gpu_runtime = "nvidia";
  // Limit for one CLI call; Kill allows the grace period on top.
  std::chrono::milliseconds command_timeout{60'000};
};

// One container as `docker inspect` describes it.
struct InspectedContainer {
  std::string id;
  std::string name;  // without the leading '/'
  StringMap labels;
  TaskStatus status;
};

// Parses the JSON array `docker inspect` prints. Internal on malformed input.
StatusOr<std::vector<InspectedContainer>> ParseDockerInspect(
    std::string_view json_text);

// The Status for a failed CLI call; `output` is what it printed on stderr
// (or the merged output). `what` names the call ("docker stop hf-task-7").
Status ClassifyDockerError(std::string_view what, int exit_code,
                           std::string_view output);

class DockerRuntime final : public Runtime {
 public:
  explicit DockerRuntime(DockerRuntimeOptions options = {});

  std::string_view Name() const override { return "docker"; }
  // When the engine creates the container but cannot start it (e.g. the
  // command is not in the image), Start returns OK and Poll reports kFailed
  // with the engine's message, as for an unexecutable process.
  Status Start(const TaskSpec& spec) override;
  StatusOr<TaskStatus> Poll(std::int64_t task_id) override;
  // `docker stop -t <grace rounded up to seconds>`.
  Status Kill(std::int64_t task_id, std::chrono::milliseconds grace) override;
  StatusOr<std::vector<AdoptedTask>> Adopt() override;
  // `docker rm` (not forced: a running container is FailedPrecondition).
  Status Remove(std::int64_t task_id) override;
  StatusOr<LogChunk> ReadLog(std::int64_t task_id, std::int64_t offset,
                             std::size_t max_bytes) override;

  // The full `docker run` command line for `spec`, docker CLI first.
  // REQUIRES: ValidateTaskSpec(spec, EnvTarget::kContainer).ok().
  std::vector<std::string> RunArgv(const TaskSpec& spec) const;

  static std::string ContainerName(std::int64_t task_id);

 private:
  // Runs `docker <args...>`; a non-zero exit becomes ClassifyDockerError.
  StatusOr<CommandResult> Docker(std::vector<std::string> args,
                                 const CommandOptions& options) const;
  StatusOr<std::vector<InspectedContainer>> Inspect(
      const std::vector<std::string>& containers) const;
  CommandOptions DefaultCommandOptions() const;

  DockerRuntimeOptions options_;
};

}  // namespace hf::runtime
