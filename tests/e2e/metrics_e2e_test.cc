// End-to-end test of the metrics (docs/METRICS.md): a REAL Prometheus
// (Debian's `prometheus`) scrapes the REAL hf-server (once on --listen with
// a `metrics` token, once on --metrics-listen) and three REAL hf-agents
// (--metrics-listen) on loopback while a scripted workload runs:
//   - a bronze slice whose task (the hook's probe against the fake libcuda,
//     with libhfhook.so preloaded) fills its 1 GiB quota until refused;
//   - a slice released by GC: its node goes silent while its task is
//     cancelled (--node-lost-after);
//   - a gold slice on a simulated H100 in MIG mode (a MIG create).
// Then it asks Prometheus's HTTP API for the series and checks their values,
// runs `promtool check metrics` on both endpoints, checks that every family
// served is listed in docs/METRICS.md, and that every metric the Grafana
// dashboard (docs/grafana/heteroflow.json) queries is served.
#include <httplib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/agent_harness.h"

#ifndef HF_PROMETHEUS_PATH
#error "HF_PROMETHEUS_PATH must name the prometheus binary"
#endif
#ifndef HF_PROMTOOL_PATH
#error "HF_PROMTOOL_PATH must name promtool"
#endif

namespace hf::e2e {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kMib = std::int64_t{1} << 20;
constexpr milliseconds kTimeout{40'000};

std::string SourceFile(const std::string& rel) {
  return ReadFile(fs::path(HF_SOURCE_DIR) / rel);
}

// The metric families an exposition declares (its `# TYPE` lines).
std::set<std::string> Families(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::istringstream words(line.substr(7));
    std::string name;
    words >> name;
    out.insert(name);
  }
  return out;
}

// Runs `promtool check metrics` on `text`; its exit status and output.
std::pair<int, std::string> PromtoolCheck(const std::string& text,
                                          const fs::path& dir) {
  const fs::path in = dir / "promtool-input.txt";
  const fs::path out = dir / "promtool-output.txt";
  std::ofstream(in) << text;
  const std::string cmd = std::string(HF_PROMTOOL_PATH) + " check metrics < " +
                          in.string() + " > " + out.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(out)};
}

// A Prometheus server in a directory of its own, scraping every second.
class PrometheusProcess {
 public:
  explicit PrometheusProcess(fs::path dir) : dir_(std::move(dir)) {}
  ~PrometheusProcess() {
    if (pid_ > 0) (void)KillChild(pid_, "prometheus");
  }

