// SqliteStore: the embedded implementation of `Store` (store.h) on one SQLite
// file.
//
// Durability. The database runs in WAL mode with synchronous=FULL, so a
// Write that returned OK has been fsynced and survives the process being
// killed and the machine losing power. Foreign keys are enforced; a row that
// refers to a missing tenant, node, group or task is refused with NotFound.
//
// Group commit. Every Write is handed to one writer thread that owns the only
// read-write connection. It takes up to `StoreOptions::max_batch` queued
// calls, opens one transaction (BEGIN IMMEDIATE), runs each call inside its
// own SAVEPOINT (a call that fails is rolled back to its savepoint alone; the
// others proceed), commits once, and then wakes every caller with its own
// result. One fsync thus acknowledges many concurrent writes. If the commit
// fails, every call of the batch that had succeeded gets the commit's error
// (Unavailable or Internal) and none of them is kept. When the last batch
// held several calls, the writer waits briefly (a quarter of the last
// commit's time, at most 1 ms) for as many to queue again: callers it has
// just woken usually come straight back, and would otherwise always miss
// the next batch, splitting concurrent writers into half-size batches.
//
// Reads use a pool of `StoreOptions::read_connections` connections; each Read
// runs in its own transaction, so it sees one consistent snapshot while
// writes go on (WAL readers never block the writer, nor it them).
//
// Schema. The schema is versioned: `schema_migrations` lists the migrations
// applied; on open each missing migration runs in its own transaction, and a
// database whose newest migration is unknown to this code (written by a newer
// HeteroFlow) is refused with FailedPrecondition.
//
// Semantics beyond store.h that the contract tests pin down for every
// backend: Insert* stores the row as given (a task keeps its `version`);
// UpsertNode keeps the first `registered_at` of a node and overwrites the
// other fields; RevokeToken on a revoked token keeps the first revocation
// time.
//
// Thread-safety: Write and Read may be called from any number of threads.
// The destructor must not race with calls on the store; it runs the writes
// already queued, then stops the writer thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "store/store.h"

namespace hf::store {

namespace sqlite_internal {
class Connection;
}  // namespace sqlite_internal

// The newest schema version this code knows (the number of migrations).
int SqliteSchemaVersion();

class SqliteStore final : public Store {
 public:
  // Opens the database file at `path`, creating it when missing (the parent
  // directory must exist), and migrates it to SqliteSchemaVersion().
  // Failure: FailedPrecondition for a database from a newer HeteroFlow or a
  // file system without WAL support; Unavailable when the file cannot be
  // opened or is locked, or another process has it open (see lock_fd_);
  // Internal for a file that is not a database.
  static StatusOr<std::unique_ptr<SqliteStore>> Open(
      const std::string& path, const StoreOptions& options = {});

  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;
  // Runs the queued writes, stops the writer thread and closes the database.
  ~SqliteStore() override;

  // See Store::Write. Also returns Internal when called from inside a Write
  // function (it would wait for itself) and Unavailable once the store is
  // closing. A function that throws is treated as failing with Internal.
  Status Write(const std::function<Status(Txn&)>& fn) override HF_EXCLUDES(mu_);
  // See Store::Read. Blocks while every read connection is busy.
  Status Read(const std::function<Status(Txn&)>& fn) override
      HF_EXCLUDES(readers_mu_);
  StoreInfo info() const override;

  // Test seam: while `fail` is set, every commit of a write batch fails
  // (SQLite's commit hook turns it into a rollback) as a full disk or an I/O
  // error would. Never used outside tests.
  void FailCommitsForTesting(bool fail) { fail_commits_for_testing_ = fail; }

 private:
  struct PendingWrite;

  SqliteStore(std::unique_ptr<sqlite_internal::Connection> writer,
              std::vector<std::unique_ptr<sqlite_internal::Connection>> readers,
              int schema_version, int max_batch, int lock_fd);

  // The writer thread: takes batches off `queue_` until stopped and drained.
  void WriterLoop() HF_EXCLUDES(mu_);
  // Runs one batch as described at the top of the file and sets each call's
  // result, with mu_ given up. REQUIRES: on the writer thread.
  void RunBatch(const std::vector<PendingWrite*>& batch) HF_EXCLUDES(mu_);
  // Runs one call inside a savepoint of the open transaction.
  Status RunInSavepoint(const std::function<Status(Txn&)>& fn);

  sqlite_internal::Connection* AcquireReader() HF_EXCLUDES(readers_mu_);
  void ReleaseReader(sqlite_internal::Connection* reader)
      HF_EXCLUDES(readers_mu_);

  // An exclusive flock on "<path>.lock" for the store's lifetime: one
  // process owns an SQLite database (its ledger mirrors the file; a second
  // server on the same file would drift from it). The kernel drops the lock
  // when the process dies, even by SIGKILL. Declared first: released last,
  // after the connections close.
  struct LockFile {
    int fd;
    ~LockFile();
  };
  const LockFile lock_;
  const std::unique_ptr<sqlite_internal::Connection> writer_;  // writer thread
  const std::vector<std::unique_ptr<sqlite_internal::Connection>> readers_;
  const int schema_version_;
  const std::size_t max_batch_;

  Mutex mu_;
  CondVar queue_cv_;  // queue_ gained a call, or stopping_
  std::deque<PendingWrite*> queue_ HF_GUARDED_BY(mu_);
  bool stopping_ HF_GUARDED_BY(mu_) = false;

  Mutex readers_mu_;
  CondVar readers_cv_;  // a reader was returned
  std::vector<sqlite_internal::Connection*> idle_readers_
      HF_GUARDED_BY(readers_mu_);

  std::atomic<bool> fail_commits_for_testing_{false};

  std::thread writer_thread_;
  std::thread::id writer_thread_id_;  // set before any call; then constant
};

}  // namespace hf::store
