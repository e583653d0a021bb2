// The agent half of the end-to-end harness: starts the REAL hf-agent binary
// (found through the HF_AGENT_PATH compile definition, CMake:
// "$<TARGET_FILE:hf-agent>"; hf-task-shim is built beside it) against a
// server started by `ServerProcess` (server_harness.h), with the simulated
// GPU backend and an inventory the test writes, in a fresh temporary
// directory.
//
// Layout of an `AgentProcess` directory:
//   inventory.json   the simulated GPUs (docs/INVENTORY.md)
//   node.token       the node token the agent reads (--token-file)
//   state/           --state-dir: the process runtime's task directories
//                    (state/runtime/tasks/<id>/), claimed MIG commands and
//                    the simulated MIG state (state/sim-mig-state.json)
//   mps/             --mps-dir: the simulated MPS pipe/ and log/ paths
//   agent.log        stdout and stderr of every start of the agent
//
// Stop sends SIGTERM and expects exit code 0 (tasks keep running); Kill
// sends SIGKILL; Restart does either and starts again on the same state
// directory, so the new agent adopts what the old one left running.
//
// Tasks of the process runtime are no children of the agent (hf-task-shim
// detaches them), so the destructor kills whatever tasks are still alive in
// its state directory: a failed test leaves no task behind.
//
// Environment: HF_E2E_KEEP=1 keeps the directory (printed) for inspection.
//
// Thread-safety: drive an AgentProcess from one thread, one that outlives
// it (the child gets PR_SET_PDEATHSIG, tied to the forking thread).
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/server_harness.h"

namespace hf::e2e {

struct AgentProcessOptions {
  std::string node_id;
  // The simulated inventory (written to inventory.json on every Start, so a
  // test may change it between Stop and Start).
  json inventory;
  // The node token's secret (written to node.token).
  std::string token;
  // "process" or "docker".
  std::string runtime = "process";
  // The docker CLI, for runtime "docker" (e.g. FakeDockerPath()).
  std::string docker;
  double heartbeat_interval_s = 0.2;
  double kill_grace_s = 2;
  // More hf-agent flags, e.g. {"--mig-destroy-wait", "1"}.
  std::vector<std::string> flags;
  // Extra environment for the agent (and so for the tasks' runtime helper),
  // e.g. {"FAKE_DOCKER_STATE", dir}. The test's HF_* variables are dropped.
  std::vector<std::pair<std::string, std::string>> env;
  // Start the agent in its directory and give every path flag (token file,
  // inventory, state and MPS directories) relative to it ("./state"), as a
  // person in a checkout would (issue 14: `make run`'s ./var/mps).
  bool relative_paths = false;
  // How long Stop waits for the exit after SIGTERM.
  milliseconds stop_timeout{15'000};
};

class AgentProcess {
 public:
  // `server_url`: "http://127.0.0.1:PORT" (ServerProcess::url()).
  AgentProcess(std::string server_url, AgentProcessOptions options);
  ~AgentProcess();  // SIGKILLs a running agent and its tasks; removes the dir
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  // Writes the inventory and token files and starts hf-agent. Returns once
  // the process exists; use WaitForLog or the server's node view to know it
  // registered.
  ::testing::AssertionResult Start();
  // SIGTERM, waits, and expects exit code 0.
  ::testing::AssertionResult Stop();
  // SIGKILL and reap.
  ::testing::AssertionResult Kill();
  // Stop (or Kill) and Start again on the same state directory.
  ::testing::AssertionResult Restart(bool kill = false);
  // Waits up to `timeout` for the agent to exit by itself; its exit code,
  // or -signal when it was killed, or nullopt when it still runs.
  std::optional<int> WaitExit(milliseconds timeout);

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  const std::string& node_id() const { return options_.node_id; }
  AgentProcessOptions& options() { return options_; }
  void set_server_url(std::string url) { server_url_ = std::move(url); }

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path state_dir() const { return dir_ / "state"; }
  std::filesystem::path mps_dir() const { return dir_ / "mps"; }
  std::filesystem::path log_path() const { return dir_ / "agent.log"; }
  // The process runtime's directory of task `id`.
  std::filesystem::path TaskDir(std::int64_t id) const;

  // The agent's log (every start), or its last `max_bytes`.
  std::string Log(std::size_t max_bytes = 16'384) const;
  bool LogContains(const std::string& needle) const;
  // Polls the log for `needle`; false (with the log) on timeout.
  ::testing::AssertionResult WaitForLog(
      const std::string& needle, milliseconds timeout = milliseconds(15'000));

  // The process group of task `id` as its shim recorded it (the command's
  // pid, which leads its own group); nullopt before it is recorded.
  std::optional<pid_t> TaskPid(std::int64_t id) const;
  std::optional<pid_t> WaitTaskPid(std::int64_t id,
                                   milliseconds timeout = milliseconds(10'000));

 private:
  bool Reap(int* status, milliseconds timeout);
  void KillLeftoverTasks() const;

  std::string server_url_;
  AgentProcessOptions options_;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
};

// The fields of /proc/<pid>/stat after "(comm)": [0] state, [2] pgrp,
// [19] start time (with the pid, a process's identity). Empty when the
// process does not exist.
std::vector<std::string> ProcStatFields(pid_t pid);

// Processes in process group `pgid` that have not ended (zombies do not
// count), read from /proc.
int LiveProcessesInGroup(pid_t pgid);

// The fake docker CLI of the runtime's tests (src/runtime/testing).
std::string FakeDockerPath();

// Creates a node token through `api`, bound to `node` when it is not empty;
// returns the secret ("" and a test failure otherwise).
std::string CreateNodeToken(const Api& api, const std::string& node = "");

// A simulated inventory: `gpus` as docs/INVENTORY.md describes them, with
// the node-level fields filled in.
json SimInventory(const std::string& node, json gpus,
                  bool mps_daemon_can_start = true);
// GPUs for SimInventory.
json H100Mig(json faults = json::array());
json A100(std::int64_t memory_mb = 81920, json faults = json::array());
json T4();    // 15360 MB, compute capability 7.5 (MPS-capable)
json P100();  // compute capability 6.0: no MPS limits (bronze)

// KEY=VALUE lines of a log (the output of `env`) as a map; other lines are
// ignored.
std::map<std::string, std::string> ParseEnvLines(const std::string& text);

// A shell command that waits until `file` exists (at most `max_s` seconds),
// then runs `then`.
std::string WaitForFileCommand(const std::filesystem::path& file,
                               const std::string& then, int max_s = 60);

// Creates `file` (empty).
void Touch(const std::filesystem::path& file);

}  // namespace hf::e2e
