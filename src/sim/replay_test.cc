// Tests for the time replay (replay.h) on tiny hand-made traces: departures
// free room, FIFO with backfill, waiting accounting (GPU-time, waits,
// samples), the defragmenter's evictions of preemptible tasks, and the MIG
// variant's charging (sim_cluster.h).
#include "sim/replay.h"

#include <gtest/gtest.h>

#include <random>

#include "scheduler/policy/best_fit.h"
#include "sim/experiment.h"
#include "sim/sim_cluster.h"

namespace hf::sim {
namespace {

TracePod Pod(const std::string& name, int num_gpu, int milli, CpuMilli cpu,
             std::int64_t created, std::int64_t deleted,
             const std::string& qos = "LS") {
  TracePod p;
  p.name = name;
  p.num_gpu = num_gpu;
  p.gpu_milli = milli;
  p.cpu_milli = cpu;
  p.memory_mib = 1024;
  p.creation_time = created;
  p.deletion_time = deleted;
  p.qos = qos;
  return p;
}

std::vector<TraceNode> OneGpu() { return {{"n0", 8000, 65536, 1, "G2"}}; }

TEST(ReplayTest, WaitsForADepartureAndBackfillsWhatFits) {
  // a holds the GPU 0..100; b (50 s of work) arrives at 10 and waits for
  // it; c, CPU-only, arrives at 20 behind b and starts at once (backfill).
  const std::vector<TracePod> pods = {Pod("a", 1, 1000, 1000, 0, 100),
                                      Pod("b", 1, 1000, 1000, 10, 60),
                                      Pod("c", 0, 0, 1000, 20, 30)};
  ReplayOptions o;
  o.sample_every_s = 50;
  auto r = RunReplay(OneGpu(), pods, "hf-frag", o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tasks, 3);
  EXPECT_EQ(r->started, 3);
  EXPECT_EQ(r->never_started, 0);
  // b waited 90 s for one GPU: 90 GPU-seconds.
  EXPECT_NEAR(r->waiting_gpu_hours, 90.0 / 3600, 1e-9);
  // a ran 100 s, b 50 s (from 100 to 150): 150 GPU-seconds.
  EXPECT_NEAR(r->running_gpu_hours, 150.0 / 3600, 1e-9);
  EXPECT_NEAR(r->waiting_share_pct, 100.0 * 90 / 240, 1e-9);
  EXPECT_EQ(r->wait_median_s, 0);  // a and c never waited
  EXPECT_EQ(r->wait_p99_s, 90);
  // At 50: a runs, b waits.
  bool seen = false;
  for (const ReplaySample& s : r->samples) {
    if (s.time != 50) continue;
    seen = true;
    EXPECT_EQ(s.waiting_tasks, 1);
    EXPECT_EQ(s.running_milli, 1000);
    EXPECT_EQ(s.waiting_milli, 1000);
    EXPECT_DOUBLE_EQ(s.allocation_pct, 100);
    EXPECT_DOUBLE_EQ(s.waiting_share_pct, 50);
  }
  EXPECT_TRUE(seen);
}

TEST(ReplayTest, TasksThatNeverFitAreLeftOutAndCounted) {
  const std::vector<TracePod> pods = {Pod("a", 1, 1000, 1000, 0, 100),
                                      Pod("huge", 2, 1000, 1000, 5, 50)};
  auto r = RunReplay(OneGpu(), pods, "fgd", {}, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tasks, 1);
  EXPECT_EQ(r->never_fit, 1);
  EXPECT_EQ(r->waiting_gpu_hours, 0);
}

TEST(ReplayTest, RejectsATraceWithoutTimes) {
  TracePod p = Pod("a", 1, 1000, 1000, 0, -1);
  auto r = RunReplay(OneGpu(), {p}, "fgd", {}, nullptr);
  EXPECT_FALSE(r.ok());
}

// Two 1-GPU nodes, each holding a 600-milli slice: x is BE, y is LS. A
// whole-GPU task z then fits nowhere; the defragmenter evicts x (never y)
// and z starts at once; x waits until z leaves its GPU.
std::vector<TracePod> Fragmented() {
  return {Pod("x", 1, 600, 1000, 0, 1000, "BE"),
          Pod("y", 1, 600, 1000, 1, 500, "LS"),
          Pod("z", 1, 1000, 1000, 10, 110, "LS")};
}
std::vector<TraceNode> TwoGpus() {
  return {{"n0", 8000, 65536, 1, "G2"}, {"n1", 8000, 65536, 1, "G2"}};
}

TEST(ReplayTest, DefragmenterEvictsAPreemptibleTaskSoAWaitingOneFits) {
  SimpleDefragmenter defrag(/*evictions_per_100=*/100);
  auto with = RunReplay(TwoGpus(), Fragmented(), "hf-frag", {}, &defrag);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ(with->evictions, 1);
  EXPECT_EQ(with->never_started, 0);
  // z never waited; x (600 milli) waited from 10 until z left at 110.
  EXPECT_NEAR(with->waiting_gpu_hours, 0.6 * 100 / 3600, 1e-9);

  auto without = RunReplay(TwoGpus(), Fragmented(), "hf-frag", {}, nullptr);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->evictions, 0);
  // z waits from 10 until y leaves at 500.
  EXPECT_NEAR(without->waiting_gpu_hours, 490.0 / 3600, 1e-9);

