// Several REAL hf-server processes on one REAL PostgreSQL database (issue
// 8): one leader binds, every instance serves the API (followers forward
// the ledger's requests to the leader), and losing the leader loses nothing.
//
//  - LeaderKilledWhileTasksArrive: three servers; a client creates tasks
//    through every instance in turn (on to the next one when one does not
//    answer) while two simulated agents heartbeat, fetch assignments and
//    report task states, failing over between the instance URLs too. The
//    leader is SIGKILLed mid-way. A new leader must take over within 10 s
//    (default lease: 6 s), every acknowledged task must exist and end
//    bound, no GPU may be oversold and no task or slice bound twice.
//  - StoppedLeaderHandsOverAtOnce: the leader is stopped with SIGTERM; it
//    hands the lease over and a follower leads within 1 s (measured from
//    the signal, not the lease time), and binds new work.
//  - PartitionedLeaderStopsBeforeTakeover: the leader reaches PostgreSQL
//    through a TCP proxy in this test, which then black-holes it. The leader
//    must stop acting (exit 75) before another instance takes over, and the
//    history must show no bind of the old term after the new term began.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "store/testing/pg_server.h"
#include "tests/e2e/server_harness.h"

namespace hf::e2e {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::int64_t kGpuMemory = 81920;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A TCP proxy to PostgreSQL that can be turned into a black hole: bytes
// are then read and dropped in both directions (connections stay open and
// nothing answers, as behind a dead switch), and new connections are held
// without being connected upstream.
class BlackHoleProxy {
 public:
  explicit BlackHoleProxy(int upstream_port) : upstream_(upstream_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    const int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) !=
            0 ||
        listen(listen_fd_, 64) != 0) {
      ADD_FAILURE() << "proxy: cannot listen";
      return;
    }
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~BlackHoleProxy() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    if (acceptor_.joinable()) acceptor_.join();
    std::lock_guard lock(mu_);
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
  }
  int port() const { return port_; }
  void BlackHole() { black_hole_ = true; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      int server = -1;
      if (!black_hole_) {
        server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<std::uint16_t>(upstream_));
        if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) !=
            0) {
          close(server);
          server = -1;
        }
      }
      std::lock_guard lock(mu_);
      fds_.push_back(client);
      if (server >= 0) fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { Pump(client, server); });
    }
  }
  // Copies bytes both ways until either side closes; drops them once the
  // proxy is a black hole (or when there is no upstream).
  void Pump(int client, int server) {
    std::array<char, 16384> buf{};
    while (!stop_) {
      std::array<pollfd, 2> p{{{client, POLLIN, 0}, {server, POLLIN, 0}}};
      const int n = poll(p.data(), server >= 0 ? 2 : 1, 100);
      if (n <= 0) continue;
      for (int i = 0; i < (server >= 0 ? 2 : 1); ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t got = read(p[i].fd, buf.data(), buf.size());
        if (got <= 0) return;
        if (black_hole_ || server < 0) continue;
        const int to = i == 0 ? server : client;
        ssize_t off = 0;
        while (off < got) {
          const ssize_t sent = write(to, buf.data() + off, got - off);
          if (sent <= 0) return;
          off += sent;
        }
      }
    }
  }

  const int upstream_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> black_hole_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> pumps_;  // GUARDED_BY(mu_)
  std::vector<int> fds_;            // GUARDED_BY(mu_)
};

// Three hf-server instances on one PostgreSQL database.
class MultiInstanceTest : public ::testing::Test {
 protected:
  void StartCluster(const std::vector<std::string>& db_urls) {
    for (std::size_t i = 0; i < db_urls.size(); ++i) {
      ServerOptions options;
      options.db = db_urls[i];
      options.flags = {"--instance-id", "hf-" + std::to_string(i),
                       "--heartbeat-interval", "1"};
      servers_.push_back(std::make_unique<ServerProcess>(options));
      ASSERT_TRUE(servers_.back()->Start());
      if (i == 0) {
        // The first becomes the leader at once (no lease on a fresh
        // database); the others follow.
        ASSERT_NE(servers_[0]->Log().find("instance hf-0, leader)"),
                  std::string::npos)
            << servers_[0]->Log();
      }
    }
    admin_ = servers_[0]->admin_token();
  }

  HttpClient Client(std::size_t i) const { return servers_[i]->client(); }

