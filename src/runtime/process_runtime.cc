// ProcessRuntime: task directories plus hf-task-shim supervisors.
#include "runtime/process_runtime.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <system_error>
#include <thread>

#include "runtime/task_files.h"

namespace hf::runtime {
namespace {

namespace tf = task_files;
namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

// The fd number the shim finds its ready pipe on.
constexpr int kShimReadyFd = 3;
// Never read more than this in one ReadLog, whatever the caller asks.
constexpr std::size_t kMaxLogChunk = std::size_t{16} << 20;

std::string TaskName(std::int64_t task_id) {
  return "task " + std::to_string(task_id);
}

// Sleeps a little longer each time, from 2 ms up to 50 ms, so short waits
// stay short and long ones stay cheap.
class Backoff {
 public:
  void Sleep() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::milliseconds(50));
  }

 private:
  std::chrono::milliseconds delay_{2};
};

std::optional<tf::ProcessIdentity> ReadIdentity(const fs::path& file) {
  StatusOr<std::string> text = tf::ReadWholeFile(file);
  if (!text.ok()) return std::nullopt;
  return tf::ParseIdentity(*text);
}

bool ShimAlive(const fs::path& dir) {
  const std::optional<tf::ProcessIdentity> shim =
      ReadIdentity(dir / tf::kShimPidFile);
  return shim && tf::IsAlive(*shim);
}

std::optional<TaskStatus> StatusFromExitRecord(const fs::path& dir) {
  StatusOr<std::string> text = tf::ReadWholeFile(dir / tf::kExitFile);
  if (!text.ok()) return std::nullopt;
  TaskStatus status;
  const std::optional<tf::ExitRecord> record = tf::ParseExitRecord(*text);
  if (!record) {
    status.state = TaskState::kLost;
    status.message = "unreadable exit record";
    return status;
  }
  switch (record->kind) {
    case tf::ExitRecord::Kind::kExited:
      status.state = TaskState::kExited;
      status.exit_code = record->value;
      break;
    case tf::ExitRecord::Kind::kSignaled:
      status.state = TaskState::kSignaled;
      status.signal = record->value;
      break;
    case tf::ExitRecord::Kind::kExecFailed:
      status.state = TaskState::kFailed;
      status.exit_code = record->value;
      status.message = record->message;
      break;
  }
  return status;
}

std::string StringMapToNul(const StringMap& map) {
  std::vector<std::string> items;
  items.reserve(map.size());
  for (const auto& [key, value] : map) items.push_back(KeyValue(key, value));
  return tf::JoinNul(items);
}

StringMap NulToStringMap(std::string_view text) {
  StringMap map;
  for (const std::string& item : tf::SplitNul(text)) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    map[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return map;
}

std::optional<std::int64_t> ParseTaskId(const std::string& name) {
  std::int64_t id = 0;
  const char* end = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(name.data(), end, id);
  if (ec != std::errc() || ptr != end || id <= 0 ||
      std::to_string(id) != name) {
    return std::nullopt;
  }
  return id;
}

// How long ago `dir` last changed (a file created or renamed in it); zero
// when that cannot be told.
std::chrono::milliseconds DirectoryAge(const fs::path& dir) {
  struct stat info = {};
  if (stat(dir.c_str(), &info) != 0) return std::chrono::milliseconds(0);
  timespec now = {};
  clock_gettime(CLOCK_REALTIME, &now);
  const std::int64_t age_ms =
      (static_cast<std::int64_t>(now.tv_sec) - info.st_mtim.tv_sec) * 1000 +
      (static_cast<std::int64_t>(now.tv_nsec) - info.st_mtim.tv_nsec) /
          1'000'000;
  return std::chrono::milliseconds(std::max<std::int64_t>(0, age_ms));
}

// A name for a directory on its way out, unique within this process.
fs::path RemovalName(const fs::path& tasks_dir, std::int64_t task_id) {
  static std::atomic<std::uint64_t> counter{0};
  return tasks_dir / (".removing-" + std::to_string(task_id) + "-" +
                      std::to_string(getpid()) + "-" +
                      std::to_string(counter.fetch_add(1)));
}

}  // namespace

