// Server benchmark: the control plane end to end, through hf-server's real
// HTTP stack (hf::api::ApiServer on cpp-httplib, its default thread pool)
// and its durable store (SQLite, WAL, synchronous=FULL, group commit).
//
// Setup (never timed). Every benchmark builds its own server, in-process, in
// a fresh directory under $TMPDIR (or /tmp) that is removed afterwards:
// OpenStore("sqlite:DIR/hf.db"), ControlPlane::Create, BootstrapAdmin, and an
// ApiServer serving 127.0.0.1 on a free port from a thread. Simulated nodes
// register through the agent API (POST /api/v1/nodes/register with a node
// token made by POST /api/v1/tokens): 8 GPUs of 81,920 MiB each, MPS
// capable, not in MIG mode (so slices are silver and no MIG commands are
// queued). Tasks are slices of 1,024 MiB and a 5% compute ratio (20 fit on
// a GPU, bounded by compute). The file system of that directory sets the
// cost of an fsync, and with it most of these figures: run it on the disk
// the server will use (TMPDIR=/var/lib/...).
//
// The store is wrapped in a pass-through `TimedStore` that times every
// Store::Write (queueing + the caller's SQL + commit and fsync) and the
// time its function runs on the writer thread, so each result can say how
// much of a request was spent in the store.
//
// Benchmarks (wall-clock, manual time, one iteration each):
//   BM_StoreCommitFloor   no server: one thread, kCommitFloorWrites small
//       Store::Write calls one after another, so each is one commit and one
//       fsync. The floor every durable request stands on (p50_ms, p99_ms,
//       max_ms); on a shared virtual disk it moves from run to run.
//   BM_CreateTasks/clients:N   N client threads (4, 16, 32), each with its
//       own keep-alive httplib::Client (TCP_NODELAY, as curl and most HTTP
//       libraries set it) and a `user` token, POST /api/v1/tasks for
//       kLoadSeconds while the real scheduler loop runs
//       (ControlPlane::Start), on 125 nodes x 8 GPUs. Counters:
//       creates_per_s, p50_ms / p99_ms / max_ms (per request, at the
//       client), errors, store_write_p50_ms / _p99_ms (Store::Write as the
//       control plane sees it: queueing, SQL, commit, fsync),
//       writer_sql_share (time the store's writer thread ran the callers'
//       SQL / wall time), drain_ms (from the last create until the
//       scheduler has bound every task) and bound.
//       Targets: >= 2,000 creates/s with p99 < 20 ms.
//   BM_CreateTasksNoScheduler/clients:32   the same without the scheduler,
//       to tell the cost of binding from the cost of creating.
//   BM_CreateTasksDirect/threads:32   ControlPlane::CreateTask from 32
//       threads, no HTTP, scheduler running: the HTTP layer's share.
//   BM_BindPendingOnce   kBindTasks pending tasks (created with
//       ControlPlane::CreateTask from kFillThreads threads, scheduler not
//       started) on 250 nodes x 8 GPUs; timed: ControlPlane::BindPendingOnce
//       in a loop until every task is bound. Counters: binds_per_s,
//       batches, batch_ms, store_write_share / store_read_share (time in
//       Store::Write / Read over the total), direct_creates_per_s (the
//       untimed setup's rate). Target: >= 2,000 binds/s.
//   BM_SchedulerLoopBacklog   the same backlog, then ControlPlane::Start;
//       timed until no task is pending (polled through ListTasks): the real
//       scheduler thread's binds_per_s.
//   BM_SliceStats/clients:N   125 nodes x 8 GPUs holding kStatsSlices live
//       slices (bound through BindPendingOnce); N clients (1, 8) GET
//       /api/v1/slices/stats with the admin token for kLoadSeconds.
//       Counters: requests_per_s, p50_ms, p99_ms, response_bytes, and
//       in-process means of ControlPlane::Stats (stats_core_ms) and of
//       building, dumping and freeing its JSON (render_ms).
//   BM_CreateTasksWithAgents/backend:B   1,000 simulated nodes (AgentLoad:
//       8 threads speaking the agent API, not 1,000 processes) send their
//       heartbeat (full report) every 5 s, phases spread evenly (200/s),
//       while 16 clients create tasks for kAgentLoadSeconds, scheduler
//       running, on SQLite (B = 0) or PostgreSQL (B = 1). Counters: as
//       BM_CreateTasks, plus heartbeats, heartbeat_p50_ms / _p99_ms /
//       _max_ms and heartbeat_errors. Targets: create p99 < 20 ms and
//       heartbeat p99 < 20 ms.
//   BM_CreateTasksOn/clients:16/backend:B and BM_BindPendingOnceOn/backend:B
//       the same load generators as BM_CreateTasks and BM_BindPendingOnce
//       (binds of kBackendBindTasks), on SQLite (B = 0) and on PostgreSQL
//       (B = 1: a real throwaway server, src/store/testing/pg_server.h,
//       started once for the binary with fsync off, a fresh database per
//       case), to compare the two stores under one load. Counters as
//       above, plus `backend`.
//
// Each case also prints a one-line summary to stderr. The whole binary runs
// in about a minute on a 2-core machine.
//
// Thread-safety: each benchmark owns its server; the load threads share
// only the server and their own result slots.
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/codec.h"
#include "api/http_api.h"
#include "common/clock.h"
#include "common/main_guard.h"
#include "common/status.h"
#include "server/control_plane.h"
#include "store/store.h"
#include "store/testing/pg_server.h"

