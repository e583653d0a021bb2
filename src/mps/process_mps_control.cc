// ProcessMpsControl and its launchers (see process_mps_control.h).
#include "mps/process_mps_control.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <thread>
#include <utility>

#include "mps/subprocess.h"

namespace hf::mps {

namespace {

// What the real binary answers when no daemon runs for its pipe directory
// (exit status 1; docs/MPS.md).
constexpr std::string_view kNoDaemonReply =
    "Cannot find MPS control daemon process";
// AF_UNIX sun_path holds 107 bytes and a terminator.
constexpr std::size_t kMaxSocketPath = 107;
constexpr MemoryMib kMaxPinnedLimitMib = MemoryMib{1} << 30;  // 1 PiB
constexpr auto kStartPollInterval = std::chrono::milliseconds(20);

// One line, printable, at most `max` characters: safe to put in a message.
std::string Excerpt(std::string_view text, std::size_t max = 200) {
  std::string out;
  for (char c : text) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    if (c == '\n' || c == '\r') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) {
      out += c;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

bool Blank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
  });
}

}  // namespace

SystemdRunLauncher::SystemdRunLauncher(std::string systemd_run,
                                       std::string unit)
    : systemd_run_(std::move(systemd_run)), unit_(std::move(unit)) {}

std::vector<std::string> SystemdRunLauncher::CommandLine(
    const LaunchSpec& spec) const {
  std::vector<std::string> argv = {systemd_run_, "--unit=" + unit_, "--collect",
                                   "--property=Type=forking"};
  for (const auto& [name, value] : spec.env) {
    std::string setenv = "--setenv=";
    setenv.append(name).append("=").append(value);
    argv.push_back(std::move(setenv));
  }
  argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
  return argv;
}

Status SystemdRunLauncher::Launch(const LaunchSpec& spec) {
  CommandSpec command;
  command.argv = CommandLine(spec);
  command.timeout = spec.timeout;
  StatusOr<CommandResult> result = RunCommand(command);
  if (!result.ok()) return result.status().WithContext(systemd_run_);
  if (result->exit_code != 0) {
    return Status::Unavailable(systemd_run_ + " --unit=" + unit_ +
                               " exited with status " +
                               std::to_string(result->exit_code) + ": " +
                               Excerpt(result->err + " " + result->out));
  }
  return Status::Ok();
}

Status DetachedLauncher::Launch(const LaunchSpec& spec) {
  DetachedSpec detached;
  detached.argv = spec.argv;
  detached.env = spec.env;
  detached.stdio_log_path = spec.stdio_log_path;
  detached.wait = spec.timeout;
  return StartDetached(detached);
}

bool SystemdIsInit(const std::string& marker_dir, const std::string& path_env) {
  std::error_code ec;
  if (!std::filesystem::is_directory(marker_dir, ec)) return false;
  return ResolveExecutable("systemd-run", path_env).ok();
}

std::unique_ptr<DaemonLauncher> DefaultLauncher() {
  if (SystemdIsInit("/run/systemd/system", CurrentPath())) {
    return std::make_unique<SystemdRunLauncher>();
  }
  return std::make_unique<DetachedLauncher>();
}

ProcessMpsControl::ProcessMpsControl(ProcessMpsOptions options,
                                     std::unique_ptr<DaemonLauncher> launcher,
                                     const Clock& clock)
    : options_(std::move(options)),
      launcher_(launcher ? std::move(launcher) : DefaultLauncher()),
      clock_(clock),
      pipe_dir_(options_.base_dir + "/pipe"),
      log_dir_(options_.base_dir + "/log") {}

std::map<std::string, std::string> ProcessMpsControl::DaemonEnv() const {
  std::map<std::string, std::string> env = options_.extra_env;
  env[std::string(kPipeDirectoryEnv)] = pipe_dir_;
  env[std::string(kLogDirectoryEnv)] = log_dir_;
  return env;
}

StatusOr<std::string> ProcessMpsControl::Command(const std::string& command) {
  CommandSpec spec;
  spec.argv = {options_.control_binary};
  spec.env = DaemonEnv();
  spec.stdin_text = command + "\n";
  spec.timeout = options_.command_timeout;
  StatusOr<CommandResult> result = RunCommand(spec);
  if (!result.ok()) {
    if (result.status().code() == StatusCode::kNotFound) {
      return Status::FailedPrecondition(result.status().message());
    }
    return result.status().WithContext("MPS control command '" +
                                       Excerpt(command, 60) + "'");
  }
  const bool no_daemon =
      result->out.find(kNoDaemonReply) != std::string::npos ||
      result->err.find(kNoDaemonReply) != std::string::npos;
  if (result->exit_code != 0 || no_daemon) {
    return Status::Unavailable(
        "no MPS control daemon answers in " + pipe_dir_ + " (exit " +
        std::to_string(result->exit_code) +
        "): " + Excerpt(result->out + " " + result->err));
  }
  return std::move(result->out);
}

