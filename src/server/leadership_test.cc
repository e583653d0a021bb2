// The leader lease (leadership.h) driven by hand with fake clocks, each
// instance on its OWN monotonic clock, against a real SQLite store (and a
// real PostgreSQL server for concurrent takeovers): takeover only after a
// full ttl of no change, a leader that cannot renew stops acting before
// anyone may take over, terms increase, and the fence makes a stale
// leader's bind abort.
#include "server/leadership.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "server/control_plane.h"
#include "store/testing/pg_server.h"
#include "store/testing/temp_store.h"

namespace hf::server {
namespace {

constexpr std::int64_t kTtl = 6'000;
constexpr std::int64_t kMargin = 1'000;  // the default: ttl / 6

// Delegates to a real store; writes fail while `down` (a leader cut off
// from its database).
class SwitchableStore final : public store::Store {
 public:
  explicit SwitchableStore(store::Store* inner) : inner_(inner) {}
  Status Write(const std::function<Status(store::Txn&)>& fn) override {
    if (down.load()) return Status::Unavailable("database unreachable");
    return inner_->Write(fn);
  }
  Status Read(const std::function<Status(store::Txn&)>& fn) override {
    if (down.load()) return Status::Unavailable("database unreachable");
    return inner_->Read(fn);
  }
  store::StoreInfo info() const override { return inner_->info(); }
  std::atomic<bool> down{false};

 private:
  store::Store* inner_;
};

// One server instance: its own view of the store and its own clock.
struct Instance {
  Instance(store::Store* shared, const Clock* wall, const std::string& id)
      : store(shared),
        lease(&store, wall, &mono,
              LeadershipOptions{id, "http://" + id, kTtl, 0}) {}
  SwitchableStore store;
  FakeClock mono{1'000'000};
  Leadership lease;
};

class LeadershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void TearDown() override { store_.reset(); }
  std::unique_ptr<Instance> NewInstance(const std::string& id) {
    return std::make_unique<Instance>(store_.get(), &wall_, id);
  }
  std::optional<Lease> Stored() {
    std::optional<Lease> out;
    EXPECT_TRUE(store_
                    ->Read([&](store::Txn& txn) -> Status {
                      auto raw = txn.GetMeta(kLeaseKey);
                      if (!raw.ok()) return raw.status();
                      if (raw->has_value()) out = DecodeLease(**raw);
                      return Status::Ok();
                    })
                    .ok());
    return out;
  }

  store::sqlite_testing::TempDir dir_{"hf-leader-test"};
  FakeClock wall_{1'700'000'000'000};
  std::unique_ptr<store::Store> store_;
};

TEST_F(LeadershipTest, FreshDatabaseIsTakenAtOnce) {
  auto a = NewInstance("a");
  ASSERT_TRUE(a->lease.Tick().ok());
  EXPECT_TRUE(a->lease.IsLeader());
  EXPECT_TRUE(a->lease.MayAct());
  EXPECT_TRUE(a->lease.Serving());  // no promotion callback
  EXPECT_EQ(a->lease.Term(), 1);
  auto stored = Stored();
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->id, "a");
  EXPECT_EQ(stored->url, "http://a");
  EXPECT_EQ(stored->term, 1);
}

TEST_F(LeadershipTest, SameInstanceIdRestartingTakesItsLeaseAtOnce) {
  auto first = NewInstance("a");
  ASSERT_TRUE(first->lease.Tick().ok());
  ASSERT_EQ(first->lease.Term(), 1);
  // The process dies; a new run with the same id (same host and port).
  auto again = NewInstance("a");
  ASSERT_TRUE(again->lease.Tick().ok());
  EXPECT_TRUE(again->lease.IsLeader());
  EXPECT_EQ(again->lease.Term(), 2);
  // Another id waits instead.
  auto b = NewInstance("b");
  ASSERT_TRUE(b->lease.Tick().ok());
  EXPECT_FALSE(b->lease.IsLeader());
}

TEST_F(LeadershipTest, ExclusiveStoreTakesALeftoverLeaseAtOnce) {
  auto first = NewInstance("old-id");
  ASSERT_TRUE(first->lease.Tick().ok());
  // SQLite: only one process opens the database, so a lease found there on
  // start is a dead process's, even under another instance id.
  SwitchableStore view(store_.get());
  FakeClock mono;
  LeadershipOptions options{"new-id", "http://new", kTtl, 0};
  options.exclusive_store = true;
  Leadership fresh(&view, &wall_, &mono, options);
  ASSERT_TRUE(fresh.Tick().ok());
  EXPECT_TRUE(fresh.IsLeader());
  EXPECT_EQ(fresh.Term(), 2);
}

