// Gc (gc.h) on the real SQLite store, with a recording GcHost: a slice is
// an orphan only once it is old enough and its task ended or holds
// another slice (operator reservations stay); a silent node's tasks that
// were asked to stop are taken as stopped (cancelled ones end, a deleted
// slice's task waits to be bound again, a move lands on its target) while
// its other tasks keep their slices; the ledger learns only what the
// committed writes released.
#include "server/gc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/store_test_rows.h"
#include "store/testing/temp_store.h"

namespace hf::server {
namespace {

using store::RowId;
using store::SliceRow;
using store::SliceState;
using store::TaskRow;
using store::TaskState;

class RecordingHost : public GcHost, public MigChannelHost {
 public:
  StatusOr<bool> LandMoveInTxn(store::Txn& /*txn*/, TaskRow& task, RowId slice,
                               bool rebind,
                               std::vector<RowId>& /*released*/) override {
    landing_asked.push_back(slice);
    if (!rebind || task.id != moving_task) return false;
    task.state = TaskState::kScheduled;  // bound to the move's target
    task.slice_id = moved_to;
    return true;
  }
  std::string GpuUuid(RowId /*node*/, int /*index*/) override { return ""; }
  SliceEnvInput SliceEnvFor(const SliceRow& /*slice*/,
                            const TaskRow& /*task*/) override {
    return {};
  }
  StatusOr<store::NodeRow> NodeForAgent(const Caller& /*caller*/,
                                        const std::string& node) override {
    return Status::NotFound(node);
  }

  std::vector<RowId> applied;  // releases the ledger learned
  std::vector<RowId> landing_asked;
  RowId moving_task = 0;  // LandMoveInTxn lands this one
  RowId moved_to = 0;
};

class GcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(*opened);
    writer_ = std::make_unique<StoreWriterForTest>(store_.get());
    writer_->learned = [this](RowId id) { host_.applied.push_back(id); };
    mig_ = std::make_unique<MigChannel>(store_.get(), &clock_, &monotonic_,
                                        120'000, &telemetry_, &queue_,
                                        writer_.get(), &host_);
    releases_ = std::make_unique<Releases>(&clock_, mig_.get(), &telemetry_);
    GcOptions options;
    options.min_age_ms = 60'000;
    options.node_lost_ms = 600'000;
    gc_ = std::make_unique<Gc>(store_.get(), &clock_, &monotonic_, options,
                               &beats_, mig_.get(), releases_.get(), &queue_,
                               writer_.get(), &host_);
    (void)queue_.Take();  // a fresh queue asks for a rescan anyway
    ASSERT_TRUE(store_
                    ->Write([&](store::Txn& txn) -> Status {
                      auto rows = InsertTenantAndNodes(txn, {"quiet", "alive"});
                      if (!rows.ok()) return rows.status();
                      tenant_ = rows->tenant;
                      nodes_ = rows->nodes;
                      return Status::Ok();
                    })
                    .ok());
  }

