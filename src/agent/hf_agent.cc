// hf-agent: the HeteroFlow node agent (docs/CONTRACT.md sections 2, 3, 8, 9).
// Parses the command line (flags, HF_AGENT_* environment variables, an optional
// config file), opens the GPU backend (NVML or a simulated inventory), the
// task runtime (processes or Docker) and the MPS control, then runs the
// agent loop until SIGTERM or SIGINT. Stopping the agent never stops tasks
// or the MPS daemon: a new agent adopts them.
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "agent/agent.h"
#include "agent/server_client.h"
#include "common/flag_paths.h"
#include "common/main_guard.h"
#include "gpu/nvml/nvml_driver.h"
#include "gpu/sim_driver.h"
#include "mps/process_mps_control.h"
#include "mps/sim_mps_control.h"
#include "runtime/docker_runtime.h"
#include "runtime/process_runtime.h"

namespace {

constexpr const char* kVersion = "0.1.0";

struct Flags {
  std::string server;
  std::string token_file;
  std::string node_id;
  std::string gpu_backend = "nvml";
  std::string inventory;
  std::string runtime = "process";
  std::string state_dir;
  double heartbeat_interval_s = 5;
  double exit_poll_interval_s = 0.25;
  double kill_grace_s = 10;
  double mig_destroy_wait_s = 60;
  double mps_wait_s = 60;
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string mps = "auto";
  std::string mps_control = "nvidia-cuda-mps-control";
  std::string mps_dir = "/run/heteroflow/mps";
  std::string docker = "docker";
  std::string task_shim;
  std::string hook_library;
  std::string hook_preload = "both";
  double hook_attach_grace_s = 5;
  std::string log_level = "info";
  std::string metrics_listen;  // empty: no metrics endpoint
  bool probe = false;
};

bool ReadToken(const std::string& path, std::string& token) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  token = ss.str();
  const auto first = token.find_first_not_of(" \t\r\n");
  const auto last = token.find_last_not_of(" \t\r\n");
  token =
      first == std::string::npos ? "" : token.substr(first, last - first + 1);
  return true;
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "hf-agent: %s\n", what.c_str());
  return 1;
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{
      "hf-agent: the HeteroFlow node agent (GPU probing, task runtime, MIG "
      "and MPS execution).\nEvery option can also come from the HF_AGENT_* "
      "environment variable shown, or from a config file (--config, "
      "TOML/INI: key = value with the long option names).\nRelative paths "
      "are made absolute against the working directory at start; a program "
      "or library given as a bare name (no '/') is looked up in PATH or the "
      "dynamic linker's search path."};
  app.set_config("--config", "", "Read options from this file");
  app.add_option("--server", f.server,
                 "Control plane URL (http://HOST:PORT); several instances "
                 "separated by commas fail over")
      ->envname("HF_AGENT_SERVER");
  app.add_option("--token-file", f.token_file,
                 "File holding a node token (POST /api/v1/tokens, role node)")
      ->envname("HF_AGENT_TOKEN_FILE");
  app.add_option("--node-id", f.node_id,
                 "This node's name ([a-z0-9][a-z0-9._-]{0,62})")
      ->envname("HF_AGENT_NODE_ID");
  app.add_option("--gpu-backend", f.gpu_backend,
                 "nvml (the machine's NVIDIA GPUs) or sim (--inventory)")
      ->envname("HF_AGENT_GPU_BACKEND")
      ->check(CLI::IsMember({"nvml", "sim"}))
      ->capture_default_str();
  app.add_option("--inventory", f.inventory,
                 "Simulated inventory file (docs/INVENTORY.md); sim only")
      ->envname("HF_AGENT_INVENTORY");
  app.add_option("--runtime", f.runtime, "Task runtime: process or docker")
      ->envname("HF_AGENT_RUNTIME")
      ->check(CLI::IsMember({"process", "docker"}))
      ->capture_default_str();
  app.add_option("--state-dir", f.state_dir,
                 "Directory for task state, logs and claimed MIG commands")
      ->envname("HF_AGENT_STATE_DIR");
  app.add_option("--heartbeat-interval", f.heartbeat_interval_s,
                 "Seconds between heartbeats")
      ->envname("HF_AGENT_HEARTBEAT_INTERVAL")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  app.add_option("--exit-poll-interval", f.exit_poll_interval_s,
                 "Seconds between looks for ended tasks between heartbeats "
                 "(their slices go back at once); 0: at heartbeats only. "
                 "Runtime process only")
      ->envname("HF_AGENT_EXIT_POLL_INTERVAL")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--kill-grace", f.kill_grace_s,
                 "Seconds between SIGTERM and SIGKILL when a task is cancelled")
      ->envname("HF_AGENT_KILL_GRACE")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--mig-destroy-wait", f.mig_destroy_wait_s,
                 "Seconds a MIG destroy waits for the task's processes "
                 "before reporting the partition orphaned")
      ->envname("HF_AGENT_MIG_DESTROY_WAIT")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--mps-wait", f.mps_wait_s,
                 "Seconds a silver task waits for a dead MPS daemon before it "
                 "is failed (never run without its limits)")
      ->envname("HF_AGENT_MPS_WAIT")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--nvml-library", f.nvml_library, "NVML library to dlopen")
      ->envname("HF_AGENT_NVML_LIBRARY")
      ->capture_default_str();
  app.add_option("--mps", f.mps,
                 "MPS control: auto (real daemon with nvml, simulated with "
                 "sim), process, sim or off")
      ->envname("HF_AGENT_MPS")
      ->check(CLI::IsMember({"auto", "process", "sim", "off"}))
      ->capture_default_str();
  app.add_option("--mps-control", f.mps_control,
                 "The nvidia-cuda-mps-control binary")
      ->envname("HF_AGENT_MPS_CONTROL")
      ->capture_default_str();
  app.add_option("--mps-dir", f.mps_dir,
                 "Base directory for the MPS pipe/ and log/ directories")
      ->envname("HF_AGENT_MPS_DIR")
      ->capture_default_str();
  app.add_option("--docker", f.docker, "The docker CLI (runtime docker)")
      ->envname("HF_AGENT_DOCKER")
      ->capture_default_str();
  app.add_option("--task-shim", f.task_shim,
                 "The hf-task-shim program (default: beside hf-agent, then "
                 "PATH)")
      ->envname("HF_AGENT_TASK_SHIM");
  app.add_option("--hook-library", f.hook_library,
                 "libhfhook.so to LD_PRELOAD into slices that are not MIG "
                 "partitions (empty: none)")
      ->envname("HF_AGENT_HOOK_LIBRARY");
  app.add_option("--hook-preload", f.hook_preload,
                 "How the hook reaches a container's processes: env "
                 "(LD_PRELOAD), ld-so-preload (a read-only /etc/ld.so.preload "
                 "naming it) or both; host processes always get LD_PRELOAD")
      ->envname("HF_AGENT_HOOK_PRELOAD")
      ->check(CLI::IsMember({"env", "ld-so-preload", "both"}))
      ->capture_default_str();
  app.add_option("--hook-attach-grace", f.hook_attach_grace_s,
                 "Seconds a process of a hooked slice may use its GPU before "
                 "it must have attached to the slice's region; past it the "
                 "slice's enforcement no longer lists the hook")
      ->envname("HF_AGENT_HOOK_ATTACH_GRACE")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--log-level", f.log_level,
                 "trace, debug, info, warn, error or off")
      ->envname("HF_AGENT_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--metrics-listen", f.metrics_listen,
                 "Serve Prometheus metrics at GET /metrics on this HOST:PORT "
                 "(no token: bind it where only monitoring reaches; "
                 "docs/METRICS.md)")
      ->envname("HF_AGENT_METRICS_LISTEN");
  app.add_flag("--probe", f.probe,
               "Probe the GPUs once, print the node report as JSON and exit "
               "(1 when the GPU backend cannot be reached); needs no server, "
               "token or node id, and starts no MPS daemon");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_level(spdlog::level::from_str(f.log_level));
  if (f.gpu_backend == "sim" && f.inventory.empty()) {
    return Fail("--inventory: required with --gpu-backend sim");
  }
  if (f.gpu_backend == "nvml" && !f.inventory.empty()) {
    return Fail("--inventory: only with --gpu-backend sim");
  }
  if (f.probe) {
    if (f.node_id.empty()) f.node_id = "probe";
    if (f.state_dir.empty()) {
      f.state_dir = (std::filesystem::temp_directory_path() /
                     ("hf-agent-probe-" + std::to_string(getpid())))
                        .string();
    }
  }
  for (const auto& [value, flag] : {std::pair{&f.server, "--server"},
                                    std::pair{&f.token_file, "--token-file"},
                                    std::pair{&f.node_id, "--node-id"},
                                    std::pair{&f.state_dir, "--state-dir"}}) {
    if (value->empty() && !(f.probe && (std::string(flag) == "--server" ||
                                        std::string(flag) == "--token-file"))) {
      return Fail(std::string(flag) + ": required");
    }
  }
  // Every path is made absolute now: the MPS pipe directory goes into
  // tasks' environments, the hook library and the state directory into
  // containers' mounts, where a relative path means nothing.
  for (const auto& [value, flag] : {std::pair{&f.token_file, "--token-file"},
                                    std::pair{&f.inventory, "--inventory"},
                                    std::pair{&f.state_dir, "--state-dir"},
                                    std::pair{&f.mps_dir, "--mps-dir"}}) {
    if (auto s = hf::MakeFlagPathAbsolute(flag, *value); !s.ok()) {
      return Fail(s.field() + ": " + s.message());
    }
  }
  for (const auto& [value, flag] :
       {std::pair{&f.hook_library, "--hook-library"},
        std::pair{&f.task_shim, "--task-shim"},
        std::pair{&f.mps_control, "--mps-control"},
        std::pair{&f.docker, "--docker"},
        std::pair{&f.nvml_library, "--nvml-library"}}) {
    if (auto s = hf::MakeFlagProgramAbsolute(flag, *value); !s.ok()) {
      return Fail(s.field() + ": " + s.message());
    }
  }
  std::unique_ptr<hf::agent::ServerClient> server;
  // Its own connection for the wait for work (Agent::SetWorkWaiter).
  std::unique_ptr<hf::agent::ServerClient> work_waiter;
  if (!f.probe) {
    std::string token;
    if (!ReadToken(f.token_file, token)) {
      return Fail("--token-file: cannot read '" + f.token_file + "'");
    }
    auto client = hf::agent::ServerClient::Create(f.server, token);
    if (!client.ok()) return Fail(client.status().ToString());
    server = std::move(*client);
    auto waiter = hf::agent::ServerClient::Create(f.server, token);
    if (!waiter.ok()) return Fail(waiter.status().ToString());
    work_waiter = std::move(*waiter);
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  hf::SystemClock clock;
  const std::filesystem::path state_dir(f.state_dir);
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) return Fail("--state-dir: " + ec.message());

  // The GPU backend.
  std::unique_ptr<hf::gpu::GpuDriver> driver;
  hf::agent::HostFacts host = hf::agent::ProbeHost();
  std::optional<hf::gpu::MpsBehaviour> sim_mps;
  if (f.gpu_backend == "sim") {
    hf::gpu::SimDriverOptions options;
    options.state_file = (state_dir / "sim-mig-state.json").string();
    auto sim =
        hf::gpu::SimGpuDriver::CreateFromFile(f.inventory, clock, options);
    if (!sim.ok()) return Fail("--inventory: " + sim.status().ToString());
    const hf::gpu::Inventory& inv = (*sim)->inventory();
    host.containerized = inv.containerized;
    host.cpu_milli = inv.cpu_milli;
    host.host_memory_mib = inv.host_memory_mib;
    sim_mps = inv.mps;
    driver = std::move(*sim);
  } else {
    hf::gpu::NvmlGpuDriver::Options options;
    options.library_path = f.nvml_library;
    auto nvml = std::make_unique<hf::gpu::NvmlGpuDriver>(options);
    if (!nvml->load_status().ok()) {
      // Keep going: the node registers with no GPUs and says why in the log.
      spdlog::error("NVML: {}", nvml->load_status().ToString());
    }
    driver = std::move(nvml);
  }

  // MPS.
  std::unique_ptr<hf::mps::MpsControl> mps;
  std::string mps_kind = f.mps;
  if (mps_kind == "auto") mps_kind = f.gpu_backend == "sim" ? "sim" : "process";
  if (f.probe) mps_kind = "off";  // a probe starts no daemon
  if (mps_kind == "sim") {
    hf::mps::SimMpsOptions options;
    options.daemon_can_start = sim_mps ? sim_mps->daemon_can_start : true;
    options.pipe_directory = f.mps_dir + "/pipe";
    options.log_directory = f.mps_dir + "/log";
    mps = std::make_unique<hf::mps::SimMpsControl>(options);
  } else if (mps_kind == "process") {
    hf::mps::ProcessMpsOptions options;
    options.control_binary = f.mps_control;
    options.base_dir = f.mps_dir;
    mps = std::make_unique<hf::mps::ProcessMpsControl>(options, nullptr, clock);
  }

  // The runtime.
  std::unique_ptr<hf::runtime::Runtime> runtime;
  if (f.runtime == "docker") {
    hf::runtime::DockerRuntimeOptions options;
    options.docker = f.docker;
    runtime = std::make_unique<hf::runtime::DockerRuntime>(options);
  } else {
    hf::runtime::ProcessRuntimeOptions options;
    options.state_dir = state_dir / "runtime";
    options.shim_path = f.task_shim;
    auto process = hf::runtime::ProcessRuntime::Create(options);
    if (!process.ok()) return Fail("runtime: " + process.status().ToString());
    runtime = std::move(*process);
  }

  hf::agent::AgentOptions options;
  options.node_id = f.node_id;
  options.agent_version = std::string("hf-agent ") + kVersion;
  options.state_dir = state_dir;
  options.heartbeat_interval = std::chrono::milliseconds(
      static_cast<std::int64_t>(f.heartbeat_interval_s * 1000));
  options.exit_poll_interval = std::chrono::milliseconds(
      static_cast<std::int64_t>(f.exit_poll_interval_s * 1000));
  options.kill_grace = std::chrono::milliseconds(
      static_cast<std::int64_t>(f.kill_grace_s * 1000));
  options.mig_destroy_wait = std::chrono::milliseconds(
      static_cast<std::int64_t>(f.mig_destroy_wait_s * 1000));
  options.mps_wait =
      std::chrono::milliseconds(static_cast<std::int64_t>(f.mps_wait_s * 1000));
  options.hook_library = f.hook_library;
  options.hook_preload = hf::runtime::ParsePreloadRoute(f.hook_preload)
                             .value_or(hf::runtime::PreloadRoute::kBoth);
  options.hook_attach_grace = std::chrono::milliseconds(
      static_cast<std::int64_t>(f.hook_attach_grace_s * 1000));
  auto agent = hf::agent::Agent::Create(options, server.get(), driver.get(),
                                        runtime.get(), mps.get(), host, &clock);
  if (!agent.ok()) return Fail(agent.status().ToString());
  if (f.probe) {
    std::printf("%s\n", (*agent)->ProbeOnly().dump(2).c_str());
    return driver->ListGpus().ok() ? 0 : 1;
  }
  (*agent)->SetWorkWaiter(work_waiter.get());

  std::unique_ptr<hf::metrics::MetricsListener> metrics_listener;
  if (!f.metrics_listen.empty()) {
    auto addr = hf::metrics::ParseListen(f.metrics_listen, "metrics-listen");
    if (!addr.ok()) return Fail("--metrics-listen " + addr.status().message());
    hf::agent::Agent* a = agent->get();
    metrics_listener = std::make_unique<hf::metrics::MetricsListener>([a] {
      hf::metrics::Exposition e;
      e.AddSource([a] { return a->CollectMetrics(); });
      return e.Render();
    });
    if (auto s = metrics_listener->Start(addr->first, addr->second); !s.ok()) {
      return Fail("--metrics-listen: " + s.message());
    }
    spdlog::info("metrics on http://{}:{}/metrics", addr->first,
                 metrics_listener->port());
  }

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    spdlog::info("signal {}: stopping (tasks keep running)", sig);
    (*agent)->Stop();
  });
  spdlog::info("hf-agent {}: node '{}', {} GPUs via {}, {} runtime, server {}",
               kVersion, f.node_id, f.gpu_backend, driver->Name(),
               runtime->Name(), f.server);
  const hf::Status result = (*agent)->Run();
  if (result.ok()) {
    waiter.join();
    if (metrics_listener) metrics_listener->Stop();
    return 0;
  }
  // Run gave up (a revoked token, ...): wake the signal thread (SIGTERM is
  // blocked everywhere, so only its sigwait takes it) and leave.
  kill(getpid(), SIGTERM);
  waiter.join();
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  return hf::RunMain("hf-agent", [&] { return Main(argc, argv); });
}