// Alone on its store (SQLite), a leader whose renewals come late (a
// loaded disk) keeps acting: nobody else could take over.
TEST_F(LeadershipTest, ExclusiveStoreLeaderIsNeverDemotedByTheClock) {
  SwitchableStore view(store_.get());
  FakeClock mono;
  LeadershipOptions options{"only", "http://only", kTtl, 0};
  options.exclusive_store = true;
  Leadership alone(&view, &wall_, &mono, options);
  ASSERT_TRUE(alone.Tick().ok());
  ASSERT_TRUE(alone.IsLeader());
  mono.Advance(3 * kTtl);
  EXPECT_TRUE(alone.MayAct());
  ASSERT_TRUE(alone.Tick().ok());
  EXPECT_TRUE(alone.IsLeader());
  EXPECT_TRUE(alone.MayAct());
}

TEST_F(LeadershipTest, FollowerTakesOverOnlyAfterATtlWithoutChange) {
  auto a = NewInstance("a");
  auto b = NewInstance("b");
  ASSERT_TRUE(a->lease.Tick().ok());
  ASSERT_TRUE(b->lease.Tick().ok());
  ASSERT_FALSE(b->lease.IsLeader());
  ASSERT_EQ(b->lease.KnownLeader()->id, "a");

  // While the leader renews (every ttl/3), the value keeps changing and the
  // follower never takes over, however long it watches.
  for (int i = 0; i < 12; ++i) {
    a->mono.Advance(kTtl / 3);
    b->mono.Advance(kTtl / 3);
    ASSERT_TRUE(a->lease.Tick().ok());
    ASSERT_TRUE(b->lease.Tick().ok());
    ASSERT_FALSE(b->lease.IsLeader()) << "round " << i;
    ASSERT_TRUE(a->lease.MayAct());
  }

  // The leader stops renewing (it hangs or died). The follower measures a
  // full ttl from when it first saw the last value, on its own clock.
  b->mono.Advance(kTtl - 1);
  ASSERT_TRUE(b->lease.Tick().ok());
  EXPECT_FALSE(b->lease.IsLeader()) << "took over before a full ttl";
  b->mono.Advance(1);
  ASSERT_TRUE(b->lease.Tick().ok());
  EXPECT_TRUE(b->lease.IsLeader());
  EXPECT_EQ(b->lease.Term(), 2);
  EXPECT_EQ(Stored()->id, "b");
}

// A leader stopped cleanly (SIGTERM) hands the lease over: it stops acting
// first, and a follower takes the lease on its next tick, not after a ttl.
TEST_F(LeadershipTest, AResigningLeaderHandsTheLeaseOverAtOnce) {
  auto a = NewInstance("a");
  auto b = NewInstance("b");
  ASSERT_TRUE(a->lease.Tick().ok());
  ASSERT_TRUE(b->lease.Tick().ok());
  ASSERT_FALSE(b->lease.IsLeader());

  ASSERT_TRUE(a->lease.Resign().ok());
  EXPECT_FALSE(a->lease.MayAct());
  EXPECT_FALSE(a->lease.IsLeader());
  EXPECT_FALSE(a->lease.Lost());  // a clean stop, not a lost lease
  ASSERT_TRUE(Stored()->released);
  // Nothing the old leader still tries to write commits.
  const Status fenced =
      store_->Write([&](store::Txn& txn) { return a->lease.CheckInTxn(txn); });
  EXPECT_EQ(fenced.code(), StatusCode::kUnavailable) << fenced.ToString();
  // It never takes its own released lease back.
  ASSERT_TRUE(a->lease.Tick().ok());
  EXPECT_FALSE(a->lease.IsLeader());

  // No clock moves: the follower takes over on its next look.
  ASSERT_TRUE(b->lease.Tick().ok());
  EXPECT_TRUE(b->lease.IsLeader());
  EXPECT_EQ(b->lease.Term(), 2);
  EXPECT_EQ(Stored()->id, "b");
  EXPECT_FALSE(Stored()->released);
  // Resigning twice, or as a follower, writes nothing.
  ASSERT_TRUE(a->lease.Resign().ok());
  EXPECT_EQ(Stored()->id, "b");
}