StatusOr<fs::path> FindTaskShim() {
  constexpr std::string_view kShimName = "hf-task-shim";
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    const fs::path beside = self.parent_path() / kShimName;
    if (access(beside.c_str(), X_OK) == 0) return beside;
  }
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "";
  while (!dirs.empty()) {
    const std::size_t colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    if (!dir.empty()) {
      const fs::path candidate = fs::path(dir) / kShimName;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return Status::NotFound(
      "hf-task-shim is neither beside this program nor on PATH");
}

StatusOr<std::unique_ptr<ProcessRuntime>> ProcessRuntime::Create(
    ProcessRuntimeOptions options) {
  if (options.state_dir.empty()) {
    return Status::InvalidArgument("process runtime needs a state directory",
                                   "state_dir");
  }
  if (options.shim_path.empty()) {
    StatusOr<fs::path> shim = FindTaskShim();
    if (!shim.ok()) return shim.status();
    options.shim_path = *shim;
  } else if (access(options.shim_path.c_str(), X_OK) != 0) {
    return Status::NotFound("task shim " + options.shim_path.string() +
                            " is not executable: " + std::strerror(errno));
  }
  std::error_code error;
  options.state_dir = fs::absolute(options.state_dir, error);
  fs::create_directories(options.state_dir / "tasks", error);
  if (error) {
    return Status::Internal("cannot create " + options.state_dir.string() +
                            "/tasks: " + error.message());
  }
  return std::unique_ptr<ProcessRuntime>(
      new ProcessRuntime(std::move(options)));
}

ProcessRuntime::ProcessRuntime(ProcessRuntimeOptions options)
    : options_(std::move(options)), tasks_dir_(options_.state_dir / "tasks") {}

fs::path ProcessRuntime::TaskDir(std::int64_t task_id) const {
  return tasks_dir_ / std::to_string(task_id);
}

fs::path ProcessRuntime::LogPath(std::int64_t task_id) const {
  return TaskDir(task_id) / tf::kLogFile;
}

Status ProcessRuntime::Start(const TaskSpec& spec) {
  HF_RETURN_IF_ERROR(ValidateTaskSpec(spec, EnvTarget::kHostProcess));
  const fs::path dir = TaskDir(spec.task_id);
  // mkdir is the claim: of two concurrent Starts exactly one succeeds.
  if (mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) {
      return Status::AlreadyExists(TaskName(spec.task_id) +
                                   " already exists in the process runtime");
    }
    return Status::Internal("cannot create " + dir.string() + ": " +
                            std::strerror(errno));
  }
  const StringMap env =
      ComposeTaskEnv(spec, options_.base_env, EnvTarget::kHostProcess);
  Status status =
      tf::WriteFileAtomic(dir / tf::kArgvFile, tf::JoinNul(spec.command));
  if (status.ok()) {
    status = tf::WriteFileAtomic(dir / tf::kEnvFile, StringMapToNul(env), 0600);
  }
  if (status.ok()) {
    status = tf::WriteFileAtomic(dir / tf::kLabelsFile,
                                 StringMapToNul(TaskLabels(spec)));
  }
  if (status.ok()) status = SpawnShim(dir);
  if (!status.ok() && status.code() != StatusCode::kUnavailable) {
    // Nothing runs: leave no trace, so the task can be started again.
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  return status.WithContext("starting " + TaskName(spec.task_id));
}

Status ProcessRuntime::SpawnShim(const fs::path& dir) const {
  int ready_pipe[2];
  if (pipe2(ready_pipe, O_CLOEXEC) != 0) {
    return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  }
  // Move the write end above the standard fds so that the dup2 below always
  // copies (and so clears close-on-exec) rather than finding it in place.
  const int write_end = fcntl(ready_pipe[1], F_DUPFD_CLOEXEC, 10);
  close(ready_pipe[1]);
  if (write_end < 0) {
    close(ready_pipe[0]);
    return Status::Internal(std::string("fcntl: ") + std::strerror(errno));
  }
  const int read_end = ready_pipe[0];

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", O_RDWR, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, write_end, kShimReadyFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);

  std::vector<std::string> args = {"hf-task-shim", "--task-dir", dir.string(),
                                   "--ready-fd", std::to_string(kShimReadyFd)};
  std::vector<char*> arg_ptrs;
  arg_ptrs.reserve(args.size() + 1);
  for (std::string& arg : args) arg_ptrs.push_back(arg.data());
  arg_ptrs.push_back(nullptr);
  char* no_env[] = {nullptr};  // the shim needs none; the task's is a file
  pid_t pid = 0;
  const int spawn_error = posix_spawn(&pid, options_.shim_path.c_str(),
                                      &actions, &attr, arg_ptrs.data(), no_env);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(write_end);
  if (spawn_error != 0) {
    close(read_end);
    return Status::Internal("cannot run " + options_.shim_path.string() + ": " +
                            std::strerror(spawn_error));
  }
  // The first shim process forks the supervisor and exits at once.
  int wait_status = 0;
  while (waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
  }

  std::string word;
  const auto deadline = SteadyClock::now() + options_.start_timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - SteadyClock::now());
    if (left.count() <= 0) {
      close(read_end);
      return Status::Unavailable(
          "the task shim did not report within " +
          std::to_string(options_.start_timeout.count()) +
          " ms; the task may still start (Poll tells)");
    }
    pollfd pfd = {read_end, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buffer[512];
    const ssize_t n = read(read_end, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    word.append(buffer, static_cast<std::size_t>(n));
  }
  close(read_end);
  while (!word.empty() && word.back() == '\n') word.pop_back();
  if (word == tf::kReadyOk) return Status::Ok();
  if (word.starts_with(tf::kReadyError)) {
    return Status::Internal("task shim: " +
                            word.substr(tf::kReadyError.size()));
  }
  return Status::Internal("the task shim exited without reporting (status " +
                          std::to_string(wait_status) + ")");
}

StatusOr<TaskStatus> ProcessRuntime::StatusFromDir(const fs::path& dir) const {
  if (std::optional<TaskStatus> done = StatusFromExitRecord(dir)) return *done;
  const std::optional<tf::ProcessIdentity> task =
      ReadIdentity(dir / tf::kPidFile);
  if ((task && tf::IsAlive(*task)) || ShimAlive(dir)) return TaskStatus{};
  // Both gone: the shim may have written the record in between.
  if (std::optional<TaskStatus> done = StatusFromExitRecord(dir)) return *done;
  std::error_code error;
  if (!task && !fs::exists(dir / tf::kShimPidFile, error) &&
      DirectoryAge(dir) < options_.start_timeout) {
    // A Start in progress (another thread): the shim has not said who it
    // is yet. After start_timeout it is a Start that died half-way.
    TaskStatus starting;
    starting.message = "starting";
    return starting;
  }
  TaskStatus lost;
  lost.state = TaskState::kLost;
  lost.message = task ? "the task's supervisor ended without recording how "
                        "the task ended (killed, or the host rebooted)"
                      : "the task never started (its supervisor is gone)";
  return lost;
}

StatusOr<TaskStatus> ProcessRuntime::Poll(std::int64_t task_id) {
  const fs::path dir = TaskDir(task_id);
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return Status::NotFound(TaskName(task_id) +
                            " is not in the process runtime");
  }
  return StatusFromDir(dir);
}

