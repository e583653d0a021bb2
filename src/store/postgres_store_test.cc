// Tests of the PostgreSQL store against a real PostgreSQL server started for
// this binary (pg_testing::PgServer): the Store contract suite
// (store_contract_test.h), each test on a fresh database, plus what only
// PostgreSQL has: database URLs and their errors, several stores (several
// servers' connections) writing one database at once, serialization
// conflicts that are run again, and the server going away and coming back.
//
// Without PostgreSQL's tools the whole binary fails (the environment's
// set-up says what to install); it never skips.
//
// Thread-safety: tests run one at a time; some start threads.
#include "store/postgres_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <pqxx/pqxx>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "store/sqlite_store.h"
#include "store/store.h"
#include "store/store_contract_test.h"
#include "store/testing/pg_server.h"

namespace hf::store {
namespace {

using pg_testing::PgServer;

// The server every test of this binary shares: started by the first test
// that needs it, stopped after the last one. When it cannot start, every
// test that needs it fails with the reason (a failed global set-up would
// only mark the tests skipped).
std::unique_ptr<PgServer> shared_server_owner;
Status shared_server_status = Status::Unavailable("not started yet");

// The database new ones are copied from: migrated once, so that each test
// pays for a copy only.
constexpr const char* kTemplateDatabase = "hf_template";

Status StartSharedServer() {
  StatusOr<std::unique_ptr<PgServer>> server = PgServer::Start();
  if (!server.ok()) return server.status();
  HF_RETURN_IF_ERROR((*server)->CreateDatabase(kTemplateDatabase));
  StatusOr<std::unique_ptr<Store>> migrated =
      OpenStore((*server)->Url(kTemplateDatabase));
  if (!migrated.ok()) return migrated.status();
  shared_server_owner = std::move(server).value();
  return Status::Ok();
}

StatusOr<PgServer*> SharedServer() {
  static const bool started = [] {
    shared_server_status = StartSharedServer().WithContext(
        "cannot start a PostgreSQL server for the tests");
    return true;
  }();
  (void)started;
  if (!shared_server_status.ok()) return shared_server_status;
  return shared_server_owner.get();
}

class StopSharedServer : public ::testing::Environment {
 public:
  void TearDown() override { shared_server_owner.reset(); }
};
[[maybe_unused]] ::testing::Environment* const kStopSharedServer =
    ::testing::AddGlobalTestEnvironment(new StopSharedServer);

// A new database on the shared server, named t_1, t_2, ...: empty but for
// the schema.
StatusOr<std::string> NewDatabase(PgServer& server) {
  static std::atomic<int> next{0};
  const std::string name = "t_" + std::to_string(++next);
  HF_RETURN_IF_ERROR(server.CreateDatabase(name, kTemplateDatabase));
  return name;
}

// A store on a database of its own, dropped once the store is closed.
class TempPgStore final : public Store {
 public:
  static StatusOr<std::unique_ptr<Store>> Open() {
    StatusOr<PgServer*> server = SharedServer();
    if (!server.ok()) return server.status();
    StatusOr<std::string> name = NewDatabase(**server);
    if (!name.ok()) return name.status();
    StatusOr<std::unique_ptr<Store>> inner = OpenStore((*server)->Url(*name));
    if (!inner.ok()) return inner.status();
    return std::unique_ptr<Store>(
        new TempPgStore(**server, *name, std::move(inner).value()));
  }
  ~TempPgStore() override {
    inner_.reset();
    const Status dropped = server_.DropDatabase(name_);
    EXPECT_TRUE(dropped.ok()) << dropped.ToString();
  }
  Status Write(const std::function<Status(Txn&)>& fn) override {
    return inner_->Write(fn);
  }
  Status Read(const std::function<Status(Txn&)>& fn) override {
    return inner_->Read(fn);
  }
  StoreInfo info() const override { return inner_->info(); }

 private:
  TempPgStore(PgServer& server, std::string name, std::unique_ptr<Store> inner)
      : server_(server), name_(std::move(name)), inner_(std::move(inner)) {}