  // A task in `state` on `node`, holding a bronze slice `slice_id` (none
  // when 0) in `slice_state`; returns the task's id.
  RowId Bound(RowId node, TaskState state, RowId slice_id,
              SliceState slice_state = SliceState::kAllocated,
              bool cancel_requested = false) {
    RowId id = 0;
    Status s = store_->Write([&](store::Txn& txn) -> Status {
      TaskRow task;
      task.tenant_id = tenant_;
      task.name = "t";
      task.image = "img";
      task.command = {"run"};
      task.state = state;
      task.node_id = node;
      task.gpu_indices = {0};
      task.cancel_requested = cancel_requested;
      if (slice_id != 0) task.slice_id = slice_id;
      auto t = txn.InsertTask(task);
      if (!t.ok()) return t.status();
      id = t->id;
      if (slice_id == 0) return Status::Ok();
      return txn.InsertSlice(SliceFor(slice_id, node, id, slice_state));
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return id;
  }
  SliceRow SliceFor(RowId id, RowId node, std::optional<RowId> task,
                    SliceState state) {
    SliceRow slice;
    slice.id = id;
    slice.task_id = task;
    slice.tenant_id = tenant_;
    slice.node_id = node;
    slice.gpu_indices = {0};
    slice.memory_mib = 1024;
    slice.compute_percent = 10;
    slice.qos_level = "bronze";
    slice.origin = "scheduler";
    slice.state = state;
    slice.created_at = clock_.NowMillis();
    return slice;
  }
  SliceRow Slice(RowId id) { return StoredSlice(*store_, id); }

  TaskRow Task(RowId id) { return StoredTask(*store_, id); }

  store::sqlite_testing::TempDir dir_{"hf-gc-test"};
  std::unique_ptr<store::Store> store_;
  FakeClock clock_{1'000'000};
  FakeClock monotonic_{5'000};
  Telemetry telemetry_;
  NodeBeats beats_{15'000};
  SchedulerQueue queue_{60'000};
  std::unique_ptr<StoreWriterForTest> writer_;
  RecordingHost host_;
  std::unique_ptr<MigChannel> mig_;
  std::unique_ptr<Releases> releases_;
  std::unique_ptr<Gc> gc_;
  RowId tenant_ = 0;
  std::vector<RowId> nodes_;
};

TEST_F(GcTest, OnlyOldSlicesOfEndedTasksOrOfTasksHoldingAnotherAreOrphans) {
  const RowId node = nodes_[1];
  beats_.Seen(node, monotonic_.NowMillis());
  Bound(node, TaskState::kSucceeded, 1);  // ended
  Bound(node, TaskState::kRunning, 2);    // alive
  const RowId other = Bound(node, TaskState::kRunning, 3);
  const Status inserted = store_->Write([&](store::Txn& txn) -> Status {
    // A reservation, and a slice of a task that holds slice 3. (A slice
    // of a task that does not exist cannot be stored: the store refuses
    // it.)
    HF_RETURN_IF_ERROR(txn.InsertSlice(
        SliceFor(4, node, std::nullopt, SliceState::kAllocated)));
    return txn.InsertSlice(SliceFor(6, node, other, SliceState::kAllocated));
  });
  ASSERT_TRUE(inserted.ok()) << inserted.ToString();
  auto young = gc_->RunOnce();
  ASSERT_TRUE(young.ok()) << young.status().ToString();
  EXPECT_EQ(*young, 0);  // all younger than min_age
  clock_.Advance(60'000);
  auto released = gc_->RunOnce();
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(*released, 2);
  EXPECT_EQ(host_.applied, (std::vector<RowId>{1, 6}));
  for (RowId kept : {2, 3, 4}) {
    EXPECT_EQ(Slice(kept).state, SliceState::kAllocated) << kept;
  }
  EXPECT_EQ(Slice(6).state, SliceState::kReleased);
  // Nothing is released twice.
  auto again = gc_->RunOnce();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
  EXPECT_EQ(host_.applied.size(), 2u);
}

TEST_F(GcTest, ASilentNodesTasksAskedToStopAreTakenAsStopped) {
  const RowId quiet = nodes_[0];
  const RowId alive = nodes_[1];
  beats_.Seen(quiet, monotonic_.NowMillis());
  beats_.Seen(alive, monotonic_.NowMillis());
  const RowId cancelled =
      Bound(quiet, TaskState::kRunning, 1, SliceState::kAllocated,
            /*cancel_requested=*/true);
  const RowId deleted = Bound(quiet, TaskState::kRunning, 2,
                              SliceState::kReleasing);  // its slice deleted
  const RowId running = Bound(quiet, TaskState::kRunning, 3);
  const RowId moving =
      Bound(quiet, TaskState::kScheduled, 4, SliceState::kReleasing);
  const RowId elsewhere =
      Bound(alive, TaskState::kRunning, 5, SliceState::kAllocated,
            /*cancel_requested=*/true);
  host_.moving_task = moving;
  host_.moved_to = 9;

  monotonic_.Advance(600'000);
  beats_.Seen(alive, monotonic_.NowMillis());
  auto not_yet = gc_->RunOnce();
  ASSERT_TRUE(not_yet.ok());
  EXPECT_EQ(*not_yet, 0);  // silent for exactly node_lost_ms: not lost
  EXPECT_EQ(Task(cancelled).state, TaskState::kRunning);

  monotonic_.Advance(1'000);
  beats_.Seen(alive, monotonic_.NowMillis());
  auto released = gc_->RunOnce();
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(*released, 3);
  std::vector<RowId> applied = host_.applied;
  std::sort(applied.begin(), applied.end());
  EXPECT_EQ(applied, (std::vector<RowId>{1, 2, 4}));
  const TaskRow c = Task(cancelled);
  EXPECT_EQ(c.state, TaskState::kCancelled);
  EXPECT_NE(c.message.find("lost"), std::string::npos) << c.message;
  const TaskRow d = Task(deleted);
  EXPECT_EQ(d.state, TaskState::kPending);
  EXPECT_FALSE(d.slice_id.has_value());
  EXPECT_TRUE(queue_.Take().resync);  // the requeued task is read again
  const TaskRow m = Task(moving);
  EXPECT_EQ(m.state, TaskState::kScheduled);
  EXPECT_EQ(m.slice_id, std::optional<RowId>(9));
  // Not asked to stop, or on a node that is heard from: kept.
  EXPECT_EQ(Task(running).state, TaskState::kRunning);
  EXPECT_EQ(Slice(3).state, SliceState::kAllocated);
  EXPECT_EQ(Task(elsewhere).state, TaskState::kRunning);
  EXPECT_EQ(Slice(5).state, SliceState::kAllocated);
}

}  // namespace
}  // namespace hf::server
