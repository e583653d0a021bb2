// The crash test (issue 4): clients stream task creations and cancellations
// (which release slices) at the real hf-server while its scheduler binds;
// the server is killed with SIGKILL mid-stream, restarted on the same
// database, and then:
//   - every creation the server acknowledged (201) is there, unchanged;
//   - every cancellation it acknowledged is still cancelled, its slice
//     released;
//   - no GPU is oversold (memory and compute within the GPU);
//   - the ledger equals the store: per GPU, what /slices/stats accounts
//     (the rebuilt ledger) is exactly the sum of the live slices in
//     /slices (the store), and every bound task has its live slice.
// Three kill/restart rounds run on one database.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/server_harness.h"

namespace hf::e2e {
namespace {

struct Acked {
  std::int64_t id = 0;
  std::string name;
  std::int64_t memory_mb = 0;
};

class CrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(
        ServerOptions{.flags = {"--gc-interval", "1", "--gc-min-age", "0"}});
    ASSERT_TRUE(server_->Start());
  }

  // Streams creations and cancellations for `duration`, then SIGKILLs the
  // server while the streams still run.
  void StreamAndKill(const std::string& token, std::chrono::milliseconds run) {
    std::atomic<bool> stop{false};
    std::atomic<int> seq{0};
    std::vector<std::thread> threads;
    for (int w = 0; w < 4; ++w) {
      threads.emplace_back([&, w] {
        std::mt19937 rng(1234 + w + 17 * round_);
        const HttpClient http = server_->client();
        while (!stop.load()) {
          const int n = seq.fetch_add(1);
          Acked a;
          a.name = "crash-" + std::to_string(round_) + "-" + std::to_string(n);
          a.memory_mb = 512 * (1 + static_cast<int>(rng() % 16));
          const HttpReply r = http.Post("/api/v1/tasks",
                                        {{"name", a.name},
                                         {"gpu_memory_mb", a.memory_mb},
                                         {"gpu_compute_ratio", 0.05}},
                                        token);
          if (r.status != 201) continue;  // not acknowledged
          a.id = r.body.at("id").get<std::int64_t>();
          std::lock_guard lock(mu_);
          created_.push_back(a);
        }
      });
    }
    threads.emplace_back([&] {
      std::mt19937 rng(99 + round_);
      const HttpClient http = server_->client();
      while (!stop.load()) {
        std::int64_t id = 0;
        {
          std::lock_guard lock(mu_);
          if (created_.size() > 10) id = created_[rng() % created_.size()].id;
        }
        if (id == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          continue;
        }
        const HttpReply r =
            http.Post("/api/v1/tasks/" + std::to_string(id) + "/cancel",
                      json::object(), token);
        if (r.status == 200 && r.body.value("status", "") == "cancelled") {
          std::lock_guard lock(mu_);
          cancelled_.insert(id);
        }
      }
    });
    std::this_thread::sleep_for(run);
    ASSERT_TRUE(server_->Kill());  // mid-stream: requests are in flight
    stop = true;
    for (std::thread& t : threads) t.join();
    ++round_;
  }