  PgServer& server_;
  std::string name_;
  std::unique_ptr<Store> inner_;
};

using contract::StoreBackend;
using contract::StoreContractTest;

INSTANTIATE_TEST_SUITE_P(Postgres, StoreContractTest,
                         ::testing::Values(StoreBackend{"Postgres",
                                                        &TempPgStore::Open}),
                         contract::BackendName);

// ------------------------------------------------------------ helpers

// A fresh database on the shared server and its URL ("" and a recorded
// failure when there is none).
std::string NewDatabaseUrl() {
  StatusOr<PgServer*> server = SharedServer();
  if (!server.ok()) {
    ADD_FAILURE() << server.status().ToString();
    return "";
  }
  StatusOr<std::string> name = NewDatabase(**server);
  if (!name.ok()) {
    ADD_FAILURE() << name.status().ToString();
    return "";
  }
  return (*server)->Url(*name);
}

std::unique_ptr<Store> MustOpen(const std::string& url) {
  StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Runs SQL on its own connection, outside any store.
void RawExec(const std::string& url, const std::string& sql) {
  try {
    pqxx::connection conn(url);
    pqxx::nontransaction query(conn);
    query.exec(sql);
    query.commit();
  } catch (const std::exception& e) {
    ADD_FAILURE() << sql << ": " << e.what();
  }
}

Status AddTenant(Store& store, const std::string& name) {
  return store.Write([&](Txn& t) {
    TenantRow row;
    row.name = name;
    return t.InsertTenant(row).status();
  });
}

// Adds one to the counter kept in meta `key` (read, then write).
Status Increment(Txn& t, const std::string& key) {
  StatusOr<std::optional<std::string>> value = t.GetMeta(key);
  if (!value.ok()) return value.status();
  const int next = (value->has_value() ? std::stoi(**value) : 0) + 1;
  return t.SetMeta(key, std::to_string(next));
}

int ReadCounter(Store& store, const std::string& key) {
  int out = -1;
  EXPECT_TRUE(store
                  .Read([&](Txn& t) -> Status {
                    StatusOr<std::optional<std::string>> value = t.GetMeta(key);
                    if (!value.ok()) return value.status();
                    out = value->has_value() ? std::stoi(**value) : 0;
                    return Status::Ok();
                  })
                  .ok());
  return out;
}

// ------------------------------------------------------------ opening

TEST(PostgresStoreTest, OpenStoreTakesBothSchemesAndReportsTheBackend) {
  const std::string url = NewDatabaseUrl();
  ASSERT_TRUE(url.starts_with("postgres://"));
  for (const std::string& spelling :
       {url, "postgresql://" + url.substr(std::string("postgres://").size())}) {
    SCOPED_TRACE(spelling);
    std::unique_ptr<Store> store = MustOpen(spelling);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->info().backend, "postgres");
    EXPECT_EQ(store->info().schema_version, PostgresSchemaVersion());
  }
  // One schema history for both backends.
  EXPECT_EQ(PostgresSchemaVersion(), SqliteSchemaVersion());
}

TEST(PostgresStoreTest, ReopenKeepsTheDataAndRefusesANewerSchema) {
  const std::string url = NewDatabaseUrl();
  {
    std::unique_ptr<Store> store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(AddTenant(*store, "kept").ok());
  }
  {
    std::unique_ptr<Store> store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(
        store->Read([](Txn& t) { return t.FindTenant("kept").status(); }).ok());
  }
  RawExec(url,
          "INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)");
  const StatusOr<std::unique_ptr<Store>> newer = OpenStore(url);
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("99"), std::string::npos)
      << newer.status().message();
}

TEST(PostgresStoreTest, Migration5MakesWholeGpuGrantsExclusive) {
  const std::string url = NewDatabaseUrl();
  contract::PreExclusiveRows rows;
  {
    std::unique_ptr<Store> store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    rows = contract::SeedPreExclusiveRows(*store);
  }
  // As a database from before migration 5 is (what came after undone).
  RawExec(url, "DELETE FROM schema_migrations WHERE version >= 5");
  RawExec(url,
          "ALTER TABLE nodes DROP COLUMN report_epoch, "
          "DROP COLUMN report_seq");
  RawExec(url, "ALTER TABLE tasks DROP COLUMN gpu_compute_mode");
  // Migration 8's columns.
  RawExec(url, "ALTER TABLE slices DROP COLUMN mig_profile");
  RawExec(url, "ALTER TABLE slices DROP COLUMN mig_start");
  RawExec(url, "ALTER TABLE agent_slice_requests DROP COLUMN mig_start");
  RawExec(url, "DROP TABLE slice_usage");                      // migration 9
  RawExec(url, "DROP TABLE slice_usage_history");              // migration 10
  RawExec(url, "ALTER TABLE slice_history DROP COLUMN txid");  // migration 11
  RawExec(url, "ALTER TABLE tasks DROP COLUMN txid");
  RawExec(url, "ALTER TABLE nodes DROP COLUMN runtime");  // migration 12
  std::unique_ptr<Store> store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  contract::CheckRelabelledExclusive(*store, rows);
  store.reset();
  store = MustOpen(url);
  contract::CheckRelabelledExclusive(*store, rows);
}

TEST(PostgresStoreTest, Migration7GivesStoredTasksTheDefaultComputeMode) {
  const std::string url = NewDatabaseUrl();
  contract::PreComputeModeTasks tasks;
  {
    std::unique_ptr<Store> store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    tasks = contract::SeedPreComputeModeTasks(*store);
  }
  // As a database from before migration 7 is.
  RawExec(url, "DELETE FROM schema_migrations WHERE version >= 7");
  RawExec(url, "ALTER TABLE tasks DROP COLUMN gpu_compute_mode");
  // Migration 8's columns.
  RawExec(url, "ALTER TABLE slices DROP COLUMN mig_profile");
  RawExec(url, "ALTER TABLE slices DROP COLUMN mig_start");
  RawExec(url, "ALTER TABLE agent_slice_requests DROP COLUMN mig_start");
  RawExec(url, "DROP TABLE slice_usage");                      // migration 9
  RawExec(url, "DROP TABLE slice_usage_history");              // migration 10
  RawExec(url, "ALTER TABLE slice_history DROP COLUMN txid");  // migration 11
  RawExec(url, "ALTER TABLE tasks DROP COLUMN txid");
  RawExec(url, "ALTER TABLE nodes DROP COLUMN runtime");  // migration 12
  std::unique_ptr<Store> store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->info().schema_version, PostgresSchemaVersion());
  contract::CheckComputeModeMigrated(*store, tasks);
  // Once only: reopening changes nothing more.
  store.reset();
  store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  contract::CheckComputeModeMigrated(*store, tasks);
}

