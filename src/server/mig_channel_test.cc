// MigChannel (mig_channel.h) on the real SQLite store, with a recording
// MigChannelHost: commands are claimed once and offered again until
// reported; a failed create releases its slice after the commit, takes the
// task back to pending and, when the card had no room, blocks the GPU
// before the ledger learns the release; a repeated report changes nothing;
// a create past its deadline is stuck with a cleanup destroy; orphaned
// partitions are recorded once.
#include "server/mig_channel.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/internal.h"
#include "server/store_test_rows.h"
#include "store/testing/temp_store.h"

namespace hf::server {
namespace {

using store::RowId;
using store::SliceRequestRow;
using store::SliceRequestState;
using store::SliceRow;
using store::TaskRow;
using store::TaskState;

class RecordingHost : public MigChannelHost {
 public:
  explicit RecordingHost(store::Store* store) : store_(store) {}
  void Attach(MigChannel* channel) { channel_ = channel; }

  // What placement would see as the ledger learns release `id`.
  void Learned(RowId id) {
    applied.push_back(id);
    blocked_when_applied.push_back(
        channel_->book().Blocked(GpuKey{node_id, 0}, /*now=*/0));
  }
  std::string GpuUuid(RowId node, int index) override {
    return "GPU-" + std::to_string(node) + "-" + std::to_string(index);
  }
  SliceEnvInput SliceEnvFor(const SliceRow& slice,
                            const TaskRow& task) override {
    SliceEnvInput in;
    in.slice_id = slice.id;
    in.qos_level = slice.qos_level;
    in.mig_device_id = slice.mig_device_id;
    in.compute_mode = task.gpu_compute_mode;
    return in;
  }
  StatusOr<store::NodeRow> NodeForAgent(const Caller& caller,
                                        const std::string& node) override {
    HF_RETURN_IF_ERROR(RequireAgentFor(caller, node));
    std::optional<store::NodeRow> row;
    HF_RETURN_IF_ERROR(store_->Read([&](store::Txn& txn) -> Status {
      auto n = txn.FindNode(node);
      if (n.ok()) row = *n;
      return Status::Ok();
    }));
    if (!row) return Status::NotFound("node " + node);
    return *row;
  }

  RowId node_id = 0;
  std::vector<RowId> applied;  // releases the ledger learned, in order
  // For each: why GPU 0 of the node took no gold slice then ("" if it did).
  std::vector<std::string> blocked_when_applied;

 private:
  store::Store* const store_;
  MigChannel* channel_ = nullptr;
};

class MigChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(*opened);
    host_ = std::make_unique<RecordingHost>(store_.get());
    writer_ = std::make_unique<StoreWriterForTest>(store_.get());
    writer_->learned = [this](RowId id) { host_->Learned(id); };
    channel_ = std::make_unique<MigChannel>(store_.get(), &clock_, &clock_,
                                            /*command_deadline_ms=*/10'000,
                                            &telemetry_, &queue_, writer_.get(),
                                            host_.get());
    (void)queue_.Take();  // a fresh queue asks for a rescan anyway
    host_->Attach(channel_.get());
    agent_.role = store::Role::kNode;
    agent_.token_id = 7;
    agent_.node = "n1";
    ASSERT_TRUE(store_
                    ->Write([&](store::Txn& txn) -> Status {
                      auto rows = InsertTenantAndNodes(txn, {"n1"});
                      if (!rows.ok()) return rows.status();
                      tenant_ = rows->tenant;
                      host_->node_id = rows->nodes[0];
                      return Status::Ok();
                    })
                    .ok());
  }

