// Bounded and detached process starts (see subprocess.h).
#include "mps/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>

extern char** environ;  // POSIX: the process environment

namespace hf::mps {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxStdin = std::size_t{16} * 1024;
constexpr std::size_t kMaxOutput = std::size_t{1024} * 1024;

// argv/envp as the exec family wants them, built before any fork.
class CStrings {
 public:
  explicit CStrings(std::vector<std::string> strings)
      : strings_(std::move(strings)) {
    for (std::string& s : strings_) pointers_.push_back(s.data());
    pointers_.push_back(nullptr);
  }
  char* const* get() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

std::vector<std::string> BuildEnv(
    const std::map<std::string, std::string>& overrides, bool clear_env) {
  std::vector<std::string> env;
  if (!clear_env) {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string_view entry(*e);
      const std::string name(entry.substr(0, entry.find('=')));
      if (!overrides.contains(name)) env.emplace_back(entry);
    }
  }
  for (const auto& [name, value] : overrides) {
    std::string entry = name;
    entry.append("=").append(value);
    env.push_back(std::move(entry));
  }
  return env;
}

std::string PathFor(const std::map<std::string, std::string>& overrides,
                    bool clear_env) {
  if (auto it = overrides.find("PATH"); it != overrides.end()) {
    return it->second;
  }
  return clear_env ? std::string() : CurrentPath();
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Closes every descriptor from `first` up. Async-signal-safe.
void CloseFrom(int first, int fallback_max) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, 0U) == 0) {
    return;
  }
#endif
  for (int fd = first; fd < fallback_max; ++fd) ::close(fd);
}

int FallbackMaxFd() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 ||
      limit.rlim_cur == RLIM_INFINITY)
    return 65536;
  return static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 65536));
}

// Writes all of `data` (async-signal-safe; retries on EINTR).
void WriteAll(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

// strerror_r (the GNU form), since strerror may share one buffer between
// threads.
std::string ErrnoText(int err) {
  std::array<char, 128> buffer{};
  return ::strerror_r(err, buffer.data(), buffer.size());
}

void DecodeWaitStatus(int status, CommandResult& result) {
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = -1;
    result.term_signal = WTERMSIG(status);
  }
}

}  // namespace

std::string CurrentPath() {
  const char* path = std::getenv("PATH");
  return path == nullptr ? std::string() : std::string(path);
}

