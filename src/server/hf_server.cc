// hf-server: the HeteroFlow control plane (docs/CONTRACT.md section 2). Parses
// the command line (flags, HF_* environment variables, an optional config
// file), opens the store, rebuilds the ledger, bootstraps the admin token,
// then serves the REST API until SIGTERM or SIGINT, and shuts down
// gracefully: in-flight requests finish, the scheduler and GC stop, the
// store drains its commit queue.
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "api/http_api.h"
#include "common/flag_paths.h"
#include "common/main_guard.h"
#include "scheduler/policy/registry.h"
#include "server/control_plane.h"
#include "server/leadership.h"
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
  std::string policy = std::string(hf::scheduler::kDefaultPolicyName);
  std::int64_t policy_cold_start_tasks = 100;
  double policy_half_life_tasks = 5000;
  int default_compute_percent = 50;
  double gc_interval_s = 60;
  bool defrag_auto = false;
  double defrag_auto_threshold = 0.5;
  double defrag_auto_interval_s = 60;
  double gc_min_age_s = 60;
  double hold_after_s = 120;
  int max_holds = 1;
  double mig_command_deadline_s = 120;
  double node_lost_after_s = 600;
  double heartbeat_write_every_s = 15;
  int heartbeat_interval_s = 5;
  int http_threads = 128;
  double idempotency_ttl_s = 86400;
  std::string log_level = "info";
  std::string metrics_listen;  // empty: /metrics on --listen only (token)
  // Several instances on one database (issue 8).
  std::string advertise_url;  // empty: from --listen
  std::string instance_id;    // empty: hostname:port
  double leader_lease_s = 6;
};

std::string HostName() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "localhost";
  return name.data();
}