  void Verify(const Api& api, const std::string& token) {
    const std::string& admin = api.admin();
    // Nothing acknowledged was lost.
    std::vector<Acked> created;
    std::set<std::int64_t> cancelled;
    {
      std::lock_guard lock(mu_);
      created = created_;
      cancelled = cancelled_;
    }
    ASSERT_FALSE(created.empty()) << "the stream never got an answer";
    std::map<std::int64_t, json> tasks;
    for (const json& t : api.ListAll("/api/v1/tasks?limit=1000", token)) {
      tasks[t.at("id").get<std::int64_t>()] = t;
    }
    for (const Acked& a : created) {
      auto it = tasks.find(a.id);
      ASSERT_NE(it, tasks.end()) << "acknowledged task " << a.id << " lost";
      EXPECT_EQ(it->second.at("name"), a.name);
      EXPECT_EQ(it->second.at("gpu_memory_mb"), a.memory_mb);
    }
    for (std::int64_t id : cancelled) {
      EXPECT_EQ(tasks.at(id).at("status"), "cancelled")
          << "acknowledged cancel of task " << id << " lost";
    }

    // The ledger (stats) equals the store (live slices), and nothing is
    // oversold.
    std::map<std::pair<std::string, int>, std::pair<std::int64_t, int>> sums;
    std::set<std::int64_t> live_ids;
    std::map<std::int64_t, std::int64_t> slice_of_task;
    for (const json& s : api.ListAll("/api/v1/slices?limit=1000", admin)) {
      const auto key = std::make_pair(s.at("node_id").get<std::string>(),
                                      s.at("gpu_index").get<int>());
      sums[key].first += s.at("memory_mb").get<std::int64_t>();
      sums[key].second += s.at("compute_percent").get<int>();
      EXPECT_TRUE(live_ids.insert(s.at("id").get<std::int64_t>()).second);
      if (!s.at("task_id").is_null()) {
        const std::int64_t task = s.at("task_id").get<std::int64_t>();
        EXPECT_FALSE(slice_of_task.contains(task))
            << "task " << task << " holds two live slices";
        slice_of_task[task] = s.at("id").get<std::int64_t>();
        EXPECT_FALSE(cancelled.contains(task))
            << "cancelled task " << task << " still holds a slice";
      }
    }
    const HttpReply stats = api.http().Get("/api/v1/slices/stats", admin);
    ASSERT_EQ(stats.status, 200) << stats.Describe();
    for (const json& g : stats.body.at("gpus")) {
      const auto key = std::make_pair(g.at("node_id").get<std::string>(),
                                      g.at("gpu_index").get<int>());
      const std::int64_t accounted = g.at("accounted_memory_mb");
      const int compute = g.at("accounted_compute_percent");
      EXPECT_LE(accounted, g.at("total_memory_mb").get<std::int64_t>());
      EXPECT_LE(compute, 100);
      EXPECT_EQ(accounted, sums[key].first) << "GPU " << key.second;
      EXPECT_EQ(compute, sums[key].second) << "GPU " << key.second;
    }
    EXPECT_EQ(stats.body.at("totals").at("live_slices").get<std::size_t>(),
              live_ids.size());
    for (const auto& [id, t] : tasks) {
      const std::string status = t.at("status");
      if (status == "scheduled" || status == "running") {
        ASSERT_FALSE(t.at("slice_id").is_null());
        EXPECT_EQ(slice_of_task[id], t.at("slice_id").get<std::int64_t>())
            << "bound task " << id << " without its live slice";
      }
    }
  }

  std::unique_ptr<ServerProcess> server_;
  std::mutex mu_;
  std::vector<Acked> created_;        // GUARDED_BY(mu_)
  std::set<std::int64_t> cancelled_;  // GUARDED_BY(mu_)
  int round_ = 0;
};

TEST_F(CrashTest, SigkillLosesNothingAcknowledgedAndOversellsNothing) {
  std::string token;
  {
    const Api api(*server_);
    const std::string tenant = api.NewTenant("crash");
    token = api.CreateToken("user", tenant);
    SimNode node(api, "crash-node",
                 {SimGpu{.index = 0}, SimGpu{.index = 1},
                  SimGpu{.index = 2, .memory_mb = 40960},
                  SimGpu{.index = 3, .memory_mb = 24576}});
    ASSERT_TRUE(node.Register());
  }
  for (int round = 0; round < 3; ++round) {
    StreamAndKill(token, std::chrono::milliseconds(1500 + 300 * round));
    ASSERT_TRUE(server_->Start()) << server_->Log();
    const Api api(*server_);
    Verify(api, token);
    if (HasFatalFailure()) return;
    // Let the restarted scheduler bind what is pending, then check again.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Verify(api, token);
    if (HasFatalFailure()) return;
  }
  std::lock_guard lock(mu_);
  RecordProperty("acknowledged_creations", static_cast<int>(created_.size()));
  RecordProperty("acknowledged_cancels", static_cast<int>(cancelled_.size()));
  std::printf("acknowledged: %zu creations, %zu cancellations\n",
              created_.size(), cancelled_.size());
}

}  // namespace
}  // namespace hf::e2e
