// posix_spawn plus a poll loop over the child's stdout and stderr.
#include "runtime/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace hf::runtime {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Spawn attributes: an empty signal mask and default dispositions, so a
// caller that blocks or ignores signals does not pass that on.
class SpawnAttr {
 public:
  SpawnAttr() {
    posix_spawnattr_init(&attr_);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr_, &none);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) {
      sigaddset(&defaults, sig);
    }
    posix_spawnattr_setsigdefault(&attr_, &defaults);
    posix_spawnattr_setflags(&attr_,
                             POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }
  SpawnAttr(const SpawnAttr&) = delete;
  SpawnAttr& operator=(const SpawnAttr&) = delete;
  ~SpawnAttr() { posix_spawnattr_destroy(&attr_); }
  const posix_spawnattr_t* get() const { return &attr_; }

 private:
  posix_spawnattr_t attr_;
};

class FileActions {
 public:
  FileActions() { posix_spawn_file_actions_init(&actions_); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
  ~FileActions() { posix_spawn_file_actions_destroy(&actions_); }
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

int ReapChild(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 0;
  }
  return status;
}

}  // namespace

StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                   const CommandOptions& options) {
  if (argv.empty()) return Status::InvalidArgument("empty command line");
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  }
  Fd out_read(out_pipe[0]);
  Fd out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  }
  Fd err_read(err_pipe[0]);
  Fd err_write(err_pipe[1]);

  FileActions actions;
  posix_spawn_file_actions_addopen(actions.get(), STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(actions.get(), out_write.get(),
                                   STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(
      actions.get(), options.merge_stderr ? out_write.get() : err_write.get(),
      STDERR_FILENO);
  SpawnAttr attr;

  std::vector<std::string> args = argv;
  std::vector<char*> arg_ptrs;
  arg_ptrs.reserve(args.size() + 1);
  for (std::string& arg : args) arg_ptrs.push_back(arg.data());
  arg_ptrs.push_back(nullptr);

  pid_t pid = 0;
  const int spawn_error = posix_spawnp(&pid, args[0].c_str(), actions.get(),
                                       attr.get(), arg_ptrs.data(), environ);
  if (spawn_error != 0) {
    return Status::Unavailable("cannot run '" + argv[0] +
                               "': " + std::strerror(spawn_error));
  }
  out_write.Reset();
  err_write.Reset();

  CommandResult result;
  const auto deadline = SteadyClock::now() + options.timeout;
  bool out_open = true;
  bool err_open = true;
  bool timed_out = false;
  char buffer[16384];
  while (out_open || err_open) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - SteadyClock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{out_open ? out_read.get() : -1, POLLIN, 0},
                     {err_open ? err_read.get() : -1, POLLIN, 0}};
    const int ready = poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      std::string& sink = i == 0 ? result.out : result.err;
      const std::size_t room =
          options.max_output - std::min(options.max_output, sink.size());
      sink.append(buffer, std::min(room, static_cast<std::size_t>(n)));
      if (i == 0 && result.out.size() >= options.max_output) {
        result.capped = true;
        out_open = err_open = false;
      }
    }
  }
  if (timed_out || result.capped) kill(pid, SIGKILL);
  const int status = ReapChild(pid);
  if (timed_out) {
    return Status::Unavailable("'" + argv[0] + "' did not finish within " +
                               std::to_string(options.timeout.count()) + " ms");
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace hf::runtime
