// Task runtimes: how the node agent runs the tasks the server hands it.
//
// A `Runtime` starts a task from a `TaskSpec`, reports its state, stops it,
// forgets it, serves its log and, after an agent restart, finds the tasks it
// still has (`Adopt`). Two implementations exist: `ProcessRuntime` (plain
// processes under a supervisor shim; bare hosts and tests) and
// `DockerRuntime` (the `docker` CLI with the NVIDIA runtime). Neither keeps
// the truth in memory: a runtime object may be destroyed and recreated (or
// the agent killed) while its tasks run on.
//
// This header also holds the two facts both runtimes share, each in one
// function: which specs are valid (`ValidateTaskSpec`) and which environment
// a task gets (`ComposeTaskEnv`).
//
// Thread-safety: the value types are plain values. Every Runtime
// implementation is safe to call from several threads at once; calls for
// different tasks do not wait for each other.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hf::runtime {

using StringMap = std::map<std::string, std::string>;

// Labels every runtime attaches to a task (container labels for Docker, the
// `labels` file for processes). They win over user labels of the same name.
inline constexpr std::string_view kTaskLabel = "heteroflow.task";
inline constexpr std::string_view kTenantLabel = "heteroflow.tenant";
inline constexpr std::string_view kSliceLabel = "heteroflow.slice";

// How a preload library reaches a container's processes (docs/HOOK.md,
// "Loading"). A host process always gets LD_PRELOAD: the host's
// /etc/ld.so.preload is the whole machine's.
enum class PreloadRoute {
  kEnv,          // LD_PRELOAD only
  kLdSoPreload,  // a preload file mounted read-only at /etc/ld.so.preload
  kBoth,         // both: a launcher that clears LD_PRELOAD still has the file
};

// "env", "ld-so-preload", "both".
std::string_view PreloadRouteName(PreloadRoute route);
// The route a name names; nullopt for any other text.
std::optional<PreloadRoute> ParsePreloadRoute(std::string_view name);

// What to run. Built by the agent from the server's task and slice.
struct TaskSpec {
  std::int64_t task_id = 0;   // > 0; the runtime's key for the task
  std::string tenant;         // for labels and logs only
  std::int64_t slice_id = 0;  // 0: no slice (not labelled)

  // Container image (DockerRuntime only; ignored by ProcessRuntime).
  std::string image;
  // argv. ProcessRuntime: required, argv[0] is looked up on the task's PATH.
  // DockerRuntime: may be empty to run the image's default command.
  std::vector<std::string> command;

  // The slice variables the server computed (HETEROFLOW_*, CUDA_MPS_*, ...)
  // plus the user's own. See ComposeTaskEnv for what the runtime adds.
  StringMap env;

  // GPU pinning: at most one of the two. Indices are host GPU indices
  // ("0,2"); the MIG device is its UUID ("MIG-...").
  std::vector<int> gpu_indices;
  std::string mig_device;

  // MPS: the control daemon's pipe directory (absolute), or empty. Injected
  // as CUDA_MPS_PIPE_DIRECTORY; containers also get it mounted and
  // --ipc=host.
  std::string mps_pipe_dir;

  // Absolute path of a hook library to LD_PRELOAD, or empty. Containers get
  // it mounted read-only at the same path.
  std::string preload_library;
  // Containers only, with a preload library: the route, and for kLdSoPreload
  // and kBoth the absolute path of a host file that names preload_library
  // (the agent writes it), mounted read-only at /etc/ld.so.preload.
  PreloadRoute preload_route = PreloadRoute::kEnv;
  std::string preload_file;
  // Absolute path of the slice's hook region file (src/hook/region.h), which
  // the agent created, or empty. Injected as HETEROFLOW_HOOK_REGION;
  // containers get it mounted read-write at the same path (the hook in the
  // task and the agent share it).
  std::string hook_region;
  // The GPU's region (hook/gpu_region.h), shared by every slice on the
  // task's GPU: how their compute shares coordinate. Injected as
  // HETEROFLOW_HOOK_GPU_REGION; containers get it mounted read-write.
  // Empty: none.
  std::string hook_gpu_region;

  // Free-form labels; keys must be non-empty and contain no '='.
  StringMap labels;
};

enum class TaskState {
  kRunning,   // started and not known to have ended
  kExited,    // ended by itself; `exit_code` is its status
  kSignaled,  // killed by signal `signal` (Kill, OOM killer, ...)
  kFailed,    // never ran: the command could not be executed
  kLost,      // the runtime can no longer tell what happened to it
};

std::string_view TaskStateName(TaskState state);

struct TaskStatus {
  TaskState state = TaskState::kRunning;
  int exit_code = 0;  // kExited; kFailed (127: not found, 126: not runnable)
  int signal = 0;     // kSignaled
  bool oom_killed = false;  // the engine reported an out-of-memory kill
  std::string message;      // human detail ("" when there is nothing to say)

  bool finished() const { return state != TaskState::kRunning; }
  friend bool operator==(const TaskStatus&, const TaskStatus&) = default;
};

// "running", "exited 3", "killed by signal 9 (OOM)", "failed 127: ...".
std::string DescribeTaskStatus(const TaskStatus& status);

// One task a runtime still holds, as found by Adopt.
struct AdoptedTask {
  std::int64_t task_id = 0;
  TaskStatus status;
  StringMap labels;  // including the heteroflow.* labels
};

// A piece of a task's combined stdout+stderr.
struct LogChunk {
  std::string data;
  std::int64_t next_offset = 0;  // pass back as `offset` to read on
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  // "process" or "docker".
  virtual std::string_view Name() const = 0;