  // BE not preemptible: nothing to evict.
  ReplayOptions keep;
  keep.be_preemptible = false;
  auto none = RunReplay(TwoGpus(), Fragmented(), "hf-frag", keep, &defrag);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->evictions, 0);
  EXPECT_NEAR(none->waiting_gpu_hours, 490.0 / 3600, 1e-9);
}

TEST(ReplayTest, DefragmenterKeepsToItsEvictionBudget) {
  SimpleDefragmenter defrag(/*evictions_per_100=*/1);  // 3 tasks: 0 allowed
  auto r = RunReplay(TwoGpus(), Fragmented(), "hf-frag", {}, &defrag);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->evictions, 0);
}

// The moving defragmenter evicts x only where x lands again at once: in
// Fragmented(), x could only wait (the other GPU has 400 milli free), so it
// moves nothing where SimpleDefragmenter evicts.
TEST(ReplayTest, MovingDefragmenterMovesOnlyWhatLandsAtOnce) {
  MovingDefragmenter moves(/*evictions_per_100=*/100);
  auto stuck = RunReplay(TwoGpus(), Fragmented(), "hf-frag", {}, &moves);
  ASSERT_TRUE(stuck.ok());
  EXPECT_EQ(stuck->evictions, 0) << "x could not land again at once";
  EXPECT_NEAR(stuck->waiting_gpu_hours, 490.0 / 3600, 1e-9);
  // Waiting by shape: all of it is z's, a whole GPU.
  EXPECT_NEAR(stuck->waiting_gpu_hours_by_shape.at("1 gpus"), 490.0 / 3600,
              1e-9);
  // Idle GPU never covered z (400 + 400 milli free, z asks 1000).
  EXPECT_NEAR(stuck->waiting_with_idle_gpu_hours, 0, 1e-9);
}

// Two 1-GPU nodes of 8 cores, a G2 and a T4. f (T4) holds the T4 node's CPU
// while c, a preemptible CPU-only task of 6 cores, arrives: c goes to the G2
// node. f leaves and y takes the T4 GPU and 1 core. z (the G2 GPU and 4
// cores) then fits nowhere: the G2 GPU is idle but c holds its node's CPU.
// Moving c to the T4 node (7 cores free) lets z start.
TracePod Pinned(TracePod p, const std::string& model) {
  p.gpu_spec = {model};
  return p;
}
std::vector<TracePod> CpuBlocked() {
  return {Pinned(Pod("f", 1, 1000, 7000, 0, 5), "T4"),
          Pod("c", 0, 0, 6000, 1, 501, "BE"),
          Pinned(Pod("y", 1, 1000, 1000, 6, 400), "T4"),
          Pinned(Pod("z", 1, 1000, 4000, 10, 110), "G2")};
}
std::vector<TraceNode> G2AndT4() {
  return {{"n0", 8000, 65536, 1, "G2"}, {"n1", 8000, 65536, 1, "T4"}};
}

