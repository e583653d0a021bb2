// Implementation of the agent half of the end-to-end harness (see
// agent_harness.h).
#include "tests/e2e/agent_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

extern char** environ;

namespace hf::e2e {

namespace fs = std::filesystem;

// ------------------------------------------------------------- helpers

std::vector<std::string> ProcStatFields(pid_t pid) {
  const std::string text =
      ReadFile(fs::path("/proc") / std::to_string(pid) / "stat");
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream in(text.substr(close + 1));
  std::vector<std::string> fields;
  std::string field;
  while (in >> field) fields.push_back(field);
  return fields;
}

int LiveProcessesInGroup(pid_t pgid) {
  int live = 0;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() ||
        name.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    const std::vector<std::string> f = ProcStatFields(std::atoi(name.c_str()));
    if (f.size() < 3) continue;
    if (f[2] == std::to_string(pgid) && f[0] != "Z" && f[0] != "X") ++live;
  }
  return live;
}

std::string FakeDockerPath() { return HF_FAKE_DOCKER_PATH; }

std::string CreateNodeToken(const Api& api, const std::string& node) {
  json body = {{"role", "node"}, {"description", "e2e agent"}};
  if (!node.empty()) body["node"] = node;
  const HttpReply r = api.http().Post("/api/v1/tokens", body, api.admin());
  if (r.status != 201 || !r.body.is_object() || !r.body["token"].is_string()) {
    ADD_FAILURE() << "creating a node token: " << r.Describe();
    return "";
  }
  return r.body["token"].get<std::string>();
}

json SimInventory(const std::string& node, json gpus,
                  bool mps_daemon_can_start) {
  return {{"node_id", node},
          {"containerized", false},
          {"cpu_milli", 16000},
          {"host_memory_mb", 65536},
          {"mps", {{"daemon_can_start", mps_daemon_can_start}}},
          {"gpus", std::move(gpus)}};
}

json H100Mig(json faults) {
  return {{"model", "NVIDIA H100 80GB HBM3"},
          {"memory_mb", 81559},
          {"compute_capability", "9.0"},
          {"mig_enabled", true},
          {"faults", std::move(faults)}};
}

json A100(std::int64_t memory_mb, json faults) {
  return {{"model", memory_mb > 40960 ? "NVIDIA A100-SXM4-80GB"
                                      : "NVIDIA A100-SXM4-40GB"},
          {"memory_mb", memory_mb},
          {"compute_capability", "8.0"},
          {"faults", std::move(faults)}};
}

json T4() {
  return {{"model", "Tesla T4"},
          {"memory_mb", 15360},
          {"compute_capability", "7.5"}};
}

json P100() {
  return {{"model", "Tesla P100-PCIE-16GB"},
          {"memory_mb", 16384},
          {"compute_capability", "6.0"}};
}

std::map<std::string, std::string> ParseEnvLines(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string name = line.substr(0, eq);
    if (name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "abcdefghijklmnopqrstuvwxyz0123456789_") !=
        std::string::npos) {
      continue;
    }
    env[name] = line.substr(eq + 1);
  }
  return env;
}

std::string WaitForFileCommand(const fs::path& file, const std::string& then,
                               int max_s) {
  const std::string rounds = std::to_string(max_s * 10);
  return "i=0; while [ ! -e '" + file.string() + "' ] && [ $i -lt " + rounds +
         " ]; do sleep 0.1; i=$((i+1)); done; " + then;
}

void Touch(const fs::path& file) { std::ofstream(file).flush(); }

// -------------------------------------------------------- AgentProcess

AgentProcess::AgentProcess(std::string server_url, AgentProcessOptions options)
    : server_url_(std::move(server_url)), options_(std::move(options)) {
  std::string pattern =
      (fs::temp_directory_path() / "hf_e2e_agent_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    return;
  }
  dir_ = pattern;
}

AgentProcess::~AgentProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  if (dir_.empty()) return;
  KillLeftoverTasks();
  if (KeepDirs()) {
    std::cerr << "[e2e] kept " << dir_ << "\n";
    return;
  }
  // The shims of killed tasks still write their exit records for a moment,
  // which can make a removal fail on a directory that is not empty yet.
  WaitFor(
      [&] {
        std::error_code ec;
        fs::remove_all(dir_, ec);
        return !fs::exists(dir_, ec);
      },
      milliseconds(5'000), milliseconds(50));
}

void AgentProcess::KillLeftoverTasks() const {
  std::error_code ec;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(state_dir() / "runtime" / "tasks", ec)) {
    // "<pid> <start time> <boot id>": signal only the process recorded, not
    // one that took its pid since.
    std::istringstream in(ReadFile(entry.path() / "pid"));
    pid_t pid = 0;
    std::string start;
    if (!(in >> pid >> start) || pid <= 1) continue;
    const std::vector<std::string> f = ProcStatFields(pid);
    if (f.size() > 19 && f[19] == start) kill(-pid, SIGKILL);
  }
}

