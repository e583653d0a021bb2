// Tests of the SQLite store: the Store contract suite (store_contract_test.h)
// against a real database file in a temporary directory, plus what only
// SQLite has: reopening, schema versions, database URLs, and durability of
// acknowledged writes when the process is killed (kill -9) mid-stream.
//
// Thread-safety: tests run one at a time; some start threads, and the crash
// test forks (only while no store is open, so no thread is running).
#include "store/sqlite_store.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "store/store.h"
#include "store/store_contract_test.h"
#include "store/testing/temp_store.h"

namespace hf::store {
namespace {

using sqlite_testing::TempDir;

// A store that owns the directory of its database file and removes it once
// the database is closed.
class TempSqliteStore final : public Store {
 public:
  static StatusOr<std::unique_ptr<Store>> Open() {
    auto dir = std::make_unique<TempDir>();
    StatusOr<std::unique_ptr<Store>> inner =
        sqlite_testing::OpenSqliteStore(*dir);
    if (!inner.ok()) return inner.status();
    return std::unique_ptr<Store>(
        new TempSqliteStore(std::move(dir), std::move(inner).value()));
  }
  Status Write(const std::function<Status(Txn&)>& fn) override {
    return inner_->Write(fn);
  }
  Status Read(const std::function<Status(Txn&)>& fn) override {
    return inner_->Read(fn);
  }
  StoreInfo info() const override { return inner_->info(); }

 private:
  TempSqliteStore(std::unique_ptr<TempDir> dir, std::unique_ptr<Store> inner)
      : dir_(std::move(dir)), inner_(std::move(inner)) {}

  std::unique_ptr<TempDir> dir_;  // declared first: outlives inner_
  std::unique_ptr<Store> inner_;
};

using contract::StoreBackend;
using contract::StoreContractTest;

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreContractTest,
                         ::testing::Values(StoreBackend{
                             "Sqlite", &TempSqliteStore::Open}),
                         contract::BackendName);

// ------------------------------------------------------------ helpers

std::unique_ptr<Store> MustOpen(const std::string& path) {
  StatusOr<std::unique_ptr<Store>> store = OpenStore("sqlite:" + path);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

RowId MustAddTenant(Store& store, const std::string& name) {
  RowId id = 0;
  const Status status = store.Write([&](Txn& t) -> Status {
    TenantRow row;
    row.name = name;
    StatusOr<TenantRow> stored = t.InsertTenant(row);
    if (!stored.ok()) return stored.status();
    id = stored->id;
    return Status::Ok();
  });
  EXPECT_TRUE(status.ok()) << status.ToString();
  return id;
}

// Runs one SQL statement on its own connection; returns the first column of
// each row.
std::vector<std::string> RawQuery(const std::string& path,
                                  const std::string& sql) {
  sqlite3* db = nullptr;
  std::vector<std::string> out;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) !=
      SQLITE_OK) {
    ADD_FAILURE() << "open " << path << ": " << sqlite3_errmsg(db);
    sqlite3_close(db);
    return out;
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db);
  } else {
    int rc = SQLITE_OK;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      out.emplace_back(text != nullptr ? reinterpret_cast<const char*>(text)
                                       : "NULL");
    }
    if (rc != SQLITE_DONE) ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

// ------------------------------------------------------------ opening

TEST(SqliteStoreTest, NewDatabaseIsMigratedInWalMode) {
  TempDir dir;
  const std::string path = dir.File("hf.db");
  {
    std::unique_ptr<Store> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->info().backend, "sqlite");
    EXPECT_EQ(store->info().schema_version, SqliteSchemaVersion());
  }
  EXPECT_EQ(RawQuery(path, "PRAGMA journal_mode"),
            std::vector<std::string>{"wal"});
  std::vector<std::string> expected;
  for (int v = 1; v <= SqliteSchemaVersion(); ++v) {
    expected.push_back(std::to_string(v));
  }
  EXPECT_EQ(RawQuery(path,
                     "SELECT version FROM schema_migrations "
                     "WHERE applied_at > 0 ORDER BY version"),
            expected);
  // No seed rows: the server creates the default tenant itself.
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM tenants"),
            std::vector<std::string>{"0"});
}