TEST(ReplayTest, ConsolidatorMovesACpuOnlyTaskSoAWaitingTaskStarts) {
  auto without = RunReplay(G2AndT4(), CpuBlocked(), "hf-frag", {}, nullptr);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  // The premise: z waits (until c leaves at 501) while a GPU is idle, and
  // only c's CPU stands in the way.
  EXPECT_NEAR(without->waiting_gpu_hours, 491.0 / 3600, 1e-9);
  EXPECT_NEAR(without->waiting_with_idle_gpu_hours, 491.0 / 3600, 1e-9);
  EXPECT_NEAR(without->waiting_evictable_gpu_hours, 491.0 / 3600, 1e-9);

  ConsolidatingDefragmenter consolidate(/*evictions_per_100=*/100);
  auto with = RunReplay(G2AndT4(), CpuBlocked(), "hf-frag", {}, &consolidate);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(with->evictions, 1);
  EXPECT_EQ(with->evictions_requeued, 0) << "c must restart at once";
  EXPECT_EQ(with->never_started, 0);
  EXPECT_EQ(with->waiting_gpu_hours, 0) << "z starts on arrival";

  // The moving defragmenter frees only GPUs, so z waits.
  MovingDefragmenter moves(/*evictions_per_100=*/100);
  auto gpu_only = RunReplay(G2AndT4(), CpuBlocked(), "hf-frag", {}, &moves);
  ASSERT_TRUE(gpu_only.ok());
  EXPECT_NEAR(gpu_only->waiting_gpu_hours, 491.0 / 3600, 1e-9);

  // c not preemptible: nothing to move, and nothing was evictable.
  ReplayOptions keep;
  keep.be_preemptible = false;
  auto none = RunReplay(G2AndT4(), CpuBlocked(), "hf-frag", keep, &consolidate);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->evictions, 0);
  EXPECT_NEAR(none->waiting_gpu_hours, 491.0 / 3600, 1e-9);
  EXPECT_EQ(none->waiting_evictable_gpu_hours, 0);
}

TEST(ReplayTest, ConsolidatorKeepsToItsEvictionBudget) {
  ConsolidatingDefragmenter consolidate(/*evictions_per_100=*/1);  // 0 of 4
  auto r = RunReplay(G2AndT4(), CpuBlocked(), "hf-frag", {}, &consolidate);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->evictions, 0);
  EXPECT_NEAR(r->waiting_gpu_hours, 491.0 / 3600, 1e-9);
}

// The consolidator never moves a task it cannot land at once, where the
// simple defragmenter leaves its evictee waiting (and the count shows it).
TEST(ReplayTest, ConsolidatorOnlyMovesWhatLandsAtOnce) {
  ConsolidatingDefragmenter consolidate(/*evictions_per_100=*/100);
  auto stuck = RunReplay(TwoGpus(), Fragmented(), "hf-frag", {}, &consolidate);
  ASSERT_TRUE(stuck.ok());
  EXPECT_EQ(stuck->evictions, 0);
  EXPECT_NEAR(stuck->waiting_gpu_hours, 490.0 / 3600, 1e-9);

  SimpleDefragmenter simple(/*evictions_per_100=*/100);
  auto evicts = RunReplay(TwoGpus(), Fragmented(), "hf-frag", {}, &simple);
  ASSERT_TRUE(evicts.ok());
  EXPECT_EQ(evicts->evictions, 1);
  EXPECT_EQ(evicts->evictions_requeued, 1) << "x waited after its eviction";
}