// A resign that comes after a takeover hands nothing on.
TEST_F(LeadershipTest, ResigningAfterATakeoverLeavesTheNewLeaseAlone) {
  auto a = NewInstance("a");
  auto b = NewInstance("b");
  ASSERT_TRUE(a->lease.Tick().ok());
  ASSERT_TRUE(b->lease.Tick().ok());
  b->mono.Advance(kTtl);
  ASSERT_TRUE(b->lease.Tick().ok());
  ASSERT_TRUE(b->lease.IsLeader());
  ASSERT_TRUE(a->lease.Resign().ok());
  const auto stored = Stored();
  EXPECT_EQ(stored->id, "b");
  EXPECT_FALSE(stored->released);
}

TEST_F(LeadershipTest, LeaderThatCannotRenewStopsActingBeforeATakeover) {
  auto a = NewInstance("a");
  auto b = NewInstance("b");
  ASSERT_TRUE(a->lease.Tick().ok());
  ASSERT_TRUE(b->lease.Tick().ok());  // b saw the value at the same instant
  a->store.down = true;               // a is cut off from the database

  // Both clocks run at the same rate from here; step 100 ms at a time.
  std::int64_t stopped_at = -1;
  std::int64_t taken_at = -1;
  for (std::int64_t t = 100; t <= 2 * kTtl; t += 100) {
    a->mono.Advance(100);
    b->mono.Advance(100);
    (void)a->lease.Tick();  // renewals fail: Unavailable
    if (stopped_at < 0 && !a->lease.MayAct()) stopped_at = t;
    ASSERT_TRUE(b->lease.Tick().ok());
    if (taken_at < 0 && b->lease.IsLeader()) taken_at = t;
  }
  ASSERT_GE(stopped_at, 0) << "the cut-off leader never stopped acting";
  ASSERT_GE(taken_at, 0) << "the follower never took over";
  // It stops acting once ttl - margin has passed since its last renewal
  // began, i.e. at least `margin` before the follower may take over.
  EXPECT_LE(stopped_at, kTtl - kMargin + 100);
  EXPECT_GE(taken_at, kTtl);
  EXPECT_GE(taken_at - stopped_at, kMargin - 100);
  EXPECT_TRUE(a->lease.Lost());
  EXPECT_EQ(a->lease.Term(), 0);

  // Back on the network, the old leader does not come back.
  a->store.down = false;
  EXPECT_EQ(a->lease.Tick().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(a->lease.MayAct());
}

TEST_F(LeadershipTest, TermsIncreaseWithEveryTakeover) {
  std::vector<std::unique_ptr<Instance>> all;
  for (const char* id : {"a", "b", "c"}) all.push_back(NewInstance(id));
  ASSERT_TRUE(all[0]->lease.Tick().ok());
  std::int64_t term = all[0]->lease.Term();
  ASSERT_EQ(term, 1);
  for (int round = 1; round <= 4; ++round) {
    Instance& next = *all[round % 3];
    ASSERT_TRUE(next.lease.Tick().ok());  // sees the current value
    next.mono.Advance(kTtl);
    ASSERT_TRUE(next.lease.Tick().ok());
    ASSERT_TRUE(next.lease.IsLeader()) << "round " << round;
    EXPECT_EQ(next.lease.Term(), term + 1);
    term = next.lease.Term();
    // The previous leader learns it at its next renewal and stops for good.
    Instance& previous = *all[(round - 1) % 3];
    if (previous.lease.IsLeader()) {
      previous.mono.Advance(kTtl / 3);
      EXPECT_EQ(previous.lease.Tick().code(), StatusCode::kFailedPrecondition);
      EXPECT_TRUE(previous.lease.Lost());
    }
    // A lost instance would be restarted as a new process; model that.
    all[(round - 1) % 3] = NewInstance(previous.lease.id());
  }
  EXPECT_EQ(Stored()->term, term);
}

TEST_F(LeadershipTest, InstancesAnnounceThemselves) {
  auto a = NewInstance("a");
  auto b = NewInstance("b");
  ASSERT_TRUE(a->lease.Tick().ok());
  ASSERT_TRUE(b->lease.Tick().ok());
  auto cluster = ReadCluster(*store_);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  ASSERT_EQ(cluster->instances.size(), 2u);
  EXPECT_EQ(cluster->instances[0].id, "a");
  EXPECT_EQ(cluster->instances[1].url, "http://b");
  EXPECT_EQ(cluster->instances[1].last_seen, wall_.NowMillis());
  ASSERT_TRUE(cluster->leader);
  EXPECT_EQ(cluster->leader->id, "a");
}

TEST_F(LeadershipTest, FencingRejectsAStaleLeadersBind) {
  auto a = NewInstance("a");
  auto b = NewInstance("b");
  ASSERT_TRUE(a->lease.Tick().ok());
  FakeClock wall(1'000'000);
  auto cp_a = ControlPlane::Create(store_.get(), &wall, {}, &a->lease);
  ASSERT_TRUE(cp_a.ok()) << cp_a.status().ToString();
  Caller admin;
  admin.role = store::Role::kAdmin;
  admin.token_id = 1;
  NodeReport node;
  node.name = "n1";
  GpuReport gpu;
  gpu.uuid = "GPU-n1-0";
  gpu.model = "NVIDIA A100-SXM4-80GB";
  gpu.memory_mib = 81920;
  gpu.cc_major = 8;
  node.gpus.push_back(gpu);
  ASSERT_TRUE((*cp_a)->RegisterNode(admin, node).ok());
  TaskCreate task;
  task.name = "t";
  task.memory_mib = 1024;
  auto created = (*cp_a)->CreateTask(admin, task);
  ASSERT_TRUE(created.ok()) << created.status().ToString();

  // b takes over while a is paused (a's clock does not move, so a still
  // believes it may act: only the fence inside the transaction stops it).
  ASSERT_TRUE(b->lease.Tick().ok());
  b->mono.Advance(kTtl);
  ASSERT_TRUE(b->lease.Tick().ok());
  ASSERT_TRUE(b->lease.IsLeader());
  ASSERT_TRUE(a->lease.MayAct());

  auto stale = (*cp_a)->BindPendingOnce();
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(stale.status().message().find("fenced"), std::string::npos)
      << stale.status().ToString();
  // Nothing of the stale bind is in the store; its ledger was undone too.
  EXPECT_TRUE((*cp_a)->CheckLedgerMatchesStore().ok());
  auto pending = (*cp_a)->GetTask(admin, created->id);
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(pending->state, store::TaskState::kPending);
  // The stale leader's other leader work is refused too.
  EXPECT_EQ((*cp_a)->RegisterNode(admin, node).status().code(),
            StatusCode::kUnavailable);

  // The new leader (ledger rebuilt from the store) binds it, in term 2.
  auto cp_b = ControlPlane::Create(store_.get(), &wall, {}, &b->lease);
  ASSERT_TRUE(cp_b.ok()) << cp_b.status().ToString();
  auto bound = (*cp_b)->BindPendingOnce();
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ(*bound, 1);
  store::HistoryFilter f;
  auto history = (*cp_b)->History(admin, f);
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->items.size(), 1u);
  EXPECT_NE(history->items[0].reason.find("by leader term 2"),
            std::string::npos)
      << history->items[0].reason;
  EXPECT_TRUE((*cp_b)->CheckLedgerMatchesStore().ok());
}

