// PostgresStore: the implementation of `Store` (store.h) on a PostgreSQL
// database, for production and for several hf-server instances sharing one
// database. Built on libpqxx; every libpqxx exception is caught here and
// turned into a Status.
//
// Schema. The same tables, columns and versioned migrations as SQLite
// (schema_migrations, one step per version, a database from a newer
// HeteroFlow refused with FailedPrecondition); only the column types differ.
// Free text that may hold any bytes (token descriptions, approval and history
// reasons, meta values) and task logs are BYTEA, because PostgreSQL text
// cannot hold a NUL byte; a NUL in any other text column is refused with
// InvalidArgument instead of being cut off. Servers opening a new database
// at once migrate it one at a time (an advisory lock).
//
// Transactions. A Write runs at SERIALIZABLE isolation, so writers in
// different processes cannot lose each other's updates. When PostgreSQL
// reports a serialization failure (40001) or a deadlock (40P01), the whole
// transaction is rolled back and `fn` is run again, after a short random
// back-off, at most kMaxWriteAttempts times in all; then Aborted. So `fn`
// may run more than once and must set, not accumulate, what it hands out.
// Within one process writes run on a pool of connections
// (StoreOptions::write_connections), so their commits overlap and
// PostgreSQL flushes them to its WAL together; SERIALIZABLE isolation keeps
// them as correct as one at a time would be, at the price of reruns when
// they conflict. A Read runs at REPEATABLE READ, read only, on a
// connection of its own, so it sees one snapshot and never waits for a
// write.
//
// A refused statement (a duplicate name, a missing row it refers to) is
// undone alone and the transaction goes on, as in SQLite: a Write first
// runs its statements bare, and if one is refused, the whole transaction
// is rolled back and run again with each statement that changes rows in
// its own savepoint (two round trips more a statement, paid only by the
// transactions that need it). A statement that leaves the
// transaction unusable (lost connection, serialization failure) fails every
// later statement of that transaction with the same error, and the Write
// never commits it, even if `fn` ignores the error.
//
// Batches (Txn::UpdateTasks, InsertSlices, AppendHistories,
// InsertSliceRequests) are one statement each, whatever their size: each
// column's values go as one array parameter and `unnest` turns them back
// into rows, so a bind pass of hundreds of tasks costs a few round trips,
// not a few per task.
//
// Connections. One for writes (opened by Open) and up to
// StoreOptions::read_connections for reads (opened on first use). A
// connection that broke is dropped and
// opened again on its next use; a transaction that lost its connection
// before COMMIT is run once more on a new connection (nothing of it was
// kept). When the server stays unreachable every call returns Unavailable:
// connecting gives up after connect_timeout, TCP keepalives and
// tcp_user_timeout notice a dead peer, and statement_timeout bounds a stuck
// statement (kConnectDefaults in postgres_store.cc; a parameter in the URL
// wins). A connection lost
// during COMMIT is Unavailable with "outcome unknown": PostgreSQL may or may
// not have committed it.
//
// Thread-safety: Write and Read may be called from any number of threads.
// The destructor must not race with calls on the store.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "store/store.h"

namespace hf::store {

namespace postgres_internal {
class Connection;
struct ConnectInfo;
enum class Retry;
}  // namespace postgres_internal

// The newest schema version this code knows (the number of migrations; the
// same as SqliteSchemaVersion()).
int PostgresSchemaVersion();

class PostgresStore final : public Store {
 public:
  // Write attempts before a serialization failure or deadlock is returned
  // (as Aborted).
  static constexpr int kMaxWriteAttempts = 8;

  // Opens the database named by `url`, a libpq connection URI
  // ("postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME[?PARAM=VALUE...]"),
  // and migrates it to PostgresSchemaVersion().
  // Failure: InvalidArgument (field "db") for a URL that is not a valid
  // PostgreSQL URI or names no database; Unavailable when the server cannot
  // be reached or refuses the login (the message names host, port, database
  // and user and carries libpq's reason, never the password);
  // FailedPrecondition for a database from a newer HeteroFlow.
  static StatusOr<std::unique_ptr<PostgresStore>> Open(
      const std::string& url, const StoreOptions& options = {});

  PostgresStore(const PostgresStore&) = delete;
  PostgresStore& operator=(const PostgresStore&) = delete;
  // Closes the connections.
  ~PostgresStore() override;

  // See Store::Write and the top of this file. Also returns Internal when
  // called from inside a Write function of this store. A function that
  // throws is treated as failing with Internal.
  Status Write(const std::function<Status(Txn&)>& fn) override;
  // See Store::Read. Blocks while every read connection is busy.
  Status Read(const std::function<Status(Txn&)>& fn) override;
  StoreInfo info() const override;
  // LISTEN on its own connection: every task insert notifies the channel
  // kTaskChannel with the task's id when it commits.
  std::unique_ptr<TaskFeed> WatchTasks(
      const std::function<void(RowId)>& on_created) override;
  static constexpr const char* kTaskChannel = "hf_task_created";

 private:
  // A place for one connection: null until first use and after it broke.
  struct Slot {
    std::unique_ptr<postgres_internal::Connection> conn;
  };

  PostgresStore(std::unique_ptr<postgres_internal::ConnectInfo> info,
                std::unique_ptr<postgres_internal::Connection> writer,
                int read_connections, int write_connections,
                int schema_version);

  // Runs `fn` in one transaction on `slot` (connecting it first when
  // needed). Sets *retry when the transaction was rolled back for a reason
  // that running it again may cure; the returned Status then says why.
  // `savepoints`: each statement that changes rows in its own savepoint.
  Status RunOnce(Slot& slot, bool write, bool savepoints,
                 const std::function<Status(Txn&)>& fn,
                 postgres_internal::Retry* retry);
  // RunOnce until it succeeds, fails for good or the attempts run out.
  Status Run(Slot& slot, bool write, const std::function<Status(Txn&)>& fn);

  // A connection slot of `pool` (readers or writers), waiting while all are
  // leased; and its return.
  struct Pool {
    Mutex mu;
    CondVar cv;               // a slot was returned
    std::vector<Slot> slots;  // fixed size; slots leased whole
    std::vector<Slot*> idle HF_GUARDED_BY(mu);
  };
  static Slot* Acquire(Pool& pool) HF_EXCLUDES(pool.mu);
  static void Release(Pool& pool, Slot* slot) HF_EXCLUDES(pool.mu);

  const std::unique_ptr<postgres_internal::ConnectInfo> info_;
  const int schema_version_;

  Pool writers_;  // StoreOptions::write_connections
  Pool readers_;  // StoreOptions::read_connections
};

}  // namespace hf::store
