// ProcessRuntime: tasks as plain host processes, the embedded default for
// bare hosts and tests.
//
// Each task runs under its own supervisor, `hf-task-shim` (task_shim.cc),
// which is no child of the agent: the agent may exit or be SIGKILLed, the
// tasks run on, and a new ProcessRuntime on the same state directory adopts
// them and still learns how they end. The command leads its own session and
// process group; Kill signals that group. Its stdout and stderr go to
// `<state_dir>/tasks/<id>/log`; its working directory is the task
// directory, deleted by Remove. task_files.h documents the directory layout.
//
// Deployment note: under systemd the agent's unit needs KillMode=process
// (or the shims must be moved out of its cgroup), or stopping the agent
// kills every task with it. The agent must not reap children it did not
// start (no waitpid(-1)). Where the agent is a container's PID 1, run it
// under an init (tini) so finished shims, re-parented to PID 1, are reaped.
//
// Thread-safety: all state is on disk and every step is atomic there
// (mkdir, rename), so calls may come from several threads; a task started
// twice at once is started once, the other call gets AlreadyExists.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>

#include "runtime/runtime.h"

namespace hf::runtime {

struct ProcessRuntimeOptions {
  // Where task directories live (created if missing). Required.
  std::filesystem::path state_dir;
  // The supervisor program; empty: FindTaskShim().
  std::filesystem::path shim_path;
  // Every task's environment starts from this (ComposeTaskEnv step 1).
  StringMap base_env = DefaultBaseEnv();
  // How long Start waits for the shim to report the command exec'd.
  std::chrono::milliseconds start_timeout{10'000};
  // How long Kill waits, after SIGKILL, for the exit record.
  std::chrono::milliseconds exit_record_wait{5'000};
};

// `hf-task-shim` beside the running executable, else the first on PATH.
// NotFound when neither exists.
StatusOr<std::filesystem::path> FindTaskShim();

class ProcessRuntime final : public Runtime {
 public:
  // InvalidArgument without a state_dir; NotFound without a shim; Internal
  // when the state directory cannot be created.
  static StatusOr<std::unique_ptr<ProcessRuntime>> Create(
      ProcessRuntimeOptions options);

  std::string_view Name() const override { return "process"; }
  // Runs spec.command; spec.image is ignored.
  Status Start(const TaskSpec& spec) override;
  StatusOr<TaskStatus> Poll(std::int64_t task_id) override;
  bool PollIsCheap() const override { return true; }  // the task's files
  Status Kill(std::int64_t task_id, std::chrono::milliseconds grace) override;
  StatusOr<std::vector<AdoptedTask>> Adopt() override;
  Status Remove(std::int64_t task_id) override;
  StatusOr<LogChunk> ReadLog(std::int64_t task_id, std::int64_t offset,
                             std::size_t max_bytes) override;

  // The task's directory and log file (they need not exist).
  std::filesystem::path TaskDir(std::int64_t task_id) const;
  std::filesystem::path LogPath(std::int64_t task_id) const;

 private:
  explicit ProcessRuntime(ProcessRuntimeOptions options);

  // Spawns the shim for the prepared `dir` and waits for its ready word.
  Status SpawnShim(const std::filesystem::path& dir) const;
  // The status as the files in `dir` tell it. REQUIRES: `dir` exists.
  StatusOr<TaskStatus> StatusFromDir(const std::filesystem::path& dir) const;
  // Waits until `dir` holds an exit record, the shim is gone, or `timeout`.
  bool WaitForExitRecord(const std::filesystem::path& dir,
                         std::chrono::milliseconds timeout) const;

  ProcessRuntimeOptions options_;
  std::filesystem::path tasks_dir_;
};

}  // namespace hf::runtime