namespace hf {
namespace {

using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr char kHost[] = "127.0.0.1";
constexpr char kAdminSecret[] = "server-bench-admin-secret-0123456789";
constexpr char kTaskBody[] =
    R"({"name":"b","gpu_memory_mb":1024,"gpu_compute_ratio":0.05})";
constexpr int kGpusPerNode = 8;
constexpr std::int64_t kGpuMemoryMib = 81920;
constexpr int kSmallClusterNodes = 125;  // 1,000 GPUs, room for 20,000 slices
constexpr int kLargeClusterNodes = 250;  // 2,000 GPUs, room for 40,000 slices
// The slices a cluster holds: kTaskBody / SliceTask ask 5% of a GPU.
constexpr int kSlicesPerGpu = 20;
// The agent load: this many simulated nodes, each heartbeating every
// kHeartbeatPeriod, from kHeartbeatThreads client threads.
constexpr int kAgentNodes = 1000;
constexpr std::chrono::milliseconds kHeartbeatPeriod{5000};
constexpr int kHeartbeatThreads = 8;
constexpr double kAgentLoadSeconds = 16.0;  // past one write cycle (15 s)
constexpr int kSmallClusterSlices =
    kSmallClusterNodes * kGpusPerNode * kSlicesPerGpu;
constexpr double kLoadSeconds = 3.0;
constexpr std::chrono::seconds kDrainLimit{120};
constexpr int kBindTasks = 20000;
constexpr int kStatsSlices = 10000;
constexpr int kScrapeBindTasks = 1000;  // per round
constexpr int kScrapeBindRounds = 3;    // of each: alone, scraped, stats
constexpr int kFillThreads = 32;
constexpr int kBreakdownRounds = 20;
constexpr int kCommitFloorWrites = 300;
constexpr int kBackendBindTasks = 5000;

// Which store a BenchServer runs on.
enum class Backend { kSqlite = 0, kPostgres = 1 };

void Check(const Status& status, const std::string& what) {
  if (!status.ok()) {
    throw std::runtime_error(what + ": " + status.ToString());
  }
}

template <typename T>
T CheckValue(StatusOr<T> value, const std::string& what) {
  Check(value.status(), what);
  return std::move(value).value();
}

double Seconds(SteadyClock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double Millis(SteadyClock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// The p-th percentile of `sorted` (ascending): the value at rank
// p% of the way from the first to the last, rounded (0 when empty).
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(
      std::lround(p / 100.0 * static_cast<double>(sorted.size() - 1)));
  return sorted[std::min(rank, sorted.size() - 1)];
}

// ------------------------------------------------------------ TimedStore

// Passes every call to the real store and times it. Thread-safe.
class TimedStore final : public store::Store {
 public:
  struct Totals {
    std::int64_t writes = 0;
    double write_s = 0;     // summed Store::Write latency, all callers
    double write_fn_s = 0;  // summed time the functions ran (writer thread)
    std::int64_t reads = 0;
    double read_s = 0;
    std::vector<double> write_ms;  // sorted per-call Write latencies
  };

  explicit TimedStore(std::unique_ptr<store::Store> inner)
      : inner_(std::move(inner)) {}

  Status Write(const std::function<Status(store::Txn&)>& fn) override {
    const auto start = SteadyClock::now();
    Status status = inner_->Write([&](store::Txn& txn) {
      const auto fn_start = SteadyClock::now();
      Status s = fn(txn);
      write_fn_ns_.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(
              SteadyClock::now() - fn_start)
              .count());
      return s;
    });
    const double ms = Millis(SteadyClock::now() - start);
    std::lock_guard lock(mu_);
    write_ms_.push_back(ms);
    return status;
  }

  Status Read(const std::function<Status(store::Txn&)>& fn) override {
    const auto start = SteadyClock::now();
    Status status = inner_->Read(fn);
    read_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           SteadyClock::now() - start)
                           .count());
    reads_.fetch_add(1);
    return status;
  }

  store::StoreInfo info() const override { return inner_->info(); }

  // Returns the figures since the last call and starts counting afresh.
  Totals TakeTotals() {
    Totals t;
    {
      std::lock_guard lock(mu_);
      t.write_ms.swap(write_ms_);
    }
    t.writes = static_cast<std::int64_t>(t.write_ms.size());
    for (double ms : t.write_ms) t.write_s += ms / 1000;
    std::sort(t.write_ms.begin(), t.write_ms.end());
    t.write_fn_s = static_cast<double>(write_fn_ns_.exchange(0)) / 1e9;
    t.reads = reads_.exchange(0);
    t.read_s = static_cast<double>(read_ns_.exchange(0)) / 1e9;
    return t;
  }

 private:
  const std::unique_ptr<store::Store> inner_;
  std::mutex mu_;
  std::vector<double> write_ms_;  // GUARDED_BY(mu_)
  std::atomic<std::int64_t> write_fn_ns_{0};
  std::atomic<std::int64_t> reads_{0};
  std::atomic<std::int64_t> read_ns_{0};
};

// ----------------------------------------------------------- BenchServer

std::filesystem::path MakeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
      "/hf-server-bench-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed for " + pattern);
  }
  return pattern;
}

// A fresh directory, removed with everything in it when this goes away.
class TempDir {
 public:
  TempDir() : path_(MakeTempDir()) {}
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  const std::filesystem::path path_;
};

std::unique_ptr<httplib::Client> MakeClient(int port,
                                            const std::string& token) {
  auto client = std::make_unique<httplib::Client>(kHost, port);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  client->set_bearer_token_auth(token.c_str());
  client->set_connection_timeout(5, 0);
  client->set_read_timeout(30, 0);
  client->set_write_timeout(30, 0);
  return client;
}

// POSTs `body` and returns the parsed reply; throws unless the status is
// `expect`.
json PostJson(httplib::Client& client, const std::string& path,
              const json& body, int expect) {
  httplib::Result res = client.Post(path, body.dump(), "application/json");
  if (!res) {
    throw std::runtime_error("POST " + path + ": " +
                             httplib::to_string(res.error()));
  }
  if (res->status != expect) {
    throw std::runtime_error("POST " + path + ": HTTP " +
                             std::to_string(res->status) + ": " + res->body);
  }
  return json::parse(res->body);
}

std::string NodeName(int n) { return "node-" + std::to_string(n); }

