// Running a helper program (the docker CLI) and collecting what it prints.
//
// Thread-safety: RunCommand may be called from several threads at once. It
// spawns with posix_spawn and close-on-exec pipes, so one call's pipes never
// leak into another call's child.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace hf::runtime {

struct CommandOptions {
  // The child is killed (SIGKILL) when it runs longer.
  std::chrono::milliseconds timeout{60'000};
  // Send stderr into `out` too, interleaved as the child writes it.
  bool merge_stderr = false;
  // Once `out` holds this many bytes the child is killed and `capped` set;
  // `err` is limited to the same size (the rest is dropped).
  std::size_t max_output = std::size_t{64} << 20;
};

struct CommandResult {
  int exit_code = -1;   // -1 when the child was killed by a signal
  int term_signal = 0;  // the signal that ended it, or 0
  bool capped = false;  // killed because of max_output
  std::string out;
  std::string err;
};

// Runs argv (argv[0] is looked up on PATH when it has no '/') with stdin on
// /dev/null and the caller's environment. Returns the result whatever the
// exit code. Unavailable when the program cannot be started or runs past
// the timeout; InvalidArgument for an empty argv.
StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                   const CommandOptions& options = {});

}  // namespace hf::runtime