// `url` with the password of a "scheme://user:password@host" URL masked,
// for logs (a PostgreSQL URL may carry one).
std::string WithoutPassword(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const auto at = url.find('@', scheme + 3);
  if (at == std::string::npos) return url;
  const auto colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

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
      "TOML/INI: key = value with the long option names).\nRelative paths "
      "(--db sqlite:PATH, --admin-token-file, --console-dir) are made "
      "absolute against the working directory at start."};
  app.set_config("--config", "", "Read options from this file");
  app.add_option("--listen", f.listen, "Address to serve HTTP on (host:port)")
      ->envname("HF_LISTEN")
      ->capture_default_str();
  app.add_option("--db", f.db,
                 "Database URL: sqlite:PATH (embedded; created when new) or "
                 "postgres://USER[:PASSWORD]@HOST:PORT/DB (several instances)")
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
  app.add_option("--policy-cold-start-tasks", f.policy_cold_start_tasks,
                 "hf-frag places with Best-Fit until it has seen this many "
                 "tasks (created, or read from the history at start)")
      ->envname("HF_POLICY_COLD_START_TASKS")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--policy-half-life-tasks", f.policy_half_life_tasks,
                 "hf-frag's target workload: a task's weight halves with "
                 "every this many newer tasks")
      ->envname("HF_POLICY_HALF_LIFE_TASKS")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--default-compute-percent", f.default_compute_percent,
                 "Compute accounted for a slice without gpu_compute_ratio")
      ->envname("HF_DEFAULT_COMPUTE_PERCENT")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_flag("--defrag-auto", f.defrag_auto,
               "Automatic defragmentation: when a node's fragmentation "
               "passes --defrag-auto-threshold and a pending task would fit "
               "after a plan, propose and apply one")
      ->envname("HF_DEFRAG_AUTO");
  app.add_option("--defrag-auto-threshold", f.defrag_auto_threshold,
                 "Fragmentation (0..1) from which automatic mode acts")
      ->envname("HF_DEFRAG_AUTO_THRESHOLD")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--defrag-auto-interval", f.defrag_auto_interval_s,
                 "Seconds at least between two automatic plans")
      ->envname("HF_DEFRAG_AUTO_INTERVAL")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--hold-after", f.hold_after_s,
                 "Seconds a task may wait for room before GPUs are held for "
                 "it, taking no other task until it fits (0: never)")
      ->envname("HF_HOLD_AFTER")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-holds", f.max_holds,
                 "How many waiting tasks may have GPUs held for them at once")
      ->envname("HF_MAX_HOLDS")
      ->check(CLI::Range(1, 100000))
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
  app.add_option("--node-lost-after", f.node_lost_after_s,
                 "Seconds without a heartbeat after which a node is lost: the "
                 "tasks it was asked to stop count as stopped and their "
                 "slices are released (its other tasks keep theirs)")
      ->envname("HF_NODE_LOST_AFTER")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--heartbeat-write-every", f.heartbeat_write_every_s,
                 "Seconds after which a node's row is written again when its "
                 "heartbeats repeat its last report (plus up to 7/8 of it, "
                 "spread by node); 0 writes every heartbeat")
      ->envname("HF_HEARTBEAT_WRITE_EVERY")
      ->check(CLI::NonNegativeNumber)
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
  app.add_option("--idempotency-ttl", f.idempotency_ttl_s,
                 "Seconds the reply of a POST sent with an Idempotency-Key "
                 "is kept for its repeats")
      ->envname("HF_IDEMPOTENCY_TTL")
      ->check(CLI::Range(1.0, 30.0 * 86400))
      ->capture_default_str();
  app.add_option("--advertise-url", f.advertise_url,
                 "URL other hf-server instances use to reach this one "
                 "(forwarded requests); default: http://HOST:PORT of --listen "
                 "(the host name when listening on all addresses)")
      ->envname("HF_ADVERTISE_URL");
  app.add_option("--instance-id", f.instance_id,
                 "This instance's name among the servers sharing the "
                 "database (default: hostname:port)")
      ->envname("HF_INSTANCE_ID");
  app.add_option("--leader-lease", f.leader_lease_s,
                 "Seconds of the leader lease: the leader renews it every "
                 "third of it; a follower takes over after it passes "
                 "unrenewed")
      ->envname("HF_LEADER_LEASE")
      ->check(CLI::Range(0.3, 3600.0))
      ->capture_default_str();
  app.add_option("--metrics-listen", f.metrics_listen,
                 "Also serve GET /metrics on this HOST:PORT, without a token "
                 "(for a port only the monitoring network reaches); on "
                 "--listen it needs an admin or metrics token")
      ->envname("HF_METRICS_LISTEN");
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

  // Paths are resolved once, against the working directory at start.
  for (const auto& [value, flag] :
       {std::pair{&f.admin_token_file, "--admin-token-file"},
        std::pair{&f.console_dir, "--console-dir"}}) {
    if (auto s = hf::MakeFlagPathAbsolute(flag, *value); !s.ok()) {
      std::fprintf(stderr, "hf-server: %s: %s\n", s.field().c_str(),
                   s.message().c_str());
      return 2;
    }
  }
  if (auto s = hf::MakeSqliteUrlAbsolute("--db", f.db); !s.ok()) {
    std::fprintf(stderr, "hf-server: --db: %s\n", s.message().c_str());
    return 2;
  }

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
  hf::SteadyClock steady;
  const bool listens_everywhere =
      host == "0.0.0.0" || host == "::" || host.empty();
  hf::server::LeadershipOptions leader_options;
  leader_options.instance_id = f.instance_id.empty()
                                   ? HostName() + ":" + std::to_string(port)
                                   : f.instance_id;
  leader_options.ttl_ms = static_cast<std::int64_t>(f.leader_lease_s * 1000);
  // SQLite is locked to one process: alone, whatever id the last run had.
  leader_options.exclusive_store = (*store)->info().backend == "sqlite";
  hf::server::Leadership leadership(store->get(), &clock, &steady,
                                    leader_options);
  hf::server::ControlPlaneOptions options;
  // The ledger is rebuilt when this instance wins the lease (at once when
  // it is alone), not before.
  options.defer_recovery = true;
  if ((*store)->info().backend == "postgres") {
    // Followers create tasks the leader learns of from the store: at once
    // through its task feed (LISTEN/NOTIFY), and by this sweep should the
    // feed have missed any.
    options.resync_interval_ms = 15'000;
  }
  options.policy = f.policy;
  options.learned.cold_start_tasks = f.policy_cold_start_tasks;
  options.learned.half_life_tasks = f.policy_half_life_tasks;
  options.default_compute_percent = f.default_compute_percent;
  options.gc_interval_ms = static_cast<std::int64_t>(f.gc_interval_s * 1000);
  options.defrag_auto = f.defrag_auto;
  options.defrag_auto_threshold = f.defrag_auto_threshold;
  options.defrag_auto_interval_ms =
      static_cast<std::int64_t>(f.defrag_auto_interval_s * 1000);
  options.gc_min_age_ms = static_cast<std::int64_t>(f.gc_min_age_s * 1000);
  options.hold_after_ms = static_cast<std::int64_t>(f.hold_after_s * 1000);
  options.max_holds = f.max_holds;
  // Agents waiting for work hold a worker each: at most half of them.
  options.max_work_waiters = f.http_threads / 2;
  options.mig_command_deadline_ms =
      static_cast<std::int64_t>(f.mig_command_deadline_s * 1000);
  options.node_lost_ms = static_cast<std::int64_t>(f.node_lost_after_s * 1000);
  options.heartbeat_write_every_ms =
      static_cast<std::int64_t>(f.heartbeat_write_every_s * 1000);
  options.heartbeat_interval_s = f.heartbeat_interval_s;
  auto cp = hf::server::ControlPlane::Create(store->get(), &clock, options,
                                             &leadership);
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
  api_options.idempotency.ttl_ms =
      static_cast<std::int64_t>(f.idempotency_ttl_s * 1000);
  hf::api::ApiServer api(cp->get(), &clock, api_options, &leadership);
  if (auto s = api.Bind(host, port); !s.ok()) {
    std::fprintf(stderr, "hf-server: --listen: %s\n", s.message().c_str());
    return 1;
  }
  std::string url_host = listens_everywhere ? HostName() : host;
  if (url_host.find(':') != std::string::npos) url_host = "[" + url_host + "]";
  leadership.SetUrl(f.advertise_url.empty() ? "http://" + url_host + ":" +
                                                  std::to_string(api.port())
                                            : f.advertise_url);
  hf::server::ControlPlane* control_plane = cp->get();
  std::unique_ptr<hf::metrics::MetricsListener> metrics_listener;
  if (!f.metrics_listen.empty()) {
    auto addr = hf::metrics::ParseListen(f.metrics_listen, "metrics-listen");
    if (!addr.ok()) {
      std::fprintf(stderr, "hf-server: --metrics-listen %s\n",
                   addr.status().message().c_str());
      return 2;
    }
    auto exposition = std::make_shared<hf::metrics::Exposition>(
        hf::api::ServerExposition(control_plane, &leadership));
    metrics_listener = std::make_unique<hf::metrics::MetricsListener>(
        [exposition] { return exposition->Render(); });
    if (auto s = metrics_listener->Start(addr->first, addr->second); !s.ok()) {
      std::fprintf(stderr, "hf-server: --metrics-listen: %s\n",
                   s.message().c_str());
      return 1;
    }
    std::printf("hf-server metrics on http://%s:%d/metrics\n",
                addr->first.c_str(), metrics_listener->port());
  }
  hf::server::Leadership::Callbacks callbacks;
  callbacks.on_elected = [control_plane] { return control_plane->Promote(); };
  callbacks.on_lost = [&leadership](const std::string& why) {
    // Crash-only demotion: the database is the truth, so nothing needs
    // unwinding; a supervisor restarts this process as a follower.
    spdlog::critical(
        "hf-server: instance {} is no longer the leader ({}); exiting with "
        "code {} so that it restarts as a follower",
        leadership.id(), why, hf::server::kExitLeadershipLost);
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(hf::server::kExitLeadershipLost);
  };
  leadership.Start(std::move(callbacks));
  // Alone on a database (or the first): leader and ledger rebuilt before
  // the API answers, as with a single instance.
  leadership.WaitSettled(600'000);
  std::printf("hf-server listening on http://%s:%d (db %s; instance %s, %s)\n",
              host.c_str(), api.port(), WithoutPassword(f.db).c_str(),
              leadership.id().c_str(),
              leadership.IsLeader() ? "leader" : "follower");
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
  if (metrics_listener) metrics_listener->Stop();
  // Leader work stops first; then the lease is handed over, so a follower
  // takes it at once rather than after a ttl.
  (*cp)->Stop();
  if (hf::Status resigned = leadership.Resign(); !resigned.ok()) {
    spdlog::warn(
        "leadership: could not hand the lease over ({}); a "
        "follower takes it after the lease time",
        resigned.ToString());
  }
  leadership.Stop();
  cp->reset();
  store->reset();
  std::printf("hf-server stopped\n");
  return served.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return hf::RunMain("hf-server", [&] { return Main(argc, argv); });
}
