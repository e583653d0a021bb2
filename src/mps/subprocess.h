// Running helper programs from the agent without ever hanging it: a bounded
// command runner (the MPS control commands, systemd-run) and the detached
// start of a daemon that must outlive the agent.
//
// Both fork from a process that may have threads; everything the child does
// between fork and exec is async-signal-safe (argv and envp are built
// before the fork).
//
// Thread-safety: the functions are safe to call from several threads.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace hf::mps {

struct CommandSpec {
  // argv[0] is a path, or a name looked up on PATH.
  std::vector<std::string> argv;
  // Set on top of the agent's environment (or alone, with clear_env).
  std::map<std::string, std::string> env;
  bool clear_env = false;
  // Given as the command's whole stdin (at most 16 KiB), then end of file.
  std::string stdin_text;
  std::chrono::milliseconds timeout{5000};
};

struct CommandResult {
  int exit_code = -1;  // -1 when a signal ended it
  int term_signal = 0;
  std::string out;  // each stream is kept up to 1 MiB
  std::string err;
};

// Runs a command to completion in its own process group. The command and
// everything it started in that group are SIGKILLed when `timeout` passes:
// Unavailable ("timed out"). NotFound when argv[0] cannot be found or run;
// InvalidArgument for an empty argv or oversized stdin; Internal when no
// process could be made. A non-zero exit is a result, not an error.
StatusOr<CommandResult> RunCommand(const CommandSpec& spec);

// `name` when it holds a '/', else the first executable file called `name`
// in the directories of `path_env` (a PATH value). NotFound otherwise.
StatusOr<std::string> ResolveExecutable(const std::string& name,
                                        const std::string& path_env);

// The agent's PATH ("" when unset).
std::string CurrentPath();

struct DetachedSpec {
  // argv[0] must be an absolute path (see ResolveExecutable).
  std::vector<std::string> argv;
  // Set on top of the agent's environment.
  std::map<std::string, std::string> env;
  // The program's stdout and stderr are appended here; stdin is /dev/null.
  std::string stdio_log_path;
  // How long to wait for the program itself to exit (a `-d` launcher
  // returns once its daemon is forked).
  std::chrono::milliseconds wait{5000};
};

// Starts `spec.argv` detached from the agent: double fork, a new session
// (its own process group, no controlling terminal), stdio to the log, no
// inherited descriptors, reparented away from the agent, so nothing that
// happens to the agent (even SIGKILL of it or of its process group)
// reaches the program. Waits up to `spec.wait` for the program to exit.
// Ok when it exited 0 or is still running at the deadline (a foreground
// daemon). Unavailable when it exited non-zero or was killed; NotFound when
// it could not be executed; Internal when no process could be made.
Status StartDetached(const DetachedSpec& spec);

// True when `pid` names a live process. A zombie (exited, not yet reaped)
// counts as dead.
bool ProcessRunning(pid_t pid);

}  // namespace hf::mps