// What the agent of simulated node `n` reports (registration without its
// node_id, and every heartbeat): 8 GPUs of 81,920 MiB, MPS capable.
json NodeReport(int n) {
  const std::string name = NodeName(n);
  json gpus = json::array();
  for (int g = 0; g < kGpusPerNode; ++g) {
    gpus.push_back({{"index", g},
                    {"uuid", "GPU-" + name + "-" + std::to_string(g)},
                    {"vendor", "nvidia"},
                    {"model", "A100-SXM4-80GB"},
                    {"memory_mb", kGpuMemoryMib},
                    {"compute_capability", "8.0"},
                    {"mig_capable", false},
                    {"mps_capable", true},
                    {"health", "ok"}});
  }
  return {{"containerized", false},  {"hook_available", true},
          {"cpu_milli", 128000},     {"host_memory_mb", 2097152},
          {"gpus", std::move(gpus)}, {"agent_version", "server_bench"}};
}

// The benchmark's task: a slice of 1,024 MiB and 5% of a GPU's compute.
server::TaskCreate SliceTask() {
  server::TaskCreate task;
  task.name = "b";
  task.memory_mib = 1024;
  task.compute_percent = 5;
  return task;
}

// The PostgreSQL server of the PostgreSQL cases: started on first use,
// stopped when the binary exits.
store::pg_testing::PgServer& Postgres() {
  static const std::unique_ptr<store::pg_testing::PgServer> server =
      CheckValue(store::pg_testing::PgServer::Start(), "start PostgreSQL");
  return *server;
}

// One hf-server, in-process, in its own directory. Destroying it stops the
// HTTP server, the scheduler and the store and removes the directory.
// REQUIRES: every client of the server is gone before it is destroyed (a
// live keep-alive connection holds up the HTTP server's stop).
class BenchServer {
 public:
  BenchServer(int nodes, bool start_scheduler,
              Backend backend = Backend::kSqlite) {
    store_ = std::make_unique<TimedStore>(
        CheckValue(store::OpenStore(StoreUrl(backend)), "open"));
    cp_ = CheckValue(server::ControlPlane::Create(
                         store_.get(), &clock_, server::ControlPlaneOptions{}),
                     "create the control plane");
    (void)CheckValue(cp_->BootstrapAdmin(std::string(kAdminSecret)),
                     "bootstrap the admin token");
    admin_ = CheckValue(cp_->Authenticate(kAdminSecret), "admin token");
    api_ =
        std::make_unique<api::ApiServer>(cp_.get(), &clock_, api::ApiOptions{});
    Check(api_->Bind(kHost, 0), "bind");
    serve_thread_ = std::thread([this] {
      const Status served = api_->Serve();
      if (!served.ok()) {
        std::fprintf(stderr, "server_bench: %s\n", served.ToString().c_str());
      }
    });
    WaitUntilServing();
    RegisterNodes(nodes);
    {
      auto admin = MakeClient(port(), kAdminSecret);
      user_token_ = PostJson(*admin, "/api/v1/tokens",
                             {{"role", "user"},
                              {"tenant", "default"},
                              {"description", "server_bench load"}},
                             201)["token"]
                        .get<std::string>();
    }
    if (start_scheduler) cp_->Start();
  }

  ~BenchServer() {
    api_->Stop();
    if (serve_thread_.joinable()) serve_thread_.join();
    cp_->Stop();
    api_.reset();
    cp_.reset();
    store_.reset();
  }

  BenchServer(const BenchServer&) = delete;
  BenchServer& operator=(const BenchServer&) = delete;

  int port() const { return api_->port(); }
  server::ControlPlane& cp() { return *cp_; }
  TimedStore& store() { return *store_; }
  const server::Caller& admin() const { return admin_; }
  const std::string& user_token() const { return user_token_; }
  const std::string& node_token() const { return node_token_; }

