// ControlPlane against the real SQLite store in a temporary directory, with
// a fake clock: the bind (QoS, env, tenancy, rollback on a failed commit,
// a lost claim), releases, orphan GC, the compensation path, the MIG
// command channel, lost GPUs and restart recovery. After every scenario the
// ledger must equal the live slices in the store.
#include "server/control_plane.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "server/internal.h"
#include "store/testing/temp_store.h"

namespace hf::server {
namespace {

using store::Role;
using store::SliceRow;
using store::TaskRow;
using store::TaskState;

// Delegates to a real store; fails the next N writes like a full disk, and
// can hold the next write, as a slow disk or a far database does, until
// the test lets it go (whether it then fails is set by then).
class FaultyStore final : public store::Store {
 public:
  explicit FaultyStore(std::unique_ptr<store::Store> inner)
      : inner_(std::move(inner)) {}
  Status Write(const std::function<Status(store::Txn&)>& fn) override {
    {
      std::unique_lock<std::mutex> lock(hold_mu_);
      if (hold_next_) {
        hold_next_ = false;
        holding_ = true;
        hold_cv_.notify_all();
        hold_cv_.wait(lock, [&] { return !holding_; });
      }
    }
    if (fail_writes.load() > 0) {
      fail_writes.fetch_sub(1);
      return Status::Unavailable("disk I/O error (injected)");
    }
    return inner_->Write(fn);
  }
  // The next Write waits, once it has started, until Release().
  void HoldNextWrite() {
    std::lock_guard<std::mutex> lock(hold_mu_);
    hold_next_ = true;
  }
  // Waits until a held Write has started (false after `timeout`).
  bool WaitUntilHolding(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(hold_mu_);
    return hold_cv_.wait_for(lock, timeout, [&] { return holding_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(hold_mu_);
    holding_ = false;
    hold_cv_.notify_all();
  }
  Status Read(const std::function<Status(store::Txn&)>& fn) override {
    return inner_->Read(fn);
  }
  store::StoreInfo info() const override { return inner_->info(); }
  std::atomic<int> fail_writes{0};

 private:
  std::unique_ptr<store::Store> inner_;
  std::mutex hold_mu_;
  std::condition_variable hold_cv_;
  bool hold_next_ = false;
  bool holding_ = false;
};

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Open();
    admin_.role = Role::kAdmin;
    admin_.token_id = 1;
  }
  void TearDown() override {
    if (cp_) {
      EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok())
          << cp_->CheckLedgerMatchesStore().ToString();
    }
    cp_.reset();
    store_.reset();
  }

  void Open(ControlPlaneOptions options = {}) {
    cp_.reset();
    store_.reset();
    auto inner = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(inner.ok()) << inner.status().ToString();
    store_ = std::make_unique<FaultyStore>(std::move(*inner));
    options.gc_min_age_ms = 60'000;
    auto cp = ControlPlane::Create(store_.get(), &clock_, options);
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    cp_ = std::move(*cp);
  }

  Caller TenantUser(const std::string& tenant,
                    const std::optional<std::string>& group = std::nullopt) {
    auto existing = cp_->GetTenant(admin_, tenant);
    if (!existing.ok()) {
      auto t = cp_->CreateTenant(admin_, tenant, group);
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      existing = t;
    }
    Caller c;
    c.role = Role::kUser;
    c.token_id = 100 + existing->id;
    c.tenant_id = existing->id;
    c.tenant = tenant;
    return c;
  }

  static GpuReport Gpu(int index, std::int64_t memory = 81920, bool mig = false,
                       bool mps = false) {
    GpuReport g;
    g.index = index;
    g.uuid = "GPU-" + std::to_string(index);
    g.model = "NVIDIA A100-SXM4-80GB";
    g.memory_mib = memory;
    g.cc_major = 8;
    g.mig_capable = mig;
    g.mps_capable = mps;
    return g;
  }

  NodeReport Node(const std::string& name, std::vector<GpuReport> gpus) {
    NodeReport r;
    r.name = name;
    r.gpus = std::move(gpus);
    for (GpuReport& g : r.gpus) g.uuid = name + "-" + g.uuid;
    return r;
  }

  void Register(const NodeReport& report) {
    auto n = cp_->RegisterNode(admin_, report);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
  }

  TaskRow Submit(const Caller& caller, std::optional<std::int64_t> memory,
                 std::optional<int> percent = std::nullopt, int whole = 0) {
    TaskCreate t;
    t.name = "t";
    t.memory_mib = memory;
    t.compute_percent = percent;
    t.gpu_required = whole;
    t.env = {{"USER_VAR", "1"}};
    auto row = cp_->CreateTask(caller, t);
    EXPECT_TRUE(row.ok()) << row.status().ToString();
    return row.ok() ? *row : TaskRow{};
  }

  TaskRow Get(RowId id) {
    auto t = cp_->GetTask(admin_, id);
    EXPECT_TRUE(t.ok());
    return *t;
  }

  SliceRow SliceOf(const TaskRow& task) {
    EXPECT_TRUE(task.slice_id.has_value());
    auto s = cp_->GetSlice(admin_, task.slice_id.value_or(0));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : SliceRow{};
  }

  int Bind() {
    auto n = cp_->BindPendingOnce();
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? *n : -1;
  }

  store::sqlite_testing::TempDir dir_{"hf-cp-test"};
  FakeClock clock_{1'700'000'000'000};
  std::unique_ptr<FaultyStore> store_;
  std::unique_ptr<ControlPlane> cp_;
  Caller admin_;
};

TEST_F(ControlPlaneTest, BindsASliceWithDerivedQosAndItsEnv) {
  Register(Node("n1", {Gpu(0, 81920, false, true)}));
  const Caller alice = TenantUser("alice");
  const TaskRow created = Submit(alice, 4096, 25);
  EXPECT_EQ(created.state, TaskState::kPending);
  EXPECT_EQ(Bind(), 1);
  const TaskRow bound = Get(created.id);
  EXPECT_EQ(bound.state, TaskState::kScheduled);
  EXPECT_TRUE(bound.pending_reason.empty());
  const SliceRow slice = SliceOf(bound);
  EXPECT_EQ(slice.qos_level, "silver");
  EXPECT_EQ(slice.enforcement, std::vector<std::string>{"mps"});
  EXPECT_EQ(slice.memory_mib, 4096);
  EXPECT_EQ(slice.compute_percent, 25);
  EXPECT_EQ(bound.env.at("HETEROFLOW_SLICE_ID"), std::to_string(slice.id));
  EXPECT_EQ(bound.env.at("HETEROFLOW_SLICE_QOS"), "silver");
  EXPECT_EQ(bound.env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_EQ(bound.env.at("USER_VAR"), "1");
  auto history = cp_->History(admin_, {});
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->items.size(), 1u);
  EXPECT_EQ(history->items[0].op, "allocate");
  EXPECT_EQ(history->items[0].actor, "scheduler");
}

TEST_F(ControlPlaneTest, TheTasksComputeModeIsKeptAndNamedInItsSliceEnv) {
  Register(Node("n1", {Gpu(0, 81920, false, true)}));
  const Caller alice = TenantUser("alice");
  TaskCreate strict;
  strict.name = "strict";
  strict.memory_mib = 4096;
  strict.compute_percent = 25;
  strict.gpu_compute_mode = GpuComputeMode::kStrict;
  auto created = cp_->CreateTask(alice, strict);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->gpu_compute_mode, GpuComputeMode::kStrict);
  const TaskRow fallback = Submit(alice, 4096, 25);
  EXPECT_EQ(fallback.gpu_compute_mode, GpuComputeMode::kWorkConserving);
  const TaskRow memory_only = Submit(alice, 4096);
  EXPECT_EQ(Bind(), 3);

  const TaskRow bound = Get(created->id);
  EXPECT_EQ(bound.gpu_compute_mode, GpuComputeMode::kStrict);
  EXPECT_EQ(bound.env.at("HETEROFLOW_SLICE_COMPUTE_PERCENT"), "25");
  EXPECT_EQ(bound.env.at("HETEROFLOW_SLICE_COMPUTE_MODE"), "strict");
  EXPECT_EQ(Get(fallback.id).env.at("HETEROFLOW_SLICE_COMPUTE_MODE"),
            "work-conserving");
  // No share asked: neither a share nor a mode in the env (the slice's
  // default share is the ledger's accounting, not a limit).
  const TaskRow no_share = Get(memory_only.id);
  EXPECT_FALSE(no_share.env.contains("HETEROFLOW_SLICE_COMPUTE_PERCENT"));
  EXPECT_FALSE(no_share.env.contains("HETEROFLOW_SLICE_COMPUTE_MODE"));

  // A resize rewrites the env and keeps the mode.
  SliceResizeRequest resize;
  resize.memory_mib = 8192;
  ASSERT_TRUE(cp_->ResizeSlice(admin_, SliceOf(bound).id, resize).ok());
  EXPECT_EQ(Get(bound.id).env.at("HETEROFLOW_SLICE_MEMORY_MB"), "8192");
  EXPECT_EQ(Get(bound.id).env.at("HETEROFLOW_SLICE_COMPUTE_MODE"), "strict");

  // So does the MIG device handed over to a gold slice (bob may not share
  // alice's GPU, so his task lands on the MIG one).
  Register(Node("mig", {Gpu(0, 81920, true)}));
  strict.name = "gold";
  auto gold_task = cp_->CreateTask(TenantUser("bob"), strict);
  ASSERT_TRUE(gold_task.ok()) << gold_task.status().ToString();
  EXPECT_EQ(Bind(), 1);
  ASSERT_EQ(SliceOf(Get(gold_task->id)).qos_level, "gold");
  auto claimed = cp_->ClaimSliceRequests(admin_, "mig");
  ASSERT_TRUE(claimed.ok());
  ASSERT_EQ(claimed->size(), 1u);
  MigResult ok;
  ok.ok = true;
  ok.device_id = "MIG-mig-GPU-0/7/0";
  ASSERT_TRUE(cp_->ReportSliceRequest(admin_, (*claimed)[0].id, ok).ok());
  const TaskRow gold = Get(gold_task->id);
  EXPECT_EQ(gold.env.at("NVIDIA_VISIBLE_DEVICES"), ok.device_id);
  EXPECT_EQ(gold.env.at("HETEROFLOW_SLICE_COMPUTE_MODE"), "strict");

  // Kept across a restart.
  Open();
  EXPECT_EQ(Get(created->id).gpu_compute_mode, GpuComputeMode::kStrict);
  EXPECT_EQ(Get(fallback.id).gpu_compute_mode, GpuComputeMode::kWorkConserving);
}

TEST_F(ControlPlaneTest, ContainerizedNodeIsForcedToBronzeAndMigIsGold) {
  NodeReport boxed = Node("boxed", {Gpu(0, 81920, true, true)});
  boxed.containerized = true;
  Register(boxed);
  const Caller alice = TenantUser("alice");
  const TaskRow t = Submit(alice, 4096);
  Bind();
  EXPECT_EQ(SliceOf(Get(t.id)).qos_level, "bronze");

  Register(Node("mig", {Gpu(0, 81920, true, false)}));
  const Caller bob = TenantUser("bob");
  const TaskRow g = Submit(bob, 4096);  // alice's GPU is closed to bob
  Bind();
  const SliceRow gold = SliceOf(Get(g.id));
  EXPECT_EQ(gold.qos_level, "gold");
  // Charged what the partition takes: 1g.10gb is 1/8 of the memory and
  // 1/7 of the compute (rounded down).
  EXPECT_EQ(gold.memory_mib, 10240);
  EXPECT_EQ(gold.compute_percent, 14);
  // Held until the agent reports the MIG device.
  auto assignments = cp_->GetAssignments(admin_, "mig");
  ASSERT_TRUE(assignments.ok());
  EXPECT_TRUE(assignments->run.empty());
  auto rows = cp_->ListSliceRequests(admin_, {});
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->items.size(), 1u);
  EXPECT_EQ(rows->items[0].action, "create");
  EXPECT_EQ(rows->items[0].profile, "1g.10gb");
}

TEST_F(ControlPlaneTest, FailedCommitRollsTheWholeBindBack) {
  Register(Node("n1", {Gpu(0)}));
  const Caller alice = TenantUser("alice");
  const TaskRow a = Submit(alice, 4096);
  const TaskRow b = Submit(alice, 8192);
  store_->fail_writes = 1;
  auto bound = cp_->BindPendingOnce();
  EXPECT_FALSE(bound.ok());
  EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok());
  EXPECT_EQ(Get(a.id).state, TaskState::kPending);
  auto stats = cp_->Stats(admin_);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->accounted_memory_mib, 0);  // placements undone
  EXPECT_EQ(Bind(), 2);
  EXPECT_EQ(Get(b.id).state, TaskState::kScheduled);
}