StatusOr<std::string> ResolveExecutable(const std::string& name,
                                        const std::string& path_env) {
  if (name.empty()) return Status::NotFound("empty program name");
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return name;
    return Status::NotFound(name + ": " + ErrnoText(errno));
  }
  std::string_view rest = path_env;
  while (true) {
    const std::size_t colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    if (dir.empty()) dir = ".";
    const std::string candidate = dir.append("/").append(name);
    struct stat info {};
    if (::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return Status::NotFound(name + " not found on PATH");
}

StatusOr<CommandResult> RunCommand(const CommandSpec& spec) {
  if (spec.argv.empty()) return Status::InvalidArgument("empty command");
  if (spec.stdin_text.size() > kMaxStdin) {
    return Status::InvalidArgument("command input over 16 KiB");
  }
  StatusOr<std::string> exe =
      ResolveExecutable(spec.argv[0], PathFor(spec.env, spec.clear_env));
  if (!exe.ok()) return exe.status();

  CStrings argv(spec.argv);
  CStrings envp(BuildEnv(spec.env, spec.clear_env));
  const std::string exe_path = *exe;

  // stdin: the whole text sits in the pipe before the child starts (it is
  // under the pipe's capacity), so no write can block or raise SIGPIPE.
  std::array<int, 2> in{-1, -1};
  std::array<int, 2> out{-1, -1};
  std::array<int, 2> err{-1, -1};
  auto close_all = [&] {
    for (auto* p : {&in, &out, &err}) {
      CloseFd((*p)[0]);
      CloseFd((*p)[1]);
    }
  };
  if (::pipe2(in.data(), O_CLOEXEC) != 0 ||
      ::pipe2(out.data(), O_CLOEXEC) != 0 ||
      ::pipe2(err.data(), O_CLOEXEC) != 0) {
    const int e = errno;
    close_all();
    return Status::Internal("pipe: " + ErrnoText(e));
  }
  WriteAll(in[1], spec.stdin_text.data(), spec.stdin_text.size());
  CloseFd(in[1]);

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    close_all();
    return Status::Internal("fork: " + ErrnoText(e));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    ::setpgid(0, 0);
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::signal(SIGPIPE, SIG_DFL);
    ::execve(exe_path.c_str(), argv.get(), envp.get());
    _exit(127);
  }
  ::setpgid(pid, pid);  // also here: no race with a kill on timeout
  CloseFd(in[0]);
  CloseFd(out[1]);
  CloseFd(err[1]);

  CommandResult result;
  const Clock::time_point deadline = Clock::now() + spec.timeout;
  bool exited = false;
  int status = 0;
  std::array<char, 4096> buffer{};
  while (true) {
    if (!exited) {
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) exited = true;
    }
    if (out[0] < 0 && err[0] < 0 && exited) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      ::killpg(pid, SIGKILL);
      if (!exited) {
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
      }
      close_all();
      if (exited) break;  // it had finished; only a straggler held the pipes
      return Status::Unavailable(spec.argv[0] + " timed out after " +
                                 std::to_string(spec.timeout.count()) + " ms");
    }
    std::array<pollfd, 2> fds{};
    nfds_t n = 0;
    for (int fd : {out[0], err[0]}) {
      if (fd >= 0) fds[n++] = pollfd{fd, POLLIN, 0};
    }
    // Once the command has exited, what is already in the pipes is all it
    // wrote; a process it left behind may hold them open for ever.
    const int wait_ms =
        exited ? 0
               : static_cast<int>(std::clamp<std::int64_t>(
                     std::chrono::duration_cast<std::chrono::milliseconds>(
                         deadline - now)
                         .count(),
                     0, 10));
    const int ready = n == 0 ? 0 : ::poll(fds.data(), n, wait_ms);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) {
      if (exited) break;
      if (n == 0) {
        // Both pipes closed, child still running: wait for it briefly.
        ::usleep(2000);
      }
      continue;
    }
    for (nfds_t i = 0; i < n; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      int& fd = fds[i].fd == out[0] ? out[0] : err[0];
      std::string& sink = fds[i].fd == out[0] ? result.out : result.err;
      const ssize_t got = ::read(fd, buffer.data(), buffer.size());
      if (got > 0) {
        if (sink.size() < kMaxOutput) {
          sink.append(buffer.data(),
                      std::min<std::size_t>(static_cast<std::size_t>(got),
                                            kMaxOutput - sink.size()));
        }
      } else if (got == 0 || errno != EINTR) {
        CloseFd(fd);
      }
    }
  }
  close_all();
  if (!exited) {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  DecodeWaitStatus(status, result);
  if (result.exit_code == 127 && result.out.empty() && result.err.empty()) {
    return Status::NotFound("could not execute " + exe_path);
  }
  return result;
}

namespace {

// What the intermediate processes of StartDetached report to the agent.
struct LaunchReport {
  char kind;  // 'E': exec failed (value: errno); 'F': fork failed (errno);
              // 'S': the program exited (value: wait status)
  int value;
};

}  // namespace