TEST(PostgresStoreTest, SliceUsageHistorySurvivesAReopen) {
  const std::string url = NewDatabaseUrl();
  {
    std::unique_ptr<Store> store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    contract::SeedSliceUsage(*store);
  }
  std::unique_ptr<Store> store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  contract::CheckSliceUsageHistory(*store, {1000, 2000, 3000}, {1500});
}

TEST(PostgresStoreTest, Migration10StartsTheUsageHistoryFromTheLatestRows) {
  const std::string url = NewDatabaseUrl();
  {
    std::unique_ptr<Store> store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    contract::SeedSliceUsage(*store);
  }
  // As a database from before migration 10 is: the latest rows only.
  RawExec(url, "DELETE FROM schema_migrations WHERE version >= 10");
  RawExec(url, "DROP TABLE slice_usage_history");
  RawExec(url, "ALTER TABLE slice_history DROP COLUMN txid");  // migration 11
  RawExec(url, "ALTER TABLE tasks DROP COLUMN txid");
  RawExec(url, "ALTER TABLE nodes DROP COLUMN runtime");  // migration 12
  std::unique_ptr<Store> store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->info().schema_version, PostgresSchemaVersion());
  contract::CheckSliceUsageHistory(*store, {3000}, {1500});
  store.reset();
  store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  contract::CheckSliceUsageHistory(*store, {3000}, {1500});
}

TEST(PostgresStoreTest, Migration12KeepsNodesWithoutARuntimeUntilTheyReport) {
  const std::string url = NewDatabaseUrl();
  {
    std::unique_ptr<Store> store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    contract::SeedNodeWithARuntime(*store);
  }
  RawExec(url, "DELETE FROM schema_migrations WHERE version >= 12");
  RawExec(url, "ALTER TABLE nodes DROP COLUMN runtime");
  std::unique_ptr<Store> store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->info().schema_version, PostgresSchemaVersion());
  contract::CheckNodeWithoutARuntime(*store);
}

TEST(PostgresStoreTest, MalformedUrlsAreInvalidArgumentNamingTheDbField) {
  const std::vector<std::string> bad = {
      "postgres://hf@127.0.0.1:5432",        // no database
      "postgres://hf@127.0.0.1:5432/",       // no database
      "postgres://hf@127.0.0.1:http/hf",     // port not a number
      "postgresql://hf@127.0.0.1:70000/hf",  // port out of range
      "postgres://hf@127.0.0.1/hf?no_such_option=1",
      "postgres://hf:pa%zzword@127.0.0.1/hf",  // bad escape in the password
  };
  for (const std::string& url : bad) {
    SCOPED_TRACE(url);
    const StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument)
        << store.status().ToString();
    EXPECT_EQ(store.status().field(), "db");
    EXPECT_NE(store.status().message().find("postgres://USER"),
              std::string::npos)
        << store.status().message();
    EXPECT_EQ(store.status().message().find("pa%zz"), std::string::npos)
        << "the password leaked: " << store.status().message();
  }
}

