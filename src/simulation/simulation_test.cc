// The whole-system simulation in `make test`: random seeds under faults
// (at least 100,000 steps in all), and one scenario per hole the
// simulation found, each a regression test of its own.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "simulation/random_run.h"
#include "simulation/world.h"

namespace hf::simulation {
namespace {

std::filesystem::path Scratch(const std::string& name) {
  std::error_code ec;
  const std::filesystem::path root =
      std::filesystem::is_directory("/dev/shm", ec)
          ? std::filesystem::path("/dev/shm")
          : std::filesystem::temp_directory_path();
  return root / ("hf-simulation-test-" + std::to_string(getpid()) + "-" + name);
}

std::string Report(const RandomRunResult& r, std::uint64_t seed,
                   std::int64_t steps) {
  std::string out = "seed " + std::to_string(seed) + " failed at step " +
                    std::to_string(r.violation_step) + ": " + r.violation +
                    "\n  replay: hf-simulate --seed " + std::to_string(seed) +
                    " --steps " + std::to_string(steps) + " --until " +
                    std::to_string(r.violation_step) + "\n";
  for (const std::string& line : r.trace) out += "    " + line + "\n";
  return out;
}

class SimulationTest : public ::testing::Test {
 protected:
  void SetUp() override { spdlog::set_level(spdlog::level::off); }
};

// Seeds 1..kSeeds under faults, two at a time: at least 100,000 steps.
TEST_F(SimulationTest, RandomSeedsUnderFaultsKeepEveryInvariant) {
  constexpr int kSeeds = 12;
  constexpr std::int64_t kSteps = 4'200;
  std::atomic<int> next{0};
  std::atomic<std::int64_t> steps{0};
  std::mutex mu;
  std::vector<std::string> failures;
  const auto worker = [&] {
    for (int i = next.fetch_add(1); i < kSeeds; i = next.fetch_add(1)) {
      RandomRunOptions o;
      o.seed = static_cast<std::uint64_t>(i + 1);
      o.steps = kSteps;
      o.dir = Scratch("seed-" + std::to_string(o.seed));
      const RandomRunResult r = RunRandom(o);
      steps.fetch_add(r.steps);
      if (!r.ok) {
        std::lock_guard lock(mu);
        failures.push_back(Report(r, o.seed, kSteps));
      }
    }
  };
  std::thread a(worker);
  std::thread b(worker);
  a.join();
  b.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_GE(steps.load(), 100'000);
  std::printf("simulated %lld steps over %d seeds\n",
              static_cast<long long>(steps.load()), kSeeds);
}

// ------------------------------------------------------------ scenarios
// One per hole the simulation found (or was built to find): each stages the
// faults that open it and checks the invariants throughout.

class ScenarioTest : public SimulationTest {
 protected:
  std::unique_ptr<World> MakeWorld(const std::string& name,
                                   WorldOptions o = {}) {
    o.seed = 7;
    o.dir = Scratch(name);
    auto w = World::Create(o);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? std::move(*w) : nullptr;
  }

  // Steps one second at a time until `done` or `max_ms`; false on timeout.
  // A violation fails the test.
  static bool RunUntil(World& w, const std::function<bool()>& done,
                       std::int64_t max_ms) {
    for (std::int64_t t = 0; t < max_ms; t += 1'000) {
      if (done()) return true;
      if (auto v = w.RunFor(1'000)) {
        ADD_FAILURE() << *v << "\n" << Joined(w.Trace());
        return false;
      }
    }
    return done();
  }

  static std::string Joined(const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& l : lines) out += "  " + l + "\n";
    return out;
  }

  static bool Running(World& w, int node, std::int64_t task) {
    const auto& tasks = w.host(node).tasks();
    auto it = tasks.find(task);
    return it != tasks.end() && it->second.running();
  }

  static std::optional<store::TaskRow> Task(World& w, std::int64_t id) {
    for (store::TaskRow& t : w.Tasks()) {
      if (t.id == id) return t;
    }
    return std::nullopt;
  }

  static std::vector<store::SliceRequestRow> Commands(World& w) {
    std::vector<store::SliceRequestRow> out;
    (void)w.store()->Read([&](store::Txn& txn) -> Status {
      store::SliceRequestFilter f;
      f.limit = 1000;
      auto rows = txn.ListSliceRequests(f);
      if (rows.ok()) out = *rows;
      return Status::Ok();
    });
    return out;
  }

  // The first 1,000 history entries.
  static std::vector<store::HistoryRow> History(World& w) {
    std::vector<store::HistoryRow> out;
    (void)w.store()->Read([&](store::Txn& txn) -> Status {
      store::HistoryFilter f;
      f.limit = 1000;
      auto rows = txn.ListHistory(f);
      if (rows.ok()) out = *rows;
      return Status::Ok();
    });
    return out;
  }

  static int MigDevices(World& w, int node) {
    int n = 0;
    for (const auto& [g, d] : w.driver(node).AllMigDevices()) {
      n += static_cast<int>(d.size());
    }
    return n;
  }

  static TaskShape Slice(const std::string& tenant, std::int64_t mib,
                         std::int64_t duration_ms = 30 * 60'000) {
    TaskShape s;
    s.tenant = tenant;
    s.memory_mib = mib;
    s.duration_ms = duration_ms;
    return s;
  }
};

// Hole: a cancel while the task is `scheduled` released its slice at once,
// though the node had started it (its "running" report was still on the
// way); the memory was handed out again while the process held it.
TEST_F(ScenarioTest, CancelOfAScheduledTaskKeepsItsMemoryUntilTheNodeStopsIt) {
  auto w = MakeWorld("cancel-scheduled");
  ASSERT_TRUE(w);
  const int n = *w->AddNode(NodeKind::kBronze);  // two 15 GB T4s
  w->SetNetworkFaults(n, NetworkFaults{.drop_request = 1.0,
                                       .only_paths_containing = "task-states"});
  const auto id = w->CreateTask(Slice("t2", 12288));
  ASSERT_TRUE(id);
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Running(*w, n, *id); }, 30'000));
  EXPECT_EQ(Task(*w, *id)->state, store::TaskState::kScheduled);
  ASSERT_TRUE(w->CancelTask(*id, "t2"));
  // Two more of the same size: one per GPU is all that fits.
  ASSERT_TRUE(w->CreateTask(Slice("t2", 12288)));
  ASSERT_TRUE(w->CreateTask(Slice("t2", 12288)));
  EXPECT_FALSE(RunUntil(
      *w, [] { return false; }, 30'000));  // no violation
  w->SetNetworkFaults(n, NetworkFaults{});
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Task(*w, *id)->state == store::TaskState::kCancelled; },
      30'000));
  EXPECT_FALSE(Running(*w, n, *id));
}

// Hole: an admin DELETE of a scheduled task's slice put the task back to
// pending at once; the node that had started it kept it running on the old
// GPU while it was bound again.
TEST_F(ScenarioTest, DeletingAScheduledTasksSliceRebindsItOnlyOnceStopped) {
  auto w = MakeWorld("delete-scheduled");
  ASSERT_TRUE(w);
  const int n = *w->AddNode(NodeKind::kBronze);
  w->SetNetworkFaults(n, NetworkFaults{.drop_request = 1.0,
                                       .only_paths_containing = "task-states"});
  const auto id = w->CreateTask(Slice("t2", 12288));
  ASSERT_TRUE(id);
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Running(*w, n, *id); }, 30'000));
  const auto task = Task(*w, *id);
  ASSERT_TRUE(task && task->slice_id);
  const std::int64_t first_slice = *task->slice_id;
  ASSERT_TRUE(w->DeleteSlice(first_slice));
  ASSERT_TRUE(w->CreateTask(Slice("t2", 12288)));
  EXPECT_FALSE(RunUntil(
      *w, [] { return false; }, 30'000));  // no violation
  w->SetNetworkFaults(n, NetworkFaults{});
  // Stopped, then bound again with a new slice, and running once more.
  ASSERT_TRUE(RunUntil(
      *w,
      [&] {
        auto t = Task(*w, *id);
        return t && t->slice_id && *t->slice_id != first_slice &&
               Running(*w, n, *id);
      },
      60'000));
}

// Hole (found): a delayed report of an earlier binding (its slice was
// deleted, and the task was bound again) was applied to the new binding,
// ending the task while its new process ran.
TEST_F(ScenarioTest, ADelayedReportOfAnEarlierBindingIsIgnored) {
  auto w = MakeWorld("stale-report");
  ASSERT_TRUE(w);
  const int n = *w->AddNode(NodeKind::kBronze);
  // Its "running" does not get through: still `scheduled` at the server,
  // so an admin may delete its slice.
  w->SetNetworkFaults(n, NetworkFaults{.drop_request = 1.0,
                                       .only_paths_containing = "task-states"});
  const auto id = w->CreateTask(Slice("t2", 4096));
  ASSERT_TRUE(id);
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Running(*w, n, *id); }, 30'000));
  const auto task = Task(*w, *id);
  ASSERT_TRUE(task && task->slice_id);
  const std::int64_t first_slice = *task->slice_id;
  ASSERT_TRUE(w->DeleteSlice(first_slice));
  // Every report about the first binding now arrives late; the agent,
  // timed out, sends it again each cycle, each copy late too.
  w->SetNetworkFaults(
      n, NetworkFaults{.delay = 1.0, .only_paths_containing = "task-states"});
  ASSERT_TRUE(RunUntil(
      *w,
      [&] {
        auto t = Task(*w, *id);
        return t && t->slice_id != first_slice;
      },
      60'000));
  w->SetNetworkFaults(n, NetworkFaults{});
  // Bound again and running, while copies of the old report still land.
  ASSERT_TRUE(RunUntil(
      *w,
      [&] {
        auto t = Task(*w, *id);
        return t && t->slice_id && *t->slice_id != first_slice &&
               Running(*w, n, *id);
      },
      60'000));
  EXPECT_FALSE(RunUntil(
      *w, [] { return false; }, 30'000));  // no violation
  const auto now = Task(*w, *id);
  ASSERT_TRUE(now);
  EXPECT_EQ(now->state, store::TaskState::kRunning);
  EXPECT_TRUE(Running(*w, n, *id));
}

// Hole: the agent wrote down the MIG command it claimed, not what came of
// it, so a lost reply to its report made it create a second partition.
TEST_F(ScenarioTest, ALostReplyToAMigCreateReportMakesNoSecondPartition) {
  auto w = MakeWorld("mig-create-once");
  ASSERT_TRUE(w);
  const int n = *w->AddNode(NodeKind::kMig);  // H100 in MIG, A100 80 GB
  w->SetNetworkFaults(
      n, NetworkFaults{.drop_reply = 1.0, .only_paths_containing = "/result"});
  // Best-Fit takes the H100 (the fuller card): a 2g.20gb, of which three
  // more would fit beside it.
  const auto id = w->CreateTask(Slice("t2", 20000));
  ASSERT_TRUE(id);
  EXPECT_FALSE(RunUntil(
      *w, [] { return false; }, 25'000));
  EXPECT_EQ(MigDevices(*w, n), 1);
  w->SetNetworkFaults(n, NetworkFaults{});
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Running(*w, n, *id); }, 60'000));
  EXPECT_EQ(MigDevices(*w, n), 1);
}

// The agent dies after the driver made a partition and before it wrote
// the outcome down: the agent that comes back finds that partition (it was
// not there before the create) instead of making a second one.
TEST_F(ScenarioTest, AnAgentThatDiedInsideAMigCreateFindsThePartitionItMade) {
  auto w = MakeWorld("mig-create-crash");
  ASSERT_TRUE(w);
  const int n = *w->AddNode(NodeKind::kMig);
  w->SetNetworkFaults(n, NetworkFaults{.drop_request = 1.0,
                                       .only_paths_containing = "/result"});
  const auto id = w->CreateTask(Slice("t2", 20000));
  ASSERT_TRUE(id);
  ASSERT_TRUE(RunUntil(
      *w, [&] { return MigDevices(*w, n) == 1; }, 30'000));
  w->CrashAgent(n, 3'000);
  // What the state file holds had it died inside the driver call.
  const std::filesystem::path state =
      Scratch("mig-create-crash") / "n0" / "agent" / "mig-commands.json";
  std::ifstream in(state);
  nlohmann::json saved = nlohmann::json::parse(in);
  in.close();
  ASSERT_EQ(saved["commands"].size(), 1u);
  saved["commands"][0]["outcome"] = nullptr;
  saved["commands"][0]["executing"] = true;
  saved["partitions"] = nlohmann::json::object();
  std::ofstream(state) << saved.dump();
  w->SetNetworkFaults(n, NetworkFaults{});
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Running(*w, n, *id); }, 60'000));
  EXPECT_EQ(MigDevices(*w, n), 1);
}

// Holes: a create whose result came after its deadline was taken as
// created and never destroyed (an orphan partition), and a gold task whose
// create was stuck waited `scheduled` for ever.
TEST_F(ScenarioTest, AStuckMigCreateRebindsItsTaskAndALateResultIsDestroyed) {
  auto w = MakeWorld("mig-late");
  ASSERT_TRUE(w);
  const int a = *w->AddNode(NodeKind::kMixed);
  const int b = *w->AddNode(NodeKind::kMixed);
  // The first node's reports do not get through for longer than the
  // deadline (60 s).
  for (int node : {a, b}) {
    w->SetNetworkFaults(
        node,
        NetworkFaults{.drop_request = 1.0, .only_paths_containing = "/result"});
  }
  const auto id = w->CreateTask(Slice("t2", 40960, 5 * 60'000));
  ASSERT_TRUE(id);
  ASSERT_TRUE(RunUntil(
      *w, [&] { return MigDevices(*w, a) + MigDevices(*w, b) == 1; }, 30'000));
  const int made_on = MigDevices(*w, a) == 1 ? a : b;
  w->SetNetworkFaults(made_on == a ? b : a, NetworkFaults{});
  // The task is bound again and runs on the other node...
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Running(*w, made_on == a ? b : a, *id); }, 180'000));
  // ...and once the first node's late report gets through, its partition
  // is destroyed.
  w->SetNetworkFaults(made_on, NetworkFaults{});
  ASSERT_TRUE(RunUntil(
      *w, [&] { return MigDevices(*w, made_on) == 0; }, 120'000));
  ASSERT_TRUE(RunUntil(
      *w, [&] { return !w->CheckSettled(); }, 30 * 60'000))
      << *w->CheckSettled();
}

// Hole: a create the agent claimed but never heard of (the claim's reply
// was lost, or it died before writing it down) was never offered again.
TEST_F(ScenarioTest, AClaimWhoseReplyWasLostIsOfferedAgain) {
  auto w = MakeWorld("mig-reoffer");
  ASSERT_TRUE(w);
  const int n = *w->AddNode(NodeKind::kMixed);
  w->SetNetworkFaults(
      n, NetworkFaults{.drop_reply = 1.0, .only_paths_containing = "/claim"});
  const auto id = w->CreateTask(Slice("t2", 40960));
  ASSERT_TRUE(id);
  ASSERT_TRUE(RunUntil(
      *w,
      [&] {
        auto c = Commands(*w);
        return !c.empty() && c[0].state == store::SliceRequestState::kClaimed;
      },
      20'000));
  w->SetNetworkFaults(n, NetworkFaults{});
  // Well before the 60 s deadline.
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Running(*w, n, *id); }, 30'000));
  EXPECT_EQ(Commands(*w)[0].state, store::SliceRequestState::kDone);
}

// Hole: partitions no slice owns still took MIG placements the scheduler
// believed free: it kept binding gold work there, and every create failed.
TEST_F(ScenarioTest, APartitionNobodyOwnsTakesNoGoldWorkUntilItIsGone) {
  auto w = MakeWorld("mig-orphan-blocks");
  ASSERT_TRUE(w);
  const int n = *w->AddNode(NodeKind::kMixed);
  auto orphan = w->driver(n).CreateMigDevice(1, "7g.80gb", std::nullopt);
  ASSERT_TRUE(orphan.ok()) << orphan.status().ToString();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->CreateTask(Slice("t2", 40960)));
  EXPECT_FALSE(RunUntil(
      *w, [] { return false; }, 5 * 60'000));
  int failed = 0;
  for (const auto& c : Commands(*w)) {
    failed += c.state == store::SliceRequestState::kFailed;
  }
  EXPECT_LE(failed, 1);
  // Gone: the gold work goes there.
  ASSERT_TRUE(w->driver(n).DestroyMigDevice(1, orphan->gpu_instance_id).ok());
  ASSERT_TRUE(RunUntil(
      *w, [&] { return MigDevices(*w, n) >= 1; }, 6 * 60'000));
}

// Hole: a gold slice took the MIG profile named for its size (3g.40gb for
// 40,960 MB) though the partition holds less (40,779 MB on an H100): the
// task held more than its slice was charged.
TEST_F(ScenarioTest, AGoldSliceIsChargedAtLeastWhatItsTaskHolds) {
  auto w = MakeWorld("mig-charge");
  ASSERT_TRUE(w);
  // V100 32 GB (too small for it) and an H100 in MIG mode.
  const int n = *w->AddNode(NodeKind::kMixed);
  const auto id = w->CreateTask(Slice("t1", 40960));
  ASSERT_TRUE(id);
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Running(*w, n, *id); }, 120'000));
  EXPECT_EQ(MigDevices(*w, n), 1);
}

// Hole: MIG_PARTITION_ORPHANED notes lived in the server's memory only, so
// every restart noted the same orphan again.
TEST_F(ScenarioTest, AnOrphanIsNotedOnceAcrossRestarts) {
  auto w = MakeWorld("mig-orphan-once");
  ASSERT_TRUE(w);
  const int n = *w->AddNode(NodeKind::kMixed);
  ASSERT_TRUE(w->driver(n).CreateMigDevice(1, "1g.10gb", std::nullopt).ok());
  EXPECT_FALSE(RunUntil(
      *w, [] { return false; }, 20'000));
  for (int i = 0; i < 3; ++i) {
    w->CrashServer(2'000);
    EXPECT_FALSE(RunUntil(
        *w, [] { return false; }, 20'000));
  }
  int notes = 0;
  for (const auto& h : History(*w)) notes += h.op == "mig_orphaned";
  EXPECT_EQ(notes, 1);
}

// Found by the soak (seed 40172): a heartbeat delivered late was applied
// over newer ones. It listed a partition that had been destroyed since, so
// the orphan, its note already dropped, was noted a second time; its GPU
// facts and running tasks were as out of date.
TEST_F(ScenarioTest, AHeartbeatDeliveredLateIsNotAppliedOverANewerOne) {
  auto w = MakeWorld("late-heartbeat");
  ASSERT_TRUE(w);
  const int n = *w->AddNode(NodeKind::kMixed);
  EXPECT_FALSE(RunUntil(
      *w, [] { return false; }, 10'000));
  std::set<std::string> orphans;
  for (int round = 0; round < 6; ++round) {
    auto made = w->driver(n).CreateMigDevice(1, "1g.10gb", std::nullopt);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    orphans.insert(made->device_uuid);
    EXPECT_FALSE(RunUntil(
        *w, [] { return false; }, 15'000));  // noted
    // The next heartbeat, which lists it, arrives 1-20 s late; the
    // partition is gone before it lands, and the heartbeats after it say so.
    const auto delayed = w->counters().delayed;
    w->SetNetworkFaults(
        n, NetworkFaults{.delay = 1.0, .only_paths_containing = "heartbeat"});
    ASSERT_TRUE(RunUntil(
        *w, [&] { return w->counters().delayed > delayed; }, 10'000));
    w->SetNetworkFaults(n, NetworkFaults{});
    ASSERT_TRUE(w->driver(n).DestroyMigDevice(1, made->gpu_instance_id).ok());
    EXPECT_FALSE(RunUntil(
        *w, [] { return false; }, 30'000));
  }
  std::map<std::string, int> notes;
  for (const auto& h : History(*w)) {
    if (h.op != "mig_orphaned") continue;
    for (const std::string& d : orphans) {
      notes[d] += h.reason.find(d) != std::string::npos;
    }
  }
  for (const std::string& d : orphans) EXPECT_EQ(notes[d], 1) << d;
}

// The agent syncs with the server's desired state: a task the server no
// longer assigns to the node (here: cancelled, and the node declared lost
// while cut off) is stopped as soon as the node can talk again.
TEST_F(ScenarioTest, ANodeBackFromBeingLostStopsWhatTheServerNoLongerAssigns) {
  WorldOptions o;
  o.node_lost_ms = 60'000;
  o.check_every_step = false;  // the node-lost release is the accepted risk
  auto w = MakeWorld("reconcile", o);
  ASSERT_TRUE(w);
  const int n = *w->AddNode(NodeKind::kBronze);
  const auto id = w->CreateTask(Slice("t2", 4096));
  ASSERT_TRUE(id);
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Running(*w, n, *id); }, 30'000));
  w->Partition(n, 150'000);
  ASSERT_TRUE(w->CancelTask(*id, "t2"));
  ASSERT_TRUE(RunUntil(
      *w, [&] { return Task(*w, *id)->state == store::TaskState::kCancelled; },
      140'000));
  EXPECT_TRUE(Running(*w, n, *id));  // cut off: it cannot know yet
  // Back (the partition ends 150 s in): its next cycle stops the task.
  ASSERT_TRUE(RunUntil(
      *w, [&] { return !Running(*w, n, *id); }, 90'000));
  EXPECT_FALSE(w->CheckInvariants());
}

}  // namespace
}  // namespace hf::simulation