  // A task bound to a gold slice on GPU 0, with its create command.
  SliceRequestRow BindGold(RowId slice_id) {
    SliceRequestRow out;
    Status s = store_->Write([&](store::Txn& txn) -> Status {
      TaskRow task;
      task.tenant_id = tenant_;
      task.name = "t" + std::to_string(slice_id);
      task.image = "img";
      task.command = {"run"};
      task.state = TaskState::kScheduled;
      task.node_id = host_->node_id;
      task.gpu_indices = {0};
      task.slice_id = slice_id;
      auto t = txn.InsertTask(task);
      if (!t.ok()) return t.status();
      SliceRow slice;
      slice.id = slice_id;
      slice.task_id = t->id;
      slice.tenant_id = tenant_;
      slice.node_id = host_->node_id;
      slice.gpu_indices = {0};
      slice.memory_mib = 10'240;
      slice.compute_percent = 14;
      slice.qos_level = "gold";
      slice.origin = "scheduler";
      slice.mig_profile = "1g.10gb";
      slice.mig_start = 0;
      slice.created_at = clock_.NowMillis();
      HF_RETURN_IF_ERROR(txn.InsertSlice(slice));
      SliceRequestRow cmd =
          channel_->CommandFor(slice, "create", 0, clock_.NowMillis());
      cmd.profile = "1g.10gb";
      auto c = txn.InsertSliceRequest(cmd);
      if (!c.ok()) return c.status();
      out = *c;
      return Status::Ok();
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }

  SliceRow Slice(RowId id) { return StoredSlice(*store_, id); }
  TaskRow Task(RowId id) { return StoredTask(*store_, id); }
  std::vector<store::HistoryRow> History() {
    return ReadRow<std::vector<store::HistoryRow>>(*store_,
                                                   [](store::Txn& txn) {
                                                     store::HistoryFilter f;
                                                     f.limit = 1000;
                                                     return txn.ListHistory(f);
                                                   });
  }
  std::vector<SliceRequestRow> Commands() {
    return ReadRow<std::vector<SliceRequestRow>>(*store_, [](store::Txn& txn) {
      store::SliceRequestFilter f;
      f.limit = 1000;
      return txn.ListSliceRequests(f);
    });
  }

  store::sqlite_testing::TempDir dir_{"hf-mig-channel-test"};
  std::unique_ptr<store::Store> store_;
  FakeClock clock_{1'000'000};
  Telemetry telemetry_;
  SchedulerQueue queue_{60'000};
  std::unique_ptr<RecordingHost> host_;
  std::unique_ptr<StoreWriterForTest> writer_;
  std::unique_ptr<MigChannel> channel_;
  Caller agent_;
  RowId tenant_ = 0;
};

TEST_F(MigChannelTest, ACommandIsOfferedAgainUntilItsResultIsReported) {
  const SliceRequestRow create = BindGold(1);
  EXPECT_EQ(create.gpu_uuid, "GPU-" + std::to_string(host_->node_id) + "-0");
  EXPECT_EQ(create.deadline_at, clock_.NowMillis() + 10'000);
  auto first = channel_->Claim(agent_, "n1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].state, SliceRequestState::kClaimed);
  // The reply was lost: the same command again, still claimed.
  auto again = channel_->Claim(agent_, "n1");
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].id, create.id);

  wire::MigResult made;
  made.ok = true;
  made.device_id = "MIG-aaaa";
  auto done = channel_->Report(agent_, create.id, made);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->state, SliceRequestState::kDone);
  EXPECT_EQ(Slice(1).mig_device_id, "MIG-aaaa");
  const TaskRow task = Task(*Slice(1).task_id);
  EXPECT_EQ(task.labels.at("heteroflow.mig_device_id"), "MIG-aaaa");
  auto none = channel_->Claim(agent_, "n1");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  // Another node's agent may neither claim nor report this node's commands.
  Caller other = agent_;
  other.node = "n2";
  EXPECT_EQ(channel_->Claim(other, "n1").status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(channel_->Report(other, create.id, made).status().code(),
            StatusCode::kPermissionDenied);
  // The same answers before a report is read (the API's check of who may
  // call), and none for a command that does not exist.
  EXPECT_EQ(channel_->CheckReporter(other, create.id).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(channel_->CheckReporter(agent_, create.id).ok());
  EXPECT_EQ(channel_->CheckReporter(agent_, create.id + 1000).code(),
            StatusCode::kNotFound);
}

TEST_F(MigChannelTest, ACreateWithNoRoomReleasesAfterTheGpuIsBlocked) {
  const SliceRequestRow create = BindGold(1);
  ASSERT_TRUE(channel_->Claim(agent_, "n1").ok());
  wire::MigResult full;
  full.error = "RESOURCE_EXHAUSTED: no room for 1g.10gb";
  auto failed = channel_->Report(agent_, create.id, full);
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_EQ(failed->state, SliceRequestState::kFailed);
  EXPECT_EQ(Slice(1).state, store::SliceState::kReleased);
  const TaskRow task = Task(*Slice(1).task_id);
  EXPECT_EQ(task.state, TaskState::kPending);
  EXPECT_FALSE(task.slice_id.has_value());
  EXPECT_TRUE(queue_.Take().resync);  // the requeued task is read again
  // The ledger learned the release once, with the GPU already blocked: a
  // bind pass woken by the freed capacity places no gold there.
  ASSERT_EQ(host_->applied, std::vector<RowId>{1});
  EXPECT_NE(host_->blocked_when_applied[0], "");

  // A repeated report is answered as before and releases nothing again.
  auto repeated = channel_->Report(agent_, create.id, full);
  ASSERT_TRUE(repeated.ok());
  EXPECT_EQ(repeated->state, SliceRequestState::kFailed);
  EXPECT_EQ(host_->applied.size(), 1u);
  EXPECT_FALSE(queue_.Take().resync);  // requeued once
}

TEST_F(MigChannelTest, ACreatePastItsDeadlineIsStuckWithACleanupDestroy) {
  const SliceRequestRow create = BindGold(1);
  ASSERT_TRUE(channel_->MarkStuck().ok());
  EXPECT_EQ(Commands().size(), 1u);  // not due yet
  clock_.Advance(10'000);
  ASSERT_TRUE(channel_->MarkStuck().ok());
  const std::vector<SliceRequestRow> commands = Commands();
  ASSERT_EQ(commands.size(), 2u);
  EXPECT_EQ(commands[0].id, create.id);
  EXPECT_EQ(commands[0].state, SliceRequestState::kStuck);
  EXPECT_NE(commands[0].error.find("HARDWARE STATE UNKNOWN"),
            std::string::npos);
  EXPECT_EQ(commands[1].action, "destroy");
  EXPECT_EQ(commands[1].gpu_uuid, create.gpu_uuid);
  EXPECT_EQ(commands[1].profile, "1g.10gb");
  // The slice stays charged until the node says what it holds.
  EXPECT_EQ(Slice(1).state, store::SliceState::kReleasing);
  EXPECT_TRUE(host_->applied.empty());
  EXPECT_EQ(Task(*Slice(1).task_id).state, TaskState::kPending);
  EXPECT_TRUE(queue_.Take().resync);  // the requeued task is read again

  // The destroy is offered; its success frees the slice.
  auto offered = channel_->Claim(agent_, "n1");
  ASSERT_TRUE(offered.ok());
  ASSERT_EQ(offered->size(), 1u);
  EXPECT_EQ((*offered)[0].action, "destroy");
  wire::MigResult ok;
  ok.ok = true;
  ASSERT_TRUE(channel_->Report(agent_, (*offered)[0].id, ok).ok());
  EXPECT_EQ(Slice(1).state, store::SliceState::kReleased);
  EXPECT_EQ(host_->applied, std::vector<RowId>{1});
}

TEST_F(MigChannelTest, AnOrphanedPartitionIsRecordedOnce) {
  const SliceRequestRow create = BindGold(1);
  ASSERT_TRUE(channel_->Claim(agent_, "n1").ok());
  wire::MigResult made;
  made.ok = true;
  made.device_id = "MIG-owned";
  ASSERT_TRUE(channel_->Report(agent_, create.id, made).ok());
  store::NodeRow node;
  node.id = host_->node_id;
  node.name = "n1";
  wire::NodeReport report;
  report.name = "n1";
  wire::GpuReport gpu;
  gpu.index = 0;
  gpu.mig_devices = std::vector<std::string>{"MIG-owned", "MIG-stray"};
  report.gpus.push_back(gpu);
  const auto orphaned = [&] {
    int n = 0;
    for (const store::HistoryRow& h : History()) {
      if (h.op == "mig_orphaned") {
        EXPECT_NE(h.reason.find("MIG-stray"), std::string::npos);
        ++n;
      }
    }
    return n;
  };
  ASSERT_TRUE(channel_->NoteOrphans(node, report).ok());
  EXPECT_EQ(orphaned(), 1);
  EXPECT_NE(channel_->book().Blocked(GpuKey{host_->node_id, 0}, 0), "");
  ASSERT_TRUE(channel_->NoteOrphans(node, report).ok());
  EXPECT_EQ(orphaned(), 1);  // the same report: recorded once
}

}  // namespace
}  // namespace hf::server