  // GET /api/v1/cluster from the first instance that answers (skipping
  // `skip`).
  json Cluster(std::optional<std::size_t> skip = std::nullopt) const {
    for (std::size_t i = 0; i < servers_.size(); ++i) {
      if (skip == i || !servers_[i]->running()) continue;
      HttpReply r = Client(i).Get("/api/v1/cluster", admin_);
      if (r.status == 200) return r.body;
    }
    return nullptr;
  }

  std::size_t IndexOf(const std::string& instance_id) const {
    return static_cast<std::size_t>(std::stoi(instance_id.substr(3)));
  }

  std::unique_ptr<store::pg_testing::PgServer> pg_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::string admin_;
};

// A simulated agent that fails over between the instances: on a transport
// error or a 503 it moves to the next URL.
class FailoverAgent {
 public:
  FailoverAgent(std::vector<HttpClient> clients, std::string name,
                std::string token, int gpus)
      : clients_(std::move(clients)),
        name_(std::move(name)),
        token_(std::move(token)),
        gpus_(gpus) {}

  json Report() const {
    json gpus = json::array();
    for (int i = 0; i < gpus_; ++i) {
      SimGpu g;
      g.index = i;
      g.memory_mb = kGpuMemory;
      gpus.push_back(g.ToJson(name_));
    }
    return {{"node_id", name_},       {"containerized", false},
            {"cpu_milli", 64000},     {"host_memory_mb", 262144},
            {"agent_version", "e2e"}, {"gpus", gpus}};
  }

  // One agent cycle; returns whether it reached a working instance.
  bool Cycle() {
    json body = Report();
    json tasks = json::array();
    for (const auto& [id, gpus] : running_) {
      json entry = {
          {"task_id", id}, {"state", "running"}, {"gpu_indices", gpus}};
      if (!hook_.is_null()) entry["hook"] = hook_;
      tasks.push_back(std::move(entry));
    }
    body["tasks"] = tasks;
    HttpReply hb =
        Send("POST", "/api/v1/nodes/" + name_ + "/heartbeat", body.dump());
    if (hb.status != 200) return false;
    HttpReply a = Send("GET", "/api/v1/nodes/" + name_ + "/assignments", "");
    if (a.status != 200) return false;
    for (const json& t : a.body["run"]) {
      const std::int64_t id = t["id"].get<std::int64_t>();
      if (running_.contains(id)) continue;
      json states = {
          {"states", json::array({{{"task_id", id}, {"state", "running"}}})}};
      HttpReply s = Send("POST", "/api/v1/nodes/" + name_ + "/task-states",
                         states.dump());
      if (s.status != 200) return false;
      running_[id] = t["gpu_indices"];
    }
    ok_cycles_.fetch_add(1);
    return true;
  }

  bool Register() {
    return Send("POST", "/api/v1/nodes/register", Report().dump()).status ==
           200;
  }

