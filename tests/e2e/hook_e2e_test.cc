// End-to-end test of the hook in the platform (docs/CONTRACT.md sections 1 and
// 13; docs/HOOK.md): the REAL hf-server, the REAL hf-agent on the simulated GPU
// backend with `--hook-library` = the built libhfhook.so, and a slice task
// whose command is the hook's test program (hook_probe) against the fake
// libcuda (src/hook/testing, LD_LIBRARY_PATH from the task's env). The probe
// runs `--resolve procaddr watch 8000`: it finds the driver the way the CUDA
// 12/13 runtime does and prints one JSON line with `total` each time
// cuMemGetInfo's total changes. The test checks that
//   - the slice is bound without "hook" and gains it once the hook in the
//     task has attached to the slice's region (the agent's report);
//   - the task sees the slice's quota as the card's size, not the card's;
//   - the slice shows what the hook measured;
//   - after PATCH /api/v1/slices/{id} the running task sees the new total,
//     without a restart (it was started once, and ran to its end).
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/agent_harness.h"

#ifndef HF_HOOK_PATH
#error "HF_HOOK_PATH must name libhfhook.so"
#endif
#ifndef HF_PROBE_PATH
#error "HF_PROBE_PATH must name hook_probe"
#endif
#ifndef HF_FAKE_CUDA_DIR
#error "HF_FAKE_CUDA_DIR must name the directory of the fake libcuda.so.1"
#endif

namespace hf::e2e {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kMib = std::int64_t{1} << 20;
constexpr milliseconds kTimeout{30'000};

// The `total` of every JSON line of the probe's output, in order.
std::vector<std::int64_t> Totals(const std::string& log) {
  std::vector<std::int64_t> totals;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.front() != '{') continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("total") &&
        j["total"].is_number_integer()) {
      totals.push_back(j["total"].get<std::int64_t>());
    }
  }
  return totals;
}

std::string Describe(const std::vector<std::int64_t>& totals) {
  std::string out;
  for (std::int64_t t : totals) {
    out += (out.empty() ? "" : ", ") + std::to_string(t / kMib) + " MiB";
  }
  return "[" + out + "]";
}

