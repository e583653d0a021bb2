// Tasks (tasks.h) on the real SQLite store, with a recording TaskHost: a
// task created where the scheduler runs is queued, elsewhere it is not;
// who may call is checked before what they sent; tenants see only their
// own tasks; a cancel releases a pending task's slice after its commit,
// asks a bound task to stop, and is idempotent.
#include "server/tasks.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/store_test_rows.h"
#include "store/testing/temp_store.h"

namespace hf::server {
namespace {

using store::RowId;
using store::TaskRow;
using store::TaskState;

class RecordingHost : public TaskHost {
 public:
  bool Scheduling() const override { return scheduling; }
  void TaskQueued(const TaskRow& task) override { queued.push_back(task.id); }
  Status ReleaseTaskSliceInTxn(store::Txn& /*txn*/, const TaskRow& task,
                               const std::string& /*actor*/,
                               const std::string& /*reason*/,
                               std::vector<RowId>& released) override {
    if (task.slice_id) released.push_back(*task.slice_id);
    return Status::Ok();
  }

  bool scheduling = true;
  std::vector<RowId> queued;
};

class TasksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(*opened);
    writer_ = std::make_unique<StoreWriterForTest>(store_.get());
    // Only after the commit, as the control plane's ledger does.
    writer_->learned = [this](RowId id) { applied_.push_back(id); };
    tenancy_ = std::make_unique<Tenancy>(store_.get(), &clock_, writer_.get(),
                                         &no_ledger_);
    tasks_ = std::make_unique<Tasks>(store_.get(), &clock_, tenancy_.get(),
                                     writer_.get(), &host_);
    admin_.role = store::Role::kAdmin;
    admin_.token_id = 1;
    for (const char* name : {"acme", "beta"}) {
      auto t = tenancy_->CreateTenant(admin_, name, std::nullopt);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      Caller user;
      user.role = store::Role::kUser;
      user.token_id = 10 + t->id;
      user.tenant_id = t->id;
      user.tenant = name;
      users_.push_back(user);
    }
  }

  static TaskCreate Slice(std::int64_t memory_mib = 1024) {
    TaskCreate t;
    t.name = "train";
    t.command = {"true"};
    t.memory_mib = memory_mib;
    return t;
  }

  // Sets the stored task's state (and slice), as a bind or an agent would.
  void SetState(RowId id, TaskState state, std::optional<RowId> slice) {
    ASSERT_TRUE(store_
                    ->Write([&](store::Txn& txn) -> Status {
                      auto t = txn.GetTask(id);
                      if (!t.ok()) return t.status();
                      TaskRow row = *t;
                      row.state = state;
                      row.slice_id = slice;
                      return txn.UpdateTask(row).status();
                    })
                    .ok());
  }

  class NoLedger : public TenancyLedger {
    Status GroupCreated(const store::GroupRow&) override { return {}; }
    Status TenantChanged(const store::TenantRow&) override { return {}; }
    Status GroupDeleted(RowId, const std::vector<RowId>&) override {
      return {};
    }
    Status ApprovalGranted(const store::ApprovalRow&) override { return {}; }
    Status ApprovalRevoked(RowId) override { return {}; }
  };

  store::sqlite_testing::TempDir dir_{"hf-tasks-test"};
  FakeClock clock_{1'000'000};
  std::unique_ptr<store::Store> store_;
  NoLedger no_ledger_;
  std::unique_ptr<StoreWriterForTest> writer_;
  RecordingHost host_;
  std::vector<RowId> applied_;  // releases the ledger learned
  std::unique_ptr<Tenancy> tenancy_;
  std::unique_ptr<Tasks> tasks_;
  Caller admin_;
  std::vector<Caller> users_;
};