// A busy random workload on a small cluster: whatever the consolidator
// moves lands at once, within the budget, and the waiting never grows.
std::vector<TracePod> Busy(std::uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  const auto pick = [&](int n) {
    return static_cast<int>(rng() % static_cast<std::uint64_t>(n));
  };
  std::vector<TracePod> pods;
  for (int i = 0; i < count; ++i) {
    const int shape = pick(10);
    const int gpus = shape < 4 ? 1 : shape < 6 ? 0 : shape < 8 ? 1 : 2;
    const int milli = shape < 4 ? 100 * (1 + pick(8)) : 1000;
    const std::int64_t start = i * 3 + pick(3);
    pods.push_back(Pod(std::to_string(i), gpus, gpus == 0 ? 0 : milli,
                       1000 * (1 + pick(6)), start, start + 20 + pick(200),
                       pick(2) == 0 ? "BE" : "LS"));
  }
  return pods;
}

TEST(ReplayTest, ConsolidatorMovesLandAtOnceWithinTheBudget) {
  const std::vector<TraceNode> nodes = {{"n0", 12000, 65536, 4, "G2"},
                                        {"n1", 12000, 65536, 4, "G2"},
                                        {"n2", 16000, 65536, 2, "T4"},
                                        {"n3", 8000, 65536, 2, "T4"}};
  std::int64_t moved = 0;
  for (const std::uint64_t seed : {1, 2, 3, 4}) {
    const std::vector<TracePod> pods = Busy(seed, 400);
    for (const double rate : {2.0, 100.0}) {
      ConsolidatingDefragmenter consolidate(rate);
      auto r = RunReplay(nodes, pods, "hf-frag", {}, &consolidate);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->evictions_requeued, 0) << "seed " << seed;
      EXPECT_EQ(r->never_started, 0) << "seed " << seed;
      EXPECT_LE(r->evictions, static_cast<std::int64_t>(r->tasks * rate / 100))
          << "seed " << seed;
      moved += r->evictions;
    }
  }
  EXPECT_GT(moved, 0) << "the workload should give the planner work";
}

// --- the MIG variant ---

SimMig A100Mig(std::vector<std::string> models,
               std::vector<std::string> plain) {
  SimMig mig;
  mig.models = std::move(models);
  mig.plain_models = std::move(plain);
  mig.table = gpu::MigTableByKey("A100-80GB");
  EXPECT_NE(mig.table, nullptr);
  return mig;
}

// One G3 GPU in MIG mode (the table of `mig`) placing trace tasks through
// ToMigRequest with Best-Fit.
class OneMigGpu {
 public:
  explicit OneMigGpu(SimMig mig) : mig_(std::move(mig)) {
    auto built = BuildSimLedger({{"mig", 64000, 262144, 1, "G3"}}, 7, mig_);
    EXPECT_TRUE(built.ok()) << built.status().ToString();
    if (built.ok()) ledger_ = std::move(built).value();
  }
  bool ok() const { return ledger_ != nullptr; }
  ledger::PlacementResult Place(int milli) {
    return ledger_->Place(*ToMigRequest(Pod("x", 1, milli, 1000, 0, 1), mig_),
                          policy_);
  }

 private:
  SimMig mig_;
  std::unique_ptr<ledger::Ledger> ledger_;
  scheduler::BestFitPolicy policy_;
};

// A whole-GPU task behind a stream of slices that keeps its only GPU busy:
// small tasks of 300 milli arrive every 10 s and run 25 s (never more than
// three at once, so the GPU is never empty while they come).
std::vector<TracePod> StarvingStream() {
  std::vector<TracePod> pods = {Pod("big", 1, 1000, 1000, 5, 15)};
  for (int i = 0; i < 30; ++i) {
    pods.push_back(
        Pod("s" + std::to_string(i), 1, 300, 100, 10 * i, 10 * i + 25));
  }
  return pods;
}