// A bind's store write runs without the control plane's lock: while it is
// held (a slow disk), an operator's placement, a heartbeat and the stats go
// on; the held bind's placement is already counted (nothing oversold), and
// when its write fails the capacity comes back.
TEST_F(ControlPlaneTest, AStoreWriteInFlightBlocksNoOtherCall) {
  Register(Node("n1", {Gpu(0, 81920)}));
  const Caller alice = TenantUser("alice");
  Caller tenant_admin = alice;
  tenant_admin.role = Role::kTenantAdmin;
  for (const bool fails : {false, true}) {
    const TaskRow task = Submit(alice, 61440);
    store_->HoldNextWrite();
    if (fails) store_->fail_writes = 1;
    auto bind =
        std::async(std::launch::async, [&] { return cp_->BindPendingOnce(); });
    ASSERT_TRUE(store_->WaitUntilHolding(std::chrono::seconds(10)));

    // Each of these needs the control plane's lock (or the ledger) and
    // returns while the bind's write is still held.
    auto others = std::async(std::launch::async, [&] {
      SliceCreate big;
      big.memory_mib = 40960;
      auto refused = cp_->CreateSlice(tenant_admin, big);
      auto stats = cp_->Stats(admin_);
      auto beat = cp_->Heartbeat(admin_, Node("n1", {Gpu(0, 81920)}), {});
      return std::make_tuple(refused.status(), stats.status(), beat.status());
    });
    // Lets the held write go however the test ends (the futures wait).
    const struct Unhold {
      FaultyStore* store;
      ~Unhold() { store->Release(); }
    } unhold{store_.get()};
    ASSERT_EQ(others.wait_for(std::chrono::seconds(10)),
              std::future_status::ready)
        << "a call waited for another call's store write";
    const auto [refused, stats, beat] = others.get();
    // 60 of 80 GB are reserved by the bind in flight: 40 more do not fit.
    EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted)
        << refused.ToString();
    EXPECT_TRUE(stats.ok()) << stats.ToString();
    EXPECT_TRUE(beat.ok()) << beat.ToString();

    store_->Release();
    auto bound = bind.get();
    if (!fails) {
      ASSERT_TRUE(bound.ok()) << bound.status().ToString();
      EXPECT_EQ(*bound, 1);
      EXPECT_EQ(Get(task.id).state, TaskState::kScheduled);
      EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok());
      auto cancelled = cp_->CancelTask(alice, task.id);
      ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
      ASSERT_TRUE(cp_->ReportTaskStates(admin_, "n1",
                                        {{task.id, TaskState::kCancelled}})
                      .ok());
    } else {
      EXPECT_FALSE(bound.ok());
      EXPECT_EQ(Get(task.id).state, TaskState::kPending);
      // The failed write's reservation is gone: 60 GB fit again.
      SliceCreate again;
      again.memory_mib = 61440;
      auto placed = cp_->CreateSlice(tenant_admin, again);
      EXPECT_TRUE(placed.ok()) << placed.status().ToString();
    }
    EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok())
        << cp_->CheckLedgerMatchesStore().ToString();
  }
}