TEST(SqliteStoreTest, ReopenKeepsDataAndSchemaVersion) {
  TempDir dir;
  const std::string path = dir.File("hf.db");
  RowId tenant = 0;
  {
    std::unique_ptr<Store> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    tenant = MustAddTenant(*store, "acme");
    ASSERT_TRUE(store->Write([](Txn& t) { return t.SetMeta("k", "v"); }).ok());
  }
  std::unique_ptr<Store> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->info().schema_version, SqliteSchemaVersion());
  const Status read = store->Read([&](Txn& t) -> Status {
    StatusOr<TenantRow> row = t.FindTenant("acme");
    HF_RETURN_IF_ERROR(row.status());
    EXPECT_EQ(row->id, tenant);
    StatusOr<std::optional<std::string>> meta = t.GetMeta("k");
    HF_RETURN_IF_ERROR(meta.status());
    EXPECT_EQ(*meta, std::optional<std::string>("v"));
    return Status::Ok();
  });
  EXPECT_TRUE(read.ok()) << read.ToString();
  // Migrations ran once, not again on reopen.
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM schema_migrations"),
            std::vector<std::string>{std::to_string(SqliteSchemaVersion())});
  // Ids keep growing after a restart.
  EXPECT_GT(MustAddTenant(*store, "beta"), tenant);
}

TEST(SqliteStoreTest, Migration5MakesWholeGpuGrantsExclusive) {
  TempDir dir;
  const std::string path = dir.File("hf.db");
  contract::PreExclusiveRows rows;
  {
    std::unique_ptr<Store> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    rows = contract::SeedPreExclusiveRows(*store);
  }
  // As a database from before migration 5 is (what came after undone).
  RawQuery(path, "DELETE FROM schema_migrations WHERE version >= 5");
  RawQuery(path, "ALTER TABLE nodes DROP COLUMN report_epoch");
  RawQuery(path, "ALTER TABLE nodes DROP COLUMN report_seq");
  RawQuery(path, "ALTER TABLE tasks DROP COLUMN gpu_compute_mode");
  // Migration 8's columns.
  RawQuery(path, "ALTER TABLE slices DROP COLUMN mig_profile");
  RawQuery(path, "ALTER TABLE slices DROP COLUMN mig_start");
  RawQuery(path, "ALTER TABLE agent_slice_requests DROP COLUMN mig_start");
  RawQuery(path, "DROP TABLE slice_usage");                 // migration 9
  RawQuery(path, "DROP TABLE slice_usage_history");         // migration 10
  RawQuery(path, "ALTER TABLE nodes DROP COLUMN runtime");  // migration 12
  std::unique_ptr<Store> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  contract::CheckRelabelledExclusive(*store, rows);
  // Once only: reopening does not log it again.
  store.reset();
  store = MustOpen(path);
  contract::CheckRelabelledExclusive(*store, rows);
}

TEST(SqliteStoreTest, Migration7GivesStoredTasksTheDefaultComputeMode) {
  TempDir dir;
  const std::string path = dir.File("hf.db");
  contract::PreComputeModeTasks tasks;
  {
    std::unique_ptr<Store> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    tasks = contract::SeedPreComputeModeTasks(*store);
  }
  // As a database from before migration 7 is.
  RawQuery(path, "DELETE FROM schema_migrations WHERE version >= 7");
  RawQuery(path, "ALTER TABLE tasks DROP COLUMN gpu_compute_mode");
  // Migration 8's columns.
  RawQuery(path, "ALTER TABLE slices DROP COLUMN mig_profile");
  RawQuery(path, "ALTER TABLE slices DROP COLUMN mig_start");
  RawQuery(path, "ALTER TABLE agent_slice_requests DROP COLUMN mig_start");
  RawQuery(path, "DROP TABLE slice_usage");                 // migration 9
  RawQuery(path, "DROP TABLE slice_usage_history");         // migration 10
  RawQuery(path, "ALTER TABLE nodes DROP COLUMN runtime");  // migration 12
  ASSERT_EQ(RawQuery(path,
                     "SELECT COUNT(*) FROM pragma_table_info('tasks') "
                     "WHERE name = 'gpu_compute_mode'"),
            std::vector<std::string>{"0"});
  std::unique_ptr<Store> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->info().schema_version, SqliteSchemaVersion());
  EXPECT_EQ(RawQuery(path, "SELECT DISTINCT gpu_compute_mode FROM tasks"),
            std::vector<std::string>{"work-conserving"});
  contract::CheckComputeModeMigrated(*store, tasks);
  // Once only: reopening changes nothing more.
  store.reset();
  store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  contract::CheckComputeModeMigrated(*store, tasks);
}

