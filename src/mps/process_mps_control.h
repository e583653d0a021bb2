// ProcessMpsControl: MpsControl over the real `nvidia-cuda-mps-control`
// (docs/MPS.md). Commands go to the binary's stdin, one run per command,
// each bounded by a timeout, so a wedged daemon can never hang the agent.
//
// The daemon is started as its own unit, never as a child of the agent, so
// an agent restart (or crash) leaves it and the tasks using it alone:
//   - where systemd is the init, `systemd-run --unit=heteroflow-mps ...`
//     (SystemdRunLauncher);
//   - elsewhere a detached process: double fork, new session, stdio to a log
//     file (DetachedLauncher).
// Supervision is the agent calling Ensure() on every heartbeat: a daemon
// found dead is started again, with exponential backoff between failed
// attempts, and each outage is logged once (and its end once).
//
// Thread-safety: safe to call from several threads; Ensure, Set and Stop
// are serialised by an internal mutex (each holds it for at most a few
// command timeouts).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "mps/mps_control.h"

namespace hf::mps {

// What a launcher starts: `argv` is `<absolute control binary> -d`; `env`
// holds the variables the daemon needs (the pipe and log directories first
// of all); the daemon's own stdio goes to `stdio_log_path` where the
// launcher controls it.
struct LaunchSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string stdio_log_path;
  std::chrono::milliseconds timeout{10000};
};

// How the daemon gets started: the seam that lets tests check the systemd
// command line on machines without systemd.
class DaemonLauncher {
 public:
  virtual ~DaemonLauncher() = default;
  // "systemd-run" or "detached", for logs.
  virtual std::string Name() const = 0;
  // Starts the daemon and returns once the start command has finished (the
  // daemon may still be getting ready). Unavailable when the start command
  // failed; NotFound when it could not be run.
  virtual Status Launch(const LaunchSpec& spec) = 0;
};

// `systemd-run --unit=<unit> --collect --property=Type=forking
//  --setenv=NAME=VALUE... <binary> -d`: a transient service of its own, in
// its own cgroup, that outlives the agent's unit. Type=forking because `-d`
// returns once the daemon is forked; --collect so a failed unit does not
// block the next start under the same name.
class SystemdRunLauncher final : public DaemonLauncher {
 public:
  explicit SystemdRunLauncher(std::string systemd_run = "systemd-run",
                              std::string unit = "heteroflow-mps");
  std::string Name() const override { return "systemd-run"; }
  Status Launch(const LaunchSpec& spec) override;
  // The command line Launch runs.
  std::vector<std::string> CommandLine(const LaunchSpec& spec) const;

 private:
  std::string systemd_run_;
  std::string unit_;
};

// StartDetached (subprocess.h): double fork, setsid, stdio to the log.
class DetachedLauncher final : public DaemonLauncher {
 public:
  std::string Name() const override { return "detached"; }
  Status Launch(const LaunchSpec& spec) override;
};

// True when systemd is the init: `marker_dir` (/run/systemd/system, the
// test sd_booted() makes) exists and `systemd-run` is on `path_env`.
bool SystemdIsInit(const std::string& marker_dir = "/run/systemd/system",
                   const std::string& path_env = "");

// SystemdRunLauncher where SystemdIsInit() (on the agent's PATH), else
// DetachedLauncher.
std::unique_ptr<DaemonLauncher> DefaultLauncher();

struct ProcessMpsOptions {
  // The control binary: a path, or a name looked up on PATH.
  std::string control_binary = "nvidia-cuda-mps-control";
  // Pipe directory `<base_dir>/pipe`, log directory `<base_dir>/log`. The
  // pipe path must stay short: the daemon's socket path there is limited to
  // 107 bytes (AF_UNIX).
  std::string base_dir = "/run/heteroflow/mps";
  // More environment for the daemon and the control commands (e.g.
  // CUDA_VISIBLE_DEVICES, or test knobs of the fake binary).
  std::map<std::string, std::string> extra_env;
  // One control command (stdin in, reply out).
  std::chrono::milliseconds command_timeout{5000};
  // The launch, plus the wait for the new daemon to answer.
  std::chrono::milliseconds start_timeout{10000};
  // Between failed start attempts: doubles from initial up to max.
  std::int64_t restart_backoff_initial_ms = 1000;
  std::int64_t restart_backoff_max_ms = 60000;
};

class ProcessMpsControl final : public MpsControl {
 public:
  // `launcher` null: DefaultLauncher(). `clock` times the restart backoff
  // and must outlive this object.
  ProcessMpsControl(ProcessMpsOptions options,
                    std::unique_ptr<DaemonLauncher> launcher,
                    const Clock& clock);

  Status Ensure() override;
  bool Alive() override;
  Status SetWholeCardPinnedLimit(const std::string& device,
                                 MemoryMib limit_mib) override;
  std::string PipeDirectory() const override { return pipe_dir_; }
  std::string LogDirectory() const override { return log_dir_; }
  Status Stop() override;

  // Runs one control command and returns its reply (stdout). Unavailable
  // when no daemon answers or the command times out. Exposed for the
  // agent's diagnostics and for tests.
  StatusOr<std::string> Command(const std::string& command);

 private:
  std::map<std::string, std::string> DaemonEnv() const;
  Status StartLocked() HF_REQUIRES(mu_);
  Status ApplyCapLocked(const std::string& device, MemoryMib limit_mib)
      HF_REQUIRES(mu_);
  std::string LaunchLogPath() const;
  std::int64_t LaunchLogSize() const;
  // The end of the launch log from byte `since` on ("" when nothing new),
  // formatted to be appended to an error message.
  std::string LaunchLogTail(std::int64_t since) const;

  const ProcessMpsOptions options_;
  const std::unique_ptr<DaemonLauncher> launcher_;
  const Clock& clock_;
  const std::string pipe_dir_;
  const std::string log_dir_;

  Mutex mu_;
  std::map<std::string, MemoryMib> caps_ HF_GUARDED_BY(mu_);
  bool ever_started_ HF_GUARDED_BY(mu_) = false;
  bool outage_logged_ HF_GUARDED_BY(mu_) = false;
  bool failure_logged_ HF_GUARDED_BY(mu_) = false;
  std::int64_t next_attempt_ms_ HF_GUARDED_BY(mu_) = 0;
  std::int64_t backoff_ms_ HF_GUARDED_BY(mu_) = 0;
  std::string last_failure_ HF_GUARDED_BY(mu_);
};

}  // namespace hf::mps