// Placements, releases, resizes and compensations from several threads at
// once, some of their writes failing: whenever the writes in flight have
// settled, the ledger holds exactly the store's live slices, and a GPU is
// never charged past its memory.
TEST_F(ControlPlaneTest, ConcurrentWritesLeaveTheLedgerEqualToTheStore) {
  Register(Node("n1", {Gpu(0), Gpu(1)}));
  const Caller alice = TenantUser("alice");
  Caller tenant_admin = alice;
  tenant_admin.role = Role::kTenantAdmin;
  std::atomic<bool> stop{false};
  std::atomic<int> ops{0};
  const auto worker = [&](unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<RowId> slices;
    std::vector<RowId> tasks;
    while (!stop.load()) {
      const std::int64_t mib =
          std::int64_t{1024} * (1 + static_cast<int>(rng() % 40));
      switch (rng() % 8) {
        case 0: {
          TaskCreate t;
          t.name = "t";
          t.memory_mib = mib;
          auto row = cp_->CreateTask(alice, t);
          if (row.ok()) tasks.push_back(row->id);
          break;
        }
        case 1:
          (void)cp_->BindPendingOnce();
          break;
        case 2: {
          SliceCreate c;
          c.memory_mib = mib;
          auto made = cp_->CreateSlice(tenant_admin, c);
          if (made.ok()) slices.push_back(made->id);
          break;
        }
        case 3:
          if (!slices.empty()) {
            (void)cp_->DeleteSlice(admin_, slices[rng() % slices.size()], "");
          }
          break;
        case 4:
          if (!slices.empty()) {
            SliceResizeRequest r;
            r.memory_mib = mib;
            (void)cp_->ResizeSlice(admin_, slices[rng() % slices.size()], r);
          }
          break;
        case 5:
          if (!tasks.empty()) {
            const RowId id = tasks[rng() % tasks.size()];
            (void)cp_->CancelTask(alice, id);
            (void)cp_->ReportTaskStates(admin_, "n1",
                                        {{id, TaskState::kCancelled}});
          }
          break;
        case 6:
          if (!tasks.empty()) {
            // A task the node runs, whatever the server thinks of it.
            const RowId id = tasks[rng() % tasks.size()];
            (void)cp_->Heartbeat(
                admin_, Node("n1", {Gpu(0), Gpu(1)}),
                {{id, "running", {static_cast<int>(rng() % 2)}}});
          }
          break;
        case 7:
          if (rng() % 4 == 0) store_->fail_writes = 1;
          break;
      }
      ops.fetch_add(1);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < 4; ++i) threads.emplace_back(worker, 7 + i);
  int checks = 0;
  for (const auto deadline =
           std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
       std::chrono::steady_clock::now() < deadline; ++checks) {
    const Status matches = cp_->CheckLedgerMatchesStore();
    ASSERT_TRUE(matches.ok()) << matches.ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  store_->fail_writes = 0;
  EXPECT_GT(ops.load(), 100);
  EXPECT_GT(checks, 10);
  const Status matches = cp_->CheckLedgerMatchesStore();
  EXPECT_TRUE(matches.ok()) << matches.ToString();
}

TEST_F(ControlPlaneTest, LostClaimUndoesThePlacement) {
  const Caller alice = TenantUser("alice");
  const TaskRow t = Submit(alice, 4096);
  EXPECT_EQ(Bind(), 0);  // no GPUs: waits with a reason
  EXPECT_FALSE(Get(t.id).pending_reason.empty());
  // The task changes behind the scheduler's cached copy.
  ASSERT_TRUE(store_
                  ->Write([&](store::Txn& txn) -> Status {
                    auto row = txn.GetTask(t.id);
                    if (!row.ok()) return row.status();
                    TaskRow changed = *row;
                    changed.message = "touched";
                    return txn.UpdateTask(changed).status();
                  })
                  .ok());
  Register(Node("n1", {Gpu(0)}));
  EXPECT_EQ(Bind(), 0);  // the claim (CAS) lost: nothing bound
  EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok());
  EXPECT_EQ(Bind(), 1);  // re-read and bound
  EXPECT_EQ(Get(t.id).state, TaskState::kScheduled);
}

TEST_F(ControlPlaneTest, TenantsOutsideAGroupNeverShareAGpu) {
  Register(Node("n1", {Gpu(0), Gpu(1)}));
  const Caller a = TenantUser("a", "g");
  const Caller b = TenantUser("b", "g");
  const Caller c = TenantUser("c");
  const TaskRow ta = Submit(a, 4096);
  Bind();
  const TaskRow tb = Submit(b, 4096);
  Bind();
  const TaskRow tc = Submit(c, 4096);
  Bind();
  const int gpu_a = SliceOf(Get(ta.id)).gpu_indices[0];
  EXPECT_EQ(SliceOf(Get(tb.id)).gpu_indices[0], gpu_a);  // same group
  EXPECT_NE(SliceOf(Get(tc.id)).gpu_indices[0], gpu_a);  // outsider
  const TaskRow td = Submit(c, 4096);
  Bind();
  EXPECT_NE(SliceOf(Get(td.id)).gpu_indices[0], gpu_a);
}

TEST_F(ControlPlaneTest, UnplaceableTaskWaitsWithReasonAndBindsWhenFreed) {
  Register(Node("n1", {Gpu(0, 40960)}));
  const Caller alice = TenantUser("alice");
  const TaskRow big = Submit(alice, 30000);
  Bind();
  const TaskRow waiting = Submit(alice, 20000);
  EXPECT_EQ(Bind(), 0);
  const TaskRow pending = Get(waiting.id);
  EXPECT_EQ(pending.state, TaskState::kPending);
  EXPECT_NE(pending.pending_reason.find("memory"), std::string::npos)
      << pending.pending_reason;
  auto cancelled = cp_->CancelTask(alice, big.id);
  ASSERT_TRUE(cancelled.ok());
  // Bound to n1, whose agent may have started it: the memory stays charged
  // until the node says it stopped it.
  EXPECT_EQ(cancelled->state, TaskState::kScheduled);
  EXPECT_TRUE(cancelled->cancel_requested);
  EXPECT_EQ(Bind(), 0);
  auto assignments = cp_->GetAssignments(admin_, "n1");
  ASSERT_TRUE(assignments.ok());
  EXPECT_EQ(assignments->cancel, std::vector<RowId>{big.id});
  ASSERT_TRUE(
      cp_->ReportTaskStates(admin_, "n1", {{big.id, TaskState::kCancelled}})
          .ok());
  EXPECT_EQ(Get(big.id).state, TaskState::kCancelled);
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(Get(waiting.id).state, TaskState::kScheduled);
}

// Holds (Scheduler): under a stream of small tasks a large one waits for
// ever without them, since every slice that ends makes room that a newer
// small task takes at once.
class HoldTest : public ControlPlaneTest {
 protected:
  void SetUp() override {
    ControlPlaneOptions options;
    options.hold_after_ms = 120'000;
    Open(options);
    admin_.role = Role::kAdmin;
    admin_.token_id = 1;
    Register(Node("n1", {Gpu(0, 40960), Gpu(1, 40960)}));
    alice_ = TenantUser("alice");
  }

  void Finish(RowId id) {
    ASSERT_TRUE(
        cp_->ReportTaskStates(admin_, "n1", {{id, TaskState::kRunning, {}, ""}})
            .ok());
    ASSERT_TRUE(cp_->ReportTaskStates(admin_, "n1",
                                      {{id, TaskState::kSucceeded, 0, "done"}})
                    .ok());
  }

  int GpuOf(RowId id) {
    const TaskRow t = Get(id);
    EXPECT_EQ(t.state, TaskState::kScheduled) << t.pending_reason;
    return t.gpu_indices.empty() ? -1 : t.gpu_indices.front();
  }

  std::vector<HoldStats> Holds() {
    auto stats = cp_->Stats(admin_);
    EXPECT_TRUE(stats.ok());
    return stats.ok() ? stats->holds : std::vector<HoldStats>{};
  }
  // The only hold, if any.
  std::optional<HoldStats> Hold() {
    const std::vector<HoldStats> holds = Holds();
    EXPECT_LE(holds.size(), 1u);
    if (holds.empty()) return std::nullopt;
    return holds.front();
  }

  // Two 20,000 MB slices on each GPU (960 MB left on each), and a 30,000 MB
  // task that waits; a slice on GPU 0 ends and a new one takes its room
  // while the large task waits on.
  void FillAndStarve() {
    for (int i = 0; i < 4; ++i) small_.push_back(Submit(alice_, 20000, 10).id);
    Bind();
    ASSERT_EQ(GpuOf(small_[0]), 0);
    ASSERT_EQ(GpuOf(small_[2]), 1);
    big_ = Submit(alice_, 30000, 10).id;
    EXPECT_EQ(Bind(), 0);
    Finish(small_[0]);
    const RowId next = Submit(alice_, 20000, 10).id;
    EXPECT_EQ(Bind(), 1);
    EXPECT_EQ(GpuOf(next), 0);
    EXPECT_EQ(Get(big_).state, TaskState::kPending);
    EXPECT_FALSE(Hold().has_value());
  }

  // Then, past --hold-after, GPU 1 ends a slice too; the large task,
  // waiting longest, gets GPU 1 held (20,000 MB in use there, 40,000 on
  // GPU 0), and the newer task that would have taken the room waits.
  // Returns the newer task.
  RowId StarveThenHold() {
    FillAndStarve();
    clock_.Advance(121'000);
    Finish(small_[2]);
    const RowId newer = Submit(alice_, 20000, 10).id;
    EXPECT_EQ(Bind(), 0);
    return newer;
  }

  void TwoStarvedTasks(int max_holds);

  Caller alice_;
  std::vector<RowId> small_;
  RowId big_ = 0;
};

TEST_F(HoldTest, ATaskThatWaitedLongGetsAGpuHeldUntilItFits) {
  const RowId newer = StarveThenHold();
  const std::optional<HoldStats> hold = Hold();
  ASSERT_TRUE(hold.has_value());
  EXPECT_EQ(hold->task_id, big_);
  EXPECT_EQ(hold->node, "n1");
  EXPECT_EQ(hold->gpu_indices, std::vector<int>{1});
  const std::string held = "GPU 1 of node n1 is held for task " +
                           std::to_string(big_) +
                           ", waiting longest, and takes no other task until "
                           "it fits";
  EXPECT_NE(Get(big_).pending_reason.find(held), std::string::npos)
      << Get(big_).pending_reason;
  EXPECT_EQ(Get(newer).state, TaskState::kPending);
  EXPECT_NE(Get(newer).pending_reason.find("1 GPU excluded for now"),
            std::string::npos)
      << Get(newer).pending_reason;
  EXPECT_NE(Get(newer).pending_reason.find(held), std::string::npos);
  // Once GPU 1 drains, the large task is bound there and the hold ends.
  Finish(small_[3]);
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(GpuOf(big_), 1);
  EXPECT_FALSE(Hold().has_value());
  // The newer task still waits (10,960 MB on GPU 1), and its reason no
  // longer names a hold.
  EXPECT_EQ(Get(newer).state, TaskState::kPending);
  EXPECT_EQ(Get(newer).pending_reason.find("held for task"), std::string::npos)
      << Get(newer).pending_reason;
  Finish(small_[1]);
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(GpuOf(newer), 0);
}

TEST_F(HoldTest, AHoldEndsWhenItsTaskIsCancelled) {
  const RowId newer = StarveThenHold();
  ASSERT_TRUE(Hold().has_value());
  ASSERT_TRUE(cp_->CancelTask(alice_, big_).ok());
  EXPECT_EQ(Bind(), 1);
  EXPECT_FALSE(Hold().has_value());
  EXPECT_EQ(GpuOf(newer), 1);
}

TEST_F(HoldTest, NoHoldBeforeItsTimeOrWhenHoldsAreOff) {
  FillAndStarve();
  clock_.Advance(100'000);  // waited 100 s of the 120
  Finish(small_[2]);
  RowId next = Submit(alice_, 20000, 10).id;
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(GpuOf(next), 1);
  EXPECT_FALSE(Hold().has_value());

  ControlPlaneOptions off;
  off.hold_after_ms = 0;
  Open(off);  // the same store, holds off
  clock_.Advance(3'600'000);
  Finish(small_[3]);
  next = Submit(alice_, 20000, 10).id;
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(GpuOf(next), 1);
  EXPECT_FALSE(Hold().has_value());
  EXPECT_EQ(Get(big_).state, TaskState::kPending);
}

// Two tasks that waited long (`max_holds` of them get GPUs held, each
// where no other hold is), and a newer task that waits meanwhile.
void HoldTest::TwoStarvedTasks(int max_holds) {
  ControlPlaneOptions options;
  options.hold_after_ms = 120'000;
  options.max_holds = max_holds;
  Open(options);  // the same store: n1 and alice are there
  for (int i = 0; i < 4; ++i) small_.push_back(Submit(alice_, 20000, 10).id);
  Bind();
  ASSERT_EQ(GpuOf(small_[0]), 0);
  ASSERT_EQ(GpuOf(small_[2]), 1);
  const RowId first = Submit(alice_, 30000, 10).id;
  const RowId second = Submit(alice_, 30000, 10).id;
  EXPECT_EQ(Bind(), 0);
  clock_.Advance(121'000);
  // GPU 0 has the least in use: the first task's hold takes it, the
  // second's (where allowed) GPU 1.
  Finish(small_[0]);
  const RowId newer = Submit(alice_, 20000, 10).id;
  EXPECT_EQ(Bind(), 0);
  const std::vector<HoldStats> holds = Holds();
  ASSERT_EQ(holds.size(), static_cast<std::size_t>(max_holds));
  EXPECT_EQ(holds[0].task_id, first);
  EXPECT_EQ(holds[0].gpu_indices, std::vector<int>{0});
  const std::string first_held =
      "GPU 0 of node n1 is held for task " + std::to_string(first);
  const std::string second_held =
      "GPU 1 of node n1 is held for task " + std::to_string(second);
  const std::string reason = Get(newer).pending_reason;
  EXPECT_NE(reason.find(first_held), std::string::npos) << reason;
  if (max_holds == 2) {
    EXPECT_EQ(holds[1].task_id, second);
    EXPECT_EQ(holds[1].gpu_indices, std::vector<int>{1});
    EXPECT_NE(reason.find(second_held), std::string::npos) << reason;
    EXPECT_NE(reason.find("2 GPUs excluded for now"), std::string::npos)
        << reason;
  } else {
    EXPECT_EQ(reason.find("held for task " + std::to_string(second)),
              std::string::npos)
        << reason;
  }
  // GPU 0 drains: the first task is bound there and its hold ends; the
  // second task holds on (with one hold allowed, it gets one now).
  Finish(small_[1]);
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(GpuOf(first), 0);
  ASSERT_EQ(Holds().size(), 1u);
  EXPECT_EQ(Holds()[0].task_id, second);
  // GPU 1 drains: the second task is bound there.
  Finish(small_[2]);
  Finish(small_[3]);
  Bind();
  EXPECT_EQ(GpuOf(second), 1);
  EXPECT_TRUE(Holds().empty());
  EXPECT_EQ(Get(newer).state, TaskState::kPending);
  EXPECT_EQ(Get(newer).pending_reason.find("held for task"), std::string::npos)
      << Get(newer).pending_reason;
}

// With --max-holds 2 both tasks get GPUs held, each on a GPU of its own.
TEST_F(HoldTest, UpToMaxHoldsTasksGetGpusHeldEachOnGpusOfTheirOwn) {
  TwoStarvedTasks(2);
}

// With the default of 1, the second task waits on without a hold.
TEST_F(HoldTest, OneHoldAtATimeByDefault) { TwoStarvedTasks(1); }

// A hold that begins while another lasts is in the reasons at once, though
// they named a hold already and were written less than a minute ago.
TEST_F(HoldTest, AHoldThatBeginsBesideAnotherIsInTheReasonsAtOnce) {
  ControlPlaneOptions options;
  options.hold_after_ms = 120'000;
  options.max_holds = 2;
  Open(options);
  for (int i = 0; i < 4; ++i) small_.push_back(Submit(alice_, 20000, 10).id);
  Bind();
  const RowId first = Submit(alice_, 30000, 10).id;
  EXPECT_EQ(Bind(), 0);
  clock_.Advance(50'000);
  const RowId second = Submit(alice_, 30000, 10).id;
  EXPECT_EQ(Bind(), 0);
  clock_.Advance(71'000);  // the first waited 121 s, the second 71 s
  Finish(small_[0]);
  EXPECT_EQ(Bind(), 0);
  ASSERT_EQ(Holds().size(), 1u);
  const std::string first_held =
      "GPU 0 of node n1 is held for task " + std::to_string(first);
  EXPECT_NE(Get(second).pending_reason.find(first_held), std::string::npos)
      << Get(second).pending_reason;
  clock_.Advance(50'000);  // the second waited 121 s; its reason is 50 s old
  EXPECT_EQ(Bind(), 0);
  ASSERT_EQ(Holds().size(), 2u);
  const std::string second_held =
      "GPU 1 of node n1 is held for task " + std::to_string(second);
  std::string reason = Get(second).pending_reason;
  EXPECT_NE(reason.find(first_held), std::string::npos) << reason;
  EXPECT_NE(reason.find(second_held), std::string::npos) << reason;
  // The first task, tried before the second's hold began, at its next try.
  clock_.Advance(5'000);
  EXPECT_EQ(Bind(), 0);
  for (const RowId id : {first, second}) {
    reason = Get(id).pending_reason;
    EXPECT_NE(reason.find(first_held), std::string::npos) << reason;
    EXPECT_NE(reason.find(second_held), std::string::npos) << reason;
  }
}

TEST_F(HoldTest, FewerThanOneHoldIsRefused) {
  ControlPlaneOptions options;
  options.max_holds = 0;
  auto cp = ControlPlane::Create(store_.get(), &clock_, options);
  ASSERT_FALSE(cp.ok());
  EXPECT_EQ(cp.status().field(), "max_holds");
}

TEST_F(HoldTest, ANegativeHoldAfterIsRefused) {
  ControlPlaneOptions options;
  options.hold_after_ms = -1;
  auto cp = ControlPlane::Create(store_.get(), &clock_, options);
  ASSERT_FALSE(cp.ok());
  EXPECT_EQ(cp.status().field(), "hold_after");
}

TEST_F(ControlPlaneTest, WholeGpuTasksAvoidMigGpusAndSlicedGpus) {
  Register(Node("n1", {Gpu(0, 81920, true), Gpu(1), Gpu(2)}));
  const Caller alice = TenantUser("alice");
  const TaskRow slice = Submit(alice, 1024);
  Bind();
  const TaskRow whole = Submit(alice, std::nullopt, std::nullopt, 1);
  EXPECT_EQ(Bind(), 1);
  const SliceRow w = SliceOf(Get(whole.id));
  EXPECT_TRUE(w.whole);
  EXPECT_NE(w.gpu_indices[0], 0);  // MIG mode
  EXPECT_NE(w.gpu_indices[0], SliceOf(Get(slice.id)).gpu_indices[0]);
  EXPECT_EQ(Get(whole.id).env.count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), 0u);
}

// Issue 14: a whole-GPU grant on an MPS-capable card was called silver
// (and listed "mps"), though no MPS limit applies to it. It is exclusive,
// on the bind path and on the compensation path.
TEST_F(ControlPlaneTest, WholeGpuGrantsAreExclusiveOnBindAndCompensation) {
  Register(Node("n1", {Gpu(0, 81920, false, /*mps=*/true),
                       Gpu(1, 81920, false, /*mps=*/true)}));
  const Caller alice = TenantUser("alice");
  const TaskRow whole = Submit(alice, std::nullopt, std::nullopt, 1);
  const TaskRow slice = Submit(alice, 1024);
  EXPECT_EQ(Bind(), 2);
  const SliceRow w = SliceOf(Get(whole.id));
  EXPECT_TRUE(w.whole);
  EXPECT_EQ(w.qos_level, "exclusive");
  EXPECT_TRUE(w.enforcement.empty());
  const store::StringMap env = Get(whole.id).env;
  EXPECT_EQ(env.at("HETEROFLOW_SLICE_QOS"), "exclusive");
  for (const auto& [name, value] : env) {
    EXPECT_FALSE(name.starts_with("CUDA_MPS_")) << name << "=" << value;
  }
  // A slice of the same kind of card is still silver.
  EXPECT_EQ(SliceOf(Get(slice.id)).qos_level, "silver");

  // Compensation: a whole-GPU task the server never bound runs on n2.
  const NodeReport n2 = Node("n2", {Gpu(0, 81920, false, true)});
  Register(n2);
  const TaskRow unbound = Submit(alice, std::nullopt, std::nullopt, 1);
  ASSERT_TRUE(cp_->Heartbeat(admin_, n2, {{unbound.id, "running", {0}}}).ok());
  const SliceRow comp = SliceOf(Get(unbound.id));
  EXPECT_EQ(comp.origin, "compensation");
  EXPECT_TRUE(comp.whole);
  EXPECT_EQ(comp.qos_level, "exclusive");
}

TEST_F(ControlPlaneTest, TerminalStateReleasesAndGcReleasesOrphans) {
  Register(Node("n1", {Gpu(0)}));
  const Caller alice = TenantUser("alice");
  const TaskRow t = Submit(alice, 4096);
  const TaskRow orphan = Submit(alice, 4096);
  Bind();
  auto n = cp_->ReportTaskStates(admin_, "n1",
                                 {{t.id, TaskState::kRunning, {}, ""}});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  n = cp_->ReportTaskStates(admin_, "n1",
                            {{t.id, TaskState::kSucceeded, 0, "done"}});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(SliceOf(Get(t.id)).state, store::SliceState::kReleased);

  // An orphan: the task is terminal but its slice was left allocated (as
  // after a crash between two writes).
  ASSERT_TRUE(store_
                  ->Write([&](store::Txn& txn) -> Status {
                    auto row = txn.GetTask(orphan.id);
                    if (!row.ok()) return row.status();
                    TaskRow changed = *row;
                    changed.state = TaskState::kFailed;
                    return txn.UpdateTask(changed).status();
                  })
                  .ok());
  // An operator reservation is never an orphan.
  SliceCreate reservation;
  reservation.tenant = "alice";
  reservation.memory_mib = 1024;
  ASSERT_TRUE(cp_->CreateSlice(admin_, reservation).ok());
  auto released = cp_->RunGcOnce();
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(*released, 0);  // younger than the minimum age
  clock_.Advance(61'000);
  released = cp_->RunGcOnce();
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(*released, 1);
  EXPECT_EQ(SliceOf(Get(orphan.id)).state, store::SliceState::kReleased);
  auto stats = cp_->Stats(admin_);
  EXPECT_EQ(stats->accounted_memory_mib, 1024);  // the reservation
  auto history = cp_->History(admin_, {});
  bool gc_entry = false;
  for (const auto& h : history->items) gc_entry |= h.actor == "gc";
  EXPECT_TRUE(gc_entry);
}

TEST_F(ControlPlaneTest, CompensationRecordsARunningTaskWithoutASlice) {
  Register(Node("n1", {Gpu(0), Gpu(1)}));
  const Caller alice = TenantUser("alice");
  const TaskRow other = Submit(alice, 1024);
  Bind();
  const SliceRow first = SliceOf(Get(other.id));
  // A task the server never bound (its store was restored from a backup
  // older than the bind) runs on GPU 1.
  const TaskRow t = Submit(alice, 4096);
  NodeReport hb = Node("n1", {Gpu(0), Gpu(1)});
  ASSERT_TRUE(cp_->Heartbeat(admin_, hb, {{t.id, "running", {1}}}).ok());
  const TaskRow after = Get(t.id);
  const SliceRow comp = SliceOf(after);
  EXPECT_EQ(comp.origin, "compensation");
  EXPECT_EQ(comp.gpu_indices, std::vector<int>{1});
  EXPECT_EQ(comp.memory_mib, 4096);
  EXPECT_GT(comp.id, first.id);
  EXPECT_EQ(after.state, TaskState::kRunning);
  // A second heartbeat does not record it twice.
  ASSERT_TRUE(cp_->Heartbeat(admin_, hb, {{t.id, "running", {1}}}).ok());
  EXPECT_EQ(Get(t.id).slice_id, comp.id);
}

TEST_F(ControlPlaneTest, MigCreateFailureRebindsWithAFreshEnv) {
  Register(Node("n1", {Gpu(0, 81920, true), Gpu(1)}));
  const Caller alice = TenantUser("alice");
  const TaskRow t = Submit(alice, 4096);
  Bind();
  const TaskRow gold = Get(t.id);
  ASSERT_EQ(gold.env.at("HETEROFLOW_SLICE_QOS"), "gold");
  auto claimed = cp_->ClaimSliceRequests(admin_, "n1");
  ASSERT_TRUE(claimed.ok());
  ASSERT_EQ(claimed->size(), 1u);
  MigResult failed;
  failed.ok = false;
  failed.error = "insufficient resources";
  ASSERT_TRUE(cp_->ReportSliceRequest(admin_, (*claimed)[0].id, failed).ok());
  TaskRow back = Get(t.id);
  EXPECT_EQ(back.state, TaskState::kPending);
  EXPECT_NE(back.pending_reason.find("insufficient resources"),
            std::string::npos);
  EXPECT_EQ(back.env.count("HETEROFLOW_SLICE_ID"), 0u);
  // Make the MIG GPU unattractive so the rebind lands elsewhere.
  NodeReport hb = Node("n1", {Gpu(0, 81920, false), Gpu(1)});
  hb.gpus[0].lost = true;
  ASSERT_TRUE(cp_->Heartbeat(admin_, hb, {}).ok());
  EXPECT_EQ(Bind(), 1);
  const TaskRow rebound = Get(t.id);
  const SliceRow slice = SliceOf(rebound);
  EXPECT_EQ(slice.gpu_indices[0], 1);
  EXPECT_EQ(rebound.env.at("HETEROFLOW_SLICE_ID"), std::to_string(slice.id));
  EXPECT_EQ(rebound.env.at("HETEROFLOW_GPU_INDEX"), "1");
  EXPECT_EQ(rebound.env.at("CUDA_VISIBLE_DEVICES"), "n1-GPU-1");
  EXPECT_EQ(rebound.env.at("HETEROFLOW_SLICE_QOS"), "bronze");
}

TEST_F(ControlPlaneTest, MigCreateThenDestroyReleasesOnlyAfterDestroy) {
  Register(Node("n1", {Gpu(0, 81920, true)}));
  const Caller alice = TenantUser("alice");
  const TaskRow t = Submit(alice, 4096);
  Bind();
  auto claimed = cp_->ClaimSliceRequests(admin_, "n1");
  ASSERT_EQ(claimed->size(), 1u);
  MigResult ok;
  ok.ok = true;
  ok.device_id = "MIG-n1-GPU-0/7/0";
  ASSERT_TRUE(cp_->ReportSliceRequest(admin_, (*claimed)[0].id, ok).ok());
  // Idempotent repeat.
  ASSERT_TRUE(cp_->ReportSliceRequest(admin_, (*claimed)[0].id, ok).ok());
  const TaskRow ready = Get(t.id);
  EXPECT_EQ(ready.labels.at("heteroflow.mig_device_id"), ok.device_id);
  EXPECT_EQ(ready.env.at("NVIDIA_VISIBLE_DEVICES"), ok.device_id);
  EXPECT_EQ(cp_->GetAssignments(admin_, "n1")->run.size(), 1u);
  ASSERT_TRUE(cp_->ReportTaskStates(admin_, "n1",
                                    {{t.id, TaskState::kFailed, 1, "boom"}})
                  .ok());
  EXPECT_EQ(SliceOf(Get(t.id)).state, store::SliceState::kReleasing);
  // Still held, at what the 1g.10gb partition takes (1/8 of the card).
  EXPECT_EQ(cp_->Stats(admin_)->accounted_memory_mib, 81920 / 8);
  auto destroy = cp_->ClaimSliceRequests(admin_, "n1");
  ASSERT_EQ(destroy->size(), 1u);
  EXPECT_EQ((*destroy)[0].action, "destroy");
  MigResult orphaned;
  orphaned.ok = false;
  orphaned.orphaned = true;
  orphaned.error = "processes still attached";
  auto row = cp_->ReportSliceRequest(admin_, (*destroy)[0].id, orphaned);
  ASSERT_TRUE(row.ok());
  EXPECT_NE(row->error.find("MIG_PARTITION_ORPHANED"), std::string::npos);
  EXPECT_EQ(SliceOf(Get(t.id)).state, store::SliceState::kReleasing);
}

TEST_F(ControlPlaneTest, StuckMigCommandsAreMarked) {
  Register(Node("n1", {Gpu(0, 81920, true)}));
  const Caller alice = TenantUser("alice");
  const RowId task_id = Submit(alice, 4096).id;
  Bind();
  clock_.Advance(ControlPlaneOptions{}.mig_command_deadline_ms + 1);
  ASSERT_TRUE(cp_->RunGcOnce().ok());
  auto rows = cp_->ListSliceRequests(admin_, {});
  ASSERT_EQ(rows->items.size(), 2u);
  EXPECT_EQ(rows->items[0].state, store::SliceRequestState::kStuck);
  EXPECT_NE(rows->items[0].error.find("HARDWARE STATE UNKNOWN"),
            std::string::npos);
  // The task does not wait for ever: it is bound again; its old slice
  // stays charged until the node cleans up whatever the create made.
  EXPECT_EQ(rows->items[1].action, "destroy");
  EXPECT_EQ(rows->items[1].state, store::SliceRequestState::kPending);
  EXPECT_EQ(rows->items[1].device_id, "");
  const TaskRow task = Get(task_id);
  EXPECT_EQ(task.state, TaskState::kPending);
  EXPECT_NE(task.pending_reason.find("not confirmed"), std::string::npos);
  auto old = cp_->GetSlice(admin_, rows->items[0].slice_id);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->state, store::SliceState::kReleasing);
}

TEST_F(ControlPlaneTest, LostGpuKeepsItsSlicesAndTakesNoNewOnes) {
  Register(Node("n1", {Gpu(0)}));
  const Caller alice = TenantUser("alice");
  const TaskRow t = Submit(alice, 4096);
  Bind();
  NodeReport lost = Node("n1", {Gpu(0)});
  lost.gpus[0].lost = true;
  ASSERT_TRUE(cp_->Heartbeat(admin_, lost, {}).ok());
  EXPECT_EQ(SliceOf(Get(t.id)).state, store::SliceState::kAllocated);
  const TaskRow waiting = Submit(alice, 1024);
  EXPECT_EQ(Bind(), 0);
  EXPECT_NE(Get(waiting.id).pending_reason.find("lost"), std::string::npos)
      << Get(waiting.id).pending_reason;
  ASSERT_TRUE(cp_->Heartbeat(admin_, Node("n1", {Gpu(0)}), {}).ok());
  EXPECT_EQ(Bind(), 1);
}

// A report sent before the newest one applied and delivered after it (a
// slow network, a retry) is out of date in everything it says: it is
// answered, naming the newer one, and none of it is applied.
TEST_F(ControlPlaneTest, AReportOlderThanTheNewestAppliedIsNotApplied) {
  const auto numbered = [&](std::int64_t epoch, std::int64_t seq,
                            bool gpu0_lost) {
    NodeReport r = Node("n1", {Gpu(0)});
    r.gpus[0].lost = gpu0_lost;
    r.number = ReportNumber{epoch, seq};
    return r;
  };
  auto applied = cp_->RegisterNode(admin_, numbered(2, 5, false));
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_FALSE(applied->newer_applied);
  const Caller alice = TenantUser("alice");
  // Older (same start, or an earlier start of the agent) and equal ones:
  // the GPU they call lost is not taken as lost.
  for (const auto& [epoch, seq] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{
           {2, 4}, {1, 99}, {2, 5}}) {
    auto reply = cp_->Heartbeat(admin_, numbered(epoch, seq, true), {});
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    ASSERT_TRUE(reply->newer_applied) << epoch << "/" << seq;
    EXPECT_EQ(*reply->newer_applied, (ReportNumber{2, 5}));
  }
  (void)Submit(alice, 1024);
  EXPECT_EQ(Bind(), 1);
  // A newer one is applied; an unnumbered one (an older agent) always is.
  auto newer = cp_->Heartbeat(admin_, numbered(3, 1, true), {});
  ASSERT_TRUE(newer.ok());
  EXPECT_FALSE(newer->newer_applied);
  (void)Submit(alice, 1024);
  EXPECT_EQ(Bind(), 0);  // GPU 0 is lost now
  ASSERT_TRUE(cp_->Heartbeat(admin_, Node("n1", {Gpu(0)}), {}).ok());
  EXPECT_EQ(Bind(), 1);
  // The number stays what was applied last, across a restart too.
  Open();
  auto stale = cp_->Heartbeat(admin_, numbered(3, 1, true), {});
  ASSERT_TRUE(stale.ok());
  EXPECT_TRUE(stale->newer_applied);
}

// A registration whose report swaps a card writes without the control
// plane's lock: a bind pass goes on while the write is held (a slow disk),
// and nothing lands on the GPU whose card is changing. Once written, the
// new card takes work; when the write fails, the old card takes work again.
class RegistrationTest : public ControlPlaneTest {
 protected:
  void SwapACardWhileItsWriteIsHeld(bool fails) {
    Register(Node("n1", {Gpu(0)}));
    const Caller alice = TenantUser("alice");
    NodeReport swapped = Node("n1", {Gpu(0)});
    swapped.gpus[0].uuid += "-replaced";
    swapped.gpus[0].memory_mib = 40960;
    store_->HoldNextWrite();
    auto registered = std::async(
        std::launch::async, [&] { return cp_->RegisterNode(admin_, swapped); });
    const struct Unhold {
      FaultyStore* store;
      ~Unhold() { store->Release(); }
    } unhold{store_.get()};
    ASSERT_TRUE(store_->WaitUntilHolding(std::chrono::seconds(10)));
    const TaskRow waiting = Submit(alice, 1024);
    auto bind = std::async(std::launch::async, [&] { return Bind(); });
    ASSERT_EQ(bind.wait_for(std::chrono::seconds(10)),
              std::future_status::ready)
        << "a bind pass waited for a registration's store write";
    EXPECT_EQ(bind.get(), 0) << "placed on the GPU whose card is changing";
    if (fails) store_->fail_writes = 1;
    store_->Release();
    const auto applied = registered.get();
    EXPECT_EQ(applied.ok(), !fails) << applied.status().ToString();
    EXPECT_EQ(Bind(), 1);
    EXPECT_EQ(SliceOf(Get(waiting.id)).gpu_indices, std::vector<int>{0});
    auto nodes = cp_->ListNodes(admin_);
    ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
    ASSERT_EQ(nodes->size(), 1u);
    ASSERT_EQ(nodes->front().gpus.size(), 1u);
    const store::GpuRow& gpu = nodes->front().gpus.front();
    EXPECT_EQ(gpu.memory_mib, fails ? 81920 : 40960);
    EXPECT_FALSE(gpu.lost);
  }
};

TEST_F(RegistrationTest, ASwappedCardTakesWorkOnceItsWriteCommits) {
  SwapACardWhileItsWriteIsHeld(false);
}

TEST_F(RegistrationTest, TheOldCardTakesWorkAgainWhenTheWriteFails) {
  SwapACardWhileItsWriteIsHeld(true);
}

// A defragmentation step reserves its target under the control plane's
// lock and writes the move without it: a bind pass goes on while the
// step's write is held. A write that fails gives the reservation back (the
// ledger matches the store) and the next step moves the task.
TEST_F(ControlPlaneTest, ADefragStepWritesWithoutTheControlPlaneLock) {
  Register(Node("n1", {Gpu(0, 40960), Gpu(1, 81920)}));
  const Caller alice = TenantUser("alice");
  TaskCreate movable;
  movable.name = "movable";
  movable.memory_mib = 15000;
  movable.compute_percent = 10;
  movable.preemptible = true;
  auto small = cp_->CreateTask(alice, movable);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  ASSERT_EQ(Bind(), 1);
  ASSERT_EQ(SliceOf(Get(small->id)).gpu_indices, std::vector<int>{0});
  (void)Submit(alice, 60000, 10);  // only GPU 1 holds it
  ASSERT_EQ(Bind(), 1);
  DefragPlanCreate request;
  request.node = "n1";
  request.goal_memory_mib = 36000;  // GPU 0 once the small task moves
  auto plan = cp_->ProposeDefrag(admin_, request);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ((*plan)["moves"].size(), 1u) << plan->dump();
  const RowId id = (*plan)["id"].get<RowId>();
  ASSERT_TRUE(cp_->ApplyDefrag(admin_, id).ok());
  for (const bool fails : {true, false}) {
    SCOPED_TRACE(fails ? "the step's write fails" : "the step's write commits");
    const TaskRow waiting = Submit(alice, 1024, 10);
    store_->HoldNextWrite();
    auto step =
        std::async(std::launch::async, [&] { return cp_->DefragTickOnce(); });
    const struct Unhold {
      FaultyStore* store;
      ~Unhold() { store->Release(); }
    } unhold{store_.get()};
    ASSERT_TRUE(store_->WaitUntilHolding(std::chrono::seconds(10)));
    auto bind = std::async(std::launch::async, [&] { return Bind(); });
    ASSERT_EQ(bind.wait_for(std::chrono::seconds(10)),
              std::future_status::ready)
        << "a bind pass waited for a defragmentation step's store write";
    EXPECT_EQ(bind.get(), 1);
    EXPECT_EQ(Get(waiting.id).state, TaskState::kScheduled)
        << Get(waiting.id).pending_reason;
    if (fails) store_->fail_writes = 1;
    store_->Release();
    EXPECT_EQ(step.get().ok(), !fails);
    EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok())
        << cp_->CheckLedgerMatchesStore().ToString();
    auto now = cp_->GetDefrag(admin_, id);
    ASSERT_TRUE(now.ok());
    EXPECT_EQ((*now)["moves"][0]["state"], fails ? "pending" : "moving")
        << now->dump();
  }
}

// A heartbeat that repeats its node's last applied report is answered from
// memory: nothing is written (a write would fail here), and the node's
// heartbeat time shows in GET /api/v1/nodes all the same. A changed report
// is applied at once; the row is written again once it is due (15 s plus
// up to 7/8 of it by node id); an out-of-date report is refused even when
// only memory knows the newer number; a restart applies the next in full.
TEST_F(ControlPlaneTest, ARepeatedHeartbeatIsWrittenOnlyWhenItsRowIsDue) {
  ControlPlaneOptions options;
  options.heartbeat_write_every_ms = 15'000;
  Open(options);
  const auto report = [&](std::int64_t seq, bool gpu0_lost) {
    NodeReport r = Node("n1", {Gpu(0)});
    r.gpus[0].lost = gpu0_lost;
    r.number = ReportNumber{1, seq};
    return r;
  };
  const auto heartbeat_at = [&] {
    auto nodes = cp_->ListNodes(admin_);
    EXPECT_TRUE(nodes.ok());
    return nodes.ok() && !nodes->empty() ? (*nodes)[0].node.last_heartbeat_at
                                         : store::Millis{0};
  };
  Register(report(1, false));
  const store::Millis registered = heartbeat_at();
  clock_.Advance(5'000);
  store_->fail_writes = 1;
  auto beat = cp_->Heartbeat(admin_, report(2, false), {});
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();
  EXPECT_FALSE(beat->newer_applied);
  EXPECT_EQ(store_->fail_writes.load(), 1) << "a repeat was written";
  EXPECT_EQ(heartbeat_at(), registered + 5'000);
  store_->fail_writes = 0;
  // Out of date: the stored row says 1/1, memory 1/2.
  beat = cp_->Heartbeat(admin_, report(2, false), {});
  ASSERT_TRUE(beat.ok());
  ASSERT_TRUE(beat->newer_applied);
  EXPECT_EQ(*beat->newer_applied, (ReportNumber{1, 2}));
  // A change is applied at once: GPU 0 lost takes no slice.
  const Caller alice = TenantUser("alice");
  ASSERT_TRUE(cp_->Heartbeat(admin_, report(3, true), {}).ok());
  (void)Submit(alice, 1024);
  EXPECT_EQ(Bind(), 0);
  ASSERT_TRUE(cp_->Heartbeat(admin_, report(4, false), {}).ok());
  EXPECT_EQ(Bind(), 1);
  // Due after at most 15 s + 7/8 of it: the repeat writes (and so fails
  // while writes fail), then is written.
  clock_.Advance(29'000);
  store_->fail_writes = 1;
  EXPECT_FALSE(cp_->Heartbeat(admin_, report(5, false), {}).ok());
  EXPECT_EQ(store_->fail_writes.load(), 0);
  ASSERT_TRUE(cp_->Heartbeat(admin_, report(6, false), {}).ok());
  // What was written survives a restart, which applies the next in full.
  Open(options);
  beat = cp_->Heartbeat(admin_, report(6, false), {});
  ASSERT_TRUE(beat.ok());
  ASSERT_TRUE(beat->newer_applied);
  EXPECT_EQ(*beat->newer_applied, (ReportNumber{1, 6}));
  store_->fail_writes = 1;
  EXPECT_FALSE(cp_->Heartbeat(admin_, report(7, false), {}).ok())
      << "the first report after a restart is applied in full";
  store_->fail_writes = 0;
}

// A waiting task's pending_reason is rewritten when its class changes, not
// when only its counts move (a GPU joined that does not take it either);
// that is written at most once a minute.
TEST_F(ControlPlaneTest, APendingReasonIsRewrittenOnlyWhenItsClassChanges) {
  Register(Node("n1", {Gpu(0)}));
  const Caller alice = TenantUser("alice");
  (void)Submit(alice, 61'440);
  const TaskRow waiting = Submit(alice, 61'440);
  EXPECT_EQ(Bind(), 1);
  const std::string first = Get(waiting.id).pending_reason;
  EXPECT_STREQ(PendingReasonClass(first), "memory") << first;
  // Counts change (one more GPU, too small as well): not written.
  Register(Node("n2", {Gpu(0, 40'960)}));
  EXPECT_EQ(Bind(), 0);
  EXPECT_EQ(Get(waiting.id).pending_reason, first);
  // A minute on, the new counts are written.
  clock_.Advance(61'000);
  Register(Node("n3", {Gpu(0, 40'960)}));
  EXPECT_EQ(Bind(), 0);
  const std::string later = Get(waiting.id).pending_reason;
  EXPECT_NE(later, first);
  EXPECT_STREQ(PendingReasonClass(later), "memory") << later;
}

// The server's default policy, once it has learned, still sees a GPU in MIG
// mode take a slice without a compute share at its partition's charge (a
// 1g partition is 14%), where a plain GPU accounts it at 50%: with 44% of the
// compute left the task is bound, not left pending.
TEST_F(ControlPlaneTest,
       HfFragBindsADefaultedShareOnAMigGpuWithLessThanHalfLeft) {
  ControlPlaneOptions options;
  options.learned.cold_start_tasks = 1;
  Open(options);
  Register(Node("mig", {Gpu(0, 81920, /*mig=*/true)}));
  const Caller alice = TenantUser("alice");
  const TaskRow small = Submit(alice, 4096, 10);  // 1g.10gb, 14%
  EXPECT_EQ(Bind(), 1);
  const TaskRow big = Submit(alice, 30000);  // 3g.40gb, 42%
  EXPECT_EQ(Bind(), 1);
  auto stats = cp_->Stats(admin_);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->policy, "hf-frag");
  EXPECT_FALSE(stats->policy_cold_start);
  const TaskRow two = Submit(alice, 15000);
  EXPECT_EQ(Bind(), 1) << Get(two.id).pending_reason;
  const SliceRow slice = SliceOf(Get(two.id));
  EXPECT_EQ(slice.mig_profile, "1g.20gb");
  EXPECT_EQ(slice.compute_percent, 14);
  EXPECT_EQ(SliceOf(Get(small.id)).mig_profile, "1g.10gb");
  EXPECT_EQ(SliceOf(Get(big.id)).mig_profile, "3g.40gb");
}

TEST_F(ControlPlaneTest, HfFragLearnsFromTheTaskHistoryAndKeepsItOnRestart) {
  ControlPlaneOptions options;
  options.learned.cold_start_tasks = 5;
  Open(options);
  Register(Node("n1", {Gpu(0), Gpu(1)}));
  const Caller alice = TenantUser("alice", "g");
  auto placement = [&] {
    auto stats = cp_->Stats(admin_);
    EXPECT_TRUE(stats.ok());
    return *stats;
  };
  EXPECT_EQ(placement().policy, "hf-frag");
  EXPECT_TRUE(placement().policy_learns);
  EXPECT_TRUE(placement().policy_cold_start);
  EXPECT_EQ(placement().policy_tasks_learned, 0);
  for (int i = 0; i < 4; ++i) Submit(alice, 8192, 10);
  EXPECT_EQ(Bind(), 4);
  EXPECT_EQ(placement().policy_tasks_learned, 4);
  EXPECT_TRUE(placement().policy_cold_start) << "4 of 5 tasks seen";
  // A task the scheduler sees again (it waits) is learned once.
  const TaskRow big = Submit(alice, 200000, 10);
  Bind();
  Bind();
  EXPECT_EQ(Get(big.id).state, TaskState::kPending);
  EXPECT_EQ(placement().policy_tasks_learned, 5);
  EXPECT_FALSE(placement().policy_cold_start);
  Submit(alice, 4096, 10);
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(placement().policy_tasks_learned, 6);

  // A restart reads the history from the store: every task, ended or not.
  Open(options);
  EXPECT_EQ(placement().policy_tasks_learned, 6);
  EXPECT_FALSE(placement().policy_cold_start);
  // Tasks already in the history are not learned twice when scheduled.
  Bind();
  EXPECT_EQ(placement().policy_tasks_learned, 6);

  // Best-Fit learns nothing and says so.
  options.policy = "best-fit";
  Open(options);
  EXPECT_EQ(placement().policy, "best-fit");
  EXPECT_FALSE(placement().policy_learns);
}

TEST_F(ControlPlaneTest, RestartRebuildsTheLedgerAndNeverReusesIds) {
  Register(Node("n1", {Gpu(0), Gpu(1)}));
  const Caller alice = TenantUser("alice", "g");
  std::vector<RowId> tasks;
  tasks.reserve(6);
  for (int i = 0; i < 6; ++i) tasks.push_back(Submit(alice, 10000 + i, 10).id);
  Bind();
  // The newest slice is released (its task ended): its id must still
  // never come back.
  const RowId highest = *Get(tasks[5]).slice_id;
  ASSERT_TRUE(cp_->ReportTaskStates(admin_, "n1",
                                    {{tasks[5], TaskState::kSucceeded, 0, ""}})
                  .ok());
  const std::int64_t accounted = cp_->Stats(admin_)->accounted_memory_mib;
  Open();
  EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok())
      << cp_->CheckLedgerMatchesStore().ToString();
  EXPECT_EQ(cp_->Stats(admin_)->accounted_memory_mib, accounted);
  const Caller again = TenantUser("alice");
  const TaskRow t = Submit(again, 1024);
  EXPECT_EQ(Bind(), 1);
  EXPECT_GT(*Get(t.id).slice_id, highest);
  // The tenancy survived: an outsider does not land next to alice.
  const Caller bob = TenantUser("bob");
  const TaskRow b = Submit(bob, 1024);
  EXPECT_EQ(Bind(), 1);
  const int bob_gpu = SliceOf(Get(b.id)).gpu_indices[0];
  for (RowId id : tasks) {
    const TaskRow task = Get(id);
    if (task.state != TaskState::kScheduled) continue;
    auto s = cp_->GetSlice(admin_, *task.slice_id);
    if (s->state == store::SliceState::kAllocated) {
      EXPECT_NE(s->gpu_indices[0], bob_gpu);
    }
  }
}

// What a node's runtime can start is stored with the node, so a server
// rebuilt from the store (a restart, a new leader) keeps to it before the
// node reports again.
TEST_F(ControlPlaneTest, ANodesRuntimeDecidesWhatItTakesAcrossARestart) {
  NodeReport processes = Node("processes", {Gpu(0, 40960)});
  processes.runtime = "process";
  NodeReport containers = Node("containers", {Gpu(0, 81920)});
  containers.runtime = "docker";
  Register(processes);
  Register(containers);
  const Caller alice = TenantUser("alice");
  const auto create = [&](const std::string& image,
                          std::vector<std::string> command) {
    TaskCreate t;
    t.name = "t";
    t.image = image;
    t.command = std::move(command);
    t.memory_mib = 4096;
    t.compute_percent = 10;
    auto row = cp_->CreateTask(alice, t);
    EXPECT_TRUE(row.ok()) << row.status().ToString();
    return row.ok() ? row->id : RowId{0};
  };
  const auto node_of = [&](RowId task) -> std::string {
    const std::optional<RowId> node = Get(task).node_id;
    for (const char* name : {"processes", "containers"}) {
      auto v = cp_->GetNode(admin_, name);
      if (v.ok() && node == v->node.id) return name;
    }
    return "";
  };
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "before the restart" : "after it");
    const RowId image = create("img:1", {});
    const RowId command = create("", {"/bin/true"});
    const RowId neither = create("", {});
    Bind();
    EXPECT_EQ(node_of(image), "containers");
    EXPECT_EQ(node_of(command), "processes");
    const TaskRow waiting = Get(neither);
    EXPECT_EQ(waiting.state, TaskState::kPending);
    EXPECT_NE(waiting.pending_reason.find("neither a command nor an image"),
              std::string::npos)
        << waiting.pending_reason;
    Open();
  }
}

// Hole: restart recovery skipped a slice it could not restore and went on
// binding onto the GPU that slice occupies (fail-open).
TEST_F(ControlPlaneTest, RecoveryThatCannotRestoreASliceFencesItsGpu) {
  Register(Node("n1", {Gpu(0, 40960), Gpu(1, 40960)}));
  const Caller alice = TenantUser("alice");
  const TaskRow first = Submit(alice, 30000);
  Bind();
  const SliceRow held = SliceOf(Get(first.id));
  // The store says GPU `held` also holds 20000 MB more: more than it has.
  cp_.reset();
  SliceRow extra = held;
  extra.id = held.id + 100;
  extra.task_id.reset();
  extra.memory_mib = 20000;
  extra.origin = "admin";
  ASSERT_TRUE(store_
                  ->Write([&](store::Txn& txn) -> Status {
                    return txn.InsertSlice(extra);
                  })
                  .ok());
  Open();
  // Nothing new lands on that GPU while the ledger cannot account for it.
  const TaskRow next = Submit(alice, 1024, 60);
  EXPECT_EQ(Bind(), 1);
  EXPECT_NE(SliceOf(Get(next.id)).gpu_indices[0], held.gpu_indices[0]);
  const TaskRow big = Submit(alice, 1024, 50);  // no room beside `next`
  EXPECT_EQ(Bind(), 0);
  bool refused = false;
  auto history = cp_->History(admin_, {});
  ASSERT_TRUE(history.ok());
  for (const auto& h : history->items) {
    refused |= h.op == "recovery_refused" && h.slice_id == extra.id;
  }
  EXPECT_TRUE(refused);
  // The operator deletes the slice: the GPU takes work again.
  ASSERT_TRUE(cp_->DeleteSlice(admin_, extra.id, "not real").ok());
  ASSERT_TRUE(cp_->ReportTaskStates(admin_, "n1",
                                    {{first.id, TaskState::kSucceeded, 0, ""}})
                  .ok());
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(Get(big.id).state, TaskState::kScheduled);
}

// Hole: after four MIG GPUs had no room, a good placement on a GPU that is
// not in MIG mode was released too, and the task starved.
TEST_F(ControlPlaneTest, ManyFullMigGpusDoNotStarveATaskANonMigGpuCanTake) {
  std::vector<GpuReport> gpus;
  for (int i = 0; i < 5; ++i) {
    GpuReport g = Gpu(i, 81920, /*mig=*/true);
    g.mig_devices = std::vector<std::string>{"MIG-orphan-" + std::to_string(i)};
    gpus.push_back(g);
  }
  gpus.push_back(Gpu(5, 81920));
  const NodeReport report = Node("n1", gpus);
  Register(report);
  // The partitions no slice owns block gold work on every MIG GPU.
  ASSERT_TRUE(cp_->Heartbeat(admin_, report, {}).ok());
  const Caller alice = TenantUser("alice");
  const TaskRow t = Submit(alice, 4096);
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(SliceOf(Get(t.id)).gpu_indices, std::vector<int>{5});
}

// The ledger charges a gold slice as its partition and says where it sits;
// the create command asks the agent for exactly that place.
TEST_F(ControlPlaneTest, GoldSlicesAreChargedAndCreatedWhereTheLedgerPutThem) {
  Register(Node("n1", {Gpu(0, 81920, /*mig=*/true)}));
  const Caller alice = TenantUser("alice");
  const TaskRow small = Submit(alice, 4096);
  const TaskRow big = Submit(alice, 30000);
  EXPECT_EQ(Bind(), 2);
  const SliceRow s1 = SliceOf(Get(small.id));
  const SliceRow s2 = SliceOf(Get(big.id));
  EXPECT_EQ(s1.mig_profile, "1g.10gb");
  EXPECT_EQ(s1.mig_start, 0);
  EXPECT_EQ(s1.memory_mib, 81920 / 8);
  EXPECT_EQ(s2.mig_profile, "3g.40gb");
  EXPECT_EQ(s2.mig_start, 4);
  EXPECT_EQ(s2.compute_percent, 42);
  auto creates = cp_->ClaimSliceRequests(admin_, "n1");
  ASSERT_TRUE(creates.ok()) << creates.status().ToString();
  ASSERT_EQ(creates->size(), 2u);
  for (const store::SliceRequestRow& cmd : *creates) {
    const SliceRow& s = cmd.slice_id == s1.id ? s1 : s2;
    EXPECT_EQ(cmd.profile, s.mig_profile);
    EXPECT_EQ(cmd.mig_start, s.mig_start);
  }
  // A third 3g.40gb has no legal place left (slots 1-3 are free, but a
  // 3g.40gb starts at 0 or 4): it waits and says why.
  const TaskRow third = Submit(alice, 30000);
  EXPECT_EQ(Bind(), 0);
  const TaskRow waiting = Get(third.id);
  EXPECT_EQ(waiting.state, TaskState::kPending);
  EXPECT_NE(waiting.pending_reason.find("MIG partition"), std::string::npos)
      << waiting.pending_reason;
}

// A policy whose choice the ledger refuses (a bug of the platform, not of
// the task) the first `broken` times.
class BrokenPolicy final : public ledger::PlacementPolicy {
 public:
  std::string_view name() const override { return "broken"; }
  std::optional<std::vector<GpuId>> Choose(
      const ledger::ClusterView& view,
      const ledger::PlacementRequest& request) const override {
    if (broken > 0) {
      --broken;
      return std::vector<GpuId>{GpuId(999)};
    }
    for (std::size_t slot = 0; slot < view.gpu_slot_count(); ++slot) {
      if (view.HasGpu(GpuId(slot)) &&
          !view.CheckSlice(view.gpu(GpuId(slot)), request)) {
        return std::vector<GpuId>{GpuId(slot)};
      }
    }
    return std::nullopt;
  }
  mutable int broken = 1;
};

// Hole: a policy/ledger disagreement (Internal) failed the user's task for
// good.
TEST_F(ControlPlaneTest, APolicyTheLedgerRefusesDelaysTheTaskButNeverFailsIt) {
  BrokenPolicy policy;
  ControlPlaneOptions o;
  o.policy_for_testing = &policy;
  Open(o);
  Register(Node("n1", {Gpu(0)}));
  const Caller alice = TenantUser("alice");
  const TaskRow t = Submit(alice, 1024);
  EXPECT_EQ(Bind(), 0);
  const TaskRow waiting = Get(t.id);
  EXPECT_EQ(waiting.state, TaskState::kPending);
  EXPECT_NE(waiting.pending_reason.find("retrying"), std::string::npos)
      << waiting.pending_reason;
  clock_.Advance(ControlPlaneOptions{}.retry_interval_ms);
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(Get(t.id).state, TaskState::kScheduled);
}

// Hole: GC counted the slices it meant to release, not the ones it did (a
// gold slice waits for its partition's destroy).
TEST_F(ControlPlaneTest, GcCountsOnlyWhatItReallyReleased) {
  Register(Node("n1", {Gpu(0, 81920, true)}));
  const Caller alice = TenantUser("alice");
  const TaskRow t = Submit(alice, 4096);
  Bind();
  auto create = cp_->ClaimSliceRequests(admin_, "n1");
  ASSERT_EQ(create->size(), 1u);
  MigResult made;
  made.ok = true;
  made.device_id = "MIG-1";
  ASSERT_TRUE(cp_->ReportSliceRequest(admin_, (*create)[0].id, made).ok());
  // The task ends without the server hearing (its row says so directly).
  ASSERT_TRUE(store_
                  ->Write([&](store::Txn& txn) -> Status {
                    auto row = txn.GetTask(t.id);
                    if (!row.ok()) return row.status();
                    row->state = TaskState::kSucceeded;
                    return txn.UpdateTask(*row).status();
                  })
                  .ok());
  clock_.Advance(61'000);
  auto released = cp_->RunGcOnce();
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(*released, 0);  // releasing: the partition is still there
  EXPECT_EQ(SliceOf(Get(t.id)).state, store::SliceState::kReleasing);
}

// Hole: several scans read one page of 1,000 rows and stopped there. They
// all page through ForEachRow now.
TEST(ForEachRowTest, ScansEveryPageNotJustTheFirst) {
  std::vector<store::SliceRequestRow> table(2'345);
  for (std::size_t i = 0; i < table.size(); ++i) {
    table[i].id = static_cast<RowId>(i + 1);
  }
  int pages = 0;
  const auto list = [&](const store::SliceRequestFilter& f)
      -> StatusOr<std::vector<store::SliceRequestRow>> {
    ++pages;
    std::vector<store::SliceRequestRow> out;
    for (const auto& row : table) {
      if (row.id > f.after_id && static_cast<int>(out.size()) < f.limit) {
        out.push_back(row);
      }
    }
    return out;
  };
  store::SliceRequestFilter f;
  f.limit = 1'000;
  std::int64_t seen = 0;
  ASSERT_TRUE((ForEachRow<store::SliceRequestRow>(
                   f, list,
                   [&](store::SliceRequestRow& row) -> Status {
                     seen += row.id;
                     return Status::Ok();
                   }))
                  .ok());
  EXPECT_EQ(seen, 2'345 * 2'346 / 2);
  EXPECT_EQ(pages, 3);
}

TEST_F(ControlPlaneTest, ReadsAreNarrowedToTheCallersTenant) {
  Register(Node("n1", {Gpu(0), Gpu(1)}));
  const Caller a = TenantUser("a");
  const Caller b = TenantUser("b");
  const TaskRow ta = Submit(a, 4096);
  Submit(b, 2048);
  Bind();
  EXPECT_EQ(cp_->GetTask(b, ta.id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cp_->GetSlice(b, *Get(ta.id).slice_id).status().code(),
            StatusCode::kNotFound);
  auto slices = cp_->ListSlices(b, {});
  ASSERT_EQ(slices->items.size(), 1u);
  EXPECT_EQ(slices->items[0].tenant_id, *b.tenant_id);
  auto stats = cp_->Stats(b);
  EXPECT_FALSE(stats->cluster_scope);
  EXPECT_EQ(stats->accounted_memory_mib, 2048);
  for (const GpuStats& g : stats->per_gpu) {
    EXPECT_EQ(g.tenants, std::vector<std::string>{"b"});
  }
  auto history = cp_->History(b, {});
  for (const auto& h : history->items) EXPECT_EQ(h.tenant_id, b.tenant_id);
  Caller node;
  node.role = Role::kNode;
  EXPECT_TRUE(cp_->Stats(node)->per_gpu.empty());
}

TEST_F(ControlPlaneTest, TokensAreHashedAndRevocable) {
  auto bootstrap = cp_->BootstrapAdmin(std::nullopt);
  ASSERT_TRUE(bootstrap.ok());
  ASSERT_TRUE(bootstrap->has_value());
  EXPECT_FALSE(cp_->BootstrapAdmin(std::nullopt)->has_value());  // once
  auto admin = cp_->Authenticate(**bootstrap);
  ASSERT_TRUE(admin.ok());
  EXPECT_TRUE(admin->admin());
  TenantUser("alice");
  auto created = cp_->CreateToken(*admin, Role::kUser, "alice", "ci");
  ASSERT_TRUE(created.ok());
  auto user = cp_->Authenticate(created->second);
  ASSERT_TRUE(user.ok());
  EXPECT_EQ(user->tenant, "alice");
  auto tokens = cp_->ListTokens(*admin);
  for (const auto& t : *tokens) EXPECT_NE(t.hash, created->second);
  ASSERT_TRUE(cp_->RevokeToken(*admin, created->first.id).ok());
  EXPECT_EQ(cp_->Authenticate(created->second).status().code(),
            StatusCode::kUnauthenticated);
  EXPECT_EQ(cp_->CreateToken(*user, Role::kUser, "alice", "").status().code(),
            StatusCode::kPermissionDenied);
}

TEST_F(ControlPlaneTest, SharingApprovalLetsTwoTenantsShareUntilItExpires) {
  Register(Node("n1", {Gpu(0), Gpu(1)}));
  const Caller a = TenantUser("a");
  const Caller b = TenantUser("b");
  const TaskRow ta = Submit(a, 40960, 10);
  Bind();
  const int gpu_a = SliceOf(Get(ta.id)).gpu_indices[0];
  ApprovalCreate approve;
  approve.tenant_a = "b";
  approve.tenant_b = "a";
  approve.reason = "joint evaluation";
  approve.ttl_s = 3600;
  // Only platform admins approve; every field is checked.
  EXPECT_EQ(cp_->CreateApproval(a, approve).status().code(),
            StatusCode::kPermissionDenied);
  ApprovalCreate bad = approve;
  bad.reason.clear();
  EXPECT_EQ(cp_->CreateApproval(admin_, bad).status().field(), "reason");
  bad = approve;
  bad.expires_at = clock_.NowMillis() + 1000;  // both expiry forms
  EXPECT_EQ(cp_->CreateApproval(admin_, bad).status().code(),
            StatusCode::kInvalidArgument);
  bad = approve;
  bad.tenant_b = "nobody";
  EXPECT_EQ(cp_->CreateApproval(admin_, bad).status().field(), "tenant_b");
  auto row = cp_->CreateApproval(admin_, approve);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_LT(row->tenant_a, row->tenant_b);
  EXPECT_EQ(row->created_by, admin_.Actor());
  // Best-Fit now puts b next to a (the fuller GPU).
  const TaskRow tb = Submit(b, 4096, 10);
  Bind();
  EXPECT_EQ(SliceOf(Get(tb.id)).gpu_indices[0], gpu_a);
  // The approval survives a restart, and so does the shared GPU.
  Open();
  const TaskRow tb2 = Submit(b, 4096, 10);
  Bind();
  EXPECT_EQ(SliceOf(Get(tb2.id)).gpu_indices[0], gpu_a);
  // Past its expiry nothing new is placed next to the other tenant.
  clock_.Advance(std::int64_t{3600} * 1000);
  const TaskRow tb3 = Submit(b, 4096, 10);
  Bind();
  EXPECT_NE(SliceOf(Get(tb3.id)).gpu_indices[0], gpu_a);
  EXPECT_EQ(SliceOf(Get(tb.id)).state, store::SliceState::kAllocated);
  // Recovery with an expired approval still restores the shared slices.
  Open();
  EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok())
      << cp_->CheckLedgerMatchesStore().ToString();
  auto list = cp_->ListApprovals(admin_);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_FALSE((*list)[0].ActiveAt(clock_.NowMillis()));
}

// An operator's slice is a placement like a task's: an approval past its
// expiry places none next to the other tenant, though nothing else (no
// bind pass) has noticed the expiry yet.
TEST_F(ControlPlaneTest, AnExpiredApprovalPlacesNoOperatorSlice) {
  Register(Node("n1", {Gpu(0)}));
  const Caller a = TenantUser("a");
  (void)TenantUser("b");
  const TaskRow ta = Submit(a, 4096, 10);
  Bind();
  ASSERT_EQ(Get(ta.id).state, TaskState::kScheduled);
  ApprovalCreate approve;
  approve.tenant_a = "a";
  approve.tenant_b = "b";
  approve.reason = "pairing";
  approve.expires_at = clock_.NowMillis() + 60'000;
  ASSERT_TRUE(cp_->CreateApproval(admin_, approve).ok());
  SliceCreate reserve;
  reserve.tenant = "b";
  reserve.node = "n1";
  reserve.memory_mib = 1024;
  reserve.compute_percent = 5;
  auto shared = cp_->CreateSlice(admin_, reserve);
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  clock_.Advance(60'000);
  EXPECT_EQ(cp_->CreateSlice(admin_, reserve).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok());
}

TEST_F(ControlPlaneTest, RevokedApprovalClosesTheSharedGpu) {
  Register(Node("n1", {Gpu(0), Gpu(1)}));
  const Caller a = TenantUser("a");
  const Caller b = TenantUser("b");
  const TaskRow ta = Submit(a, 40960, 10);
  Bind();
  const int gpu_a = SliceOf(Get(ta.id)).gpu_indices[0];
  ApprovalCreate approve;
  approve.tenant_a = "a";
  approve.tenant_b = "b";
  approve.reason = "incident 42";
  approve.expires_at = clock_.NowMillis() + 60'000;
  auto row = cp_->CreateApproval(admin_, approve);
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  auto revoked = cp_->RevokeApproval(admin_, row->id);
  ASSERT_TRUE(revoked.ok());
  EXPECT_TRUE(revoked->revoked_at.has_value());
  EXPECT_TRUE(cp_->RevokeApproval(admin_, row->id).ok());  // idempotent
  EXPECT_EQ(cp_->RevokeApproval(admin_, 999).status().code(),
            StatusCode::kNotFound);
  const TaskRow tb = Submit(b, 4096, 10);
  Bind();
  EXPECT_NE(SliceOf(Get(tb.id)).gpu_indices[0], gpu_a);
  auto history = cp_->History(admin_, {});
  int approval_entries = 0;
  for (const auto& h : history->items) {
    approval_entries += h.op == "approve_sharing" || h.op == "revoke_sharing";
  }
  EXPECT_EQ(approval_entries, 2);
}

TEST_F(ControlPlaneTest, TaskLogsStopGrowingAtTheCap) {
  Register(Node("n1", {Gpu(0)}));
  const TaskRow t = Submit(TenantUser("a"), 4096, 10);
  Bind();
  const std::string big(kMaxTaskLogBytes - 10, 'x');
  auto size = cp_->AppendTaskLog(admin_, "n1", t.id, 0, big);
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  size = cp_->AppendTaskLog(admin_, "n1", t.id, *size, "0123456789abcdef");
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, kMaxTaskLogBytes);
  size = cp_->AppendTaskLog(admin_, "n1", t.id, *size, "more");
  EXPECT_EQ(*size, kMaxTaskLogBytes);
  auto log = cp_->ReadTaskLog(admin_, t.id, kMaxTaskLogBytes - 12, 100);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->data, "xx0123456789");
  EXPECT_TRUE(log->truncated);
  EXPECT_EQ(cp_->AppendTaskLog(admin_, "nope", t.id, 0, "").status().code(),
            StatusCode::kNotFound);
}

TEST_F(ControlPlaneTest, BoundNodeTokenActsOnlyForItsNode) {
  auto bootstrap = cp_->BootstrapAdmin(std::nullopt);
  auto admin = cp_->Authenticate(**bootstrap);
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(cp_->CreateToken(*admin, Role::kUser, "default", "", "n1")
                .status()
                .field(),
            "node");
  auto created = cp_->CreateToken(*admin, Role::kNode, std::nullopt, "", "n1");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->first.node, std::optional<std::string>("n1"));
  auto node = cp_->Authenticate(created->second);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->node, std::optional<std::string>("n1"));
  EXPECT_TRUE(cp_->RegisterNode(*node, Node("n1", {Gpu(0)})).ok());
  EXPECT_EQ(cp_->RegisterNode(*node, Node("n2", {Gpu(0)})).status().code(),
            StatusCode::kPermissionDenied);
  Register(Node("n2", {Gpu(0)}));
  EXPECT_EQ(cp_->GetAssignments(*node, "n2").status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(cp_->GetAssignments(*node, "n1").ok());
}

// The real loops (scheduler, GC) with clients creating, cancelling and
// heartbeating at once; run under ThreadSanitizer by `make test`.
TEST_F(ControlPlaneTest, ConcurrentClientsWithRunningLoops) {
  Register(Node("n1", {Gpu(0), Gpu(1, 40960, false, true)}));
  const Caller alice = TenantUser("alice", "g");
  const Caller bob = TenantUser("bob", "g");
  cp_->Start();
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  threads.reserve(3);
  std::mutex mu;
  std::vector<RowId> created;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 60; ++i) {
        TaskCreate t;
        t.name = "c";
        t.memory_mib = 1024 * (1 + (i + w) % 8);
        t.compute_percent = 5;
        auto row = cp_->CreateTask(w % 2 == 0 ? alice : bob, t);
        ASSERT_TRUE(row.ok()) << row.status().ToString();
        std::lock_guard lock(mu);
        created.push_back(row->id);
      }
    });
  }
  threads.emplace_back([&] {
    std::size_t next = 0;
    while (!stop.load()) {
      RowId id = 0;
      {
        std::lock_guard lock(mu);
        if (next < created.size()) id = created[next];
        next += 3;
      }
      if (id != 0) (void)cp_->CancelTask(admin_, id);
      std::this_thread::yield();
    }
  });
  threads.emplace_back([&] {
    while (!stop.load()) {
      ASSERT_TRUE(
          cp_->Heartbeat(admin_,
                         Node("n1", {Gpu(0), Gpu(1, 40960, false, true)}), {})
              .ok());
      (void)cp_->Stats(admin_);
      (void)cp_->ListSlices(admin_, {});
    }
  });
  for (int w = 0; w < 3; ++w) threads[w].join();
  // Let the scheduler catch up: every pending task has been tried.
  auto untried = [&] {
    auto pending =
        cp_->ListTasks(admin_, {.state = TaskState::kPending, .limit = 1000});
    int n = 0;
    for (const TaskRow& t : pending->items) {
      n += t.pending_reason == "waiting for the scheduler" ? 1 : 0;
    }
    return n;
  };
  for (int i = 0; i < 300 && untried() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  for (std::size_t i = 3; i < threads.size(); ++i) threads[i].join();
  cp_->Stop();
  // One more pass: the last cancellations may have freed room.
  ASSERT_TRUE(cp_->BindPendingOnce().ok());
  EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok())
      << cp_->CheckLedgerMatchesStore().ToString();
  EXPECT_EQ(untried(), 0);
  // What waits, waits because it does not fit anywhere.
  auto stats = cp_->Stats(admin_);
  auto pending =
      cp_->ListTasks(admin_, {.state = TaskState::kPending, .limit = 1000});
  for (const TaskRow& t : pending->items) {
    for (const GpuStats& g : stats->per_gpu) {
      const bool fits =
          g.total_memory_mib - g.accounted_memory_mib >= *t.memory_mib &&
          100 - g.accounted_compute_percent >= 5;
      EXPECT_FALSE(fits) << "task " << t.id << " waits but fits GPU " << g.index
                         << ": " << t.pending_reason;
    }
  }
}

// ------------------------------------------------- dynamic quota (SPEC 13)

class ResizeTest : public ControlPlaneTest {
 protected:
  // A bronze slice of `memory` MB for alice on n1's only GPU (80 GB), its
  // task reported running.
  TaskRow RunningSlice(std::int64_t memory, bool running = true) {
    const Caller alice = TenantUser("alice");
    const TaskRow t = Submit(alice, memory);
    EXPECT_EQ(Bind(), 1);
    if (running) {
      EXPECT_TRUE(cp_->ReportTaskStates(admin_, "n1",
                                        {{t.id, TaskState::kRunning, {}, ""}})
                      .ok());
    }
    return Get(t.id);
  }

  StatusOr<SliceResize> Resize(RowId slice, std::int64_t memory,
                               const Caller* caller = nullptr) {
    SliceResizeRequest r;
    r.memory_mib = memory;
    r.reason = "test";
    return cp_->ResizeSlice(caller ? *caller : admin_, slice, r);
  }

  std::vector<store::HistoryRow> HistoryOf(RowId slice, const std::string& op) {
    store::HistoryFilter f;
    f.slice_id = slice;
    auto page = cp_->History(admin_, f);
    EXPECT_TRUE(page.ok());
    std::vector<store::HistoryRow> out;
    for (const auto& h : page->items) {
      if (h.op == op) out.push_back(h);
    }
    return out;
  }
};

TEST_F(ResizeTest, RaiseThatFitsIsPersistedAndSurvivesARestart) {
  Register(Node("n1", {Gpu(0)}));
  const TaskRow t = RunningSlice(4096, /*running=*/false);
  const RowId id = *t.slice_id;
  auto r = Resize(id, 8192);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->slice.memory_mib, 8192);
  EXPECT_TRUE(r->warnings.empty()) << r->warnings.front();
  EXPECT_EQ(SliceOf(Get(t.id)).memory_mib, 8192);
  // The task's slice env names the new quota (it starts with it).
  EXPECT_EQ(Get(t.id).env.at("HETEROFLOW_SLICE_MEMORY_MB"), "8192");
  EXPECT_EQ(Get(t.id).env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=8192M");
  // The task's request is what was asked; the slice holds the grant.
  EXPECT_EQ(Get(t.id).memory_mib, 4096);
  EXPECT_EQ(cp_->Stats(admin_)->accounted_memory_mib, 8192);
  const auto history = HistoryOf(id, "slice_resized");
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].memory_mib, 8192);
  EXPECT_EQ(history[0].reason, "memory_mb 4096 -> 8192: test");
  EXPECT_EQ(history[0].actor, admin_.Actor());
  EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok());

  // A restart rebuilds the ledger from the store: the new size holds.
  Open();
  EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok())
      << cp_->CheckLedgerMatchesStore().ToString();
  EXPECT_EQ(cp_->Stats(admin_)->accounted_memory_mib, 8192);
  EXPECT_EQ(SliceOf(Get(t.id)).memory_mib, 8192);
  // Same size again: nothing to do, nothing logged.
  ASSERT_TRUE(Resize(id, 8192).ok());
  EXPECT_EQ(HistoryOf(id, "slice_resized").size(), 1u);
}

TEST_F(ResizeTest, RaiseThatDoesNotFitIsAConflictNamingTheFreeMemory) {
  Register(Node("n1", {Gpu(0)}));
  const TaskRow t = RunningSlice(40960);
  const TaskRow other = Submit(TenantUser("alice"), 30720);
  ASSERT_EQ(Bind(), 1);  // 81920 - 40960 - 30720 = 10240 MB free
  const RowId id = *t.slice_id;
  auto r = Resize(id, 61440);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("has 10240 MB free"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(SliceOf(Get(t.id)).memory_mib, 40960);
  EXPECT_EQ(Get(t.id).env.at("HETEROFLOW_SLICE_MEMORY_MB"), "40960");
  EXPECT_TRUE(HistoryOf(id, "slice_resized").empty());
  EXPECT_EQ(cp_->Stats(admin_)->accounted_memory_mib, 40960 + 30720);
  // Exactly the free memory fits.
  ASSERT_TRUE(Resize(id, 40960 + 10240).ok());
  EXPECT_EQ(cp_->Stats(admin_)->free_memory_mib, 0);
  (void)other;
}

TEST_F(ResizeTest, LoweringWarnsThatTheTaskMayHitOomAndFreesCapacity) {
  Register(Node("n1", {Gpu(0)}));
  const TaskRow t = RunningSlice(61440);
  const TaskRow waiting = Submit(TenantUser("alice"), 40960);
  EXPECT_EQ(Bind(), 0);  // does not fit next to 60 GB
  auto r = Resize(*t.slice_id, 8192);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->slice.memory_mib, 8192);
  ASSERT_FALSE(r->warnings.empty());
  EXPECT_NE(r->warnings[0].find("may hit OOM"), std::string::npos)
      << r->warnings[0];
  // Nothing says the hook runs in this task: that is said too.
  bool unenforced = false;
  for (const std::string& w : r->warnings) {
    unenforced |= w.find("the hook is not attached") != std::string::npos;
  }
  EXPECT_TRUE(unenforced);
  // The freed memory takes the waiting task.
  EXPECT_EQ(Bind(), 1);
  EXPECT_EQ(Get(waiting.id).state, TaskState::kScheduled);
}

TEST_F(ResizeTest, GoldAndWholeGpuSlicesCannotChangeSize) {
  Register(Node("n1", {Gpu(0, 81920, true), Gpu(1)}));
  const Caller alice = TenantUser("alice");
  const TaskRow gold = Submit(alice, 4096);
  const TaskRow whole = Submit(alice, std::nullopt, std::nullopt, 1);
  Bind();
  ASSERT_EQ(SliceOf(Get(gold.id)).qos_level, "gold");
  auto r = Resize(*Get(gold.id).slice_id, 8192);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("a partition cannot change size"),
            std::string::npos)
      << r.status().message();
  r = Resize(*Get(whole.id).slice_id, 8192);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("whole GPUs"), std::string::npos)
      << r.status().message();
}

TEST_F(ResizeTest, ValidationPermissionsAndReleasedSlices) {
  Register(Node("n1", {Gpu(0)}));
  const TaskRow t = RunningSlice(4096);
  const RowId id = *t.slice_id;
  for (std::int64_t bad : {0, 16, 100, -32}) {
    auto r = Resize(id, bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(r.status().field(), "memory_mb") << bad;
  }
  const Caller user = TenantUser("alice");
  EXPECT_EQ(Resize(id, 8192, &user).status().code(),
            StatusCode::kPermissionDenied);
  Caller own = user;
  own.role = Role::kTenantAdmin;
  Caller other = TenantUser("bob");
  other.role = Role::kTenantAdmin;
  EXPECT_EQ(Resize(id, 8192, &other).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(Resize(id, 8192, &own).ok());
  EXPECT_EQ(HistoryOf(id, "slice_resized")[0].actor, own.Actor());
  ASSERT_TRUE(cp_->ReportTaskStates(admin_, "n1",
                                    {{t.id, TaskState::kSucceeded, 0, ""}})
                  .ok());
  EXPECT_EQ(Resize(id, 4096).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(ResizeTest, AFailedWriteLeavesTheLedgerAsItWas) {
  Register(Node("n1", {Gpu(0)}));
  const TaskRow t = RunningSlice(4096);
  store_->fail_writes = 1;
  EXPECT_FALSE(Resize(*t.slice_id, 8192).ok());
  EXPECT_EQ(cp_->Stats(admin_)->accounted_memory_mib, 4096);
  store_->fail_writes = 1;
  EXPECT_FALSE(Resize(*t.slice_id, 1024).ok());
  EXPECT_EQ(cp_->Stats(admin_)->accounted_memory_mib, 4096);
  EXPECT_TRUE(cp_->CheckLedgerMatchesStore().ok());
}

// ------------------------------------------------------ hook enforcement

TEST_F(ResizeTest, HookIsListedOnlyOnceTheAgentReportsItAttached) {
  NodeReport node = Node("n1", {Gpu(0, 81920, false, true)});
  node.hook_available = true;
  Register(node);
  const TaskRow t = RunningSlice(4096);
  const RowId id = *t.slice_id;
  // Bound with the hook available: MPS only, the hook is not proven yet.
  EXPECT_EQ(SliceOf(t).enforcement, std::vector<std::string>{"mps"});
  EXPECT_FALSE(cp_->SliceHookUsage(id).has_value());

  HookReport hook;
  hook.quota_bytes = std::int64_t{4096} << 20;
  RunningTask running{t.id, "running", {0}, hook};
  auto reply = cp_->Heartbeat(admin_, node, {running});
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  // The reply names the quota the task's region must hold.
  ASSERT_EQ(reply->quotas.size(), 1u);
  EXPECT_EQ(reply->quotas[0].task_id, t.id);
  EXPECT_EQ(reply->quotas[0].slice_id, id);
  EXPECT_EQ(reply->quotas[0].memory_mib, 4096);
  // Not attached yet: usage is shown, enforcement unchanged.
  EXPECT_EQ(SliceOf(Get(t.id)).enforcement, std::vector<std::string>{"mps"});
  ASSERT_TRUE(cp_->SliceHookUsage(id).has_value());
  EXPECT_FALSE(cp_->SliceHookUsage(id)->report.attached);

  running.hook->attached = true;
  running.hook->attaches = 2;
  running.hook->used_bytes = 1 << 30;
  running.hook->peak_bytes = 3 << 29;
  running.hook->quota_ooms = 1;
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  EXPECT_EQ(SliceOf(Get(t.id)).enforcement,
            (std::vector<std::string>{"mps", "hook"}));
  const auto attached = HistoryOf(id, "hook_attached");
  ASSERT_EQ(attached.size(), 1u);  // once, however often it is reported
  EXPECT_EQ(attached[0].actor, "agent:n1");
  const auto usage = cp_->SliceHookUsage(id);
  ASSERT_TRUE(usage.has_value());
  EXPECT_EQ(usage->report.used_bytes, 1 << 30);
  EXPECT_EQ(usage->report.peak_bytes, 3 << 29);
  EXPECT_EQ(usage->report.quota_ooms, 1);
  EXPECT_EQ(usage->task_id, t.id);

  // A resize now carries no "not enforced" warning, and the next reply
  // names the new quota.
  auto r = Resize(id, 8192);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const std::string& w : r->warnings) {
    EXPECT_EQ(w.find("the hook is not attached"), std::string::npos) << w;
  }
  reply = cp_->Heartbeat(admin_, node, {running});
  ASSERT_TRUE(reply.ok());
  ASSERT_EQ(reply->quotas.size(), 1u);
  EXPECT_EQ(reply->quotas[0].memory_mib, 8192);

  // Persisted: a restart keeps "hook", and the usage as last stored
  // (served from the store until the next heartbeat, as a follower would).
  Open();
  EXPECT_EQ(SliceOf(Get(t.id)).enforcement,
            (std::vector<std::string>{"mps", "hook"}));
  const auto stored = cp_->SliceHookUsage(id);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->report.used_bytes, 1 << 30);
  EXPECT_EQ(stored->report.peak_bytes, 3 << 29);
  EXPECT_EQ(stored->report.quota_ooms, 1);
  EXPECT_TRUE(stored->report.attached);
  EXPECT_EQ(stored->task_id, t.id);
  EXPECT_GT(stored->reported_at, 0);
  // A change worth storing is stored at once; a small one waits.
  running.hook->used_bytes = std::int64_t{2} << 30;  // +100%
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  Open();
  EXPECT_EQ(cp_->SliceHookUsage(id)->report.used_bytes, std::int64_t{2} << 30);
  // (A restarted leader stores the first report it gets.)
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  running.hook->used_bytes = (std::int64_t{2} << 30) + (1 << 20);  // +1 MiB
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  EXPECT_EQ(cp_->SliceHookUsage(id)->report.used_bytes,
            (std::int64_t{2} << 30) + (1 << 20))
      << "the leader serves the newest report";
  Open();
  EXPECT_EQ(cp_->SliceHookUsage(id)->report.used_bytes, std::int64_t{2} << 30)
      << "stored only when it moved by more than 5% or aged 30 s";
  // The released slice keeps its last stored usage as a record (here the
  // first report after the restart); the API shows usage for live slices.
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  ASSERT_TRUE(cp_->ReportTaskStates(admin_, "n1",
                                    {{t.id, TaskState::kSucceeded, 0, ""}})
                  .ok());
  ASSERT_TRUE(cp_->SliceHookUsage(id).has_value());
  EXPECT_EQ(cp_->SliceHookUsage(id)->report.used_bytes,
            (std::int64_t{2} << 30) + (1 << 20));
}

TEST_F(ResizeTest, NoQuotaForGoldOrWholeGpusAndNoHookForWholeGpus) {
  NodeReport node = Node("n1", {Gpu(0, 81920, true), Gpu(1), Gpu(2)});
  node.hook_available = true;
  Register(node);
  const Caller alice = TenantUser("alice");
  const TaskRow gold = Submit(alice, 4096);
  const TaskRow whole = Submit(alice, std::nullopt, std::nullopt, 1);
  // Another tenant: it cannot join alice's MIG GPU.
  const TaskRow compute_only = Submit(TenantUser("bob"), std::nullopt, 30);
  EXPECT_EQ(Bind(), 3);
  ASSERT_EQ(SliceOf(Get(gold.id)).qos_level, "gold");
  ASSERT_EQ(SliceOf(Get(compute_only.id)).qos_level, "bronze");
  for (const TaskRow& t : {gold, whole, compute_only}) {
    ASSERT_TRUE(cp_->ReportTaskStates(admin_, "n1",
                                      {{t.id, TaskState::kRunning, {}, ""}})
                    .ok());
  }
  HookReport attached;
  attached.attached = true;
  attached.attaches = 1;
  auto reply = cp_->Heartbeat(
      admin_, node,
      {{whole.id, "running", Get(whole.id).gpu_indices, attached},
       {compute_only.id, "running", Get(compute_only.id).gpu_indices, attached},
       {gold.id, "running", Get(gold.id).gpu_indices, std::nullopt}});
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  // Only the compute-only slice gets a quota, with no memory cap.
  ASSERT_EQ(reply->quotas.size(), 1u);
  EXPECT_EQ(reply->quotas[0].task_id, compute_only.id);
  EXPECT_FALSE(reply->quotas[0].memory_mib.has_value());
  // Whole GPUs have no quota for the hook to enforce.
  EXPECT_EQ(std::count(SliceOf(Get(whole.id)).enforcement.begin(),
                       SliceOf(Get(whole.id)).enforcement.end(), "hook"),
            0);
  EXPECT_EQ(SliceOf(Get(compute_only.id)).enforcement,
            std::vector<std::string>{"hook"});
}

// Enforcement is never claimed without proof: a process of the task that
// uses the GPU without the hook (the agent's report) takes "hook" away, and
// the slice's usage and the history say why; once every process is under
// the hook again, it is listed again.
TEST_F(ResizeTest, AProcessWithoutTheHookTakesItAwayAndTheHistorySaysWhy) {
  NodeReport node = Node("n1", {Gpu(0, 81920, false, true)});
  node.hook_available = true;
  Register(node);
  const TaskRow t = RunningSlice(4096);
  const RowId id = *t.slice_id;
  HookReport hook;
  hook.attached = true;
  hook.attaches = 1;
  hook.quota_bytes = std::int64_t{4096} << 20;
  RunningTask running{t.id, "running", {0}, hook};
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  ASSERT_EQ(SliceOf(Get(t.id)).enforcement,
            (std::vector<std::string>{"mps", "hook"}));

  const std::string why =
      "process 4242 runs without the hook: libhfhook.so is not loaded in it";
  running.hook->unhooked_pids = {4242};
  running.hook->unhooked_reason = why;
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  EXPECT_EQ(SliceOf(Get(t.id)).enforcement, std::vector<std::string>{"mps"});
  const auto lost = HistoryOf(id, "hook_lost");
  ASSERT_EQ(lost.size(), 1u);  // once, however often it is reported
  EXPECT_EQ(lost[0].actor, "agent:n1");
  EXPECT_EQ(lost[0].task_id, t.id);
  EXPECT_NE(lost[0].reason.find(why), std::string::npos) << lost[0].reason;
  EXPECT_NE(lost[0].reason.find("no longer lists the hook"), std::string::npos)
      << lost[0].reason;
  auto usage = cp_->SliceHookUsage(id);
  ASSERT_TRUE(usage.has_value());
  EXPECT_EQ(usage->report.unhooked_pids, std::vector<std::int64_t>{4242});
  EXPECT_EQ(usage->report.unhooked_reason, why);
  // Persisted: a restarted server does not list it either.
  Open();
  EXPECT_EQ(SliceOf(Get(t.id)).enforcement, std::vector<std::string>{"mps"});

  // The process attached (or exited): listed again, and said so.
  running.hook->unhooked_pids.clear();
  running.hook->unhooked_reason.clear();
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  EXPECT_EQ(SliceOf(Get(t.id)).enforcement,
            (std::vector<std::string>{"mps", "hook"}));
  EXPECT_EQ(HistoryOf(id, "hook_attached").size(), 2u);
  EXPECT_TRUE(cp_->SliceHookUsage(id)->report.unhooked_pids.empty());
}

// A task whose processes never load the hook: "hook" was never listed, and
// the history still says why.
TEST_F(ResizeTest, AHookThatNeverAttachedIsExplainedToo) {
  NodeReport node = Node("n1", {Gpu(0, 81920, false, true)});
  node.hook_available = true;
  Register(node);
  const TaskRow t = RunningSlice(4096);
  const RowId id = *t.slice_id;
  HookReport hook;
  hook.unhooked_pids = {77};
  hook.unhooked_reason = "process 77 runs without the hook";
  RunningTask running{t.id, "running", {0}, hook};
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  EXPECT_EQ(SliceOf(Get(t.id)).enforcement, std::vector<std::string>{"mps"});
  const auto lost = HistoryOf(id, "hook_lost");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_NE(lost[0].reason.find("process 77 runs without the hook"),
            std::string::npos)
      << lost[0].reason;
  // Attached as well as unhooked: still not listed.
  running.hook->attached = true;
  running.hook->attaches = 1;
  ASSERT_TRUE(cp_->Heartbeat(admin_, node, {running}).ok());
  EXPECT_EQ(SliceOf(Get(t.id)).enforcement, std::vector<std::string>{"mps"});
  EXPECT_TRUE(HistoryOf(id, "hook_attached").empty());
}

// Regression: LedgerNodeLocked scaled the reported cpu_milli and
// host_memory_mib by `<< 20`: undefined beyond 2^43 (a wrapped, negative
// value made the ledger refuse the node), and past 2^31 (any node with 2
// CPUs) the ledger's index saturated and its invariant check failed.
TEST_F(ControlPlaneTest, AnyReportedNodeResourcesKeepTheLedgerConsistent) {
  NodeReport typical = Node("typical", {Gpu(0)});
  typical.cpu_milli = 64'000;
  typical.host_memory_mib = std::int64_t{512} * 1024;
  Register(typical);
  NodeReport huge = Node("huge", {Gpu(0)});
  huge.cpu_milli = (std::int64_t{1} << 43) + 1;
  huge.host_memory_mib = std::numeric_limits<std::int64_t>::max();
  Register(huge);
  const Caller alice = TenantUser("alice");
  const TaskRow a = Submit(alice, 40960);
  const TaskRow b = Submit(alice, 40960);
  EXPECT_EQ(Bind(), 2);
  EXPECT_EQ(Get(a.id).state, TaskState::kScheduled);
  EXPECT_EQ(Get(b.id).state, TaskState::kScheduled);
  const Status s = cp_->CheckLedgerMatchesStore();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace hf::server