TEST(SqliteStoreTest, SliceUsageHistorySurvivesARestart) {
  TempDir dir;
  const std::string path = dir.File("hf.db");
  {
    std::unique_ptr<Store> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    contract::SeedSliceUsage(*store);
  }
  std::unique_ptr<Store> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  contract::CheckSliceUsageHistory(*store, {1000, 2000, 3000}, {1500});
}

TEST(SqliteStoreTest, Migration10StartsTheUsageHistoryFromTheLatestRows) {
  TempDir dir;
  const std::string path = dir.File("hf.db");
  {
    std::unique_ptr<Store> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    contract::SeedSliceUsage(*store);
  }
  // As a database from before migration 10 is: the latest rows only.
  RawQuery(path, "DELETE FROM schema_migrations WHERE version >= 10");
  RawQuery(path, "DROP TABLE slice_usage_history");
  RawQuery(path, "ALTER TABLE nodes DROP COLUMN runtime");  // migration 12
  std::unique_ptr<Store> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->info().schema_version, SqliteSchemaVersion());
  contract::CheckSliceUsageHistory(*store, {3000}, {1500});
  // Once only: reopening adds nothing.
  store.reset();
  store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  contract::CheckSliceUsageHistory(*store, {3000}, {1500});
}

TEST(SqliteStoreTest, Migration12KeepsNodesWithoutARuntimeUntilTheyReport) {
  TempDir dir;
  const std::string path = dir.File("hf.db");
  {
    std::unique_ptr<Store> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    contract::SeedNodeWithARuntime(*store);
  }
  RawQuery(path, "DELETE FROM schema_migrations WHERE version >= 12");
  RawQuery(path, "ALTER TABLE nodes DROP COLUMN runtime");
  std::unique_ptr<Store> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->info().schema_version, SqliteSchemaVersion());
  contract::CheckNodeWithoutARuntime(*store);
}

TEST(SqliteStoreTest, RefusesADatabaseFromANewerVersion) {
  TempDir dir;
  const std::string path = dir.File("hf.db");
  ASSERT_NE(MustOpen(path), nullptr);
  const int newer = SqliteSchemaVersion() + 1;
  RawQuery(path,
           "INSERT INTO schema_migrations (version, applied_at) VALUES (" +
               std::to_string(newer) + ", 1)");
  StatusOr<std::unique_ptr<Store>> store = OpenStore("sqlite:" + path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find(
                "database schema version " + std::to_string(newer) +
                " is newer than this hf-server (" +
                std::to_string(SqliteSchemaVersion()) + ")"),
            std::string::npos)
      << store.status().ToString();
}

TEST(SqliteStoreTest, OneProcessOwnsTheDatabaseAtATime) {
  TempDir dir;
  const std::string url = "sqlite:" + dir.File("hf.db");
  StatusOr<std::unique_ptr<Store>> first = OpenStore(url);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  StatusOr<std::unique_ptr<Store>> second = OpenStore(url);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("in use by another process"),
            std::string::npos)
      << second.status().ToString();
  first->reset();
  EXPECT_TRUE(OpenStore(url).ok());  // released with the store
}

TEST(SqliteStoreTest, RefusesAFileThatIsNotADatabase) {
  TempDir dir;
  const std::string path = dir.File("junk.db");
  std::ofstream(path) << std::string(8192, 'x');
  StatusOr<std::unique_ptr<Store>> store = OpenStore("sqlite:" + path);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(path), std::string::npos)
      << store.status().ToString();
}

