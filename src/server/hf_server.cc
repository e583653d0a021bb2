// hf-server: the HeteroFlow control plane (SPEC.md section 2). Parses the
// command line (flags, HF_* environment variables, an optional config
// file), opens the store, rebuilds the ledger, bootstraps the admin token,
// then serves the REST API until SIGTERM or SIGINT, and shuts down
// gracefully: in-flight requests finish, the scheduler and GC stop, the
// store drains its commit queue.
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "api/http_api.h"
#include "common/main_guard.h"
#include "scheduler/policy/registry.h"
#include "server/control_plane.h"
#include "store/store.h"

namespace {

struct Flags {
  std::string listen = "127.0.0.1:3333";
  std::string db = "sqlite:./var/heteroflow.db";
#ifdef HF_DEFAULT_CONSOLE_DIR
  std::string console_dir = HF_DEFAULT_CONSOLE_DIR;
#else
  std::string console_dir;
#endif
  std::string admin_token_file;
  std::string policy = "best-fit";
  int default_compute_percent = 50;
  double gc_interval_s = 60;
  double gc_min_age_s = 60;
  double mig_command_deadline_s = 120;
  int heartbeat_interval_s = 5;
  int http_threads = 128;
  std::string log_level = "info";
};

bool SplitListen(const std::string& listen, std::string& host, int& port) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  try {
    std::size_t used = 0;
    port = std::stoi(listen.substr(colon + 1), &used);
    if (used != listen.size() - colon - 1) return false;
  } catch (const std::exception&) {
    return false;
  }
  return !host.empty() && port >= 0 && port <= 65535;
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{
      "hf-server: the HeteroFlow control plane (REST API, ledger, scheduler, "
      "orphan GC, MIG command channel).\nEvery option can also come from the "
      "HF_* environment variable shown, or from a config file (--config, "
      "TOML/INI: key = value with the long option names)."};
  app.set_config("--config", "", "Read options from this file");
  app.add_option("--listen", f.listen, "Address to serve HTTP on (host:port)")
      ->envname("HF_LISTEN")
      ->capture_default_str();
  app.add_option("--db", f.db,
                 "Database URL: sqlite:PATH (embedded; created when new)")
      ->envname("HF_DB")
      ->capture_default_str();
  app.add_option("--admin-token-file", f.admin_token_file,
                 "File whose content is a platform-admin token. Without it, "
                 "a fresh database gets a generated admin token, printed "
                 "once; only its hash is stored")
      ->envname("HF_ADMIN_TOKEN_FILE");
  app.add_option(
         "--policy", f.policy,
         "Placement policy (" +
             [] {
               std::string names;
               for (const auto& n : hf::scheduler::PolicyNames()) {
                 names += (names.empty() ? "" : ", ") + std::string(n);
               }
               return names;
             }() +
             ")")
      ->envname("HF_POLICY")
      ->capture_default_str();
  app.add_option("--default-compute-percent", f.default_compute_percent,
                 "Compute accounted for a slice without gpu_compute_ratio")
      ->envname("HF_DEFAULT_COMPUTE_PERCENT")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--gc-interval", f.gc_interval_s,
                 "Seconds between orphan-GC passes")
      ->envname("HF_GC_INTERVAL")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--gc-min-age", f.gc_min_age_s,
                 "GC skips slices younger than this many seconds")
      ->envname("HF_GC_MIN_AGE")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--mig-command-deadline", f.mig_command_deadline_s,
                 "Seconds before an unfinished MIG command is marked "
                 "HARDWARE STATE UNKNOWN")
      ->envname("HF_MIG_COMMAND_DEADLINE")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--heartbeat-interval", f.heartbeat_interval_s,
                 "Seconds between agent heartbeats (told to agents)")
      ->envname("HF_HEARTBEAT_INTERVAL")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--console-dir", f.console_dir,
                 "Directory of the built web console, served at / (make builds "
                 "it; empty: no console)")
      ->envname("HF_CONSOLE_DIR")
      ->capture_default_str();
  app.add_option("--http-threads", f.http_threads, "HTTP worker threads")
      ->envname("HF_HTTP_THREADS")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--log-level", f.log_level,
                 "trace, debug, info, warn, error or off")
      ->envname("HF_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_level(spdlog::level::from_str(f.log_level));

  std::string host;
  int port = 0;
  if (!SplitListen(f.listen, host, port)) {
    std::fprintf(stderr, "hf-server: --listen: expected host:port, got '%s'\n",
                 f.listen.c_str());
    return 2;
  }
  std::optional<std::string> admin_secret;
  if (!f.admin_token_file.empty()) {
    std::ifstream in(f.admin_token_file);
    if (!in) {
      std::fprintf(stderr, "hf-server: --admin-token-file: cannot read '%s'\n",
                   f.admin_token_file.c_str());
      return 2;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    std::string secret = ss.str();
    while (!secret.empty() &&
           std::isspace(static_cast<unsigned char>(secret.back()))) {
      secret.pop_back();
    }
    while (!secret.empty() &&
           std::isspace(static_cast<unsigned char>(secret.front()))) {
      secret.erase(secret.begin());
    }
    admin_secret = secret;
  }

  // Signals are taken by one thread with sigwait; block them everywhere
  // else (threads created below inherit the mask).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto store = hf::store::OpenStore(f.db);
  if (!store.ok()) {
    std::fprintf(stderr, "hf-server: --db: %s\n",
                 store.status().ToString().c_str());
    return 1;
  }
  hf::SystemClock clock;
  hf::server::ControlPlaneOptions options;
  options.policy = f.policy;
  options.default_compute_percent = f.default_compute_percent;
  options.gc_interval_ms = static_cast<std::int64_t>(f.gc_interval_s * 1000);
  options.gc_min_age_ms = static_cast<std::int64_t>(f.gc_min_age_s * 1000);
  options.mig_command_deadline_ms =
      static_cast<std::int64_t>(f.mig_command_deadline_s * 1000);
  options.heartbeat_interval_s = f.heartbeat_interval_s;
  auto cp = hf::server::ControlPlane::Create(store->get(), &clock, options);
  if (!cp.ok()) {
    std::fprintf(stderr, "hf-server: %s\n", cp.status().ToString().c_str());
    return 1;
  }
  auto bootstrap = (*cp)->BootstrapAdmin(admin_secret);
  if (!bootstrap.ok()) {
    std::fprintf(stderr, "hf-server: admin token: %s\n",
                 bootstrap.status().ToString().c_str());
    return 1;
  }
  if (bootstrap->has_value()) {
    std::printf(
        "Admin token (shown only this once; only its hash is stored):\n"
        "  %s\n",
        (*bootstrap)->c_str());
  }

  hf::api::ApiOptions api_options;
  api_options.threads = f.http_threads;
  api_options.console_dir = f.console_dir;
  hf::api::ApiServer api(cp->get(), &clock, api_options);
  if (auto s = api.Bind(host, port); !s.ok()) {
    std::fprintf(stderr, "hf-server: --listen: %s\n", s.message().c_str());
    return 1;
  }
  (*cp)->Start();
  std::printf("hf-server listening on http://%s:%d (db %s)\n", host.c_str(),
              api.port(), f.db.c_str());
  std::fflush(stdout);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    spdlog::info("signal {}: shutting down", sig);
    api.Stop();
  });
  hf::Status served = api.Serve();
  // Serve returns after Stop (or on error): wake the waiter if needed.
  if (!served.ok()) ::kill(::getpid(), SIGTERM);
  waiter.join();
  (*cp)->Stop();
  cp->reset();
  store->reset();
  std::printf("hf-server stopped\n");
  return served.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return hf::RunMain("hf-server", [&] { return Main(argc, argv); });
}