TEST(ReplayTest, WithoutHoldsAWholeGpuTaskWaitsForTheStreamToEnd) {
  auto r = RunReplay(OneGpu(), StarvingStream(), "hf-frag", {}, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->started, 31);
  EXPECT_EQ(r->holds, 0);
  // The last slice ends at 315; the big task arrived at 5.
  EXPECT_EQ(r->wait_max_s, 310);
}

TEST(ReplayTest, AHoldDrainsTheGpuForTheTaskThatWaitedLongest) {
  ReplayOptions o;
  o.hold_after_s = 20;
  auto r = RunReplay(OneGpu(), StarvingStream(), "hf-frag", o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->started, 31);
  // At 25 (a slice ended; the big task has waited 20 s) the GPU is held;
  // the slices that arrive at 30 and 40 wait, the two running end at 35
  // and 45, and the big task starts at 45: 40 s. The slices held back
  // wait less than that.
  EXPECT_EQ(r->holds, 1);
  EXPECT_EQ(r->holds_started, 1);
  EXPECT_EQ(r->wait_max_s, 40);
  // With the hold after longer than the stream lasts, none begins.
  o.hold_after_s = 400;
  r = RunReplay(OneGpu(), StarvingStream(), "hf-frag", o, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->holds, 0);
  EXPECT_EQ(r->wait_max_s, 310);
}

TEST(ReplayTest, HoldOptionsAreChecked) {
  ReplayOptions o;
  o.hold_after_s = -1;
  auto r = RunReplay(OneGpu(), StarvingStream(), "hf-frag", o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "hold_after_s");
  o.hold_after_s = 20;
  o.max_holds = 0;
  r = RunReplay(OneGpu(), StarvingStream(), "hf-frag", o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "max_holds");
  // A planner's snapshots know nothing of holds: not modelled together.
  o.max_holds = 1;
  SimpleDefragmenter defrag;
  r = RunReplay(OneGpu(), StarvingStream(), "hf-frag", o, &defrag);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("defragmenter"), std::string::npos);
}

TEST(MigVariantTest, TheLedgerChargesTheSmallestProfileThatCovers) {
  const SimMig mig = A100Mig({"G3"}, {"T4"});
  // The request is the task's own, on the MIG models only.
  auto small = ToMigRequest(Pod("s", 1, 100, 1000, 0, 1), mig);
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(small->memory_mib, 100 * kSimMibPerMilli);
  EXPECT_EQ(small->compute_percent, 10);
  EXPECT_EQ(small->allowed_models, std::vector<std::string>{"G3"});
  // Whole GPUs and other models: no MIG instance.
  EXPECT_FALSE(ToMigRequest(Pod("w", 1, 1000, 1000, 0, 1), mig).has_value());
  TracePod t4 = Pod("t", 1, 100, 1000, 0, 1);
  t4.gpu_spec = {"T4"};
  EXPECT_FALSE(ToMigRequest(t4, mig).has_value());
  // Out of MIG mode: only the other models.
  auto plain = ToPlainRequest(Pod("p", 1, 1000, 1000, 0, 1), mig);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->allowed_models, std::vector<std::string>{"T4"});
  TracePod g3 = Pod("g", 1, 1000, 1000, 0, 1);
  g3.gpu_spec = {"G3"};
  EXPECT_FALSE(ToPlainRequest(g3, mig).has_value());

  // The ledger, on a G3 in MIG mode with the A100-80GB table, charges each
  // the partition that covers it.
  OneMigGpu gpu(mig);
  ASSERT_TRUE(gpu.ok());
  // 100 milli: 6.4 GB and 10% -> 1g.10gb (1 of 8 memory slices, 14%).
  ledger::PlacementResult r = gpu.Place(100);
  ASSERT_TRUE(r.placed()) << r.message;
  EXPECT_EQ(r.allocation.mig_profile, "1g.10gb");
  EXPECT_EQ(r.allocation.memory_mib, kSimGpuMemoryMib / 8);
  EXPECT_EQ(r.allocation.compute_percent, 14);
  // 460 milli: 29.4 GB fits 3g.40gb, but 46% needs 4g.40gb (57%), whose one
  // placement (slots 0-3) the 1g.10gb at slot 0 blocks, as it blocks the
  // full card's 7g.80gb.
  r = gpu.Place(460);
  EXPECT_FALSE(r.placed()) << r.allocation.mig_profile;
  // 950 milli: above the ledger's 90% slice limit anywhere.
  EXPECT_FALSE(gpu.Place(950).placed());
  // On an empty card, a task above every partition short of the full card
  // (600 milli: 38.4 GB and 60%, more than a 4g.40gb) takes the 7g.80gb.
  OneMigGpu fresh(mig);
  ASSERT_TRUE(fresh.ok());
  const ledger::PlacementResult full = fresh.Place(600);
  ASSERT_TRUE(full.placed()) << full.message;
  EXPECT_EQ(full.allocation.mig_profile, "7g.80gb");
  EXPECT_EQ(full.allocation.memory_mib, kSimGpuMemoryMib);
}