fs::path AgentProcess::TaskDir(std::int64_t id) const {
  return state_dir() / "runtime" / "tasks" / std::to_string(id);
}

std::string AgentProcess::Log(std::size_t max_bytes) const {
  return Tail(ReadFile(log_path()), max_bytes);
}

bool AgentProcess::LogContains(const std::string& needle) const {
  return ReadFile(log_path()).find(needle) != std::string::npos;
}

::testing::AssertionResult AgentProcess::WaitForLog(const std::string& needle,
                                                    milliseconds timeout) {
  if (WaitFor([&] { return LogContains(needle); }, timeout, milliseconds(20))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "the agent did not log '" << needle << "' within "
         << timeout.count() << " ms; its log:\n"
         << Log();
}

std::optional<pid_t> AgentProcess::TaskPid(std::int64_t id) const {
  std::istringstream in(ReadFile(TaskDir(id) / "pid"));
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 1) return std::nullopt;
  return pid;
}

std::optional<pid_t> AgentProcess::WaitTaskPid(std::int64_t id,
                                               milliseconds timeout) {
  std::optional<pid_t> pid;
  WaitFor(
      [&] {
        pid = TaskPid(id);
        return pid.has_value();
      },
      timeout);
  return pid;
}

bool AgentProcess::Reap(int* status, milliseconds timeout) {
  return ReapChild(pid_, status, timeout);
}

::testing::AssertionResult AgentProcess::Start() {
  if (dir_.empty()) return ::testing::AssertionFailure() << "no temp dir";
  if (pid_ > 0) {
    return ::testing::AssertionFailure() << "the agent is already running";
  }
  {
    std::ofstream inventory(dir_ / "inventory.json");
    inventory << options_.inventory.dump(2) << "\n";
    std::ofstream token(dir_ / "node.token");
    token << options_.token << "\n";
    if (!inventory || !token) {
      return ::testing::AssertionFailure() << "cannot write into " << dir_;
    }
  }
  // Relative to the agent's working directory (its own directory then).
  const auto path = [&](const std::filesystem::path& p) {
    return options_.relative_paths
               ? "./" + std::filesystem::relative(p, dir_).string()
               : p.string();
  };
  std::vector<std::string> args = {
      HF_AGENT_PATH,
      "--server",
      server_url_,
      "--token-file",
      path(dir_ / "node.token"),
      "--node-id",
      options_.node_id,
      "--gpu-backend",
      "sim",
      "--inventory",
      path(dir_ / "inventory.json"),
      "--runtime",
      options_.runtime,
      "--state-dir",
      path(state_dir()),
      "--mps-dir",
      path(mps_dir()),
      "--heartbeat-interval",
      std::to_string(options_.heartbeat_interval_s),
      "--kill-grace",
      std::to_string(options_.kill_grace_s),
  };
  if (!options_.docker.empty()) {
    args.push_back("--docker");
    args.push_back(options_.docker);
  }
  args.insert(args.end(), options_.flags.begin(), options_.flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The test's environment minus HF_* (the agent reads HF_AGENT_* options
  // from there; a developer's shell must not change the test), plus extras.
  std::vector<std::string> env_storage;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "HF_", 3) != 0) env_storage.emplace_back(*e);
  }
  for (const auto& [name, value] : options_.env) {
    env_storage.push_back(name + "=" + value);
  }
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  const int log_fd =
      open(log_path().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return ::testing::AssertionFailure()
           << "cannot open " << log_path() << ": " << std::strerror(errno);
  }
  {
    const std::string banner = "=== hf-agent start ===\n";
    (void)!write(log_fd, banner.data(), banner.size());
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const std::string working_dir = options_.relative_paths ? dir_.string() : "";
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return ::testing::AssertionFailure() << "fork: " << std::strerror(errno);
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    if (!working_dir.empty() && chdir(working_dir.c_str()) != 0) _exit(125);
    execve(argv[0], argv.data(), envp.data());
    static const char kMsg[] = "e2e harness: execve failed\n";
    (void)!write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    _exit(127);
  }
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  pid_ = pid;
  return ::testing::AssertionSuccess();
}

std::optional<int> AgentProcess::WaitExit(milliseconds timeout) {
  int status = 0;
  if (!Reap(&status, timeout)) return std::nullopt;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1000;
}

::testing::AssertionResult AgentProcess::Stop() {
  return TerminateChild(pid_, "hf-agent", options_.stop_timeout,
                        [&] { return Log(); });
}

::testing::AssertionResult AgentProcess::Kill() {
  return KillChild(pid_, "hf-agent");
}

::testing::AssertionResult AgentProcess::Restart(bool kill_it) {
  ::testing::AssertionResult down = kill_it ? Kill() : Stop();
  if (!down) return down;
  return Start();
}

}  // namespace hf::e2e