TEST_F(TasksTest, ATaskIsQueuedOnlyWhereTheSchedulerRuns) {
  auto here = tasks_->CreateTask(users_[0], Slice());
  ASSERT_TRUE(here.ok()) << here.status().ToString();
  EXPECT_EQ(here->state, TaskState::kPending);
  EXPECT_EQ(host_.queued, std::vector<RowId>{here->id});
  host_.scheduling = false;  // a follower
  auto there = tasks_->CreateTask(users_[0], Slice());
  ASSERT_TRUE(there.ok()) << there.status().ToString();
  EXPECT_EQ(host_.queued, std::vector<RowId>{here->id});
  EXPECT_TRUE(tasks_->GetTask(users_[0], there->id).ok());  // stored
}

TEST_F(TasksTest, WhoMayCallIsCheckedBeforeWhatTheySent) {
  TaskCreate bad = Slice(/*memory_mib=*/1);  // below the 32 MB minimum
  bad.tenant = "beta";
  EXPECT_EQ(tasks_->CreateTask(users_[0], bad).status().code(),
            StatusCode::kPermissionDenied);
  Caller node;
  node.role = store::Role::kNode;
  EXPECT_EQ(tasks_->CreateTask(node, Slice(1)).status().code(),
            StatusCode::kPermissionDenied);
  auto invalid = tasks_->CreateTask(users_[0], Slice(1));
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid.status().field(), "gpu_memory_mb");
  auto listed = tasks_->ListTasks(admin_, TaskQuery{});
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->items.empty());  // nothing refused was stored
  EXPECT_TRUE(host_.queued.empty());
}

TEST_F(TasksTest, TenantsSeeOnlyTheirOwnTasks) {
  auto task = tasks_->CreateTask(users_[0], Slice());
  ASSERT_TRUE(task.ok());
  EXPECT_TRUE(tasks_->GetTask(users_[0], task->id).ok());
  EXPECT_TRUE(tasks_->GetTask(admin_, task->id).ok());
  EXPECT_EQ(tasks_->GetTask(users_[1], task->id).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(tasks_->CancelTask(users_[1], task->id).status().code(),
            StatusCode::kNotFound);
  auto theirs = tasks_->ListTasks(users_[1], TaskQuery{});
  ASSERT_TRUE(theirs.ok());
  EXPECT_TRUE(theirs->items.empty());
  EXPECT_EQ(tasks_->ReadTaskLog(users_[1], task->id, 0, 100).status().code(),
            StatusCode::kNotFound);
}

TEST_F(TasksTest, ACancelReleasesAPendingTasksSliceAfterItsCommit) {
  auto task = tasks_->CreateTask(users_[0], Slice());
  ASSERT_TRUE(task.ok());
  SetState(task->id, TaskState::kPending, /*slice=*/77);  // a kept slice
  auto cancelled = tasks_->CancelTask(users_[0], task->id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->state, TaskState::kCancelled);
  EXPECT_EQ(applied_, std::vector<RowId>{77});
  // Again: the same answer, nothing released twice.
  auto again = tasks_->CancelTask(users_[0], task->id);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state, TaskState::kCancelled);
  EXPECT_EQ(applied_, std::vector<RowId>{77});
}

TEST_F(TasksTest, ABoundTaskIsAskedToStopAndAnEndedOneIsLeftAlone) {
  auto running = tasks_->CreateTask(users_[0], Slice());
  auto done = tasks_->CreateTask(users_[0], Slice());
  ASSERT_TRUE(running.ok() && done.ok());
  SetState(running->id, TaskState::kRunning, 5);
  SetState(done->id, TaskState::kSucceeded, std::nullopt);
  auto asked = tasks_->CancelTask(users_[0], running->id);
  ASSERT_TRUE(asked.ok());
  EXPECT_EQ(asked->state, TaskState::kRunning);  // its agent stops it
  EXPECT_TRUE(asked->cancel_requested);
  EXPECT_TRUE(applied_.empty());  // released when it stops
  EXPECT_EQ(tasks_->CancelTask(users_[0], done->id).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace hf::server