  // Tasks still pending, from the store.
  bool AnyPending() {
    server::TaskQuery query;
    query.state = store::TaskState::kPending;
    query.limit = 1;
    return !CheckValue(cp_->ListTasks(admin_, query), "list pending")
                .items.empty();
  }
  // Waits until no task is pending; false when `limit` passes first (a
  // scheduler that stopped binding fails the benchmark, never hangs it).
  bool DrainPending(std::chrono::seconds limit) {
    const auto give_up = SteadyClock::now() + limit;
    while (AnyPending()) {
      if (SteadyClock::now() > give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }

  // Creates `count` slice tasks through ControlPlane::CreateTask from
  // kFillThreads threads (concurrent writers share commits); returns the
  // creates per second.
  double CreateDirect(int count) {
    std::atomic<int> next{0};
    std::mutex error_mu;
    Status error;  // GUARDED_BY(error_mu): the first failure
    std::vector<std::thread> threads;
    threads.reserve(kFillThreads);
    const auto start = SteadyClock::now();
    for (int i = 0; i < kFillThreads; ++i) {
      threads.emplace_back([&] {
        while (next.fetch_add(1) < count) {
          const Status created = cp_->CreateTask(admin_, SliceTask()).status();
          if (!created.ok()) {
            std::lock_guard lock(error_mu);
            if (error.ok()) error = created;
            return;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    Check(error, "creating tasks");
    return count / Seconds(SteadyClock::now() - start);
  }

  // Binds every pending task with BindPendingOnce; returns the batches.
  int BindAll() {
    int batches = 0;
    while (CheckValue(cp_->BindPendingOnce(), "bind") > 0) ++batches;
    return batches;
  }

 private:
  // A fresh SQLite file in this server's directory, or a fresh database on
  // the PostgreSQL server.
  std::string StoreUrl(Backend backend) const {
    if (backend == Backend::kSqlite) {
      return "sqlite:" + (dir_.path() / "hf.db").string();
    }
    static std::atomic<int> databases{0};
    const std::string name = "server_bench_" + std::to_string(databases++);
    Check(Postgres().CreateDatabase(name), "create database " + name);
    return Postgres().Url(name);
  }

  void WaitUntilServing() const {
    httplib::Client client(kHost, port());
    for (int attempt = 0; attempt < 500; ++attempt) {
      if (httplib::Result res = client.Get("/healthz");
          res && res->status == 200) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("the HTTP server did not come up");
  }

  void RegisterNodes(int nodes) {
    auto admin = MakeClient(port(), kAdminSecret);
    node_token_ =
        PostJson(*admin, "/api/v1/tokens",
                 {{"role", "node"}, {"description", "server_bench agents"}},
                 201)["token"]
            .get<std::string>();
    auto agent = MakeClient(port(), node_token_);
    for (int n = 0; n < nodes; ++n) {
      json registration = NodeReport(n);
      registration["node_id"] = NodeName(n);
      (void)PostJson(*agent, "/api/v1/nodes/register", registration, 200);
    }
  }

  const TempDir dir_;  // first: removed after everything else is gone
  SystemClock clock_;
  std::unique_ptr<TimedStore> store_;
  std::unique_ptr<server::ControlPlane> cp_;
  std::unique_ptr<api::ApiServer> api_;
  std::thread serve_thread_;
  server::Caller admin_;
  std::string user_token_;
  std::string node_token_;
};

// ---------------------------------------------------------- load generator

struct LoadResult {
  std::int64_t ok = 0;
  std::int64_t errors = 0;
  std::string first_error;
  double seconds = 0;              // first request to last reply
  std::vector<double> latency_ms;  // successful requests, sorted
  std::size_t last_reply_bytes = 0;
  SteadyClock::time_point end;
};

// One client's request: performs it and returns "" on success or what went
// wrong; stores the size of the reply in *bytes.
using Request = std::function<std::string(std::size_t* bytes)>;

// Runs `clients` threads, each with its own Request from `make_client`
// (made, and connected, before the clock starts), issuing requests until
// `seconds` have passed.
// `budget` (> 0) caps the requests sent in all, so a load never creates
// more than its cluster can hold.
LoadResult RunLoad(int clients, double seconds,
                   const std::function<Request()>& make_client,
                   std::int64_t budget = 0) {
  std::atomic<std::int64_t> left{budget > 0 ? budget : INT64_MAX};
  struct PerClient {
    std::vector<double> latency_ms;
    std::int64_t errors = 0;
    std::string first_error;
    std::size_t last_bytes = 0;
  };
  std::vector<PerClient> results(static_cast<std::size_t>(clients));
  std::latch ready(clients + 1);
  std::atomic<bool> go{false};
  SteadyClock::time_point start;
  SteadyClock::time_point deadline;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(clients));
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      PerClient& mine = results[static_cast<std::size_t>(i)];
      mine.latency_ms.reserve(65536);
      const Request request = make_client();
      ready.count_down();
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      while (SteadyClock::now() < deadline &&
             left.fetch_sub(1, std::memory_order_relaxed) > 0) {
        std::size_t bytes = 0;
        const auto sent = SteadyClock::now();
        const std::string error = request(&bytes);
        const auto got = SteadyClock::now();
        if (error.empty()) {
          mine.latency_ms.push_back(Millis(got - sent));
          mine.last_bytes = bytes;
        } else if (mine.errors++ == 0) {
          mine.first_error = error;
        }
      }
    });
  }
  ready.arrive_and_wait();
  start = SteadyClock::now();
  deadline = start + std::chrono::duration_cast<SteadyClock::duration>(
                         std::chrono::duration<double>(seconds));
  go.store(true, std::memory_order_release);
  for (std::thread& t : threads) t.join();

  LoadResult out;
  out.end = SteadyClock::now();
  out.seconds = Seconds(out.end - start);
  for (PerClient& r : results) {
    out.ok += static_cast<std::int64_t>(r.latency_ms.size());
    out.latency_ms.insert(out.latency_ms.end(), r.latency_ms.begin(),
                          r.latency_ms.end());
    out.errors += r.errors;
    if (out.first_error.empty()) out.first_error = r.first_error;
    if (r.last_bytes != 0) out.last_reply_bytes = r.last_bytes;
  }
  std::sort(out.latency_ms.begin(), out.latency_ms.end());
  return out;
}

// An HTTP client on its own keep-alive connection: `send` issues one
// request; a reply with status `expect` is a success.
std::function<Request()> HttpClients(
    int port, const std::string& token,
    std::function<httplib::Result(httplib::Client&)> send, int expect) {
  return [port, token, send = std::move(send), expect]() -> Request {
    std::shared_ptr<httplib::Client> client = MakeClient(port, token);
    (void)client->Get("/healthz");  // connect before the clock starts
    return [client, send, expect](std::size_t* bytes) -> std::string {
      const httplib::Result res = send(*client);
      if (!res) return httplib::to_string(res.error());
      if (res->status != expect) {
        return "HTTP " + std::to_string(res->status) + ": " +
               res->body.substr(0, 200);
      }
      *bytes = res->body.size();
      return "";
    };
  };
}

void ReportLatency(benchmark::State& state, const LoadResult& r) {
  state.counters["p50_ms"] = Percentile(r.latency_ms, 50);
  state.counters["p99_ms"] = Percentile(r.latency_ms, 99);
  state.counters["max_ms"] = r.latency_ms.empty() ? 0 : r.latency_ms.back();
  state.counters["errors"] = static_cast<double>(r.errors);
  if (r.errors > 0) {
    std::fprintf(stderr, "server_bench: %lld errors, first: %s\n",
                 static_cast<long long>(r.errors), r.first_error.c_str());
  }
}

void ReportStore(benchmark::State& state, const TimedStore::Totals& t,
                 double seconds) {
  state.counters["store_writes"] = static_cast<double>(t.writes);
  state.counters["store_write_p50_ms"] = Percentile(t.write_ms, 50);
  state.counters["store_write_p99_ms"] = Percentile(t.write_ms, 99);
  // Share of the writer thread's time spent running the callers' SQL (the
  // rest is commits, fsync and idle).
  state.counters["writer_sql_share"] = seconds > 0 ? t.write_fn_s / seconds : 0;
}

// ------------------------------------------------------------ benchmarks

void BM_StoreCommitFloor(benchmark::State& state) {
  const TempDir dir;
  auto store = CheckValue(
      store::OpenStore("sqlite:" + (dir.path() / "hf.db").string()), "open");
  std::vector<double> ms;
  ms.reserve(kCommitFloorWrites);
  for (auto _ : state) {
    const auto start = SteadyClock::now();
    for (int i = 0; i < kCommitFloorWrites; ++i) {
      const auto t0 = SteadyClock::now();
      Check(store->Write([i](store::Txn& txn) {
        return txn.SetMeta("server_bench", std::to_string(i));
      }),
            "write");
      ms.push_back(Millis(SteadyClock::now() - t0));
    }
    const double seconds = Seconds(SteadyClock::now() - start);
    state.SetIterationTime(seconds);
    std::sort(ms.begin(), ms.end());
    state.counters["commits_per_s"] = kCommitFloorWrites / seconds;
    state.counters["p50_ms"] = Percentile(ms, 50);
    state.counters["p99_ms"] = Percentile(ms, 99);
    state.counters["max_ms"] = ms.back();
    std::fprintf(stderr,
                 "server_bench: one writer, one small write per commit: "
                 "%.0f commits/s, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
                 kCommitFloorWrites / seconds, Percentile(ms, 50),
                 Percentile(ms, 99), ms.back());
  }
}
BENCHMARK(BM_StoreCommitFloor)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

enum class CreatePath { kHttp, kHttpNoScheduler, kDirect };

void RunCreateTasks(benchmark::State& state, CreatePath path,
                    Backend backend = Backend::kSqlite) {
  const int clients = static_cast<int>(state.range(0));
  const bool scheduler = path != CreatePath::kHttpNoScheduler;
  BenchServer server(kSmallClusterNodes, scheduler, backend);
  const server::Caller user = CheckValue(
      server.cp().Authenticate(server.user_token()), "the user token");
  std::function<Request()> clients_of;
  if (path == CreatePath::kDirect) {
    clients_of = [&server, &user]() -> Request {
      return [&server, &user](std::size_t*) -> std::string {
        const auto row = server.cp().CreateTask(user, SliceTask());
        return row.ok() ? "" : row.status().ToString();
      };
    };
  } else {
    clients_of = HttpClients(
        server.port(), server.user_token(),
        [](httplib::Client& c) {
          return c.Post("/api/v1/tasks", kTaskBody, "application/json");
        },
        201);
  }
  (void)server.store().TakeTotals();
  for (auto _ : state) {
    // Never more tasks than the cluster holds: every one can be bound.
    const LoadResult r =
        RunLoad(clients, kLoadSeconds, clients_of, kSmallClusterSlices);
    const TimedStore::Totals store_totals = server.store().TakeTotals();
    double drain_ms = 0;
    if (scheduler) {
      if (!server.DrainPending(kDrainLimit)) {
        state.SkipWithError(
            ("tasks still pending 120 s after the load ended (creates: " +
             std::to_string(r.ok) + ")")
                .c_str());
        return;
      }
      drain_ms = Millis(SteadyClock::now() - r.end);
    }
    state.SetIterationTime(r.seconds);
    const double rate = static_cast<double>(r.ok) / r.seconds;
    state.counters["clients"] = clients;
    state.counters["creates"] = static_cast<double>(r.ok);
    state.counters["creates_per_s"] = rate;
    ReportLatency(state, r);
    ReportStore(state, store_totals, r.seconds);
    if (scheduler) {
      state.counters["drain_ms"] = drain_ms;
      const auto stats = CheckValue(server.cp().Stats(server.admin()), "stats");
      state.counters["bound"] = stats.live_slices;
    }
    static constexpr const char* kPathNames[] = {
        "HTTP", "HTTP, no scheduler", "ControlPlane::CreateTask, no HTTP"};
    state.counters["backend"] = static_cast<double>(backend);
    std::fprintf(
        stderr,
        "server_bench: create (%s, %s) clients=%d: %.0f creates/s, p50 %.2f "
        "ms, "
        "p99 %.2f ms, max %.2f ms, errors %lld; Store::Write p50 %.2f ms "
        "p99 %.2f ms; writer SQL %.0f%%; drain %.0f ms\n",
        kPathNames[static_cast<int>(path)],
        backend == Backend::kSqlite ? "SQLite" : "PostgreSQL", clients, rate,
        Percentile(r.latency_ms, 50), Percentile(r.latency_ms, 99),
        r.latency_ms.empty() ? 0 : r.latency_ms.back(),
        static_cast<long long>(r.errors), Percentile(store_totals.write_ms, 50),
        Percentile(store_totals.write_ms, 99),
        100 * store_totals.write_fn_s / r.seconds, drain_ms);
  }
}

void BM_CreateTasks(benchmark::State& state) {
  RunCreateTasks(state, CreatePath::kHttp);
}
BENCHMARK(BM_CreateTasks)
    ->ArgName("clients")
    ->Arg(4)
    ->Arg(16)
    ->Arg(32)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_CreateTasksNoScheduler(benchmark::State& state) {
  RunCreateTasks(state, CreatePath::kHttpNoScheduler);
}
BENCHMARK(BM_CreateTasksNoScheduler)
    ->ArgName("clients")
    ->Arg(32)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_CreateTasksDirect(benchmark::State& state) {
  RunCreateTasks(state, CreatePath::kDirect);
}
BENCHMARK(BM_CreateTasksDirect)
    ->ArgName("threads")
    ->Arg(32)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void RunBindPendingOnce(benchmark::State& state, Backend backend, int tasks) {
  BenchServer server(kLargeClusterNodes, /*start_scheduler=*/false, backend);
  const double fill_rate = server.CreateDirect(tasks);
  (void)server.store().TakeTotals();
  for (auto _ : state) {
    const auto start = SteadyClock::now();
    int bound = 0;
    int batches = 0;
    for (;;) {
      const int n = CheckValue(server.cp().BindPendingOnce(), "bind");
      if (n == 0) break;
      bound += n;
      ++batches;
    }
    const double seconds = Seconds(SteadyClock::now() - start);
    const TimedStore::Totals t = server.store().TakeTotals();
    state.SetIterationTime(seconds);
    if (bound != tasks) {
      state.SkipWithError(
          ("bound " + std::to_string(bound) + " of " + std::to_string(tasks))
              .c_str());
      return;
    }
    const double rate = bound / seconds;
    state.counters["bound"] = bound;
    state.counters["binds_per_s"] = rate;
    state.counters["batches"] = batches;
    state.counters["batch_ms"] = 1000 * seconds / batches;
    state.counters["store_write_share"] = t.write_s / seconds;
    state.counters["store_read_share"] = t.read_s / seconds;
    state.counters["direct_creates_per_s"] = fill_rate;
    state.counters["backend"] = static_cast<double>(backend);
    std::fprintf(stderr,
                 "server_bench: BindPendingOnce (%s): %d tasks in %.0f ms = "
                 "%.0f "
                 "binds/s, %d batches of %.1f ms (Store::Write %.0f%%, "
                 "reads %.0f%% of it); setup: %.0f direct creates/s\n",
                 backend == Backend::kSqlite ? "SQLite" : "PostgreSQL", bound,
                 1000 * seconds, rate, batches, 1000 * seconds / batches,
                 100 * t.write_s / seconds, 100 * t.read_s / seconds,
                 fill_rate);
  }
}
void BM_BindPendingOnce(benchmark::State& state) {
  RunBindPendingOnce(state, Backend::kSqlite, kBindTasks);
}
BENCHMARK(BM_BindPendingOnce)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The agents of `nodes` simulated nodes, not one process each: threads
// that each own a keep-alive connection (the node token) and a share of the
// nodes, and send each node's heartbeat (its full report, no running tasks)
// every kHeartbeatPeriod, the nodes' phases spread evenly over the period.
// Runs from construction until Stop(); the heartbeats' latencies (at the
// client, successful ones) and errors are kept.
class AgentLoad {
 public:
  AgentLoad(int port, const std::string& node_token, int nodes) {
    std::vector<std::string> bodies;
    bodies.reserve(static_cast<std::size_t>(nodes));
    for (int n = 0; n < nodes; ++n) {
      json body = NodeReport(n);
      body["tasks"] = json::array();
      bodies.push_back(body.dump());
    }
    start_ = SteadyClock::now();
    for (int t = 0; t < kHeartbeatThreads; ++t) {
      std::vector<std::pair<int, std::string>> mine;
      for (int n = t; n < nodes; n += kHeartbeatThreads) {
        mine.emplace_back(n, bodies[static_cast<std::size_t>(n)]);
      }
      threads_.emplace_back(
          [this, port, node_token, nodes, mine = std::move(mine)] {
            Run(port, node_token, nodes, mine);
          });
    }
  }
  ~AgentLoad() { Stop(); }
  AgentLoad(const AgentLoad&) = delete;
  AgentLoad& operator=(const AgentLoad&) = delete;

  void Stop() {
    stop_.store(true);
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  // Latencies (sorted) and errors since the last call.
  struct Totals {
    std::vector<double> latency_ms;
    std::int64_t errors = 0;
    std::string first_error;
  };
  Totals Take() {
    std::lock_guard lock(mu_);
    Totals out = std::move(totals_);
    totals_ = Totals{};
    std::sort(out.latency_ms.begin(), out.latency_ms.end());
    return out;
  }

 private:
  void Run(int port, const std::string& token, int nodes,
           const std::vector<std::pair<int, std::string>>& mine) {
    auto client = MakeClient(port, token);
    client->set_read_timeout(10, 0);
    const auto period =
        std::chrono::duration_cast<SteadyClock::duration>(kHeartbeatPeriod);
    for (std::int64_t round = 0; !stop_.load(); ++round) {
      for (const auto& [n, body] : mine) {
        // Node n's phase: n / nodes of the period.
        const auto due = start_ + period * round + period * n / nodes;
        while (SteadyClock::now() < due) {
          if (stop_.load()) return;
          std::this_thread::sleep_until(std::min(
              due, SteadyClock::now() + std::chrono::milliseconds(50)));
        }
        const auto sent = SteadyClock::now();
        const httplib::Result res =
            client->Post("/api/v1/nodes/" + NodeName(n) + "/heartbeat", body,
                         "application/json");
        const double ms = Millis(SteadyClock::now() - sent);
        std::lock_guard lock(mu_);
        if (res && res->status == 200) {
          totals_.latency_ms.push_back(ms);
        } else if (totals_.errors++ == 0) {
          totals_.first_error = res ? "HTTP " + std::to_string(res->status) +
                                          ": " + res->body.substr(0, 200)
                                    : httplib::to_string(res.error());
        }
      }
    }
  }

  SteadyClock::time_point start_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  Totals totals_;  // GUARDED_BY(mu_)
};

// Creates from 16 clients while kAgentNodes simulated nodes heartbeat every
// 5 s (200 heartbeats/s): create and heartbeat latency together.
void BM_CreateTasksWithAgents(benchmark::State& state) {
  const auto backend = static_cast<Backend>(state.range(0));
  constexpr int kClients = 16;
  BenchServer server(kAgentNodes, /*start_scheduler=*/true, backend);
  AgentLoad agents(server.port(), server.node_token(), kAgentNodes);
  // One period of heartbeats before the creates, so every node is in step.
  std::this_thread::sleep_for(kHeartbeatPeriod);
  (void)agents.Take();
  const auto clients_of = HttpClients(
      server.port(), server.user_token(),
      [](httplib::Client& c) {
        return c.Post("/api/v1/tasks", kTaskBody, "application/json");
      },
      201);
  for (auto _ : state) {
    const LoadResult r =
        RunLoad(kClients, kAgentLoadSeconds, clients_of,
                std::int64_t{kAgentNodes} * kGpusPerNode * kSlicesPerGpu);
    const AgentLoad::Totals beats = agents.Take();
    agents.Stop();
    if (!server.DrainPending(kDrainLimit)) {
      state.SkipWithError("tasks still pending 120 s after the load ended");
      return;
    }
    state.SetIterationTime(r.seconds);
    const double rate = static_cast<double>(r.ok) / r.seconds;
    state.counters["backend"] = static_cast<double>(backend);
    state.counters["nodes"] = kAgentNodes;
    state.counters["clients"] = kClients;
    state.counters["creates_per_s"] = rate;
    ReportLatency(state, r);
    state.counters["heartbeats"] = static_cast<double>(beats.latency_ms.size());
    state.counters["heartbeats_per_s"] =
        static_cast<double>(beats.latency_ms.size()) / r.seconds;
    state.counters["heartbeat_p50_ms"] = Percentile(beats.latency_ms, 50);
    state.counters["heartbeat_p99_ms"] = Percentile(beats.latency_ms, 99);
    state.counters["heartbeat_max_ms"] =
        beats.latency_ms.empty() ? 0 : beats.latency_ms.back();
    state.counters["heartbeat_errors"] = static_cast<double>(beats.errors);
    if (beats.errors > 0) {
      std::fprintf(stderr, "server_bench: %lld heartbeat errors, first: %s\n",
                   static_cast<long long>(beats.errors),
                   beats.first_error.c_str());
    }
    std::fprintf(stderr,
                 "server_bench: create with %d agents (%s): %.0f creates/s, "
                 "p50 %.2f ms, p99 %.2f ms; %zu heartbeats, p50 %.2f ms, "
                 "p99 %.2f ms, max %.2f ms, errors %lld\n",
                 kAgentNodes,
                 backend == Backend::kSqlite ? "SQLite" : "PostgreSQL", rate,
                 Percentile(r.latency_ms, 50), Percentile(r.latency_ms, 99),
                 beats.latency_ms.size(), Percentile(beats.latency_ms, 50),
                 Percentile(beats.latency_ms, 99),
                 beats.latency_ms.empty() ? 0 : beats.latency_ms.back(),
                 static_cast<long long>(beats.errors));
  }
}
// One run on each store, timed by the benchmark itself.
void OnEachBackend(benchmark::internal::Benchmark* b) {
  b->ArgName("backend")
      ->Arg(static_cast<int>(Backend::kSqlite))
      ->Arg(static_cast<int>(Backend::kPostgres))
      ->Iterations(1)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_CreateTasksWithAgents)->Apply(OnEachBackend);

// SQLite against PostgreSQL, one load generator.
void BM_CreateTasksOn(benchmark::State& state) {
  RunCreateTasks(state, CreatePath::kHttp,
                 static_cast<Backend>(state.range(1)));
}
BENCHMARK(BM_CreateTasksOn)
    ->ArgNames({"clients", "backend"})
    ->Args({16, static_cast<int>(Backend::kSqlite)})
    ->Args({16, static_cast<int>(Backend::kPostgres)})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_BindPendingOnceOn(benchmark::State& state) {
  RunBindPendingOnce(state, static_cast<Backend>(state.range(0)),
                     kBackendBindTasks);
}
BENCHMARK(BM_BindPendingOnceOn)->Apply(OnEachBackend);

void BM_SchedulerLoopBacklog(benchmark::State& state) {
  BenchServer server(kLargeClusterNodes, /*start_scheduler=*/false);
  (void)server.CreateDirect(kBindTasks);
  for (auto _ : state) {
    const auto start = SteadyClock::now();
    server.cp().Start();
    if (!server.DrainPending(kDrainLimit)) {
      state.SkipWithError("tasks still pending after 120 s of scheduling");
      return;
    }
    const double seconds = Seconds(SteadyClock::now() - start);
    state.SetIterationTime(seconds);
    const auto stats = CheckValue(server.cp().Stats(server.admin()), "stats");
    if (stats.live_slices != kBindTasks) {
      state.SkipWithError(("bound " + std::to_string(stats.live_slices) +
                           " of " + std::to_string(kBindTasks))
                              .c_str());
      return;
    }
    const double rate = kBindTasks / seconds;
    state.counters["bound"] = stats.live_slices;
    state.counters["binds_per_s"] = rate;
    std::fprintf(stderr,
                 "server_bench: scheduler loop: %d pending tasks bound in "
                 "%.0f ms = %.0f binds/s\n",
                 kBindTasks, 1000 * seconds, rate);
  }
}
BENCHMARK(BM_SchedulerLoopBacklog)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_SliceStats(benchmark::State& state) {
  const int clients = static_cast<int>(state.range(0));
  BenchServer server(kSmallClusterNodes, /*start_scheduler=*/false);
  (void)server.CreateDirect(kStatsSlices);
  (void)server.BindAll();
  const auto stats = CheckValue(server.cp().Stats(server.admin()), "stats");
  if (stats.live_slices != kStatsSlices) {
    state.SkipWithError(("live slices " + std::to_string(stats.live_slices) +
                         " of " + std::to_string(kStatsSlices))
                            .c_str());
    return;
  }
  // Where one request's time goes, in-process: the control plane's view
  // (ledger walk under its mutex, names) and the JSON (build, dump, free).
  double core_s = 0;
  double render_s = 0;
  for (int i = 0; i < kBreakdownRounds; ++i) {
    const auto t0 = SteadyClock::now();
    const server::SliceStats s =
        CheckValue(server.cp().Stats(server.admin()), "stats");
    const auto t1 = SteadyClock::now();
    {
      const std::string body = api::StatsJson(s).dump();
      benchmark::DoNotOptimize(body.data());
    }
    const auto t2 = SteadyClock::now();
    core_s += Seconds(t1 - t0);
    render_s += Seconds(t2 - t1);
  }
  const double core_ms = 1000 * core_s / kBreakdownRounds;
  const double render_ms = 1000 * render_s / kBreakdownRounds;
  for (auto _ : state) {
    const LoadResult r = RunLoad(
        clients, kLoadSeconds,
        HttpClients(
            server.port(), kAdminSecret,
            [](httplib::Client& c) { return c.Get("/api/v1/slices/stats"); },
            200));
    state.SetIterationTime(r.seconds);
    const double rate = static_cast<double>(r.ok) / r.seconds;
    state.counters["clients"] = clients;
    state.counters["live_slices"] = stats.live_slices;
    state.counters["gpus"] = stats.gpus;
    state.counters["requests_per_s"] = rate;
    state.counters["response_bytes"] = static_cast<double>(r.last_reply_bytes);
    state.counters["stats_core_ms"] = core_ms;
    state.counters["render_ms"] = render_ms;
    ReportLatency(state, r);
    std::fprintf(stderr,
                 "server_bench: stats clients=%d, %d live slices on %d GPUs: "
                 "%.0f requests/s, p50 %.2f ms, p99 %.2f ms, %zu bytes; "
                 "in-process: ControlPlane::Stats %.2f ms, JSON %.2f ms\n",
                 clients, stats.live_slices, stats.gpus, rate,
                 Percentile(r.latency_ms, 50), Percentile(r.latency_ms, 99),
                 r.last_reply_bytes, core_ms, render_ms);
  }
}
BENCHMARK(BM_SliceStats)
    ->ArgName("clients")
    ->Arg(1)
    ->Arg(8)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// What a Prometheus scrape of GET /metrics costs a server holding 10,000
// live slices on 1,000 GPUs (docs/METRICS.md): the in-process render
// (ControlPlane::CollectMetrics and prometheus-cpp's serializer), scrapes
// over HTTP, and bind throughput with and without a client scraping
// back to back, or asking for the slice stats back to back (neither may
// hold up binds).
void BM_MetricsScrape(benchmark::State& state) {
  BenchServer server(kSmallClusterNodes, /*start_scheduler=*/false);
  (void)server.CreateDirect(kStatsSlices);
  (void)server.BindAll();
  const metrics::Exposition exposition =
      api::ServerExposition(&server.cp(), nullptr);
  std::vector<double> render_ms;
  std::size_t bytes = 0;
  for (int i = 0; i < kBreakdownRounds; ++i) {
    const auto t0 = SteadyClock::now();
    const std::string text = exposition.Render();
    render_ms.push_back(1000 * Seconds(SteadyClock::now() - t0));
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  std::sort(render_ms.begin(), render_ms.end());
  // Of a render: the control plane's part (the ledger copy, names, the
  // store's stuck commands), the rest is prometheus-cpp's serializer.
  std::vector<double> collect_ms;
  for (int i = 0; i < kBreakdownRounds; ++i) {
    const auto t0 = SteadyClock::now();
    const metrics::Families f = server.cp().CollectMetrics();
    collect_ms.push_back(1000 * Seconds(SteadyClock::now() - t0));
    benchmark::DoNotOptimize(f.data());
  }
  std::sort(collect_ms.begin(), collect_ms.end());
  // Binds of kScrapeBindTasks more tasks, alone and while a client GETs
  // `path` back to back.
  const auto bind_rate = [&](const std::string& path) {
    (void)server.CreateDirect(kScrapeBindTasks);
    std::atomic<bool> stop{false};
    std::atomic<int> scrapes{0};
    std::thread scraper;
    if (!path.empty()) {
      scraper = std::thread([&] {
        auto client = MakeClient(server.port(), kAdminSecret);
        while (!stop.load()) {
          auto res = client->Get(path);
          if (res && res->status == 200) ++scrapes;
        }
      });
    }
    const auto t0 = SteadyClock::now();
    (void)server.BindAll();
    const double rate = kScrapeBindTasks / Seconds(SteadyClock::now() - t0);
    stop = true;
    if (scraper.joinable()) scraper.join();
    return std::make_pair(rate, scrapes.load());
  };
  // Alternated rounds, the median of each (one round is short enough for
  // the machine's noise to show).
  std::vector<double> alone_rates;
  std::vector<double> scraped_rates;
  std::vector<double> stats_rates;
  int scrapes_during = 0;
  int stats_during = 0;
  for (int round = 0; round < kScrapeBindRounds; ++round) {
    alone_rates.push_back(bind_rate("").first);
    const auto scraped = bind_rate("/metrics");
    scraped_rates.push_back(scraped.first);
    scrapes_during += scraped.second;
    const auto stats = bind_rate("/api/v1/slices/stats");
    stats_rates.push_back(stats.first);
    stats_during += stats.second;
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return Percentile(v, 50);
  };
  const double binds_alone = median(alone_rates);
  const double binds_scraped = median(scraped_rates);
  const double binds_stats = median(stats_rates);
  for (auto _ : state) {
    const LoadResult r =
        RunLoad(1, kLoadSeconds,
                HttpClients(
                    server.port(), kAdminSecret,
                    [](httplib::Client& c) { return c.Get("/metrics"); }, 200));
    state.SetIterationTime(r.seconds);
    state.counters["live_slices"] =
        kStatsSlices + 3 * kScrapeBindRounds * kScrapeBindTasks;
    state.counters["response_bytes"] = static_cast<double>(bytes);
    state.counters["render_p50_ms"] = Percentile(render_ms, 50);
    state.counters["render_max_ms"] = render_ms.back();
    state.counters["collect_p50_ms"] = Percentile(collect_ms, 50);
    state.counters["binds_per_s_alone"] = binds_alone;
    state.counters["binds_per_s_scraped"] = binds_scraped;
    state.counters["scrapes_during_binds"] = scrapes_during;
    state.counters["binds_per_s_stats"] = binds_stats;
    state.counters["stats_during_binds"] = stats_during;
    ReportLatency(state, r);
    std::fprintf(stderr,
                 "server_bench: metrics scrape, %d live slices on 1,000 GPUs: "
                 "render p50 %.2f ms (collect %.2f ms), max %.2f ms, %zu "
                 "bytes; HTTP scrape p50 "
                 "%.2f ms, p99 %.2f ms; binds (median of %d rounds) %.0f/s "
                 "alone, %.0f/s under %d scrapes, %.0f/s under %d stats "
                 "calls\n",
                 kStatsSlices + 3 * kScrapeBindRounds * kScrapeBindTasks,
                 Percentile(render_ms, 50), Percentile(collect_ms, 50),
                 render_ms.back(), bytes, Percentile(r.latency_ms, 50),
                 Percentile(r.latency_ms, 99), kScrapeBindRounds, binds_alone,
                 binds_scraped, scrapes_during, binds_stats, stats_during);
  }
}
BENCHMARK(BM_MetricsScrape)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace hf

int main(int argc, char** argv) {
  return hf::RunMain("server_bench", [&] {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    spdlog::set_level(spdlog::level::warn);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  });
}