bool ProcessRuntime::WaitForExitRecord(
    const fs::path& dir, std::chrono::milliseconds timeout) const {
  const auto deadline = SteadyClock::now() + timeout;
  Backoff backoff;
  for (;;) {
    std::error_code error;
    if (fs::exists(dir / tf::kExitFile, error)) return true;
    if (!ShimAlive(dir)) return fs::exists(dir / tf::kExitFile, error);
    if (SteadyClock::now() >= deadline) return false;
    backoff.Sleep();
  }
}

Status ProcessRuntime::Kill(std::int64_t task_id,
                            std::chrono::milliseconds grace) {
  const fs::path dir = TaskDir(task_id);
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return Status::NotFound(TaskName(task_id) +
                            " is not in the process runtime");
  }
  if (fs::exists(dir / tf::kExitFile, error)) return Status::Ok();
  std::optional<tf::ProcessIdentity> task = ReadIdentity(dir / tf::kPidFile);
  if (!task) {
    // A concurrent Start may still be between spawning the shim and the
    // shim recording the command: wait for it rather than miss the kill.
    const auto deadline = SteadyClock::now() + options_.start_timeout;
    Backoff backoff;
    while (!task && ShimAlive(dir) && !fs::exists(dir / tf::kExitFile, error) &&
           SteadyClock::now() < deadline) {
      backoff.Sleep();
      task = ReadIdentity(dir / tf::kPidFile);
    }
  }
  // Signal only a command that is provably ours: a dead task's pid may
  // belong to somebody else by now. Its pid is also its process group id.
  if (task && tf::IsAlive(*task)) {
    if (kill(-task->pid, SIGTERM) != 0 && errno != ESRCH) {
      return Status::Internal("kill " + TaskName(task_id) + ": " +
                              std::strerror(errno));
    }
    if (!WaitForExitRecord(dir, grace) && tf::IsAlive(*task)) {
      kill(-task->pid, SIGKILL);
    }
  }
  WaitForExitRecord(dir, options_.exit_record_wait);
  return Status::Ok();
}

