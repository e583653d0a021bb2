// The on-disk state of ProcessRuntime tasks: file names, record formats and
// the /proc reads that tell a live process from a recycled pid. Shared by the
// runtime (the agent side) and hf-task-shim (the supervisor), so both sides
// read and write the same formats from one place.
//
// Layout of one task, `<state_dir>/tasks/<task_id>/`:
//   argv      the command, NUL-separated (written by the runtime)
//   env       the full environment, NUL-separated KEY=VALUE, mode 0600
//   labels    TaskLabels(spec), NUL-separated KEY=VALUE
//   log       the command's stdout+stderr (and the shim's own complaints)
//   shim.pid  identity of the supervising shim   } "<pid> <start> <boot>"
//   pid       identity of the command; also its   } written by the shim,
//             process group and session id        } atomically
//   exit      how the command ended, written atomically by the shim once:
//               "exited <code>" | "signaled <signo>" |
//               "failed <code>\n<message>" (could not exec)
// A task directory without `exit` is running, or lost when neither the shim
// nor the command is alive any more.
//
// Thread-safety: free functions over files; each write is atomic (write to a
// temporary name, then rename), so a reader sees a record whole or not at
// all.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hf::runtime::task_files {

inline constexpr char kArgvFile[] = "argv";
inline constexpr char kEnvFile[] = "env";
inline constexpr char kLabelsFile[] = "labels";
inline constexpr char kLogFile[] = "log";
inline constexpr char kShimPidFile[] = "shim.pid";
inline constexpr char kPidFile[] = "pid";
inline constexpr char kExitFile[] = "exit";

// What the shim writes on its ready pipe before closing it: "ok\n" once the
// command has been exec'd (or has failed to exec, which `exit` records), or
// "error <message>\n" when the shim could not set the task up at all.
inline constexpr std::string_view kReadyOk = "ok";
inline constexpr std::string_view kReadyError = "error ";

// A process as it was when recorded. The start time (clock ticks since
// boot, /proc/<pid>/stat field 22) and the boot id make a recycled pid, or a
// pid from before a reboot, recognisable.
struct ProcessIdentity {
  pid_t pid = 0;
  std::uint64_t start_time = 0;
  std::string boot_id;
  friend bool operator==(const ProcessIdentity&,
                         const ProcessIdentity&) = default;
};

std::string FormatIdentity(const ProcessIdentity& identity);
std::optional<ProcessIdentity> ParseIdentity(std::string_view text);

// The identity of process `pid` now (a zombie included); nullopt if there is
// no such process.
std::optional<ProcessIdentity> IdentityOf(pid_t pid);

// True when `identity`'s process still exists and is not a zombie.
bool IsAlive(const ProcessIdentity& identity);

// /proc/sys/kernel/random/boot_id, or "" where the kernel lacks it.
std::string BootId();

struct ExitRecord {
  enum class Kind { kExited, kSignaled, kExecFailed };
  Kind kind = Kind::kExited;
  int value = 0;        // exit code, signal number, or 126/127 for kExecFailed
  std::string message;  // kExecFailed only
  friend bool operator==(const ExitRecord&, const ExitRecord&) = default;
};

std::string FormatExitRecord(const ExitRecord& record);
std::optional<ExitRecord> ParseExitRecord(std::string_view text);

// NUL-separated lists: every item is followed by one NUL.
std::string JoinNul(const std::vector<std::string>& items);
std::vector<std::string> SplitNul(std::string_view text);

// Writes `data` to `path` through a temporary file in the same directory
// and a rename, with permission bits `mode`.
Status WriteFileAtomic(const std::filesystem::path& path, std::string_view data,
                       mode_t mode = 0644);

// The whole file; NotFound when it does not exist.
StatusOr<std::string> ReadWholeFile(const std::filesystem::path& path);

}  // namespace hf::runtime::task_files