// Placements, not only counts: five 1g.10gb partitions take slots 0-4, and
// a 250-milli task (a 2g.20gb: slots 0-1, 2-3 or 4-5; 3g and 4g overlap the
// taken slots too) finds none free, although 3 of the 8 memory slices and
// 30% of the compute are; a 100-milli task after it takes slot 5. (Charged
// by counts alone, the 250-milli task was placed.)
TEST(MigVariantTest, APartitionNeedsAFreePlacement) {
  OneMigGpu gpu(A100Mig({"G3"}, {}));
  ASSERT_TRUE(gpu.ok());
  for (int i = 0; i < 5; ++i) {
    const ledger::PlacementResult r = gpu.Place(100);
    ASSERT_TRUE(r.placed()) << r.message;
    EXPECT_EQ(r.allocation.mig_start, i);
  }
  const ledger::PlacementResult two = gpu.Place(250);
  EXPECT_FALSE(two.placed())
      << two.allocation.mig_profile << "@" << two.allocation.mig_start;
  EXPECT_NE(two.message.find("MIG"), std::string::npos) << two.message;
  const ledger::PlacementResult last = gpu.Place(100);
  ASSERT_TRUE(last.placed()) << last.message;
  EXPECT_EQ(last.allocation.mig_start, 5);
}

TEST(MigVariantTest, SharingTasksHoldTheirProfileOnMigGpus) {
  const std::vector<TraceNode> nodes = {{"mig", 64000, 262144, 1, "G3"},
                                        {"plain", 64000, 262144, 1, "T4"}};
  // Two 100-milli tasks: each holds a 1g.10gb (125 milli) on the MIG GPU;
  // a whole-GPU task takes the T4.
  const std::vector<TracePod> pods = {Pod("a", 1, 100, 1000, 0, 1),
                                      Pod("b", 1, 100, 1000, 0, 1),
                                      Pod("c", 1, 1000, 1000, 0, 1)};
  ExperimentOptions o;
  o.inflate = 0;  // exactly these tasks
  o.mig = A100Mig({"G3"}, {"T4"});
  std::vector<scheduler::TaskClass> classes;
  for (const TracePod& p : pods) classes.push_back(ToTaskClass(p));
  const auto workload = scheduler::TargetWorkload::FromTasks(classes, 1.0);
  for (const char* policy : {"fgd", "hf-frag", "bestfit"}) {
    auto run = RunSeed(nodes, pods, policy, 7, workload, o);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    EXPECT_EQ(run->placed, 3) << policy;
    EXPECT_EQ(run->samples.back().allocated_milli, 125 + 125 + 1000) << policy;
    EXPECT_EQ(run->samples.back().idle_milli, 2000 - 1250) << policy;
  }
}

}  // namespace
}  // namespace hf::sim