TEST(PostgresStoreTest, UnreachableServerNamesHostAndPortButNotThePassword) {
  StatusOr<PgServer*> server = SharedServer();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // Port 1 (tcpmux): nothing listens there.
  const int closed_port = 1;
  const auto started = std::chrono::steady_clock::now();
  const StatusOr<std::unique_ptr<Store>> store = OpenStore(
      "postgres://alice:s3cret-pw@127.0.0.1:" + std::to_string(closed_port) +
      "/hf");
  EXPECT_LT(std::chrono::steady_clock::now() - started,
            std::chrono::seconds(10));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable);
  const std::string& message = store.status().message();
  EXPECT_NE(message.find("127.0.0.1:" + std::to_string(closed_port)),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("Connection refused"), std::string::npos) << message;
  EXPECT_EQ(message.find("s3cret"), std::string::npos) << message;

  // Reached, but refused: the server's reason comes through.
  const StatusOr<std::unique_ptr<Store>> missing =
      OpenStore("postgres://postgres:s3cret-pw@127.0.0.1:" +
                std::to_string((*server)->port()) + "/no_such_db");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("no_such_db"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(missing.status().message().find("s3cret"), std::string::npos)
      << missing.status().message();
}

// --------------------------------------------------------------- values

TEST(PostgresStoreTest, NulInATextColumnIsRefusedNotCutShort) {
  std::unique_ptr<Store> store = MustOpen(NewDatabaseUrl());
  ASSERT_NE(store, nullptr);
  const Status status = AddTenant(*store, std::string("a\0b", 3));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_TRUE(store
                  ->Read([](Txn& t) -> Status {
                    StatusOr<std::vector<TenantRow>> all = t.ListTenants();
                    if (!all.ok()) return all.status();
                    EXPECT_TRUE(all->empty());
                    return Status::Ok();
                  })
                  .ok());
}

TEST(PostgresStoreTest, WriteInsideAWriteIsRefused) {
  std::unique_ptr<Store> store = MustOpen(NewDatabaseUrl());
  ASSERT_NE(store, nullptr);
  Status inner;
  const Status outer = store->Write([&](Txn&) {
    inner = store->Write([](Txn&) { return Status::Ok(); });
    return Status::Ok();
  });
  EXPECT_TRUE(outer.ok()) << outer.ToString();
  EXPECT_EQ(inner.code(), StatusCode::kInternal) << inner.ToString();
}

// ---------------------------------------------------------- concurrency