  void Run(const std::atomic<bool>& stop) {
    while (!stop.load()) {
      (void)Cycle();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // What the hook measured in every running task, sent with each
  // heartbeat from now on (the agent's thread only).
  void SetHook(json hook) { hook_ = std::move(hook); }

  int ok_cycles() const { return ok_cycles_.load(); }
  int failovers() const { return failovers_.load(); }
  std::size_t running() const { return running_.size(); }

 private:
  HttpReply Send(const std::string& method, const std::string& path,
                 const std::string& body) {
    HttpReply r;
    for (std::size_t attempt = 0; attempt < clients_.size(); ++attempt) {
      r = clients_[current_].Send(method, path, body, token_);
      if (r.status != 0 && r.status != 503) return r;
      current_ = (current_ + 1) % clients_.size();
      failovers_.fetch_add(1);
    }
    return r;
  }

  std::vector<HttpClient> clients_;
  std::string name_;
  std::string token_;
  int gpus_;
  std::size_t current_ = 0;
  std::map<std::int64_t, json> running_;  // only the agent's thread
  json hook_;                             // only the agent's thread
  std::atomic<int> ok_cycles_{0};
  std::atomic<int> failovers_{0};
};

TEST_F(MultiInstanceTest, LeaderKilledWhileTasksArrive) {
  auto pg = store::pg_testing::PgServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  pg_ = std::move(*pg);
  ASSERT_TRUE(pg_->CreateDatabase("hf").ok());
  const std::string url = pg_->Url("hf");
  ASSERT_NO_FATAL_FAILURE(StartCluster({url, url, url}));

  json cluster = Cluster();
  ASSERT_TRUE(cluster.is_object());
  ASSERT_EQ(cluster["leader"]["id"], "hf-0") << cluster.dump();
  ASSERT_EQ(cluster["leader"]["term"], 1);
  ASSERT_TRUE(WaitFor([&] { return Cluster()["instances"].size() == 3; }))
      << Cluster().dump();

  Api api(Client(1), admin_);  // through a follower
  const std::string node_token = api.CreateToken("node", std::nullopt);
  ASSERT_FALSE(node_token.empty());
  std::vector<HttpClient> clients;
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    clients.push_back(Client(i));
  }
  std::vector<std::unique_ptr<FailoverAgent>> agents;
  for (int n = 0; n < 2; ++n) {
    agents.push_back(std::make_unique<FailoverAgent>(
        clients, "node-" + std::to_string(n), node_token, 2));
    ASSERT_TRUE(agents.back()->Register());
  }

  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (auto& agent : agents) {
    threads.emplace_back([&stop, a = agent.get()] { a->Run(stop); });
  }
  // The client: 4 GPUs x 20 slices of 4096 MB at 5% fit 80 tasks.
  constexpr int kTasks = 60;
  std::mutex acked_mu;
  std::vector<std::int64_t> acked;
  std::atomic<int> client_failovers{0};
  threads.emplace_back([&] {
    std::size_t target = 0;
    for (int n = 0; n < kTasks && !stop.load(); ++n) {
      const json body = {{"name", "mi-" + std::to_string(n)},
                         {"gpu_memory_mb", 4096},
                         {"gpu_compute_ratio", 0.05}};
      for (int attempt = 0; attempt < 100; ++attempt) {
        HttpReply r = clients[target].Post("/api/v1/tasks", body, admin_);
        target = (target + 1) % clients.size();  // spread over instances
        if (r.status == 201) {
          std::lock_guard lock(acked_mu);
          acked.push_back(r.body["id"].get<std::int64_t>());
          break;
        }
        client_failovers.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  // Let some tasks be created and bound, then kill the leader.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::lock_guard lock(acked_mu);
        return acked.size() >= 15;
      },
      milliseconds(20'000)));
  ASSERT_TRUE(servers_[0]->Kill());
  const auto killed_at = Clock::now();
  const int agent_cycles_at_kill =
      agents[0]->ok_cycles() + agents[1]->ok_cycles();

  json new_leader;
  ASSERT_TRUE(WaitFor(
      [&] {
        json c = Cluster(0);
        if (!c.is_object() || !c["leader"].is_object() ||
            c["leader"]["id"] == "hf-0") {
          return false;
        }
        new_leader = c["leader"];
        return true;
      },
      milliseconds(15'000), milliseconds(50)));
  const double takeover_s = SecondsSince(killed_at);
  EXPECT_LE(takeover_s, 10.0) << "takeover took " << takeover_s << " s";
  EXPECT_EQ(new_leader["term"], 2) << new_leader.dump();
  std::cerr << "[multi] new leader " << new_leader.dump() << " after "
            << takeover_s << " s\n";
  // The ledger is served (by the new leader, through a follower as well).
  ASSERT_TRUE(WaitFor(
      [&] {
        return Client(1).Get("/api/v1/slices/stats", admin_).status == 200 &&
               Client(2).Get("/api/v1/slices/stats", admin_).status == 200;
      },
      milliseconds(5'000)));

  // Every acknowledged task ends bound, and the agents run them.
  threads.back().join();
  threads.pop_back();
  std::vector<std::int64_t> ids;
  {
    std::lock_guard lock(acked_mu);
    ids = acked;
  }
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(kTasks));
  Api survivor(Client(IndexOf(new_leader["id"])), admin_);
  for (std::int64_t id : ids) {
    json t = survivor.WaitTask(
        id, admin_,
        [](const json& task) { return task["status"] == "running"; },
        milliseconds(20'000));
    ASSERT_TRUE(t.is_object()) << "task " << id << " is lost";
    EXPECT_EQ(t["status"], "running") << t.dump();
    EXPECT_TRUE(t["slice_id"].is_number()) << t.dump();
  }
  // The agents keep cycling through the new leader.
  EXPECT_TRUE(WaitFor(
      [&] {
        return agents[0]->ok_cycles() + agents[1]->ok_cycles() >
               agent_cycles_at_kill + 10;
      },
      milliseconds(10'000)))
      << "the agents stopped working after the leader died";
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_GT(agents[0]->failovers() + agents[1]->failovers(), 0);

  // No GPU oversold, no task with two live slices, no slice twice.
  Api reader(Client(1), admin_);
  const json slices = reader.ListAll("/api/v1/slices?limit=1000", admin_);
  std::set<std::int64_t> slice_ids;
  std::set<std::int64_t> task_ids;
  std::map<std::string, std::int64_t> per_gpu;
  for (const json& s : slices) {
    EXPECT_TRUE(slice_ids.insert(s["id"].get<std::int64_t>()).second)
        << "slice twice: " << s.dump();
    ASSERT_TRUE(s["task_id"].is_number()) << s.dump();
    EXPECT_TRUE(task_ids.insert(s["task_id"].get<std::int64_t>()).second)
        << "task with two live slices: " << s.dump();
    per_gpu[s["node_id"].get<std::string>() + "/" +
            std::to_string(s["gpu_index"].get<int>())] +=
        s["memory_mb"].get<std::int64_t>();
  }
  EXPECT_EQ(slice_ids.size(), ids.size());
  for (const auto& [gpu, memory] : per_gpu) {
    EXPECT_LE(memory, kGpuMemory) << gpu << " oversold";
  }
  // The leader's ledger says the same (accounted = sum of live slices).
  HttpReply stats = Client(2).Get("/api/v1/slices/stats", admin_);
  ASSERT_EQ(stats.status, 200) << stats.Describe();
  EXPECT_TRUE(JsonMentions(stats.body, "node-0")) << stats.raw;
  std::cerr << "[multi] client failovers " << client_failovers.load()
            << ", agent failovers "
            << agents[0]->failovers() + agents[1]->failovers() << "\n";
}

TEST_F(MultiInstanceTest, StoppedLeaderHandsOverAtOnce) {
  auto pg = store::pg_testing::PgServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  pg_ = std::move(*pg);
  ASSERT_TRUE(pg_->CreateDatabase("hf").ok());
  const std::string url = pg_->Url("hf");
  ASSERT_NO_FATAL_FAILURE(StartCluster({url, url}));
  ASSERT_EQ(Cluster()["leader"]["id"], "hf-0");
  ASSERT_TRUE(WaitFor([&] { return Cluster()["instances"].size() == 2; }));

  const auto signalled = Clock::now();
  ASSERT_TRUE(servers_[0]->Stop());  // SIGTERM; exit code 0
  double took = -1;
  ASSERT_TRUE(WaitFor([&] {
    json c = Cluster();
    if (c.is_object() && c["leader"].is_object() &&
        c["leader"]["id"] == "hf-1" && c["leader"]["term"] == 2) {
      took = SecondsSince(signalled);
      return true;
    }
    return false;
  })) << Cluster().dump();
  std::printf(
      "[handover] a follower leads %.2f s after the SIGTERM "
      "(lease time 6 s)\n",
      took);
  // Well within the lease time: handed over, not waited out.
  EXPECT_LT(took, 1.0);
  EXPECT_NE(servers_[0]->Log().find("handed the lease over"), std::string::npos)
      << servers_[0]->Log();
  // The new leader works: a node registers and a task is bound.
  Api api(Client(1), admin_);
  FailoverAgent agent({Client(1)}, "n1", api.CreateToken("node", std::nullopt),
                      1);
  // Until it has rebuilt its ledger from the database the new leader
  // answers the agent API with 503 (docs/OPERATIONS.md, Promotion); an
  // agent retries.
  ASSERT_TRUE(WaitFor([&] { return agent.Register(); }));
  const json task = api.CreateTask(
      {{"name", "after-handover"}, {"gpu_memory_mb", 1024}}, admin_);
  ASSERT_TRUE(task.is_object() && task.contains("id")) << task.dump();
  const json bound = api.WaitNotPending(task["id"].get<std::int64_t>(), admin_);
  EXPECT_NE(bound["status"], "pending") << bound.dump();
}

// What the hook measured in a task (memory, the share achieved,
// interference) is kept by the leader in the database: a follower serves it
// as the leader does, and the advice (a leader route) reaches the leader
// through the follower.
TEST_F(MultiInstanceTest, AFollowerServesTheSlicesMeasuredUsage) {
  auto pg = store::pg_testing::PgServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  pg_ = std::move(*pg);
  ASSERT_TRUE(pg_->CreateDatabase("usage").ok());
  const std::string url = pg_->Url("usage");
  ASSERT_NO_FATAL_FAILURE(StartCluster({url, url}));
  Api api(Client(0), admin_);
  FailoverAgent agent({Client(0)}, "n-usage",
                      api.CreateToken("node", std::nullopt), 1);
  ASSERT_TRUE(agent.Register());
  const json task =
      api.CreateTask({{"name", "measured"}, {"gpu_memory_mb", 4096}}, admin_);
  ASSERT_TRUE(task.is_object() && task.contains("id")) << task.dump();
  const std::int64_t id = task["id"].get<std::int64_t>();
  ASSERT_TRUE(WaitFor([&] { return agent.Cycle() && agent.running() == 1; }))
      << "the task never ran";
  agent.SetHook({{"attached", true},
                 {"attaches", 1},
                 {"processes", 1},
                 {"used_bytes", std::int64_t{3} << 30},
                 {"peak_bytes", std::int64_t{3} << 30},
                 {"quota_bytes", std::int64_t{4} << 30},
                 {"quota_ooms", 2},
                 {"physical_ooms", 0},
                 {"share_achieved_percent", 41.5},
                 {"interference", 1.8},
                 {"interference_samples", 120}});
  ASSERT_TRUE(agent.Cycle());
  const json t = Api(Client(1), admin_).GetTask(id, admin_);
  ASSERT_TRUE(t["slice_id"].is_number_integer()) << t.dump();
  const std::string path =
      "/api/v1/slices/" + std::to_string(t["slice_id"].get<std::int64_t>());
  json hook;
  ASSERT_TRUE(WaitFor([&] {
    HttpReply r = Client(1).Get(path, admin_);
    hook = r.status == 200 ? r.body["hook"] : json();
    return hook.is_object() && hook["interference"] == 1.8;
  })) << hook.dump();
  EXPECT_EQ(hook["used_bytes"], std::int64_t{3} << 30);
  EXPECT_EQ(hook["quota_ooms"], 2);
  EXPECT_EQ(hook["share_achieved_percent"], 41.5);
  EXPECT_EQ(hook["interference_samples"], 120);
  // The follower's answer is the leader's.
  EXPECT_EQ(Client(0).Get(path, admin_).body["hook"], hook);
  // Advice is the leader's (it reads the ledger): asked of the follower, it
  // is forwarded and names the slice.
  HttpReply advice = Client(1).Get("/api/v1/advice?threshold=1.5", admin_);
  ASSERT_EQ(advice.status, 200) << advice.Describe();
  ASSERT_EQ(advice.body["items"].size(), 1u) << advice.raw;
  EXPECT_EQ(advice.body["items"][0]["slices"][0]["interference"], 1.8)
      << advice.raw;
}

// A follower answers POST /tasks from the database alone; the leader
// learns of the task through the store's task feed (LISTEN/NOTIFY) as it
// commits, not at its next sweep of every pending task (15 s).
TEST_F(MultiInstanceTest, ATaskCreatedOnAFollowerIsBoundAtOnce) {
  auto pg = store::pg_testing::PgServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  pg_ = std::move(*pg);
  ASSERT_TRUE(pg_->CreateDatabase("feed").ok());
  const std::string url = pg_->Url("feed");
  ASSERT_NO_FATAL_FAILURE(StartCluster({url, url}));
  Api api(Client(0), admin_);
  FailoverAgent agent({Client(0)}, "n-feed",
                      api.CreateToken("node", std::nullopt), 1);
  ASSERT_TRUE(agent.Register());
  Api follower(Client(1), admin_);
  for (int i = 0; i < 3; ++i) {
    const auto created = Clock::now();
    const json task =
        follower.CreateTask({{"name", "via-follower-" + std::to_string(i)},
                             {"gpu_memory_mb", 1024},
                             {"gpu_compute_ratio", 0.1}},
                            admin_);
    ASSERT_TRUE(task.is_object() && task.contains("id")) << task.dump();
    const json bound =
        follower.WaitNotPending(task["id"].get<std::int64_t>(), admin_);
    const double took = SecondsSince(created);
    EXPECT_EQ(bound["status"], "scheduled") << bound.dump();
    EXPECT_LT(took, 2.0) << "bound only by the sweep";
    std::printf("[feed] a task created on a follower was bound after %.3f s\n",
                took);
  }
}

TEST_F(MultiInstanceTest, PartitionedLeaderStopsBeforeTakeover) {
  auto pg = store::pg_testing::PgServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  pg_ = std::move(*pg);
  ASSERT_TRUE(pg_->CreateDatabase("part").ok());
  BlackHoleProxy proxy(pg_->port());
  const std::string direct = pg_->Url("part");
  const std::string via_proxy =
      "postgres://postgres@127.0.0.1:" + std::to_string(proxy.port()) + "/part";
  ASSERT_NO_FATAL_FAILURE(StartCluster({via_proxy, direct, direct}));
  ASSERT_EQ(Cluster()["leader"]["id"], "hf-0");

  Api api(Client(1), admin_);
  const std::string node_token = api.CreateToken("node", std::nullopt);
  std::vector<HttpClient> clients;
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    clients.push_back(Client(i));
  }
  FailoverAgent agent(clients, "node-p", node_token, 2);
  ASSERT_TRUE(agent.Register());

  // Tasks keep arriving through the followers (served from the database
  // alone, so creation goes on through the partition).
  std::atomic<bool> stop{false};
  std::atomic<int> created{0};
  std::thread creator([&] {
    for (int n = 0; !stop.load(); ++n) {
      const json body = {{"name", "p-" + std::to_string(n)},
                         {"gpu_memory_mb", 1024},
                         {"gpu_compute_ratio", 0.01}};
      if (clients[1 + n % 2].Post("/api/v1/tasks", body, admin_).status ==
          201) {
        created.fetch_add(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
  });
  ASSERT_TRUE(WaitFor([&] { return created.load() >= 10; }));
  // Some are bound by the first leader (term 1) before the cut.
  ASSERT_TRUE(WaitFor(
      [&] {
        return api.ListAll("/api/v1/slices?limit=1000", admin_).size() >= 5;
      },
      milliseconds(10'000), milliseconds(200)));

  proxy.BlackHole();
  const auto cut_at = Clock::now();
  double exited_s = -1;
  double taken_s = -1;
  int status = 0;
  json new_leader;
  ASSERT_TRUE(WaitFor(
      [&] {
        if (exited_s < 0 && servers_[0]->WaitExit(milliseconds(0), &status)) {
          exited_s = SecondsSince(cut_at);
        }
        if (taken_s < 0) {
          json c = Cluster(0);
          if (c.is_object() && c["leader"].is_object() &&
              c["leader"]["id"] != "hf-0") {
            taken_s = SecondsSince(cut_at);
            new_leader = c["leader"];
          }
        }
        return exited_s >= 0 && taken_s >= 0;
      },
      milliseconds(20'000), milliseconds(20)));
  std::cerr << "[partition] old leader exited after " << exited_s
            << " s, new leader " << new_leader.dump() << " after " << taken_s
            << " s\n";
  ASSERT_TRUE(WIFEXITED(status)) << DescribeWaitStatus(status);
  EXPECT_EQ(WEXITSTATUS(status), 75) << servers_[0]->Log();
  EXPECT_NE(servers_[0]->Log().find("lost the leader lease"), std::string::npos)
      << servers_[0]->Log();
  EXPECT_LT(exited_s, taken_s)
      << "the old leader still ran when another took over";
  EXPECT_EQ(new_leader["term"], 2);

  // Binding goes on under the new term.
  const int before = created.load();
  ASSERT_TRUE(WaitFor([&] { return created.load() >= before + 5; }));
  stop = true;
  creator.join();
  ASSERT_TRUE(WaitFor(
      [&] {
        return api.ListAll("/api/v1/tasks?status=pending", admin_).empty();
      },
      milliseconds(15'000), milliseconds(200)));

  // The history: no bind of term 1 after term 2 began, and term 2 binds.
  const std::string since = new_leader["since"].get<std::string>();
  const json history = api.ListAll("/api/v1/slices/history?limit=1000", admin_);
  int old_term = 0;
  int new_term = 0;
  for (const json& h : history) {
    if (h["op"] != "allocate") continue;
    const std::string reason = h["reason"].get<std::string>();
    if (reason.ends_with("by leader term 1")) {
      ++old_term;
      // RFC 3339 UTC with milliseconds: text order is time order.
      EXPECT_LT(h["at"].get<std::string>(), since)
          << "a bind by the old term after the new term began: " << h.dump();
    } else if (reason.ends_with("by leader term 2")) {
      ++new_term;
    }
  }
  EXPECT_GE(old_term, 5);
  EXPECT_GE(new_term, 5);
}

}  // namespace
}  // namespace hf::e2e