class HookE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* path : {HF_HOOK_PATH, HF_PROBE_PATH, HF_AGENT_PATH}) {
      ASSERT_TRUE(fs::exists(path)) << path;
    }
    ASSERT_TRUE(fs::exists(fs::path(HF_FAKE_CUDA_DIR) / "libcuda.so.1"))
        << HF_FAKE_CUDA_DIR;
    server_ = std::make_unique<ServerProcess>(ServerOptions{});
    ASSERT_TRUE(server_->Start());
    api_ = std::make_unique<Api>(*server_);
    tenant_ = api_->NewTenant("hook");
    user_ = api_->CreateToken("user", tenant_);
    ASSERT_FALSE(user_.empty());
  }

  void TearDown() override {
    if (agent_ && agent_->running()) {
      EXPECT_TRUE(agent_->Stop());
    }
    agent_.reset();
    if (server_ && server_->running()) {
      EXPECT_TRUE(server_->Stop());
    }
  }

  // Starts an agent with the real hook on `gpus` and waits until the
  // server lists it with hook_available.
  ::testing::AssertionResult StartAgent(const std::string& node, json gpus) {
    AgentProcessOptions options;
    options.node_id = node;
    options.inventory = SimInventory(node, std::move(gpus));
    options.token = CreateNodeToken(*api_, node);
    options.flags = {"--hook-library", HF_HOOK_PATH};
    agent_ = std::make_unique<AgentProcess>(server_->url(), options);
    ::testing::AssertionResult started = agent_->Start();
    if (!started) return started;
    if (WaitFor(
            [&] {
              HttpReply r =
                  api_->http().Get("/api/v1/nodes/" + node, api_->admin());
              return r.status == 200 && r.body["hook_available"] == true;
            },
            milliseconds(20'000))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "node " << node << " never registered" << Logs();
  }

  std::string TaskLog(std::int64_t id) const {
    HttpReply r = api_->http().Get(
        "/api/v1/tasks/" + std::to_string(id) + "/logs?limit=1048576", user_);
    return r.status == 200 && r.body.is_object() ? r.body.value("data", "")
                                                 : "";
  }

  std::string Logs() const {
    return "\nagent log:\n" + (agent_ ? agent_->Log(8192) : "") +
           "\nserver log:\n" + server_->Log(8192);
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<AgentProcess> agent_;
  std::string tenant_;
  std::string user_;
};

TEST_F(HookE2eTest, TaskSeesItsQuotaAndAResizeWithoutARestart) {
  // A Pascal card: bronze, so the hook is the only run-time enforcement.
  ASSERT_TRUE(StartAgent("hooked", {P100()}));
  const std::int64_t card_mb = 16384;
  json t = api_->CreateTask(
      {{"name", "probe"},
       {"command", {HF_PROBE_PATH, "--resolve", "procaddr", "watch", "8000"}},
       {"gpu_memory_mb", 4096},
       {"gpu_compute_ratio", 0.5},
       {"env",
        {{"LD_LIBRARY_PATH", HF_FAKE_CUDA_DIR},
         {"HF_FAKE_CUDA_MEMORY_MB", std::to_string(card_mb)}}}},
      user_);
  ASSERT_TRUE(t.is_object()) << Logs();
  const std::int64_t id = t["id"].get<std::int64_t>();
  t = api_->WaitTask(
      id, user_,
      [](const json& x) { return x.value("status", "") != "pending"; },
      kTimeout);
  ASSERT_TRUE(t["slice_id"].is_number_integer()) << t.dump() << Logs();
  const std::int64_t slice = t["slice_id"].get<std::int64_t>();
  const std::string path = "/api/v1/slices/" + std::to_string(slice);
  EXPECT_EQ(t["qos_level"], "bronze") << t.dump();

  // "hook" is listed once the hook in the task attached to the region.
  json s;
  ASSERT_TRUE(WaitFor(
      [&] {
        s = api_->GetSlice(slice, user_);
        return s["enforcement"] == json({"hook"});
      },
      kTimeout))
      << s.dump() << "\ntask log:\n"
      << TaskLog(id) << Logs();
  ASSERT_TRUE(s["hook"].is_object()) << s.dump();
  EXPECT_EQ(s["hook"]["attached"], true);
  // Any user may map it: a container's USER need not be the agent's.
  const fs::path region = agent_->state_dir() / "hook" /
                          ("slice-" + std::to_string(slice) + ".region");
  EXPECT_EQ(fs::status(region).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write |
                fs::perms::group_read | fs::perms::group_write |
                fs::perms::others_read | fs::perms::others_write);
  EXPECT_EQ(s["hook"]["quota_bytes"], 4096 * kMib) << s.dump();
  bool attached_logged = false;
  for (const json& h : api_->ListAll(
           "/api/v1/slices/history?slice_id=" + std::to_string(slice), user_)) {
    attached_logged |= h["op"] == "hook_attached";
  }
  EXPECT_TRUE(attached_logged);

  // The task sees the quota as the card's size, not the 16 GB card.
  ASSERT_TRUE(WaitFor([&] { return !Totals(TaskLog(id)).empty(); }, kTimeout))
      << "task log:\n"
      << TaskLog(id) << Logs();
  EXPECT_EQ(Totals(TaskLog(id)).front(), 4096 * kMib)
      << Describe(Totals(TaskLog(id))) << "\ntask log:\n"
      << TaskLog(id);

  // Dynamic quota: the running task sees the new total.
  HttpReply r = api_->http().Patch(path, {{"memory_mb", 8192}}, api_->admin());
  ASSERT_EQ(r.status, 200) << r.Describe();
  EXPECT_EQ(r.body["memory_mb"], 8192);
  EXPECT_EQ(r.body["warnings"], json::array()) << r.raw;
  std::vector<std::int64_t> totals;
  ASSERT_TRUE(WaitFor(
      [&] {
        totals = Totals(TaskLog(id));
        return !totals.empty() && totals.back() == 8192 * kMib;
      },
      kTimeout))
      << Describe(totals) << "\ntask log:\n"
      << TaskLog(id) << Logs();
  EXPECT_EQ(totals.front(), 4096 * kMib) << Describe(totals);
  // Never the card's size.
  for (std::int64_t total : totals) {
    EXPECT_NE(total, card_mb * kMib) << Describe(totals);
  }

  // The same process ran to its end: started once, never restarted.
  t = api_->WaitTask(
      id, user_,
      [](const json& x) {
        const std::string st = x.value("status", "");
        return st == "succeeded" || st == "failed" || st == "cancelled";
      },
      kTimeout);
  EXPECT_EQ(t["status"], "succeeded") << t.dump() << "\ntask log:\n"
                                      << TaskLog(id) << Logs();
  const std::string log = agent_->Log(1 << 20);
  const std::string started = "task " + std::to_string(id) + " started";
  EXPECT_NE(log.find(started), std::string::npos) << log;
  EXPECT_EQ(log.find(started), log.rfind(started)) << log;
  EXPECT_TRUE(agent_->LogContains("hook quota 4096 MiB -> 8192 MiB"))
      << agent_->Log();
  // The region is gone with the task; the slice keeps its history.
  EXPECT_TRUE(WaitFor([&] {
    return !fs::exists(agent_->state_dir() / "hook" /
                       ("slice-" + std::to_string(slice) + ".region"));
  })) << Logs();
}

}  // namespace
}  // namespace hf::e2e