StatusOr<std::vector<AdoptedTask>> ProcessRuntime::Adopt() {
  std::vector<AdoptedTask> tasks;
  std::error_code error;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(tasks_dir_, error)) {
    const std::optional<std::int64_t> id =
        ParseTaskId(entry.path().filename().string());
    if (!id || !entry.is_directory(error)) continue;
    StatusOr<TaskStatus> status = StatusFromDir(entry.path());
    if (!status.ok()) return status.status();
    AdoptedTask task;
    task.task_id = *id;
    task.status = *status;
    StatusOr<std::string> labels =
        tf::ReadWholeFile(entry.path() / tf::kLabelsFile);
    if (labels.ok()) task.labels = NulToStringMap(*labels);
    tasks.push_back(std::move(task));
  }
  if (error) {
    return Status::Internal("cannot list " + tasks_dir_.string() + ": " +
                            error.message());
  }
  std::sort(tasks.begin(), tasks.end(),
            [](const AdoptedTask& a, const AdoptedTask& b) {
              return a.task_id < b.task_id;
            });
  return tasks;
}

Status ProcessRuntime::Remove(std::int64_t task_id) {
  StatusOr<TaskStatus> status = Poll(task_id);
  if (!status.ok()) return status.status();
  if (!status->finished()) {
    return Status::FailedPrecondition(TaskName(task_id) +
                                      " is still running; kill it first");
  }
  // Rename first, so a concurrent Start of the same id never meets a
  // half-deleted directory.
  const fs::path doomed = RemovalName(tasks_dir_, task_id);
  if (rename(TaskDir(task_id).c_str(), doomed.c_str()) != 0) {
    if (errno == ENOENT) {
      return Status::NotFound(TaskName(task_id) +
                              " is not in the process runtime");
    }
    return Status::Internal("cannot remove " + TaskName(task_id) + ": " +
                            std::strerror(errno));
  }
  std::error_code error;
  fs::remove_all(doomed, error);
  if (error) {
    return Status::Internal("cannot delete " + doomed.string() + ": " +
                            error.message());
  }
  return Status::Ok();
}

StatusOr<LogChunk> ProcessRuntime::ReadLog(std::int64_t task_id,
                                           std::int64_t offset,
                                           std::size_t max_bytes) {
  if (offset < 0) {
    return Status::InvalidArgument("log offset must not be negative", "offset");
  }
  const fs::path dir = TaskDir(task_id);
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return Status::NotFound(TaskName(task_id) +
                            " is not in the process runtime");
  }
  LogChunk chunk;
  chunk.next_offset = offset;
  const int fd = open((dir / tf::kLogFile).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return chunk;  // nothing written yet
    return Status::Internal("cannot open the log of " + TaskName(task_id) +
                            ": " + std::strerror(errno));
  }
  struct stat info = {};
  if (fstat(fd, &info) != 0) {
    close(fd);
    return Status::Internal(std::string("fstat: ") + std::strerror(errno));
  }
  const std::int64_t available =
      std::max<std::int64_t>(0, info.st_size - offset);
  const std::size_t want = std::min<std::size_t>(
      {max_bytes, kMaxLogChunk, static_cast<std::size_t>(available)});
  chunk.data.resize(want);
  std::size_t got = 0;
  while (got < want) {
    const ssize_t n = pread(fd, chunk.data.data() + got, want - got,
                            offset + static_cast<std::int64_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  close(fd);
  chunk.data.resize(got);
  chunk.next_offset = offset + static_cast<std::int64_t>(got);
  return chunk;
}

}  // namespace hf::runtime
