// hf-task-shim: the supervisor of one ProcessRuntime task.
//
//   hf-task-shim --task-dir <dir> --ready-fd <fd>
//
// ProcessRuntime spawns this program for every task. It forks once and the
// first process exits at once, so the supervisor is no child of the agent
// and outlives it (an agent restart, even SIGKILL, leaves tasks running).
// The supervisor starts a session of its own, runs the command from
// `<dir>/argv` with the environment from `<dir>/env` as the leader of a
// further new session (so the command's process group is the unit Kill
// signals, and the supervisor is not in it), waits for it and records how it
// ended in `<dir>/exit`. When the leader ends, whatever is left of its
// process group is killed, as a container engine does: a finished task holds
// no GPU. task_files.h describes the directory and the ready-fd protocol.
//
// Thread-safety: a single-threaded program.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/task_files.h"

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace {

namespace tf = hf::runtime::task_files;

// Writes all of `text` to `fd`; best effort (the reader may be gone).
void WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

void ResetSignals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGCHLD}) {
    signal(sig, SIG_DFL);
  }
}

class Supervisor {
 public:
  Supervisor(std::filesystem::path dir, int ready_fd)
      : dir_(std::move(dir)), ready_fd_(ready_fd) {}

  int Run() {
    // Out of the agent's session: no terminal or session signal reaches us.
    // The command is stopped through its own process group, never through
    // the shim, so the shim ignores the polite signals.
    setsid();
    if (chdir("/") != 0) return Fail("chdir /", errno);
    for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE}) {
      signal(sig, SIG_IGN);
    }
    log_fd_ = open((dir_ / tf::kLogFile).c_str(),
                   O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd_ < 0) return Fail("cannot open log", errno);
    const std::optional<tf::ProcessIdentity> self = tf::IdentityOf(getpid());
    if (!self) return Fail("cannot read own /proc entry", errno);
    const hf::Status shim_recorded =
        tf::WriteFileAtomic(dir_ / tf::kShimPidFile, tf::FormatIdentity(*self));
    if (!shim_recorded.ok()) return Fail(shim_recorded.message(), 0);
    hf::StatusOr<std::string> argv_text =
        tf::ReadWholeFile(dir_ / tf::kArgvFile);
    hf::StatusOr<std::string> env_text = tf::ReadWholeFile(dir_ / tf::kEnvFile);
    if (!argv_text.ok()) return Fail(argv_text.status().message(), 0);
    if (!env_text.ok()) return Fail(env_text.status().message(), 0);
    std::vector<std::string> argv = tf::SplitNul(*argv_text);
    std::vector<std::string> env = tf::SplitNul(*env_text);
    if (argv.empty()) return Fail("empty command", EINVAL);
    const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0) return Fail("cannot open /dev/null", errno);

    // Everything the child needs is prepared before fork.
    std::vector<char*> argv_ptrs = Pointers(argv);
    std::vector<char*> env_ptrs = Pointers(env);
    int exec_pipe[2];
    if (pipe2(exec_pipe, O_CLOEXEC) != 0) return Fail("pipe", errno);

    const pid_t child = fork();
    if (child < 0) return Fail("fork", errno);
    if (child == 0) {
      close(exec_pipe[0]);
      setsid();
      ResetSignals();
      dup2(null_fd, STDIN_FILENO);
      dup2(log_fd_, STDOUT_FILENO);
      dup2(log_fd_, STDERR_FILENO);
      // The task directory is the command's scratch space.
      if (chdir(dir_.c_str()) != 0) {
        // Stay in "/" (the shim's): the command can still run.
      }
      environ = env_ptrs.data();
      execvp(argv_ptrs[0], argv_ptrs.data());
      const int error = errno;
      WriteAll(exec_pipe[1],
               std::string_view(reinterpret_cast<const char*>(&error),
                                sizeof error));
      _exit(127);
    }
    close(exec_pipe[1]);
    close(null_fd);

    int exec_errno = 0;
    ssize_t got = 0;
    do {
      got = read(exec_pipe[0], &exec_errno, sizeof exec_errno);
    } while (got < 0 && errno == EINTR);
    close(exec_pipe[0]);

    if (got == static_cast<ssize_t>(sizeof exec_errno)) {
      Reap(child);
      tf::ExitRecord record;
      record.kind = tf::ExitRecord::Kind::kExecFailed;
      record.value = exec_errno == ENOENT ? 127 : 126;
      record.message =
          "cannot execute '" + argv[0] + "': " + std::strerror(exec_errno);
      WriteAll(log_fd_, "hf-task-shim: " + record.message + "\n");
      const hf::Status written = tf::WriteFileAtomic(
          dir_ / tf::kExitFile, tf::FormatExitRecord(record));
      if (!written.ok()) return Fail(written.message(), 0);
      Ready();
      return 0;
    }

    const std::optional<tf::ProcessIdentity> task = tf::IdentityOf(child);
    const hf::Status recorded =
        task ? tf::WriteFileAtomic(dir_ / tf::kPidFile,
                                   tf::FormatIdentity(*task))
             : hf::Status::Internal("no /proc entry for the command");
    if (!recorded.ok()) {
      // Unrecorded, the command could never be killed: stop it now.
      kill(-child, SIGKILL);
      Reap(child);
      return Fail(recorded.message(), 0);
    }
    Ready();

    const int status = Reap(child);
    // The leader is gone; its group must not outlive it.
    kill(-child, SIGKILL);
    tf::ExitRecord record;
    if (WIFSIGNALED(status)) {
      record.kind = tf::ExitRecord::Kind::kSignaled;
      record.value = WTERMSIG(status);
    } else {
      record.kind = tf::ExitRecord::Kind::kExited;
      record.value = WEXITSTATUS(status);
    }
    const hf::Status written =
        tf::WriteFileAtomic(dir_ / tf::kExitFile, tf::FormatExitRecord(record));
    if (!written.ok()) {
      WriteAll(log_fd_, "hf-task-shim: " + written.message() + "\n");
      return 1;
    }
    return 0;
  }

 private:
  static std::vector<char*> Pointers(std::vector<std::string>& items) {
    std::vector<char*> out;
    out.reserve(items.size() + 1);
    for (std::string& item : items) out.push_back(item.data());
    out.push_back(nullptr);
    return out;
  }

  static int Reap(pid_t child) {
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
      if (errno != EINTR) return 0;
    }
    return status;
  }

  void Ready() {
    if (ready_fd_ < 0) return;
    WriteAll(ready_fd_, std::string(tf::kReadyOk) + "\n");
    close(ready_fd_);
    ready_fd_ = -1;
  }

  int Fail(const std::string& what, int error) {
    const std::string message =
        what + (error != 0 ? std::string(": ") + std::strerror(error) : "");
    if (log_fd_ >= 0) WriteAll(log_fd_, "hf-task-shim: " + message + "\n");
    if (ready_fd_ >= 0) {
      WriteAll(ready_fd_, std::string(tf::kReadyError) + message + "\n");
      close(ready_fd_);
      ready_fd_ = -1;
    }
    return 1;
  }

  std::filesystem::path dir_;
  int ready_fd_;
  int log_fd_ = -1;
};

int Usage() {
  std::fputs("usage: hf-task-shim --task-dir <dir> --ready-fd <fd>\n", stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int ready_fd = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--task-dir") {
      dir = argv[i + 1];
    } else if (flag == "--ready-fd") {
      ready_fd = std::atoi(argv[i + 1]);
    } else {
      return Usage();
    }
  }
  if (dir.empty() || argc % 2 != 1) return Usage();
  ResetSignals();
  // The ready pipe must not leak into the command.
  if (ready_fd >= 0) fcntl(ready_fd, F_SETFD, FD_CLOEXEC);

  const pid_t supervisor = fork();
  if (supervisor < 0) {
    if (ready_fd >= 0) {
      const std::string message =
          std::string(tf::kReadyError) + "fork: " + std::strerror(errno) + "\n";
      WriteAll(ready_fd, message);
    }
    return 1;
  }
  if (supervisor > 0) return 0;  // the spawner reaps us; the child lives on
  return Supervisor(dir, ready_fd).Run();
}