  ::testing::AssertionResult Start(const std::string& config) {
    fs::create_directories(dir_ / "data");
    std::ofstream(dir_ / "prometheus.yml") << config;
    port_ = PickFreePort();
    const std::string listen = "127.0.0.1:" + std::to_string(port_);
    const std::string log = (dir_ / "prometheus.log").string();
    pid_ = fork();
    if (pid_ < 0) return ::testing::AssertionFailure() << "fork failed";
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::FILE* f = std::freopen(log.c_str(), "w", stdout);
      (void)f;
      dup2(fileno(stdout), fileno(stderr));
      const std::string config_flag =
          "--config.file=" + (dir_ / "prometheus.yml").string();
      const std::string data_flag =
          "--storage.tsdb.path=" + (dir_ / "data").string();
      const std::string web_flag = "--web.listen-address=" + listen;
      execl(HF_PROMETHEUS_PATH, "prometheus", config_flag.c_str(),
            data_flag.c_str(), web_flag.c_str(), "--log.level=warn",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    HttpClient client("127.0.0.1", port_);
    if (WaitFor([&] { return client.Get("/-/ready").status == 200; },
                milliseconds(30'000), milliseconds(100))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "prometheus never became ready:\n"
           << Tail(ReadFile(dir_ / "prometheus.log"), 4000);
  }

  // An instant query's result vector; null when Prometheus refused it.
  json Query(const std::string& promql) const {
    httplib::Client c("127.0.0.1", port_);
    auto r = c.Get("/api/v1/query", httplib::Params{{"query", promql}},
                   httplib::Headers{});
    if (!r || r->status != 200) return nullptr;
    json j = json::parse(r->body, nullptr, false);
    if (!j.is_object() || j.value("status", "") != "success") return nullptr;
    return j["data"]["result"];
  }

  // The value of a query that must return exactly one sample; NaN if not.
  double Value(const std::string& promql) const {
    json result = Query(promql);
    if (!result.is_array() || result.size() != 1) return std::nan("");
    return std::stod(result[0]["value"][1].get<std::string>());
  }

  std::string Log() const {
    return Tail(ReadFile(dir_ / "prometheus.log"), 4000);
  }

 private:
  fs::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

class MetricsE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* path : {HF_PROMETHEUS_PATH, HF_PROMTOOL_PATH, HF_HOOK_PATH,
                             HF_PROBE_PATH, HF_AGENT_PATH}) {
      ASSERT_TRUE(fs::exists(path)) << path << " is missing (run "
                                    << "scripts/bootstrap.sh)";
    }
    server_metrics_port_ = PickFreePort();
    ServerOptions options;
    options.flags = {"--gc-interval",
                     "1",
                     "--node-lost-after",
                     "2",
                     "--metrics-listen",
                     "127.0.0.1:" + std::to_string(server_metrics_port_)};
    server_ = std::make_unique<ServerProcess>(options);
    ASSERT_TRUE(server_->Start());
    api_ = std::make_unique<Api>(*server_);
    dir_ = server_->dir() / "metrics-e2e";
    fs::create_directories(dir_);
  }

  void TearDown() override {
    prometheus_.reset();
    for (auto& a : agents_) {
      if (a->running()) (void)a->Stop();
    }
    agents_.clear();
    if (server_ && server_->running()) {
      EXPECT_TRUE(server_->Stop());
    }
  }

  AgentProcess* NewAgent(const std::string& node, json gpus, int port) {
    AgentProcessOptions options;
    options.node_id = node;
    options.inventory = SimInventory(node, std::move(gpus));
    options.token = CreateNodeToken(*api_, node);
    options.flags = {"--hook-library", HF_HOOK_PATH, "--metrics-listen",
                     "127.0.0.1:" + std::to_string(port)};
    agents_.push_back(std::make_unique<AgentProcess>(server_->url(), options));
    return agents_.back().get();
  }

  bool NodeUp(const std::string& node) {
    HttpReply r = api_->http().Get("/api/v1/nodes/" + node, api_->admin());
    return r.status == 200 && r.body.is_object() && r.body["gpus"].size() == 1;
  }

  std::string Logs() const {
    std::string out = "\nserver log:\n" + server_->Log(4096);
    for (const auto& a : agents_) {
      out += "\nagent " + a->node_id() + ":\n" + a->Log(4096);
    }
    if (prometheus_) out += "\nprometheus:\n" + prometheus_->Log();
    return out;
  }

  std::string Scrape(int port, const std::string& token = "") {
    HttpClient c("127.0.0.1", port);
    HttpReply r = c.Get("/metrics", token);
    EXPECT_EQ(r.status, 200) << r.Describe();
    return r.raw;
  }

  int server_metrics_port_ = 0;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Api> api_;
  std::vector<std::unique_ptr<AgentProcess>> agents_;
  std::unique_ptr<PrometheusProcess> prometheus_;
  fs::path dir_;
};

TEST_F(MetricsE2eTest, PrometheusScrapesTheServerAndTheAgents) {
  // --- who may read /metrics
  const std::string metrics_token = api_->CreateToken("metrics", std::nullopt);
  ASSERT_FALSE(metrics_token.empty());
  const std::string quota_tenant = api_->NewTenant("quota");
  const std::string lost_tenant = api_->NewTenant("lost");
  const std::string gold_tenant = api_->NewTenant("gold");
  const std::string quota_user = api_->CreateToken("user", quota_tenant);
  const std::string quota_admin =
      api_->CreateToken("tenant-admin", quota_tenant);
  const std::string lost_user = api_->CreateToken("user", lost_tenant);
  const std::string gold_user = api_->CreateToken("user", gold_tenant);
  EXPECT_EQ(api_->http().Get("/metrics").status, 401);
  EXPECT_EQ(api_->http().Get("/metrics", quota_user).status, 403);
  EXPECT_EQ(api_->http().Get("/metrics", quota_admin).status, 403);
  EXPECT_EQ(api_->http().Get("/metrics", metrics_token).status, 200);
  EXPECT_EQ(api_->http().Get("/metrics", api_->admin()).status, 200);
  // The metrics token reads nothing else.
  EXPECT_EQ(api_->http().Get("/api/v1/tasks", metrics_token).status, 403);
  EXPECT_EQ(api_->http().Get("/api/v1/slices/stats", metrics_token).status,
            403);

  // --- Prometheus, before the workload: it sees every step
  const int hooked_port = PickFreePort();
  const int doomed_port = PickFreePort();
  const int gold_port = PickFreePort();
  std::ofstream(dir_ / "metrics.token") << metrics_token;
  std::ostringstream config;
  config << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
         << "scrape_configs:\n"
         << "  - job_name: server\n"
         << "    authorization:\n      credentials_file: "
         << (dir_ / "metrics.token").string() << "\n"
         << "    static_configs:\n      - targets: ['127.0.0.1:"
         << server_->port() << "']\n"
         << "  - job_name: server-metrics-listen\n"
         << "    static_configs:\n      - targets: ['127.0.0.1:"
         << server_metrics_port_ << "']\n"
         << "  - job_name: agent\n"
         << "    static_configs:\n      - targets: ['127.0.0.1:" << hooked_port
         << "', '127.0.0.1:" << doomed_port << "', '127.0.0.1:" << gold_port
         << "']\n";
  prometheus_ = std::make_unique<PrometheusProcess>(dir_ / "prometheus");
  ASSERT_TRUE(prometheus_->Start(config.str()));

  // --- 1. a slice that hits its quota (the hook and the fake driver)
  AgentProcess* hooked = NewAgent("hooked", {P100()}, hooked_port);
  ASSERT_TRUE(hooked->Start());
  ASSERT_TRUE(WaitFor([&] { return NodeUp("hooked"); }, kTimeout)) << Logs();
  const std::string probe = std::string(HF_PROBE_PATH) +
                            " --resolve procaddr fill 256; exec sleep 300";
  json t = api_->CreateTask({{"name", "filler"},
                             {"command", {"/bin/sh", "-c", probe}},
                             {"gpu_memory_mb", 1024},
                             {"gpu_compute_ratio", 0.5},
                             {"env",
                              {{"LD_LIBRARY_PATH", HF_FAKE_CUDA_DIR},
                               {"HF_FAKE_CUDA_MEMORY_MB", "16384"}}}},
                            quota_user);
  ASSERT_TRUE(t.is_object()) << Logs();
  const std::int64_t filler = t["id"].get<std::int64_t>();
  t = api_->WaitTask(
      filler, quota_user,
      [](const json& x) { return x.value("status", "") == "running"; },
      kTimeout);
  ASSERT_TRUE(t["slice_id"].is_number_integer()) << t.dump() << Logs();
  const std::string quota_slice = std::to_string(t["slice_id"].get<int>());
  // The hook refused an allocation past the quota.
  json s;
  ASSERT_TRUE(WaitFor(
      [&] {
        s = api_->GetSlice(std::stoll(quota_slice), quota_user);
        return s["hook"].is_object() && s["hook"].value("quota_ooms", 0) > 0;
      },
      kTimeout))
      << s.dump() << Logs();

  // --- 2. a GC release: the node goes silent while its task is cancelled
  AgentProcess* doomed = NewAgent("doomed", {P100()}, doomed_port);
  ASSERT_TRUE(doomed->Start());
  ASSERT_TRUE(WaitFor([&] { return NodeUp("doomed"); }, kTimeout)) << Logs();
  t = api_->CreateTask({{"name", "sleeper"},
                        {"command", {"sleep", "300"}},
                        {"gpu_memory_mb", 2048}},
                       lost_user);
  ASSERT_TRUE(t.is_object()) << Logs();
  const std::int64_t sleeper = t["id"].get<std::int64_t>();
  t = api_->WaitTask(
      sleeper, lost_user,
      [](const json& x) { return x.value("status", "") == "running"; },
      kTimeout);
  ASSERT_EQ(t.value("status", ""), "running") << t.dump() << Logs();
  ASSERT_EQ(t.value("node_id", ""), "doomed") << t.dump();
  const std::int64_t gc_slice = t["slice_id"].get<std::int64_t>();
  ASSERT_TRUE(doomed->Stop());
  HttpReply cancel =
      api_->http().Post("/api/v1/tasks/" + std::to_string(sleeper) + "/cancel",
                        json::object(), lost_user);
  ASSERT_EQ(cancel.status, 200) << cancel.Describe();
  ASSERT_TRUE(WaitFor(
      [&] {
        s = api_->GetSlice(gc_slice, api_->admin());
        return s.value("state", "") == "released";
      },
      kTimeout))
      << s.dump() << Logs();

  // --- 3. a MIG create (gold slice on a simulated H100 in MIG mode)
  AgentProcess* gold = NewAgent("gold", {H100Mig()}, gold_port);
  ASSERT_TRUE(gold->Start());
  ASSERT_TRUE(WaitFor([&] { return NodeUp("gold"); }, kTimeout)) << Logs();
  t = api_->CreateTask({{"name", "mig"},
                        {"command", {"sleep", "300"}},
                        // More than the P100s take: only the H100 can.
                        {"gpu_memory_mb", 20000}},
                       gold_user);
  ASSERT_TRUE(t.is_object()) << Logs();
  const std::int64_t mig_task = t["id"].get<std::int64_t>();
  t = api_->WaitTask(
      mig_task, gold_user,
      [](const json& x) { return x.value("status", "") == "running"; },
      kTimeout);
  ASSERT_EQ(t.value("status", ""), "running") << t.dump() << Logs();
  const std::string gold_slice = std::to_string(t["slice_id"].get<int>());

  // --- Prometheus's view
  const auto value_at_least = [&](const std::string& q, double min) {
    double v = std::nan("");
    const bool ok = WaitFor(
        [&] {
          v = prometheus_->Value(q);
          return v >= min;
        },
        kTimeout, milliseconds(250));
    EXPECT_TRUE(ok) << q << " = " << v << " (want >= " << min << ")" << Logs();
    return v;
  };
  // Every target is up, the token-scraped server too.
  value_at_least("sum(up{job=\"server\"})", 1);
  value_at_least("sum(up{job=\"server-metrics-listen\"})", 1);
  // The doomed agent is down now; the two others are up.
  value_at_least("sum(up{job=\"agent\"})", 2);
  // The quota slice: 1 GiB quota, refused past it, never by the driver.
  const std::string sl = "{slice=\"" + quota_slice + "\"}";
  value_at_least("heteroflow_slice_quota_oom_total" + sl, 1);
  EXPECT_EQ(prometheus_->Value("heteroflow_slice_physical_oom_total" + sl), 0)
      << Logs();
  EXPECT_EQ(prometheus_->Value("heteroflow_slice_memory_quota_bytes" + sl),
            1024.0 * kMib);
  EXPECT_GE(prometheus_->Value("heteroflow_slice_memory_peak_bytes" + sl),
            768.0 * kMib);
  EXPECT_LE(prometheus_->Value("heteroflow_slice_memory_peak_bytes" + sl),
            1024.0 * kMib);
  EXPECT_GE(prometheus_->Value("heteroflow_slice_memory_used_bytes" + sl), 0);
  EXPECT_EQ(prometheus_->Value("heteroflow_slice_compute_share_ratio" + sl),
            0.5);
  // The gold slice's series exist, at 0: no process touched the GPU.
  const std::string gl = "{slice=\"" + gold_slice + "\"}";
  value_at_least("count(heteroflow_slice_memory_used_bytes" + gl + ")", 1);
  EXPECT_EQ(prometheus_->Value("heteroflow_slice_memory_used_bytes" + gl), 0);
  EXPECT_EQ(prometheus_->Value("heteroflow_slice_quota_oom_total" + gl), 0);
  // The MIG create, on both sides.
  value_at_least(
      "max(heteroflow_mig_command_duration_seconds_count{action=\"create\","
      "outcome=\"done\"})",
      1);
  value_at_least("max(heteroflow_node_gpu_mig_instances)", 1);
  EXPECT_EQ(prometheus_->Value("max(heteroflow_mig_commands_stuck)"), 0);
  // The GC release, and binds.
  value_at_least("max(heteroflow_slice_releases_total{path=\"gc\"})", 1);
  value_at_least("max(heteroflow_binds_total)", 3);
  value_at_least("max(heteroflow_scheduling_latency_seconds_count)", 3);
  // Slices by tier and enforcement: the quota slice is hooked bronze.
  value_at_least("max(heteroflow_slices{qos=\"bronze\",enforcement=\"hook\"})",
                 1);
  value_at_least("max(heteroflow_slices{qos=\"gold\"})", 1);
  // Per GPU: the P100 holds the 1 GiB slice of 16 GiB.
  value_at_least(
      "max(heteroflow_gpu_memory_total_bytes{node=\"hooked\",gpu=\"0\"})", 1);
  EXPECT_EQ(
      prometheus_->Value("max(heteroflow_gpu_memory_total_bytes{node=\"hooked\""
                         ",gpu=\"0\"})"),
      16384.0 * kMib);
  EXPECT_EQ(prometheus_->Value(
                "max(heteroflow_gpu_memory_accounted_bytes{node=\"hooked\","
                "gpu=\"0\"})"),
            1024.0 * kMib);
  EXPECT_EQ(prometheus_->Value(
                "count(heteroflow_pending_tasks{reason=\"not_tried\"})"),
            2);  // one per server job
  EXPECT_EQ(prometheus_->Value("max(heteroflow_held_gpus)"), 0);  // no hold
  value_at_least("max(heteroflow_leader)", 1);
  value_at_least(
      "max(heteroflow_http_requests_total{route=\"/api/v1/tasks\","
      "method=\"POST\",code=\"201\"})",
      3);
  value_at_least("max(heteroflow_node_heartbeat_age_seconds{node=\"doomed\"})",
                 2);

  // --- promtool on both endpoints
  const std::string server_text = Scrape(server_->port(), metrics_token);
  const std::string agent_text = Scrape(hooked_port);
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"server", server_text},
        {"agent", agent_text}}) {
    auto [rc, out] = PromtoolCheck(text, dir_);
    EXPECT_EQ(rc, 0) << name << ": promtool check metrics:\n" << out;
    EXPECT_EQ(out, "") << name << ": promtool check metrics:\n" << out;
  }
  // Tenants' names never label a series.
  for (const std::string& tenant : {quota_tenant, lost_tenant, gold_tenant}) {
    EXPECT_EQ(server_text.find(tenant), std::string::npos) << tenant;
    EXPECT_EQ(agent_text.find(tenant), std::string::npos) << tenant;
  }

  // --- every family served is documented, and named by the rules
  std::set<std::string> served = Families(server_text);
  for (const std::string& f : Families(agent_text)) served.insert(f);
  const std::string doc = SourceFile("docs/METRICS.md");
  static const std::regex kUnit(
      "^heteroflow_[a-z0-9_]+(_bytes|_seconds|_total|_ratio)?$");
  for (const std::string& f : served) {
    EXPECT_NE(doc.find("`" + f + "`"), std::string::npos)
        << f << " is served but not in docs/METRICS.md";
    EXPECT_TRUE(std::regex_match(f, kUnit)) << f;
  }
  for (const char* contract : {"heteroflow_slices", "heteroflow_pending_tasks",
                               "heteroflow_gpu_memory_total_bytes",
                               "heteroflow_gpu_memory_accounted_bytes",
                               "heteroflow_slice_memory_used_bytes",
                               "heteroflow_slice_quota_oom_total",
                               "heteroflow_slice_physical_oom_total"}) {
    EXPECT_TRUE(served.contains(contract)) << contract;
  }

  // --- the Grafana dashboard queries only what is served
  const json dashboard =
      json::parse(SourceFile("docs/grafana/heteroflow.json"), nullptr, false);
  ASSERT_TRUE(dashboard.is_object()) << "docs/grafana/heteroflow.json";
  std::vector<std::string> exprs;
  const std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        if (k == "expr" && v.is_string()) exprs.push_back(v.get<std::string>());
        walk(v);
      }
    } else if (j.is_array()) {
      for (const json& v : j) walk(v);
    }
  };
  walk(dashboard);
  ASSERT_GE(exprs.size(), 10u);
  static const std::regex kName("heteroflow_[a-z0-9_]+");
  int names = 0;
  for (const std::string& e : exprs) {
    for (auto it = std::sregex_iterator(e.begin(), e.end(), kName);
         it != std::sregex_iterator(); ++it) {
      std::string n = it->str();
      for (const char* suffix : {"_bucket", "_count", "_sum"}) {
        const std::string sfx = suffix;
        if (n.size() > sfx.size() && n.ends_with(sfx) && !served.contains(n)) {
          n = n.substr(0, n.size() - sfx.size());
        }
      }
      ++names;
      EXPECT_TRUE(served.contains(n))
          << "the dashboard queries " << it->str() << " (in " << e
          << "), which neither binary serves";
    }
    // The query itself is valid PromQL: Prometheus evaluates it.
    std::string q =
        std::regex_replace(e, std::regex(R"(\$__rate_interval)"), "1m");
    q = std::regex_replace(q, std::regex(R"(\$[a-z_]+)"), ".*");
    EXPECT_TRUE(prometheus_->Query(q).is_array()) << q;
  }
  EXPECT_GE(names, 10);
}

}  // namespace
}  // namespace hf::e2e