TEST(SqliteStoreTest, OpenStoreCreatesTheParentDirectory) {
  TempDir dir;
  const std::string path = dir.File("a/b/c/hf.db");
  std::unique_ptr<Store> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST(SqliteStoreTest, BadDatabaseUrlsNameTheDbField) {
  const std::vector<std::string> bad = {
      "",
      "hf.db",
      "mysql://localhost/hf",
      "sqlite:",
      "sqlite::memory:",
      "sqlite://var/lib/hf.db",
      "sqlite:file:hf.db?mode=memory",
  };
  for (const std::string& url : bad) {
    SCOPED_TRACE(url);
    StatusOr<std::unique_ptr<Store>> store = OpenStore(url);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(store.status().field(), "db");
    EXPECT_FALSE(store.status().message().empty());
  }
}

// ------------------------------------------------------- write machinery

TEST(SqliteStoreTest, ThrowingWriteFunctionFailsAloneWithInternal) {
  TempDir dir;
  std::unique_ptr<Store> store = MustOpen(dir.File("hf.db"));
  ASSERT_NE(store, nullptr);
  const Status thrown = store->Write([](Txn& t) -> Status {
    TenantRow row;
    row.name = "half-done";
    (void)t.InsertTenant(row);
    throw std::runtime_error("boom");
  });
  EXPECT_EQ(thrown.code(), StatusCode::kInternal);
  EXPECT_NE(thrown.message().find("boom"), std::string::npos);
  // The writer thread lives on, and nothing of the throwing call was kept.
  MustAddTenant(*store, "after");
  const Status read = store->Read([](Txn& t) -> Status {
    EXPECT_EQ(t.FindTenant("half-done").status().code(), StatusCode::kNotFound);
    return t.FindTenant("after").status();
  });
  EXPECT_TRUE(read.ok()) << read.ToString();
}

TEST(SqliteStoreTest, WriteFromInsideAWriteIsRefused) {
  TempDir dir;
  std::unique_ptr<Store> store = MustOpen(dir.File("hf.db"));
  ASSERT_NE(store, nullptr);
  Status inner;
  const Status outer = store->Write([&](Txn&) {
    inner = store->Write([](Txn&) { return Status::Ok(); });
    return Status::Ok();
  });
  EXPECT_TRUE(outer.ok());
  EXPECT_EQ(inner.code(), StatusCode::kInternal);
}

TEST(SqliteStoreTest, ClosingRunsTheQueuedWrites) {
  TempDir dir;
  const std::string path = dir.File("hf.db");
  constexpr int kWriters = 16;
  {
    std::unique_ptr<Store> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    std::vector<std::thread> writers;
    writers.reserve(kWriters);
    for (int i = 0; i < kWriters; ++i) {
      writers.emplace_back(
          [&, i] { MustAddTenant(*store, "t" + std::to_string(i)); });
    }
    for (std::thread& w : writers) w.join();
  }
  EXPECT_EQ(RawQuery(path, "SELECT COUNT(*) FROM tenants"),
            std::vector<std::string>{std::to_string(kWriters)});
}

TEST(SqliteStoreTest, FailedCommitFailsEveryHeldCallAndKeepsNothing) {
  TempDir dir;
  StatusOr<std::unique_ptr<SqliteStore>> opened =
      SqliteStore::Open(dir.File("hf.db"));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  SqliteStore& store = **opened;
  store.FailCommitsForTesting(true);

  // A slow first write lets the others queue into one batch behind it.
  std::atomic<bool> holding{false};
  Status holder_result;
  std::thread holder([&] {
    holder_result = store.Write([&](Txn& t) {
      holding = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return t.SetMeta("holder", "1");
    });
  });
  while (!holding) std::this_thread::yield();
  constexpr int kWriters = 6;
  std::vector<Status> results(kWriters);
  std::vector<std::thread> writers;
  writers.reserve(kWriters);
  for (int i = 0; i < kWriters; ++i) {
    writers.emplace_back([&, i] {
      results[i] = store.Write([i](Txn& t) -> Status {
        HF_RETURN_IF_ERROR(t.SetMeta("w" + std::to_string(i), "1"));
        if (i == 0) return Status::FailedPrecondition("mine");
        return Status::Ok();
      });
    });
  }
  for (std::thread& w : writers) w.join();
  holder.join();

  EXPECT_EQ(holder_result.code(), StatusCode::kInternal)
      << holder_result.ToString();
  // A call that failed by itself keeps its own error; the others get the
  // commit's, with SQLite's message.
  EXPECT_EQ(results[0], Status::FailedPrecondition("mine"));
  for (int i = 1; i < kWriters; ++i) {
    EXPECT_EQ(results[i].code(), StatusCode::kInternal)
        << results[i].ToString();
    EXPECT_NE(results[i].message().find("constraint failed"), std::string::npos)
        << results[i].ToString();
  }

  store.FailCommitsForTesting(false);
  ASSERT_TRUE(store.Write([](Txn& t) { return t.SetMeta("after", "1"); }).ok());
  const Status read = store.Read([](Txn& t) -> Status {
    for (const std::string key : {"holder", "w0", "w1", "w5"}) {
      StatusOr<std::optional<std::string>> value = t.GetMeta(key);
      HF_RETURN_IF_ERROR(value.status());
      EXPECT_EQ(*value, std::nullopt) << key;
    }
    return t.GetMeta("after").status();
  });
  EXPECT_TRUE(read.ok()) << read.ToString();
}

// ------------------------------------------------------------ durability

// The child: writes tasks from 4 threads and reports each acknowledged id on
// `fd`, until killed. Never returns.
[[noreturn]] void WriteUntilKilled(const std::string& path, RowId tenant,
                                   int fd) {
  StatusOr<std::unique_ptr<Store>> opened = OpenStore("sqlite:" + path);
  if (!opened.ok()) _exit(3);
  std::unique_ptr<Store> store = std::move(opened).value();
  std::vector<std::thread> writers;
  writers.reserve(4);
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&store, tenant, fd] {
      // Bounded, in case the parent never kills us.
      for (int i = 0; i < 100000; ++i) {
        RowId id = 0;
        const Status status = store->Write([&](Txn& t) -> Status {
          TaskRow row;
          row.tenant_id = tenant;
          row.name = "crash-" + std::to_string(i);
          row.env = {{"PAYLOAD", std::string(512, 'p')}};
          StatusOr<TaskRow> stored = t.InsertTask(row);
          if (!stored.ok()) return stored.status();
          id = stored->id;
          return Status::Ok();
        });
        if (!status.ok()) _exit(4);
        if (write(fd, &id, sizeof(id)) != sizeof(id)) _exit(5);
      }
    });
  }
  for (std::thread& w : writers) w.join();
  _exit(0);
}