bool ProcessMpsControl::Alive() { return Command("get_server_list").ok(); }

std::string ProcessMpsControl::LaunchLogPath() const {
  return log_dir_ + "/heteroflow-mps-launch.log";
}

std::int64_t ProcessMpsControl::LaunchLogSize() const {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(LaunchLogPath(), ec);
  return ec ? 0 : static_cast<std::int64_t>(size);
}

std::string ProcessMpsControl::LaunchLogTail(std::int64_t since) const {
  std::ifstream log(LaunchLogPath(), std::ios::binary);
  if (!log) return {};
  log.seekg(0, std::ios::end);
  const std::streamoff size = log.tellg();
  const std::streamoff from = std::max<std::streamoff>({0, size - 400, since});
  if (from >= size) return {};
  log.seekg(from);
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  log.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  tail = Excerpt(tail, 400);
  return tail.empty() ? tail : "; launch log: " + tail;
}

Status ProcessMpsControl::StartLocked() {
  if (pipe_dir_.size() + std::string_view("/control").size() > kMaxSocketPath) {
    return Status::FailedPrecondition(
        "MPS pipe directory " + pipe_dir_ +
        " is too long for the daemon's socket path (107 bytes)");
  }
  for (const std::string& dir : {pipe_dir_, log_dir_}) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return Status::FailedPrecondition("creating " + dir + ": " +
                                        ec.message());
    }
  }
  std::string path = CurrentPath();
  if (auto it = options_.extra_env.find("PATH");
      it != options_.extra_env.end()) {
    path = it->second;
  }
  StatusOr<std::string> exe = ResolveExecutable(options_.control_binary, path);
  if (!exe.ok()) return Status::FailedPrecondition(exe.status().message());
  std::string binary = *exe;
  if (!binary.starts_with('/')) {
    std::error_code ec;
    binary = std::filesystem::absolute(binary, ec).string();
  }

  LaunchSpec spec;
  spec.argv = {binary, "-d"};
  spec.env = DaemonEnv();
  spec.stdio_log_path = LaunchLogPath();
  spec.timeout = options_.start_timeout;
  // Only what this launch writes belongs in its error.
  const std::int64_t log_start = LaunchLogSize();
  const Status launched = launcher_->Launch(spec);
  if (!launched.ok() && !Alive()) {
    // (Alive: another start won the race, which is as good.)
    return Status::Unavailable("starting the MPS control daemon (" +
                               launcher_->Name() + "): " + launched.message() +
                               LaunchLogTail(log_start));
  }
  // The daemon needs a moment to open its socket. A real-time bound: the
  // injected clock times the backoff only.
  const auto deadline =
      std::chrono::steady_clock::now() + options_.start_timeout;
  while (!Alive()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Unavailable(
          "the MPS control daemon did not answer within " +
          std::to_string(options_.start_timeout.count()) +
          " ms of its start (" + launcher_->Name() + ")" +
          LaunchLogTail(log_start));
    }
    std::this_thread::sleep_for(kStartPollInterval);
  }
  for (const auto& [device, limit] : caps_) {
    const Status applied = ApplyCapLocked(device, limit);
    if (!applied.ok()) {
      // No silver without its cap: stop the daemon again.
      (void)Command("quit");
      return Status::Unavailable(
          "the MPS control daemon started but its pinned-memory cap could "
          "not be set, so it was stopped again: " +
          applied.message());
    }
  }
  return Status::Ok();
}