// On PostgreSQL several processes race for the lease for real: the store's
// SERIALIZABLE writes must let exactly one of simultaneous takeovers win.
TEST(LeadershipPostgresTest, SimultaneousTakeoversElectExactlyOne) {
  auto pg = store::pg_testing::PgServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  ASSERT_TRUE((*pg)->CreateDatabase("lease").ok());
  constexpr int kInstances = 4;
  std::vector<std::unique_ptr<store::Store>> stores;
  for (int i = 0; i < kInstances; ++i) {
    auto s = store::OpenStore((*pg)->Url("lease"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    stores.push_back(std::move(*s));
  }
  FakeClock wall(1'000);
  for (int round = 0; round < 5; ++round) {
    std::vector<std::unique_ptr<Instance>> all;
    for (int i = 0; i < kInstances; ++i) {
      all.push_back(std::make_unique<Instance>(
          stores[i].get(), &wall,
          "r" + std::to_string(round) + "-" + std::to_string(i)));
      // Everyone has watched the current value for a full ttl already.
      ASSERT_TRUE(all.back()->lease.Tick().ok());
      all.back()->mono.Advance(kTtl);
    }
    std::vector<std::thread> threads;
    threads.reserve(all.size());
    std::atomic<int> go{0};
    for (auto& instance : all) {
      threads.emplace_back([&go, &instance] {
        go.fetch_add(1);
        while (go.load() < kInstances) std::this_thread::yield();
        (void)instance->lease.Tick();
      });
    }
    for (std::thread& t : threads) t.join();
    int leaders = 0;
    std::string leader;
    for (auto& instance : all) {
      if (instance->lease.IsLeader()) {
        ++leaders;
        leader = instance->lease.id();
      }
    }
    EXPECT_EQ(leaders, 1) << "round " << round;
    auto cluster = ReadCluster(*stores[0]);
    ASSERT_TRUE(cluster.ok());
    ASSERT_TRUE(cluster->leader);
    EXPECT_EQ(cluster->leader->id, leader);
  }
}

}  // namespace
}  // namespace hf::server
