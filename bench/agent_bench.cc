// The node agent's footprint (issue 5): resident memory and CPU of a real
// hf-agent process, idle, reporting 8 simulated GPUs to a real hf-server at
// the default 5 s heartbeat. Targets: < 30 MB RSS, < 1% of one core.
//
// Counters: rss_mb (peak VmRSS seen), cpu_percent_of_core (user + system
// time over the window), heartbeats (cycles the server saw, as a sanity
// check that the agent was working, not stuck).
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kWindowSeconds = 30;

pid_t Spawn(const std::vector<std::string>& args, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> storage = args;
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) !=
      0) {
    pid = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

void Stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

// Nanoseconds `pid` (all its threads) has run on a CPU
// (/proc/PID/schedstat, first field; finer than utime/stime's ticks).
double CpuSeconds(pid_t pid) {
  double total = 0;
  for (const auto& task :
       fs::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream in(task.path() / "schedstat");
    double ns = 0;
    if (in >> ns) total += ns;
  }
  return total / 1e9;
}

double RssMb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stod(line.substr(6)) / 1024.0;  // kB
    }
  }
  return -1;
}

// A port nothing listens on now (bind to port 0, read it back, close).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

void BM_AgentIdleFootprint(benchmark::State& state) {
  const fs::path dir = fs::temp_directory_path() /
                       ("hf-agent-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  json gpus = json::array();
  for (int i = 0; i < 8; ++i) {
    gpus.push_back(
        {{"model", i == 0 ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100-SXM4-80GB"},
         {"memory_mb", 81920},
         {"compute_capability", i == 0 ? "9.0" : "8.0"},
         {"mig_enabled", i == 0}});
  }
  std::ofstream(dir / "inventory.json") << json{
      {"node_id", "bench"},
      {"cpu_milli", 64000},
      {"host_memory_mb", 524288},
      {"gpus", gpus}}.dump();
  const std::string admin = "hf_agent_bench_admin_token_000";
  std::ofstream(dir / "admin.token") << admin;
  const int port = FreePort();
  const pid_t server =
      Spawn({HF_SERVER_PATH, "--listen", "127.0.0.1:" + std::to_string(port),
             "--db", "sqlite:" + (dir / "db").string(), "--admin-token-file",
             (dir / "admin.token").string(), "--log-level", "warn"},
            dir / "server.log");
  httplib::Client http("127.0.0.1", port);
  const httplib::Headers auth = {{"Authorization", "Bearer " + admin}};
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    up = static_cast<bool>(http.Get("/healthz"));
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto token =
      http.Post("/api/v1/tokens", auth, R"({"role":"node","node":"bench"})",
                "application/json");
  if (!up || !token || token->status != 201) {
    state.SkipWithError("hf-server did not start");
    Stop(server);
    return;
  }
  std::ofstream(dir / "node.token")
      << json::parse(token->body)["token"].get<std::string>();
  const pid_t agent = Spawn(
      {HF_AGENT_PATH, "--server", "http://127.0.0.1:" + std::to_string(port),
       "--token-file", (dir / "node.token").string(), "--node-id", "bench",
       "--gpu-backend", "sim", "--inventory", (dir / "inventory.json").string(),
       "--state-dir", (dir / "agent").string(), "--mps-dir",
       (dir / "mps").string(), "--log-level", "warn"},
      dir / "agent.log");
  // Let it register and settle before measuring.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const auto heartbeat_at = [&]() -> std::string {
    auto n = http.Get("/api/v1/nodes/bench", auth);
    if (!n || n->status != 200) return "";
    return json::parse(n->body).value("last_heartbeat_at", "");
  };
  double peak_rss = 0;
  double cpu_seconds = 0;
  int heartbeats = 0;
  for (auto _ : state) {
    const double start_cpu = CpuSeconds(agent);
    const auto start = std::chrono::steady_clock::now();
    std::string last = heartbeat_at();
    for (int s = 0; s < kWindowSeconds; ++s) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      peak_rss = std::max(peak_rss, RssMb(agent));
      const std::string now = heartbeat_at();
      if (!now.empty() && now != last) ++heartbeats;
      last = now;
    }
    cpu_seconds = CpuSeconds(agent) - start_cpu;
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  state.counters["gpus"] = 8;
  state.counters["rss_mb"] = peak_rss;
  state.counters["cpu_percent_of_core"] = 100.0 * cpu_seconds / kWindowSeconds;
  state.counters["heartbeats"] = heartbeats;
  Stop(agent);
  Stop(server);
  std::error_code ec;
  fs::remove_all(dir, ec);
}
BENCHMARK(BM_AgentIdleFootprint)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