Status StartDetached(const DetachedSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/') {
    return Status::InvalidArgument("a detached program needs an absolute path");
  }
  CStrings argv(spec.argv);
  CStrings envp(BuildEnv(spec.env, /*clear_env=*/false));
  const std::string exe_path = spec.argv[0];
  const int fallback_max = FallbackMaxFd();
  const unsigned wait_s = static_cast<unsigned>(
      std::max<std::int64_t>(1, (spec.wait.count() + 999) / 1000));

  int log_fd = ::open(spec.stdio_log_path.c_str(),
                      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return Status::FailedPrecondition("opening " + spec.stdio_log_path + ": " +
                                      ErrnoText(errno));
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::array<int, 2> report{-1, -1};
  if (null_fd < 0 || ::pipe2(report.data(), O_CLOEXEC) != 0) {
    const int e = errno;
    CloseFd(log_fd);
    CloseFd(null_fd);
    return Status::Internal("pipe: " + ErrnoText(e));
  }

  const pid_t first = ::fork();
  if (first < 0) {
    const int e = errno;
    CloseFd(log_fd);
    CloseFd(null_fd);
    CloseFd(report[0]);
    CloseFd(report[1]);
    return Status::Internal("fork: " + ErrnoText(e));
  }
  if (first == 0) {
    // Intermediate: async-signal-safe calls only. A new session: the
    // program leaves the agent's process group and terminal for good.
    ::setsid();
    ::signal(SIGPIPE, SIG_DFL);
    ::signal(SIGALRM, SIG_DFL);
    const pid_t second = ::fork();
    if (second < 0) {
      const LaunchReport r{'F', errno};
      WriteAll(report[1], &r, sizeof r);
      _exit(1);
    }
    if (second == 0) {
      ::dup2(null_fd, STDIN_FILENO);
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
      // Keep the report pipe as fd 3 (close-on-exec) and nothing else: a
      // daemon holding the agent's sockets would keep them alive after it.
      if (report[1] != 3) {
        ::dup3(report[1], 3, O_CLOEXEC);
      }
      CloseFrom(4, fallback_max);
      ::execve(exe_path.c_str(), argv.get(), envp.get());
      const LaunchReport r{'E', errno};
      WriteAll(3, &r, sizeof r);
      _exit(127);
    }
    // Bound the wait: at the alarm this process dies (default action), the
    // program runs on, reparented, and the agent sees no exit report.
    ::alarm(wait_s);
    int status = 0;
    while (::waitpid(second, &status, 0) < 0 && errno == EINTR) {
    }
    const LaunchReport r{'S', status};
    WriteAll(report[1], &r, sizeof r);
    _exit(0);
  }

  CloseFd(log_fd);
  CloseFd(null_fd);
  CloseFd(report[1]);
  // Read the reports until end of file (both intermediates gone) or our own
  // deadline, a second after the intermediate's alarm.
  std::vector<LaunchReport> reports;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::seconds(wait_s + 1);
  std::string partial;
  while (Clock::now() < deadline) {
    pollfd fd{report[0], POLLIN, 0};
    const int ready = ::poll(&fd, 1, 20);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    std::array<char, 64> buffer{};
    const ssize_t got = ::read(report[0], buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    partial.append(buffer.data(), static_cast<std::size_t>(got));
    while (partial.size() >= sizeof(LaunchReport)) {
      LaunchReport r{};
      std::memcpy(&r, partial.data(), sizeof r);
      reports.push_back(r);
      partial.erase(0, sizeof r);
    }
  }
  CloseFd(report[0]);
  int first_status = 0;
  if (::waitpid(first, &first_status, WNOHANG) == 0) {
    ::kill(first, SIGKILL);  // only the intermediate; the program lives on
    while (::waitpid(first, &first_status, 0) < 0 && errno == EINTR) {
    }
  }

  for (const LaunchReport& r : reports) {
    if (r.kind == 'E') {
      return Status::NotFound("could not execute " + exe_path + ": " +
                              ErrnoText(r.value));
    }
    if (r.kind == 'F') return Status::Internal("fork: " + ErrnoText(r.value));
  }
  for (const LaunchReport& r : reports) {
    if (r.kind != 'S') continue;
    CommandResult decoded;
    DecodeWaitStatus(r.value, decoded);
    if (decoded.exit_code == 0) return Status::Ok();
    if (decoded.exit_code > 0) {
      return Status::Unavailable(exe_path + " exited with status " +
                                 std::to_string(decoded.exit_code));
    }
    return Status::Unavailable(exe_path + " was killed by signal " +
                               std::to_string(decoded.term_signal));
  }
  return Status::Ok();  // still running at the deadline: a foreground daemon
}

bool ProcessRunning(pid_t pid) {
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!stat || !std::getline(stat, text)) {
    return ::kill(pid, 0) == 0 || errno == EPERM;
  }
  // "pid (comm) S ...": the state follows the last ')'.
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return true;
  const char state = text[close + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace hf::mps