Status ProcessMpsControl::Ensure() {
  MutexLock lock(mu_);
  if (Alive()) {
    if (outage_logged_) {
      spdlog::info("MPS control daemon in {} answers again", pipe_dir_);
    }
    outage_logged_ = false;
    failure_logged_ = false;
    backoff_ms_ = 0;
    next_attempt_ms_ = 0;
    return Status::Ok();
  }
  if (!outage_logged_) {
    if (ever_started_) {
      spdlog::warn("MPS control daemon in {} is down; restarting it",
                   pipe_dir_);
    } else {
      spdlog::info("starting the MPS control daemon ({}, pipe directory {})",
                   launcher_->Name(), pipe_dir_);
    }
    outage_logged_ = true;
  }
  const std::int64_t now = clock_.NowMillis();
  if (now < next_attempt_ms_) {
    return Status::Unavailable(
        "the MPS control daemon is down; next start attempt in " +
        std::to_string(next_attempt_ms_ - now) +
        " ms (last failure: " + last_failure_ + ")");
  }
  Status started = StartLocked();
  if (started.ok()) {
    spdlog::info("MPS control daemon started ({}, pipe directory {})",
                 launcher_->Name(), pipe_dir_);
    ever_started_ = true;
    outage_logged_ = false;
    failure_logged_ = false;
    backoff_ms_ = 0;
    next_attempt_ms_ = 0;
    return Status::Ok();
  }
  backoff_ms_ = backoff_ms_ == 0 ? options_.restart_backoff_initial_ms
                                 : std::min(backoff_ms_ * 2,
                                            options_.restart_backoff_max_ms);
  next_attempt_ms_ = now + backoff_ms_;
  last_failure_ = started.message();
  if (!failure_logged_) {
    spdlog::warn("{}; retrying with backoff (next in {} ms)", started.message(),
                 backoff_ms_);
    failure_logged_ = true;
  } else {
    spdlog::debug("{}; next attempt in {} ms", started.message(), backoff_ms_);
  }
  return started;
}

Status ProcessMpsControl::ApplyCapLocked(const std::string& device,
                                         MemoryMib limit_mib) {
  const std::string value = FormatPinnedLimit(limit_mib);
  StatusOr<std::string> servers = Command("get_server_list");
  if (servers.ok() && !Blank(*servers)) {
    spdlog::warn(
        "MPS servers already run ({}); they keep their pinned-memory limit, "
        "the cap {} of device {} binds the next server",
        Excerpt(*servers, 80), value, device);
  }
  StatusOr<std::string> set =
      Command("set_default_device_pinned_mem_limit " + device + " " + value);
  if (!set.ok()) return set.status();
  // The daemon may answer a refused command with text and exit 0, so the
  // readback is what proves the cap is in place.
  StatusOr<std::string> shown =
      Command("get_default_device_pinned_mem_limit " + device);
  if (!shown.ok()) return shown.status();
  if (!PinnedLimitReplyMatches(*shown, limit_mib)) {
    return Status::Internal(
        "the MPS daemon shows '" + Excerpt(*shown, 60) +
        "' as the pinned-memory default of device " + device +
        " after it was set to " + value +
        (Blank(*set) ? std::string()
                     : " (it answered '" + Excerpt(*set, 100) + "')"));
  }
  return Status::Ok();
}

Status ProcessMpsControl::SetWholeCardPinnedLimit(const std::string& device,
                                                  MemoryMib limit_mib) {
  HF_RETURN_IF_ERROR(ValidateDeviceKey(device));
  if (limit_mib <= 0 || limit_mib > kMaxPinnedLimitMib) {
    return Status::InvalidArgument(
        "pinned-memory cap must be 1 MiB or more, got " +
            std::to_string(limit_mib),
        "limit_mib");
  }
  MutexLock lock(mu_);
  caps_[device] = limit_mib;
  if (!Alive()) {
    return Status::Unavailable(
        "no MPS control daemon answers now; the pinned-memory cap of device " +
        device + " is set when it starts");
  }
  return ApplyCapLocked(device, limit_mib)
      .WithContext("setting the pinned-memory cap of device " + device);
}

Status ProcessMpsControl::Stop() {
  MutexLock lock(mu_);
  StatusOr<std::string> quit = Command("quit");
  if (!quit.ok() && quit.status().code() == StatusCode::kFailedPrecondition) {
    return quit.status();
  }
  const auto deadline =
      std::chrono::steady_clock::now() + options_.start_timeout;
  while (Alive()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Unavailable("the MPS control daemon in " + pipe_dir_ +
                                 " still answers after quit");
    }
    std::this_thread::sleep_for(kStartPollInterval);
  }
  spdlog::info("MPS control daemon in {} stopped", pipe_dir_);
  // The outage that follows is the operator's choice: Ensure starts it
  // again without a warning.
  ever_started_ = false;
  return Status::Ok();
}

}  // namespace hf::mps