TEST(PostgresStoreTest, SerializationConflictIsRunAgainEvenIfFnIgnoresIt) {
  const std::string url = NewDatabaseUrl();
  std::unique_ptr<Store> a = MustOpen(url);
  std::unique_ptr<Store> b = MustOpen(url);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->Write([](Txn& t) { return t.SetMeta("n", "10"); }).ok());

  // A reads n; then B (another connection, as another hf-server) changes it
  // and commits; then A's write of n conflicts. A's function ignores that
  // error, but the Write must not commit it: it runs the function again.
  int runs = 0;
  const Status status = a->Write([&](Txn& t) -> Status {
    ++runs;
    StatusOr<std::optional<std::string>> n = t.GetMeta("n");
    if (!n.ok()) return n.status();
    if (runs == 1) {
      EXPECT_TRUE(b->Write([](Txn& w) { return w.SetMeta("n", "20"); }).ok());
    }
    (void)t.SetMeta("n", std::to_string(std::stoi(n->value()) + 1));
    return Status::Ok();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(runs, 2);
  // B's 20, then A's increment of what it read on its second run.
  EXPECT_EQ(ReadCounter(*a, "n"), 21);
}

TEST(PostgresStoreTest, TwoStoresWritingAtOnceLoseNoUpdateAndShareNoId) {
  const std::string url = NewDatabaseUrl();
  constexpr int kStores = 2;
  constexpr int kThreadsPerStore = 2;
  constexpr int kWritesPerThread = 60;
  std::vector<std::unique_ptr<Store>> stores;
  for (int i = 0; i < kStores; ++i) {
    stores.push_back(MustOpen(url));
    ASSERT_NE(stores.back(), nullptr);
  }
  ASSERT_TRUE(AddTenant(*stores[0], "t").ok());
  RowId tenant = 0;
  ASSERT_TRUE(stores[0]
                  ->Read([&](Txn& t) -> Status {
                    StatusOr<TenantRow> row = t.FindTenant("t");
                    if (!row.ok()) return row.status();
                    tenant = row->id;
                    return Status::Ok();
                  })
                  .ok());

  // Every write increments one shared counter (a read-modify-write) and
  // inserts a task. Under contention a write may give up (Aborted) after
  // its retries; the counter must then equal the number of writes that
  // succeeded, and every success must hold a task id of its own.
  std::atomic<int> succeeded{0};
  std::atomic<int> gave_up{0};
  std::atomic<int> runs{0};  // more than the writes: conflicts were rerun
  std::vector<std::vector<RowId>> ids(
      static_cast<std::size_t>(kStores * kThreadsPerStore));
  std::vector<std::thread> threads;
  for (int s = 0; s < kStores; ++s) {
    for (int w = 0; w < kThreadsPerStore; ++w) {
      const int slot = s * kThreadsPerStore + w;
      threads.emplace_back([&, s, slot] {
        for (int i = 0; i < kWritesPerThread; ++i) {
          RowId id = 0;
          const Status status = stores[s]->Write([&](Txn& t) -> Status {
            ++runs;
            HF_RETURN_IF_ERROR(Increment(t, "counter"));
            StatusOr<TaskRow> task = t.InsertTask(contract::PendingTask(
                tenant, std::to_string(slot) + "/" + std::to_string(i)));
            if (!task.ok()) return task.status();
            id = task->id;
            return Status::Ok();
          });
          if (status.ok()) {
            ++succeeded;
            ids[slot].push_back(id);
          } else {
            EXPECT_EQ(status.code(), StatusCode::kAborted) << status.ToString();
            ++gave_up;
          }
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();

  RecordProperty("runs", runs.load());
  RecordProperty("gave_up", gave_up.load());
  EXPECT_EQ(succeeded + gave_up, kStores * kThreadsPerStore * kWritesPerThread);
  // Retries absorb nearly all conflicts.
  EXPECT_GE(succeeded.load(),
            kStores * kThreadsPerStore * kWritesPerThread * 9 / 10);
  EXPECT_EQ(ReadCounter(*stores[1], "counter"), succeeded.load());
  std::set<RowId> distinct;
  for (const auto& per_thread : ids) {
    distinct.insert(per_thread.begin(), per_thread.end());
  }
  EXPECT_EQ(distinct.size(), static_cast<std::size_t>(succeeded.load()));
  EXPECT_TRUE(stores[0]
                  ->Read([&](Txn& t) -> Status {
                    TaskFilter f;
                    f.limit = 10000;
                    StatusOr<std::vector<TaskRow>> tasks = t.ListTasks(f);
                    if (!tasks.ok()) return tasks.status();
                    EXPECT_EQ(tasks->size(), distinct.size());
                    return Status::Ok();
                  })
                  .ok());
}

// The task feed: a task committed through another store (another server
// instance) reaches the feed with its id; a rolled-back one never does; a
// feed whose connection is killed reports 0 (read afresh) and goes on.
TEST(PostgresStoreTest, TheTaskFeedSeesTasksCommittedByOtherStores) {
  const std::string url = NewDatabaseUrl();
  std::unique_ptr<Store> leader = MustOpen(url);
  std::unique_ptr<Store> follower = MustOpen(url);
  ASSERT_NE(leader, nullptr);
  ASSERT_NE(follower, nullptr);
  ASSERT_TRUE(AddTenant(*follower, "t").ok());
  std::mutex mu;
  std::vector<RowId> seen;
  std::unique_ptr<TaskFeed> feed = leader->WatchTasks([&](RowId id) {
    std::lock_guard lock(mu);
    seen.push_back(id);
  });
  ASSERT_NE(feed, nullptr);
  const auto wait_for = [&](const std::function<bool()>& done) {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard lock(mu);
        if (done()) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  // Listening: the start is reported as "read afresh".
  ASSERT_TRUE(wait_for([&] { return !seen.empty(); }));
  EXPECT_EQ(seen.front(), 0);
  const auto create = [&](bool commit) {
    RowId id = 0;
    const Status s = follower->Write([&](Txn& t) -> Status {
      StatusOr<TenantRow> tenant = t.FindTenant("t");
      if (!tenant.ok()) return tenant.status();
      StatusOr<TaskRow> row =
          t.InsertTask(contract::PendingTask(tenant->id, "job"));
      if (!row.ok()) return row.status();
      id = row->id;
      HF_RETURN_IF_ERROR(t.NotifyTaskCreated(id));
      return commit ? Status::Ok() : Status::Aborted("rolled back");
    });
    EXPECT_EQ(s.ok(), commit) << s.ToString();
    return id;
  };
  const RowId dropped = create(false);
  const RowId first = create(true);
  ASSERT_TRUE(wait_for([&] {
    return std::find(seen.begin(), seen.end(), first) != seen.end();
  }));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(std::find(seen.begin(), seen.end(), dropped), seen.end());
    seen.clear();
  }
  // Kill the feed's connection: it comes back, says so, and goes on.
  RawExec(url,
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
          "query LIKE 'LISTEN%' AND pid <> pg_backend_pid()");
  ASSERT_TRUE(wait_for(
      [&] { return std::find(seen.begin(), seen.end(), 0) != seen.end(); }));
  const RowId second = create(true);
  EXPECT_TRUE(wait_for([&] {
    return std::find(seen.begin(), seen.end(), second) != seen.end();
  }));
  feed.reset();  // stops: no callback after this
  std::lock_guard lock(mu);
  const std::size_t count = seen.size();
  create(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(seen.size(), count);
}

TEST(PostgresStoreTest, CompareAndSetHoldsAcrossStores) {
  const std::string url = NewDatabaseUrl();
  std::unique_ptr<Store> a = MustOpen(url);
  std::unique_ptr<Store> b = MustOpen(url);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(AddTenant(*a, "t").ok());
  TaskRow task;
  ASSERT_TRUE(a->Write([&](Txn& t) -> Status {
                 StatusOr<TenantRow> tenant = t.FindTenant("t");
                 if (!tenant.ok()) return tenant.status();
                 StatusOr<TaskRow> row =
                     t.InsertTask(contract::PendingTask(tenant->id, "job"));
                 if (!row.ok()) return row.status();
                 task = *row;
                 return Status::Ok();
               }).ok());
  // Both servers hold version v; the first update wins, the second loses.
  TaskRow from_a = task;
  from_a.state = TaskState::kScheduled;
  TaskRow from_b = task;
  from_b.state = TaskState::kCancelled;
  EXPECT_TRUE(
      a->Write([&](Txn& t) { return t.UpdateTask(from_a).status(); }).ok());
  const Status lost =
      b->Write([&](Txn& t) { return t.UpdateTask(from_b).status(); });
  EXPECT_EQ(lost.code(), StatusCode::kAborted) << lost.ToString();
  EXPECT_TRUE(b->Read([&](Txn& t) -> Status {
                 StatusOr<TaskRow> row = t.GetTask(task.id);
                 if (!row.ok()) return row.status();
                 EXPECT_EQ(row->state, TaskState::kScheduled);
                 return Status::Ok();
               }).ok());
}

// ------------------------------------------------------- client pages

// Inserts one row (a history entry or a task); returns its id.
using InsertRow = std::function<StatusOr<RowId>(Txn&)>;
// The ids and positions of a list: a client's page from `after`, or, with
// nullopt, the server's own scan (every visible row, id order).
using ListRows =
    std::function<StatusOr<std::vector<std::pair<RowId, ListPosition>>>(
        Txn&, std::optional<ListPosition> after)>;

std::vector<std::pair<RowId, ListPosition>> MustList(
    Store& store, const ListRows& list, std::optional<ListPosition> after) {
  std::vector<std::pair<RowId, ListPosition>> out;
  const Status read = store.Read([&](Txn& t) -> Status {
    auto rows = list(t, after);
    if (!rows.ok()) return rows.status();
    out = std::move(rows).value();
    return Status::Ok();
  });
  EXPECT_TRUE(read.ok()) << read.ToString();
  return out;
}

// Two server instances (two stores): A inserts row N and stays in its
// transaction while B inserts N+1 and commits, so B's row is visible and
// A's is not. A client pages the list then, keeps the cursor, and pages
// again once A has committed: it must get every row exactly once; a
// cursor that moved past N+1 (id order) would never return N.
void CheckALateCommitIsNotSkipped(const InsertRow& insert,
                                  const ListRows& list) {
  const std::string url = NewDatabaseUrl();
  std::unique_ptr<Store> a = MustOpen(url);
  std::unique_ptr<Store> b = MustOpen(url);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto must_insert = [&](Store& store) {
    RowId id = 0;
    const Status wrote = store.Write([&](Txn& t) -> Status {
      StatusOr<RowId> inserted = insert(t);
      if (!inserted.ok()) return inserted.status();
      id = *inserted;
      return Status::Ok();
    });
    EXPECT_TRUE(wrote.ok()) << wrote.ToString();
    return id;
  };
  const RowId seed = must_insert(*b);

  std::promise<RowId> inserted_a;
  std::promise<void> commit_a;
  std::shared_future<void> may_commit_a = commit_a.get_future().share();
  Status wrote_a;
  std::thread in_flight([&] {
    bool told = false;
    wrote_a = a->Write([&](Txn& t) -> Status {
      StatusOr<RowId> id = insert(t);
      if (!id.ok()) return id.status();
      if (!told) inserted_a.set_value(*id);
      told = true;
      may_commit_a.wait();
      return Status::Ok();
    });
    if (!told) inserted_a.set_value(0);
  });
  const RowId n = inserted_a.get_future().get();
  const RowId n1 = must_insert(*b);
  EXPECT_GT(n1, n);

  // The server's own scans see the newest commit at once.
  std::vector<RowId> scanned;
  for (const auto& [id, position] : MustList(*b, list, std::nullopt)) {
    scanned.push_back(id);
  }
  EXPECT_EQ(scanned, (std::vector<RowId>{seed, n1}));

  // The client's first page, and the cursor it keeps.
  std::vector<RowId> seen;
  ListPosition cursor;
  for (const auto& [id, position] : MustList(*b, list, ListPosition{})) {
    seen.push_back(id);
    cursor = position;
  }
  commit_a.set_value();
  in_flight.join();
  ASSERT_TRUE(wrote_a.ok()) << wrote_a.ToString();

  for (const auto& [id, position] : MustList(*b, list, cursor)) {
    EXPECT_LT(cursor, position) << id;
    seen.push_back(id);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<RowId>{seed, n, n1}))
      << "a row that committed after a later id was skipped or repeated";
}

TEST(PostgresStoreTest, HistoryPagesDoNotSkipARowThatCommitsLate) {
  HistoryRow row;
  row.op = "allocate";
  row.actor = "test";
  CheckALateCommitIsNotSkipped(
      [&](Txn& t) { return t.AppendHistory(row); },
      [](Txn& t, std::optional<ListPosition> after)
          -> StatusOr<std::vector<std::pair<RowId, ListPosition>>> {
        HistoryFilter f;
        f.after = after;
        StatusOr<std::vector<HistoryRow>> rows = t.ListHistory(f);
        if (!rows.ok()) return rows.status();
        std::vector<std::pair<RowId, ListPosition>> out;
        for (const HistoryRow& h : *rows) out.emplace_back(h.id, h.position());
        return out;
      });
}

TEST(PostgresStoreTest, TaskPagesDoNotSkipATaskThatCommitsLate) {
  // Each store inserts the task under a tenant of its own making: the
  // first insert creates it, later ones find it.
  auto tenant_of = [](Txn& t) -> StatusOr<RowId> {
    StatusOr<TenantRow> found = t.FindTenant("t");
    if (found.ok()) return found->id;
    TenantRow row;
    row.name = "t";
    StatusOr<TenantRow> added = t.InsertTenant(row);
    if (!added.ok()) return added.status();
    return added->id;
  };
  CheckALateCommitIsNotSkipped(
      [&](Txn& t) -> StatusOr<RowId> {
        StatusOr<RowId> tenant = tenant_of(t);
        if (!tenant.ok()) return tenant.status();
        StatusOr<TaskRow> task =
            t.InsertTask(contract::PendingTask(*tenant, "late"));
        if (!task.ok()) return task.status();
        return task->id;
      },
      [](Txn& t, std::optional<ListPosition> after)
          -> StatusOr<std::vector<std::pair<RowId, ListPosition>>> {
        TaskFilter f;
        f.after = after;
        StatusOr<std::vector<TaskRow>> rows = t.ListTasks(f);
        if (!rows.ok()) return rows.status();
        std::vector<std::pair<RowId, ListPosition>> out;
        for (const TaskRow& task : *rows) {
          out.emplace_back(task.id, task.position());
        }
        return out;
      });
}

TEST(PostgresStoreTest, Migration11PutsStoredRowsAheadOfNewOnesInIdOrder) {
  const std::string url = NewDatabaseUrl();
  std::vector<RowId> old_rows;
  {
    std::unique_ptr<Store> store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 3; ++i) {
      HistoryRow row;
      row.op = "allocate";
      ASSERT_TRUE(store
                      ->Write([&](Txn& t) -> Status {
                        StatusOr<RowId> id = t.AppendHistory(row);
                        if (!id.ok()) return id.status();
                        old_rows.push_back(*id);
                        return Status::Ok();
                      })
                      .ok());
    }
  }
  // As a database from before migration 11 is.
  RawExec(url, "DELETE FROM schema_migrations WHERE version >= 11");
  RawExec(url, "ALTER TABLE slice_history DROP COLUMN txid");
  RawExec(url, "ALTER TABLE tasks DROP COLUMN txid");
  RawExec(url, "ALTER TABLE nodes DROP COLUMN runtime");  // migration 12
  std::unique_ptr<Store> store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->info().schema_version, PostgresSchemaVersion());
  RowId added = 0;
  ASSERT_TRUE(store
                  ->Write([&](Txn& t) -> Status {
                    HistoryRow row;
                    row.op = "release";
                    StatusOr<RowId> id = t.AppendHistory(row);
                    if (!id.ok()) return id.status();
                    added = *id;
                    return Status::Ok();
                  })
                  .ok());
  // A cursor handed out before (an id, position (0, id)) still means the
  // same place: the stored rows after it, then the new one.
  std::vector<HistoryRow> rows;
  ASSERT_TRUE(store
                  ->Read([&](Txn& t) -> Status {
                    HistoryFilter f;
                    f.after = ListPosition{.txn = 0, .id = old_rows[0]};
                    auto listed = t.ListHistory(f);
                    if (!listed.ok()) return listed.status();
                    rows = std::move(listed).value();
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_EQ(contract::IdsOf(rows),
            (std::vector<RowId>{old_rows[1], old_rows[2], added}));
  EXPECT_EQ(rows[0].txn, 0);
  EXPECT_EQ(rows[1].txn, 0);
  EXPECT_GT(rows[2].txn, 0);
}

// ------------------------------------------------------ server failures

TEST(PostgresStoreTest, ServerStoppedMidUseGivesErrorsThenWorksAfterRestart) {
  // A server of its own: this test stops it.
  StatusOr<std::unique_ptr<PgServer>> started = PgServer::Start();
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  PgServer& server = **started;
  ASSERT_TRUE(server.CreateDatabase("hf").ok());
  std::unique_ptr<Store> store = MustOpen(server.Url("hf"));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(AddTenant(*store, "before").ok());

  // Writers and readers keep going throughout; no call may hang.
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<std::int64_t> slowest_ms{0};
  auto timed = [&](const std::function<Status()>& call) {
    const auto start = std::chrono::steady_clock::now();
    const Status status = call();
    const std::int64_t ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start)
            .count();
    std::int64_t seen = slowest_ms.load();
    while (ms > seen && !slowest_ms.compare_exchange_weak(seen, ms)) {
    }
    if (!status.ok()) {
      ++failures;
      EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
    }
  };
  constexpr int kThreads = 3;  // one writer, two readers
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      while (!stop) {
        if (i == 0) {
          timed([&] {
            return store->Write([&](Txn& t) { return Increment(t, "writes"); });
          });
        } else {
          timed([&] {
            return store->Read([](Txn& t) { return t.ListTenants().status(); });
          });
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(server.Stop().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(failures.load(), 0) << "the calls did not notice the server stop";
  ASSERT_TRUE(server.Restart().ok());

  // Back in service within a short while.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(15);
  Status back = Status::Unavailable("not tried");
  while (!back.ok() && std::chrono::steady_clock::now() < deadline) {
    back = AddTenant(*store, "after");
    if (!back.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(back.ok()) << back.ToString();
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_LT(slowest_ms.load(), 10'000);

  // Nothing acknowledged before the stop is lost, and a stop while the
  // store sits idle costs no failed call: the dead connections are
  // replaced on first use.
  ASSERT_TRUE(server.Stop().ok());
  ASSERT_TRUE(server.Restart().ok());
  const Status read = store->Read([](Txn& t) -> Status {
    HF_RETURN_IF_ERROR(t.FindTenant("before").status());
    return t.FindTenant("after").status();
  });
  EXPECT_TRUE(read.ok()) << read.ToString();
  const Status write = AddTenant(*store, "after-idle-restart");
  EXPECT_TRUE(write.ok()) << write.ToString();
  store.reset();
}

}  // namespace
}  // namespace hf::store