TEST(SqliteStoreTest, AcknowledgedWritesSurviveKill9) {
  TempDir dir;
  const std::string path = dir.File("hf.db");
  RowId tenant = 0;
  {
    std::unique_ptr<Store> store = MustOpen(path);
    ASSERT_NE(store, nullptr);
    tenant = MustAddTenant(*store, "t");
  }  // closed: no store thread runs while we fork

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    WriteUntilKilled(path, tenant, fds[1]);
  }
  close(fds[1]);

  // Read acknowledgements; kill the child once 200 have arrived, then drain
  // what it acknowledged before it died.
  constexpr int kAcksBeforeKill = 200;
  std::set<RowId> acked;
  bool killed = false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    if (!killed && (static_cast<int>(acked.size()) >= kAcksBeforeKill ||
                    std::chrono::steady_clock::now() > deadline)) {
      kill(child, SIGKILL);
      killed = true;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = poll(&pfd, 1, 1000);
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    if (ready < 0) break;
    RowId id = 0;
    const ssize_t n = read(fds[0], &id, sizeof(id));
    if (n == 0) break;  // every write end closed: the child is gone
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      break;
    }
    ASSERT_EQ(n, static_cast<ssize_t>(sizeof(id)));
    acked.insert(id);
  }
  close(fds[0]);
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wait_status))
      << "child exited on its own with status " << WEXITSTATUS(wait_status);
  EXPECT_EQ(WTERMSIG(wait_status), SIGKILL);
  ASSERT_GE(static_cast<int>(acked.size()), kAcksBeforeKill);

  EXPECT_EQ(RawQuery(path, "PRAGMA integrity_check"),
            std::vector<std::string>{"ok"});
  std::unique_ptr<Store> store = MustOpen(path);
  ASSERT_NE(store, nullptr);
  std::set<RowId> stored;
  const Status read = store->Read([&](Txn& t) -> Status {
    TaskFilter f;
    f.tenant_id = tenant;
    f.limit = 1000;
    for (;;) {
      StatusOr<std::vector<TaskRow>> page = t.ListTasks(f);
      HF_RETURN_IF_ERROR(page.status());
      if (page->empty()) return Status::Ok();
      for (const TaskRow& row : *page) stored.insert(row.id);
      f.after_id = page->back().id;
    }
  });
  ASSERT_TRUE(read.ok()) << read.ToString();
  for (const RowId id : acked) {
    EXPECT_TRUE(stored.count(id)) << "acknowledged task " << id << " lost";
  }
  EXPECT_GE(stored.size(), acked.size());
}

}  // namespace
}  // namespace hf::store