  // Starts the task and returns once it is running or has failed to run (an
  // unexecutable command is a started task whose Poll says kFailed).
  // Errors: InvalidArgument (ValidateTaskSpec), AlreadyExists (the runtime
  // still holds a task with this id, finished or not; Remove it first),
  // Unavailable (the engine is down), FailedPrecondition (e.g. image
  // missing), Internal.
  virtual Status Start(const TaskSpec& spec) = 0;

  // The task's current state. NotFound for a task this runtime does not
  // hold (never started, or removed).
  virtual StatusOr<TaskStatus> Poll(std::int64_t task_id) = 0;
  // Whether Poll is cheap enough to call for every running task several
  // times a second (a file read, not an engine call): the agent then looks
  // for ended tasks between heartbeats (AgentOptions::exit_poll_interval).
  virtual bool PollIsCheap() const { return false; }

  // Asks the task's whole process group (container) to stop with SIGTERM,
  // and sends SIGKILL once `grace` has passed. Blocks until the task has
  // ended (or about grace + a few seconds). OK for a task that has already
  // ended; NotFound for an unknown task.
  virtual Status Kill(std::int64_t task_id,
                      std::chrono::milliseconds grace) = 0;

  // Every task this runtime holds, running or finished, e.g. left by a
  // previous agent process. In ascending task id order.
  virtual StatusOr<std::vector<AdoptedTask>> Adopt() = 0;

  // Forgets a finished task and deletes its state and log.
  // FailedPrecondition while it runs (Kill it first); NotFound if unknown.
  virtual Status Remove(std::int64_t task_id) = 0;

  // Up to `max_bytes` of the task's log from byte `offset`. Fewer (or none)
  // at the current end of the log. NotFound for an unknown task.
  virtual StatusOr<LogChunk> ReadLog(std::int64_t task_id, std::int64_t offset,
                                     std::size_t max_bytes) = 0;
};

// Where a spec's environment goes: a host process sees host GPU indices; a
// container sees only the devices the NVIDIA runtime exposes, renumbered
// from 0, so a host index in CUDA_VISIBLE_DEVICES would name the wrong one.
enum class EnvTarget { kHostProcess, kContainer };

// OK when `spec` can be started: task_id > 0; a command (kHostProcess) or an
// image not starting with '-' (kContainer); at most one of gpu_indices and
// mig_device, indices >= 0 and distinct, the MIG device "MIG-..."; absolute
// mps_pipe_dir, and preload_library, preload_file and hook_region absolute
// without ':' or spaces; a preload_file when a container's preload_route
// needs one; env names non-empty without '=', label
// keys likewise; no NUL byte anywhere. InvalidArgument naming the field
// otherwise.
Status ValidateTaskSpec(const TaskSpec& spec, EnvTarget target);

// The task's environment, in this order (later wins):
//   1. `base` (ProcessRuntime passes DefaultBaseEnv(); containers nothing,
//      the image has its own),
//   2. spec.env,
//   3. GPU pinning: NVIDIA_VISIBLE_DEVICES and, for host processes,
//      CUDA_VISIBLE_DEVICES = "0,2" or the MIG UUID. In a container
//      CUDA_VISIBLE_DEVICES is removed instead (see EnvTarget). Without
//      pinning both pass through from spec.env untouched.
//   4. CUDA_MPS_PIPE_DIRECTORY = spec.mps_pipe_dir when set,
//   5. LD_PRELOAD = spec.preload_library, ahead of any LD_PRELOAD already
//      set ("hook.so:user.so"); not in a container whose preload_route is
//      kLdSoPreload (its /etc/ld.so.preload names the library),
//   6. HETEROFLOW_HOOK_REGION = spec.hook_region when set.
// Steps 5 and 6 are the hook's whole environment on the node's side (the
// server's slice env gives it HETEROFLOW_SLICE_*).
// REQUIRES: ValidateTaskSpec(spec, target).ok().
StringMap ComposeTaskEnv(const TaskSpec& spec, const StringMap& base,
                         EnvTarget target);

// The value the pinning gives *_VISIBLE_DEVICES ("0,2", "MIG-..."), or ""
// when the spec pins nothing.
std::string VisibleDevices(const TaskSpec& spec);

// The dynamic loader's line in a task's output that says why a program did
// not start, or ran without a library it was to preload (the hook in an
// image whose glibc is older than the hook needs, say):
//   "...: version `GLIBC_2.34' not found (required by .../libhfhook.so)"
//   "...: error while loading shared libraries: ...: cannot open ..."
//   "...: symbol lookup error: ...: undefined symbol: ..."
//   "ERROR: ld.so: object '...' from LD_PRELOAD cannot be preloaded (...)"
//   "Error loading shared library ...", "Error relocating ..." (musl)
// The last such line, trimmed, at most 500 bytes, bytes other than
// printable ASCII replaced by '?'; "" when there is none.
std::string FindLoaderError(std::string_view output);

// FindLoaderError over the log of task `task_id` of `runtime`: its first
// and last 64 KiB, the last part first (a program the loader stops prints
// its line and ends at once, so the line is near one end). `log_size` is
// the log's size when known (what has been shipped of it); with -1 only the
// first part is read. "" when the log says nothing of the kind or cannot be
// read.
std::string LoaderErrorOfTask(Runtime& runtime, std::int64_t task_id,
                              std::int64_t log_size);

// "KEY=VALUE", the form of environment entries and label arguments.
std::string KeyValue(std::string_view key, std::string_view value);

// spec.labels plus the heteroflow.* labels (task, tenant, slice when set).
StringMap TaskLabels(const TaskSpec& spec);

// The minimal environment a host process starts from: PATH (the standard
// system directories), HOME ("/", or the agent's HOME when set), LANG=C.UTF-8.
// Nothing else of the agent's environment leaks into a task.
StringMap DefaultBaseEnv();

}  // namespace hf::runtime
