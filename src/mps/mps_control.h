// MpsControl: the seam between the node agent and the CUDA MPS control
// daemon that backs silver slices (docs/CONTRACT.md sections 3 and 9,
// docs/MPS.md).
//
// Two implementations: ProcessMpsControl (process_mps_control.h; runs the
// real `nvidia-cuda-mps-control`, or the fake in src/mps/testing/) and
// SimMpsControl (sim_mps_control.h; in memory, for the simulated GPU
// backend). The contract tests in mps_test.cc run against both.
//
// Also here, as pure functions, the two facts the agent derives from the
// daemon: whether a GPU is MPS capable, and which MPS variables a silver
// task gets. Both say "nothing" while the daemon is down: no capability is
// reported and no pipe directory is injected.
//
// Thread-safety: implementations are safe to call from several threads; the
// free functions are pure.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/quantity.h"
#include "common/status.h"

namespace hf::mps {

// The environment variables of the MPS client contract (docs/MPS.md).
inline constexpr std::string_view kPipeDirectoryEnv = "CUDA_MPS_PIPE_DIRECTORY";
inline constexpr std::string_view kLogDirectoryEnv = "CUDA_MPS_LOG_DIRECTORY";
inline constexpr std::string_view kPinnedMemLimitEnv =
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
inline constexpr std::string_view kActiveThreadPercentageEnv =
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";

class MpsControl {
 public:
  virtual ~MpsControl() = default;

  // Starts the control daemon when it is not running. Ok when the daemon
  // answers afterwards (already running included); idempotent, and cheap
  // when the daemon is up (one probe). The agent calls it on every
  // heartbeat: that is the supervision that restarts a daemon which died.
  // After a (re)start every cap given to SetWholeCardPinnedLimit is set
  // again, since the daemon forgets them when it stops; when that fails the
  // new daemon is stopped again (no silver without its cap) and the error is
  // returned.
  // Errors: FailedPrecondition (control binary missing, bad directories),
  // Unavailable (the daemon could not be started, or a restart backoff is
  // running; the message says when the next attempt is due), Internal.
  virtual Status Ensure() = 0;

  // Probes the daemon afresh (never a cached belief): true when it answers a
  // command now.
  virtual bool Alive() = 0;

  // Sets the daemon-side default pinned device memory limit of `device` (a
  // device index such as "0", or a "GPU-..."/"MIG-..." UUID) to `limit_mib`.
  // MPS clients can only lower it. The cap is remembered and set again
  // whenever the daemon restarts. It binds MPS servers started after the
  // call; a server already running keeps the limit it started with.
  // Errors: InvalidArgument (device or limit malformed), Unavailable (no
  // daemon now: the cap is still remembered and set at the next start),
  // Internal (the daemon did not take or does not report the value).
  virtual Status SetWholeCardPinnedLimit(const std::string& device,
                                         MemoryMib limit_mib) = 0;

  // Where clients find the daemon (CUDA_MPS_PIPE_DIRECTORY; mounted into the
  // task's container) and where the daemon logs (CUDA_MPS_LOG_DIRECTORY).
  virtual std::string PipeDirectory() const = 0;
  virtual std::string LogDirectory() const = 0;

  // Sends `quit`: the daemon (and, as MPS does, its servers once their
  // clients are done) ends. For explicit operator action only; the agent's
  // own shutdown never calls it, so tasks outlive an agent restart. Ok when
  // no daemon was running. Unavailable when it still answers afterwards.
  virtual Status Stop() = 0;
};

// mps_capable (docs/CONTRACT.md section 3): the daemon answers now and the GPU
// has compute capability 7.0 or newer (Volta: the first with the client
// limits).
bool MpsCapable(bool daemon_alive, int cc_major);

// What the agent knows about the daemon at one moment.
struct MpsDaemonState {
  bool alive = false;
  std::string pipe_directory;
  std::string log_directory;
};

// Probes `control` once and returns its state.
MpsDaemonState ProbeDaemon(MpsControl& control);

// A slice's MPS client limits exactly as the server computed them (the
// server's slice environment is the one place that derives them); empty
// when the slice has none.
struct MpsSliceLimits {
  std::string pinned_device_mem_limit;   // "0=4096M"
  std::string active_thread_percentage;  // "25"
};

// Reads the limits out of the environment the server computed for a task.
MpsSliceLimits SliceLimitsFromEnv(
    const std::map<std::string, std::string>& slice_env);

// The MPS variables a silver task gets: the pipe and log directories and
// the slice's limits, unchanged. Empty while the daemon is down (or names
// no pipe directory): no pipe is ever injected that leads nowhere. The
// agent must then fail a task promised silver, never run it as bronze.
std::map<std::string, std::string> MpsClientEnv(const MpsDaemonState& daemon,
                                                const MpsSliceLimits& limits);

// Ok when `device` can name a device in a control command: a decimal index
// or a "GPU-"/"MIG-" UUID (letters, digits, '-', '/'). Anything else
// (spaces, newlines) could smuggle a second command: InvalidArgument.
Status ValidateDeviceKey(std::string_view device);

// The value syntax of set_default_device_pinned_mem_limit: "4096M".
// REQUIRES: limit_mib > 0.
std::string FormatPinnedLimit(MemoryMib limit_mib);

// True when the daemon's reply to get_default_device_pinned_mem_limit
// ("4096M", or "4G": the daemon shows 1 GiB and more in whole GiB, rounded
// down) shows `limit_mib`.
bool PinnedLimitReplyMatches(std::string_view reply, MemoryMib limit_mib);

}  // namespace hf::mps
