// SqliteStore: connections with cached prepared statements, the schema and
// its migrations, the Txn over one connection, and the group-commit writer.
// See sqlite_store.h for the design.
//
// Thread-safety: a Connection (and its statement cache) is used by one thread
// at a time: the writer connection only by the writer thread (and during
// Open), each read connection by the Read that leased it from the pool.
#include "store/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/sql_rows.h"

namespace hf::store {
namespace {

constexpr int kBusyTimeoutMillis = 5000;

// The row codecs and helpers shared with the PostgreSQL backend.
using sql_rows::BindSliceData;
using sql_rows::BindSliceRequestData;
using sql_rows::BindTaskFields;
using sql_rows::ColumnCount;
using sql_rows::DecodeApproval;
using sql_rows::DecodeGpu;
using sql_rows::DecodeGroup;
using sql_rows::DecodeHistory;
using sql_rows::DecodeIdempotency;
using sql_rows::DecodeNode;
using sql_rows::DecodeSlice;
using sql_rows::DecodeSliceRequest;
using sql_rows::DecodeTask;
using sql_rows::DecodeTenant;
using sql_rows::DecodeToken;
using sql_rows::kApprovalColumns;
using sql_rows::kGpuColumns;
using sql_rows::kGroupColumns;
using sql_rows::kHistoryColumns;
using sql_rows::kIdempotencyColumns;
using sql_rows::kNodeColumns;
using sql_rows::kSliceColumns;
using sql_rows::kSliceRequestColumns;
using sql_rows::kTaskFieldColumns;
using sql_rows::kTaskFieldCount;
using sql_rows::kTenantColumns;
using sql_rows::kTokenColumns;
using sql_rows::Quoted;
using sql_rows::RunGuarded;
using sql_rows::WithoutId;

// Translates a failed SQLite call into the store's error vocabulary, once,
// here at the boundary. `context` says what was being done ("inserting
// tenant \"acme\"").
Status SqliteStatus(int rc, sqlite3* db, std::string_view context) {
  std::string message(context);
  message += ": ";
  message += db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_UNIQUE ||
          rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return Status::AlreadyExists(std::move(message));
      }
      if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
        return Status::NotFound(std::string(context) +
                                ": a row it refers to does not exist "
                                "(FOREIGN KEY constraint failed)");
      }
      return Status::Internal(std::move(message));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
    case SQLITE_READONLY:
    case SQLITE_INTERRUPT:
      return Status::Unavailable(std::move(message));
    default:
      return Status::Internal(std::move(message));
  }
}

}  // namespace

namespace sqlite_internal {

// A prepared statement leased from a Connection's cache. Parameters are bound
// in order with Bind(); Step() runs it. Destruction resets it and returns it
// to the cache, so a statement never stays active past its use.
class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt, bool* in_use)
      : db_(db), stmt_(stmt), in_use_(in_use) {}
  Statement(Statement&& other) noexcept
      : db_(other.db_),
        stmt_(std::exchange(other.stmt_, nullptr)),
        in_use_(std::exchange(other.in_use_, nullptr)),
        next_param_(other.next_param_),
        bind_rc_(other.bind_rc_) {}
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() {
    if (stmt_ == nullptr) return;
    if (in_use_ != nullptr) {  // cached: keep it for the next use
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
      *in_use_ = false;
    } else {  // a second, uncached copy (the cached one was busy)
      sqlite3_finalize(stmt_);
    }
  }

  Statement& Bind(std::int64_t v) {
    Check(sqlite3_bind_int64(stmt_, ++next_param_, v));
    return *this;
  }
  Statement& Bind(int v) { return Bind(static_cast<std::int64_t>(v)); }
  Statement& Bind(bool v) { return Bind(static_cast<std::int64_t>(v ? 1 : 0)); }
  Statement& Bind(std::string_view v) {
    Check(sqlite3_bind_text64(stmt_, ++next_param_, v.data(), v.size(),
                              SQLITE_TRANSIENT, SQLITE_UTF8));
    return *this;
  }
  Statement& Bind(const std::string& v) { return Bind(std::string_view(v)); }
  Statement& BindBlob(std::string_view v) {
    Check(sqlite3_bind_blob64(stmt_, ++next_param_, v.data(), v.size(),
                              SQLITE_TRANSIENT));
    return *this;
  }
  Statement& Bind(const char* v) { return Bind(std::string_view(v)); }
  Statement& Bind(std::nullopt_t) {
    Check(sqlite3_bind_null(stmt_, ++next_param_));
    return *this;
  }
  template <typename T>
  Statement& Bind(const std::optional<T>& v) {
    if (!v) return Bind(std::nullopt);
    return Bind(*v);
  }
  template <typename... Args>
  Statement& BindAll(const Args&... args) {
    (Bind(args), ...);
    return *this;
  }

  // Advances the statement: true when a row is ready, false when done.
  StatusOr<bool> Step(std::string_view context) {
    if (bind_rc_ != SQLITE_OK) return SqliteStatus(bind_rc_, db_, context);
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteStatus(rc, db_, context);
  }
  // Runs a statement that returns no rows.
  Status Run(std::string_view context) {
    StatusOr<bool> row = Step(context);
    if (!row.ok()) return row.status();
    if (*row) {
      return Status::Internal(std::string(context) +
                              ": statement unexpectedly returned a row");
    }
    return Status::Ok();
  }

  std::int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  int Int32(int col) const { return sqlite3_column_int(stmt_, col); }
  bool Bool(int col) const { return sqlite3_column_int64(stmt_, col) != 0; }
  bool IsNull(int col) const {
    return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
  }
  std::optional<std::string> OptText(int col) const {
    if (IsNull(col)) return std::nullopt;
    return Text(col);
  }
  std::optional<std::int64_t> OptInt(int col) const {
    if (IsNull(col)) return std::nullopt;
    return Int(col);
  }
  std::optional<int> OptInt32(int col) const {
    if (IsNull(col)) return std::nullopt;
    return Int32(col);
  }
  std::string Blob(int col) const {
    const void* data = sqlite3_column_blob(stmt_, col);
    if (data == nullptr) return {};
    return {static_cast<const char*>(data),
            static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col))};
  }
  std::string Text(int col) const {
    const unsigned char* text = sqlite3_column_text(stmt_, col);
    if (text == nullptr) return {};
    return {reinterpret_cast<const char*>(text),
            static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col))};
  }

 private:
  void Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_;
  bool* in_use_;  // the cache slot's flag; null for an uncached statement
  int next_param_ = 0;
  int bind_rc_ = SQLITE_OK;
};

// One SQLite connection and its prepared-statement cache (keyed by SQL text;
// list queries build their text from a few fixed fragments, so the cache
// stays small).
class Connection {
 public:
  // Opens `path`; the writer may create it, readers are query-only.
  static StatusOr<std::unique_ptr<Connection>> Open(const std::string& path,
                                                    bool writer) {
    sqlite3* db = nullptr;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
    if (writer) flags |= SQLITE_OPEN_CREATE;
    const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
    auto conn = std::unique_ptr<Connection>(new Connection(db));
    if (rc != SQLITE_OK) {
      return SqliteStatus(rc, db, "opening");
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, kBusyTimeoutMillis);
    HF_RETURN_IF_ERROR(conn->Configure(writer));
    return conn;
  }

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    for (auto& [sql, slot] : cache_) sqlite3_finalize(slot.stmt);
    sqlite3_close_v2(db_);
  }

  // Sets the pragmas every connection needs: WAL and full fsync for the
  // writer, query-only for readers, foreign keys for both.
  Status Configure(bool writer) {
    HF_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys = ON"));
    if (writer) {
      // journal_mode answers with the mode in force; anything but "wal"
      // means the file system refused it (e.g. no shared memory).
      StatusOr<Statement> mode = Prepare("PRAGMA journal_mode = WAL");
      if (!mode.ok()) return mode.status();
      StatusOr<bool> row = mode->Step("enabling WAL mode");
      if (!row.ok()) return row.status();
      const std::string got = *row ? mode->Text(0) : "";
      if (got != "wal") {
        return Status::FailedPrecondition(
            "cannot enable WAL mode (journal_mode is " + Quoted(got) + ")");
      }
      return Exec("PRAGMA synchronous = FULL");
    }
    return Exec("PRAGMA query_only = ON");
  }

  sqlite3* db() const { return db_; }
  // True while a transaction is open on this connection.
  bool InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

  // Returns the cached statement for `sql`, preparing it on first use. If
  // the cached one is in use (a query nested in another), a fresh uncached
  // copy is returned.
  StatusOr<Statement> Prepare(const std::string& sql) {
    auto it = cache_.find(sql);
    if (it != cache_.end() && !it->second.in_use) {
      it->second.in_use = true;
      return Statement(db_, it->second.stmt, &it->second.in_use);
    }
    sqlite3_stmt* stmt = nullptr;
    const int rc =
        sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size() + 1),
                           SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(stmt);
      return SqliteStatus(rc, db_, "preparing \"" + sql + "\"");
    }
    if (it != cache_.end()) return Statement(db_, stmt, nullptr);
    Slot& slot = cache_[sql];
    slot.stmt = stmt;
    slot.in_use = true;
    return Statement(db_, stmt, &slot.in_use);
  }

  // Runs one statement without rows (BEGIN, COMMIT, PRAGMA ... = x).
  Status Exec(const std::string& sql) {
    StatusOr<Statement> stmt = Prepare(sql);
    if (!stmt.ok()) return stmt.status();
    StatusOr<bool> row = stmt->Step(sql);
    return row.ok() ? Status::Ok() : row.status();
  }

  // Runs a script of several statements (a migration); nothing is cached.
  Status ExecScript(const std::string& sql, std::string_view context) {
    char* error = nullptr;
    const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
    sqlite3_free(error);
    if (rc != SQLITE_OK) return SqliteStatus(rc, db_, context);
    return Status::Ok();
  }

  // Ends any open transaction, ignoring errors: the way out after a failure.
  void RollbackQuietly() {
    if (InTransaction()) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }

 private:
  struct Slot {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };

  explicit Connection(sqlite3* db) : db_(db) {}

  sqlite3* db_;
  std::unordered_map<std::string, Slot> cache_;
};

}  // namespace sqlite_internal

namespace {

using sqlite_internal::Connection;
using sqlite_internal::Statement;
using Json = nlohmann::json;

// ------------------------------------------------------------- migrations

// The schema, one step per version, applied in order and never edited once
// released: a change is a new step. Version N is kMigrations[N - 1].
constexpr const char* kMigrations[] = {
    // 1: the initial schema.
    R"sql(
CREATE TABLE shared_groups (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL
);
CREATE TABLE tenants (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL UNIQUE,
  group_id INTEGER REFERENCES shared_groups(id) ON DELETE SET NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX tenants_by_group ON tenants(group_id);
CREATE TABLE tokens (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  hash TEXT NOT NULL UNIQUE,
  role TEXT NOT NULL,
  tenant_id INTEGER REFERENCES tenants(id),
  description TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  revoked_at INTEGER
);
CREATE INDEX tokens_by_tenant ON tokens(tenant_id, id);
CREATE TABLE nodes (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL UNIQUE,
  containerized INTEGER NOT NULL,
  cpu_milli INTEGER NOT NULL,
  host_memory_mib INTEGER NOT NULL,
  agent_version TEXT NOT NULL,
  registered_at INTEGER NOT NULL,
  last_heartbeat_at INTEGER NOT NULL
);
CREATE TABLE gpus (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  node_id INTEGER NOT NULL REFERENCES nodes(id),
  idx INTEGER NOT NULL,
  uuid TEXT NOT NULL,
  vendor TEXT NOT NULL,
  model TEXT NOT NULL,
  memory_mib INTEGER NOT NULL,
  cc_major INTEGER NOT NULL,
  cc_minor INTEGER NOT NULL,
  mig_capable INTEGER NOT NULL,
  mps_capable INTEGER NOT NULL,
  lost INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  UNIQUE (node_id, idx)
);
CREATE TABLE tasks (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_id INTEGER NOT NULL REFERENCES tenants(id),
  name TEXT NOT NULL,
  image TEXT NOT NULL,
  command TEXT NOT NULL,            -- JSON array of strings
  command_is_shell INTEGER NOT NULL,
  gpu_type TEXT NOT NULL,
  gpu_required INTEGER NOT NULL,
  memory_mib INTEGER,
  compute_percent INTEGER,
  preemptible INTEGER NOT NULL,
  user_env TEXT NOT NULL,           -- JSON object of strings
  env TEXT NOT NULL,                -- JSON object of strings
  labels TEXT NOT NULL,             -- JSON object of strings
  state TEXT NOT NULL,
  pending_reason TEXT NOT NULL,
  slice_id INTEGER,
  node_id INTEGER REFERENCES nodes(id),
  gpu_indices TEXT NOT NULL,        -- JSON array of integers
  exit_code INTEGER,
  message TEXT NOT NULL,
  cancel_requested INTEGER NOT NULL,
  version INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX tasks_by_state ON tasks(state, id);
CREATE INDEX tasks_by_tenant ON tasks(tenant_id, id);
CREATE INDEX tasks_by_node ON tasks(node_id, id);
CREATE TABLE slices (
  id INTEGER PRIMARY KEY,           -- assigned by the ledger
  task_id INTEGER REFERENCES tasks(id),
  tenant_id INTEGER NOT NULL REFERENCES tenants(id),
  node_id INTEGER NOT NULL REFERENCES nodes(id),
  whole INTEGER NOT NULL,
  gpu_indices TEXT NOT NULL,        -- JSON array of integers
  memory_mib INTEGER NOT NULL,
  compute_percent INTEGER NOT NULL,
  compute_defaulted INTEGER NOT NULL,
  qos_level TEXT NOT NULL,
  enforcement TEXT NOT NULL,        -- JSON array of strings
  state TEXT NOT NULL,
  origin TEXT NOT NULL,
  mig_device_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  released_at INTEGER
);
CREATE INDEX slices_by_state ON slices(state, id);
CREATE INDEX slices_by_node ON slices(node_id, id);
CREATE INDEX slices_by_tenant ON slices(tenant_id, id);
CREATE INDEX slices_by_task ON slices(task_id);
-- An append-only log: no foreign keys, so that it outlives what it names.
CREATE TABLE slice_history (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at INTEGER NOT NULL,
  op TEXT NOT NULL,
  slice_id INTEGER,
  task_id INTEGER,
  tenant_id INTEGER,
  node_id INTEGER,
  gpu_indices TEXT NOT NULL,        -- JSON array of integers
  memory_mib INTEGER NOT NULL,
  compute_percent INTEGER NOT NULL,
  actor TEXT NOT NULL,
  reason TEXT NOT NULL
);
CREATE INDEX slice_history_by_tenant ON slice_history(tenant_id, id);
CREATE INDEX slice_history_by_slice ON slice_history(slice_id, id);
CREATE INDEX slice_history_by_task ON slice_history(task_id, id);
-- slice_id and task_id carry no foreign key: the server may queue a request
-- before it writes the slice row in the same transaction.
CREATE TABLE agent_slice_requests (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  node_id INTEGER NOT NULL REFERENCES nodes(id),
  slice_id INTEGER NOT NULL,
  task_id INTEGER,
  action TEXT NOT NULL,
  gpu_index INTEGER NOT NULL,
  gpu_uuid TEXT NOT NULL,
  profile TEXT NOT NULL,
  state TEXT NOT NULL,
  device_id TEXT NOT NULL,
  error TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  deadline_at INTEGER NOT NULL,
  claimed_at INTEGER,
  finished_at INTEGER
);
CREATE INDEX agent_slice_requests_by_node
  ON agent_slice_requests(node_id, state, id);
CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
)sql",
    // 2: node tokens bound to one node; cross-tenant sharing approvals.
    R"sql(
ALTER TABLE tokens ADD COLUMN node_name TEXT;
CREATE TABLE sharing_approvals (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_a INTEGER NOT NULL REFERENCES tenants(id),
  tenant_b INTEGER NOT NULL REFERENCES tenants(id),
  reason TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  revoked_at INTEGER,
  CHECK (tenant_a < tenant_b)
);
)sql",
    // 3: task logs shipped by agents.
    R"sql(
CREATE TABLE task_log_chunks (
  task_id INTEGER NOT NULL REFERENCES tasks(id),
  offset INTEGER NOT NULL,
  data BLOB NOT NULL,
  PRIMARY KEY (task_id, offset)
) WITHOUT ROWID;
)sql",
    // 4: the replies of POSTs sent with an Idempotency-Key, per token.
    R"sql(
CREATE TABLE idempotency_keys (
  token_id INTEGER NOT NULL,
  key TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  status INTEGER NOT NULL,
  body TEXT NOT NULL,
  task_id INTEGER,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (token_id, key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys(expires_at);
)sql",
    // 5: grants of whole GPUs are "exclusive": they were stored with the
    // tier a slice of their first GPU would get, though no MIG, MPS or hook
    // limit applies to them. The tier they had is kept in the history.
    R"sql(
INSERT INTO slice_history (at, op, slice_id, task_id, tenant_id, node_id,
                           gpu_indices, memory_mib, compute_percent, actor,
                           reason)
SELECT CAST(strftime('%s', 'now') AS INTEGER) * 1000, 'qos_relabelled', id,
       task_id, tenant_id, node_id, gpu_indices, memory_mib, compute_percent,
       'migration',
       'qos_level ' || qos_level ||
       ' -> exclusive: a grant of whole GPUs has no MIG, MPS or hook limit'
  FROM slices WHERE whole = 1 AND qos_level <> 'exclusive' ORDER BY id;
UPDATE tasks SET env = json_set(env, '$.HETEROFLOW_SLICE_QOS', 'exclusive')
 WHERE slice_id IN (SELECT id FROM slices WHERE whole = 1)
   AND json_extract(env, '$.HETEROFLOW_SLICE_QOS') IS NOT NULL;
UPDATE slices SET qos_level = 'exclusive', enforcement = '[]'
 WHERE whole = 1 AND qos_level <> 'exclusive';
)sql",
    // 6: the newest agent report applied per node, so that a report
    // delivered late is not applied over a newer one.
    R"sql(
ALTER TABLE nodes ADD COLUMN report_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN report_seq INTEGER NOT NULL DEFAULT 0;
)sql",
    // 7: how the hook shares a GPU's time (a task's gpu_compute_mode).
    // Tasks stored before it get the default; the slice env of a bound one
    // names it beside its compute share, as a bind does now.
    R"sql(
ALTER TABLE tasks ADD COLUMN gpu_compute_mode TEXT NOT NULL
  DEFAULT 'work-conserving';
UPDATE tasks
   SET env = json_set(env, '$.HETEROFLOW_SLICE_COMPUTE_MODE',
                      'work-conserving')
 WHERE state IN ('scheduled', 'running')
   AND json_extract(env, '$.HETEROFLOW_SLICE_COMPUTE_PERCENT') IS NOT NULL;
)sql",
    // 8: MIG partitions charged by the ledger: where each gold slice sits
    // (its profile and first memory slot), and where a create must put it.
    // Slices stored before it get the partition the ledger would give them
    // now when they are restored.
    R"sql(
ALTER TABLE slices ADD COLUMN mig_profile TEXT NOT NULL DEFAULT '';
ALTER TABLE slices ADD COLUMN mig_start INTEGER NOT NULL DEFAULT -1;
ALTER TABLE agent_slice_requests ADD COLUMN mig_start INTEGER NOT NULL
  DEFAULT -1;
)sql",
    // 9: each slice's measured usage as its node last reported it, so that
    // every instance serves it (the leader only kept it in memory).
    R"sql(
CREATE TABLE slice_usage (
  slice_id INTEGER PRIMARY KEY,
  reported_at INTEGER NOT NULL,
  usage TEXT NOT NULL
);
)sql",
    // 10: each slice's stored usage over time (the newest
    // kSliceUsageHistoryRows per slice), for a chart of the recent past.
    // It starts with the one row each slice has now.
    R"sql(
CREATE TABLE slice_usage_history (
  slice_id INTEGER NOT NULL,
  reported_at INTEGER NOT NULL,
  usage TEXT NOT NULL,
  PRIMARY KEY (slice_id, reported_at)
);
INSERT INTO slice_usage_history (slice_id, reported_at, usage)
SELECT slice_id, reported_at, usage FROM slice_usage;
)sql",
    // 11: nothing here. PostgreSQL records the transaction that inserted
    // each history and task row, to page them in an order no later commit
    // reaches back into; SQLite has one writer, so ids commit in order and
    // every row's ListPosition is (0, id). The step keeps the versions of
    // both stores in step.
    "-- ids commit in order on SQLite\n",
    // 12: each node's task runtime as its agent reports it, which decides
    // what the node can start a task from; '' (not said) for the nodes
    // stored before it, until their next report.
    R"sql(
ALTER TABLE nodes ADD COLUMN runtime TEXT NOT NULL DEFAULT '';
)sql",
};

constexpr int kLatestSchemaVersion = static_cast<int>(std::size(kMigrations));

std::int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Applies the missing migrations, one transaction each, and returns the
// schema version. Each step re-reads the version under the write lock, so two
// processes opening a new file at once do not both apply a step.
StatusOr<int> Migrate(Connection& conn) {
  for (;;) {
    HF_RETURN_IF_ERROR(conn.Exec("BEGIN IMMEDIATE"));
    Status status = conn.ExecScript(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        "creating schema_migrations");
    int current = 0;
    if (status.ok()) {
      StatusOr<Statement> stmt = conn.Prepare(
          "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
      if (stmt.ok()) {
        StatusOr<bool> row = stmt->Step("reading the schema version");
        if (row.ok()) {
          current = *row ? static_cast<int>(stmt->Int(0)) : 0;
        } else {
          status = row.status();
        }
      } else {
        status = stmt.status();
      }
    }
    if (status.ok() && current > kLatestSchemaVersion) {
      status = Status::FailedPrecondition(
          "database schema version " + std::to_string(current) +
          " is newer than this hf-server (" +
          std::to_string(kLatestSchemaVersion) + ")");
    }
    if (status.ok() && current == kLatestSchemaVersion) {
      status = conn.Exec("COMMIT");
      if (status.ok()) return current;
    }
    if (status.ok()) {
      const int next = current + 1;
      status =
          conn.ExecScript(kMigrations[next - 1],
                          "applying schema migration " + std::to_string(next));
      if (status.ok()) {
        StatusOr<Statement> record = conn.Prepare(
            "INSERT INTO schema_migrations (version, applied_at) "
            "VALUES (?, ?)");
        status = record.ok() ? record->BindAll(next, NowMillis())
                                   .Run("recording schema migration")
                             : record.status();
      }
      if (status.ok()) status = conn.Exec("COMMIT");
      if (status.ok()) continue;
    }
    conn.RollbackQuietly();
    return status;
  }
}

// "a, b, c" -> "a = ?, b = ?, c = ?" for an UPDATE of every column.
std::string Assignments(std::string_view columns) {
  std::string out;
  for (std::string_view name : sql_rows::ColumnNames(columns)) {
    if (!out.empty()) out += ", ";
    out += name;
    out += " = ?";
  }
  return out;
}

// "?, ?, ?" with `count` placeholders.
std::string Placeholders(int count) {
  std::string out;
  for (int i = 0; i < count; ++i) out += i == 0 ? "?" : ", ?";
  return out;
}

// ------------------------------------------------------------------- Txn

// The row type of a decoder returning StatusOr<Row>, and its list result.
template <typename Decode>
using RowOf = std::remove_cvref_t<
    decltype(std::declval<Decode>()(std::declval<Statement&>()).value())>;
template <typename Decode>
using RowsOf = StatusOr<std::vector<RowOf<Decode>>>;

// The Txn over one connection inside an open transaction. `writable` is false
// for a Read, whose mutating methods all fail with Internal.
class SqliteTxn final : public Txn {
 public:
  SqliteTxn(Connection& conn, bool writable)
      : conn_(conn), writable_(writable) {}

  // ----------------------------------------------------------- groups
  StatusOr<GroupRow> InsertGroup(const GroupRow& row) override {
    const std::string what = "inserting group " + Quoted(row.name);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<RowId> id = Insert(
        what, "INSERT INTO shared_groups (name, created_at) VALUES (?, ?)",
        row.name, row.created_at);
    if (!id.ok()) return id.status();
    GroupRow out = row;
    out.id = *id;
    return out;
  }
  StatusOr<GroupRow> GetGroup(RowId id) override {
    return One(DecodeGroup, "group " + std::to_string(id),
               Select(kGroupColumns, "shared_groups", "id = ?"), id);
  }
  StatusOr<GroupRow> FindGroup(std::string_view name) override {
    return One(DecodeGroup, "group " + Quoted(name),
               Select(kGroupColumns, "shared_groups", "name = ?"), name);
  }
  StatusOr<std::vector<GroupRow>> ListGroups() override {
    return Many(DecodeGroup, "listing groups",
                Select(kGroupColumns, "shared_groups", "1") + " ORDER BY id");
  }
  Status DeleteGroup(RowId id) override {
    const std::string what = "group " + std::to_string(id);
    HF_RETURN_IF_ERROR(CheckWritable("deleting " + what));
    // Explicit, not only ON DELETE SET NULL: it must not depend on the
    // foreign_keys pragma.
    StatusOr<std::int64_t> cleared =
        Change("clearing the tenants of " + what,
               "UPDATE tenants SET group_id = NULL WHERE group_id = ?", id);
    if (!cleared.ok()) return cleared.status();
    return ChangeOne(what, "DELETE FROM shared_groups WHERE id = ?", id);
  }

  // ---------------------------------------------------------- tenants
  StatusOr<TenantRow> InsertTenant(const TenantRow& row) override {
    const std::string what = "inserting tenant " + Quoted(row.name);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<RowId> id = Insert(
        what,
        "INSERT INTO tenants (name, group_id, created_at) VALUES (?, ?, ?)",
        row.name, row.group_id, row.created_at);
    if (!id.ok()) return id.status();
    TenantRow out = row;
    out.id = *id;
    return out;
  }
  StatusOr<TenantRow> GetTenant(RowId id) override {
    return One(DecodeTenant, "tenant " + std::to_string(id),
               Select(kTenantColumns, "tenants", "id = ?"), id);
  }
  StatusOr<TenantRow> FindTenant(std::string_view name) override {
    return One(DecodeTenant, "tenant " + Quoted(name),
               Select(kTenantColumns, "tenants", "name = ?"), name);
  }
  StatusOr<std::vector<TenantRow>> ListTenants() override {
    return Many(DecodeTenant, "listing tenants",
                Select(kTenantColumns, "tenants", "1") + " ORDER BY id");
  }
  Status SetTenantGroup(RowId tenant_id,
                        std::optional<RowId> group_id) override {
    const std::string what = "tenant " + std::to_string(tenant_id);
    HF_RETURN_IF_ERROR(CheckWritable("setting the group of " + what));
    return ChangeOne(what, "UPDATE tenants SET group_id = ? WHERE id = ?",
                     group_id, tenant_id);
  }

  // ----------------------------------------------------------- tokens
  StatusOr<TokenRow> InsertToken(const TokenRow& row) override {
    // The hash names the key but is a credential's fingerprint: show a
    // prefix only.
    const std::string what =
        "inserting token with hash " + Quoted(row.hash.substr(0, 12));
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<RowId> id =
        Insert(what,
               "INSERT INTO tokens (" + std::string(WithoutId(kTokenColumns)) +
                   ") VALUES (" + Placeholders(7) + ")",
               row.hash, RoleName(row.role), row.tenant_id, row.description,
               row.created_at, row.revoked_at, row.node);
    if (!id.ok()) return id.status();
    TokenRow out = row;
    out.id = *id;
    return out;
  }
  StatusOr<TokenRow> GetToken(RowId id) override {
    return One(DecodeToken, "token " + std::to_string(id),
               Select(kTokenColumns, "tokens", "id = ?"), id);
  }
  StatusOr<TokenRow> FindTokenByHash(std::string_view hash) override {
    return One(DecodeToken, "token with that hash",
               Select(kTokenColumns, "tokens", "hash = ?"), hash);
  }
  StatusOr<std::vector<TokenRow>> ListTokens(
      std::optional<RowId> tenant_id) override {
    if (tenant_id) {
      return Many(
          DecodeToken, "listing tokens",
          Select(kTokenColumns, "tokens", "tenant_id = ?") + " ORDER BY id",
          *tenant_id);
    }
    return Many(DecodeToken, "listing tokens",
                Select(kTokenColumns, "tokens", "1") + " ORDER BY id");
  }
  Status RevokeToken(RowId id, Millis at) override {
    const std::string what = "token " + std::to_string(id);
    HF_RETURN_IF_ERROR(CheckWritable("revoking " + what));
    return ChangeOne(
        what,
        "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?",
        at, id);
  }

  // ------------------------------------------------ sharing approvals
  StatusOr<ApprovalRow> InsertApproval(const ApprovalRow& row) override {
    const std::string what = "inserting the sharing approval of tenants " +
                             std::to_string(row.tenant_a) + " and " +
                             std::to_string(row.tenant_b);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<RowId> id =
        Insert(what,
               "INSERT INTO sharing_approvals (" +
                   std::string(WithoutId(kApprovalColumns)) + ") VALUES (" +
                   Placeholders(7) + ")",
               row.tenant_a, row.tenant_b, row.reason, row.created_by,
               row.created_at, row.expires_at, row.revoked_at);
    if (!id.ok()) return id.status();
    ApprovalRow out = row;
    out.id = *id;
    return out;
  }
  StatusOr<ApprovalRow> GetApproval(RowId id) override {
    return One(DecodeApproval, "sharing approval " + std::to_string(id),
               Select(kApprovalColumns, "sharing_approvals", "id = ?"), id);
  }
  StatusOr<std::vector<ApprovalRow>> ListApprovals() override {
    return Many(
        DecodeApproval, "listing sharing approvals",
        Select(kApprovalColumns, "sharing_approvals", "1") + " ORDER BY id");
  }
  Status RevokeApproval(RowId id, Millis at) override {
    const std::string what = "sharing approval " + std::to_string(id);
    HF_RETURN_IF_ERROR(CheckWritable("revoking " + what));
    return ChangeOne(what,
                     "UPDATE sharing_approvals SET revoked_at = "
                     "COALESCE(revoked_at, ?) WHERE id = ?",
                     at, id);
  }

  // ---------------------------------------------------- nodes and GPUs
  StatusOr<NodeRow> UpsertNode(const NodeRow& row) override {
    const std::string what = "upserting node " + Quoted(row.name);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<Statement> stmt = conn_.Prepare(
        "INSERT INTO nodes (" + std::string(WithoutId(kNodeColumns)) +
        ") VALUES (" + Placeholders(10) +
        ") ON CONFLICT (name) DO UPDATE SET "
        "containerized = excluded.containerized, "
        "cpu_milli = excluded.cpu_milli, "
        "host_memory_mib = excluded.host_memory_mib, "
        "agent_version = excluded.agent_version, "
        "last_heartbeat_at = excluded.last_heartbeat_at, "
        "report_epoch = excluded.report_epoch, "
        "report_seq = excluded.report_seq, "
        "runtime = excluded.runtime "
        "RETURNING id, registered_at");
    if (!stmt.ok()) return stmt.status();
    stmt->BindAll(row.name, row.containerized, row.cpu_milli,
                  row.host_memory_mib, row.agent_version, row.registered_at,
                  row.last_heartbeat_at, row.report_epoch, row.report_seq,
                  row.runtime);
    StatusOr<bool> has_row = stmt->Step(what);
    if (!has_row.ok()) return has_row.status();
    if (!*has_row) return Status::Internal(what + ": no id returned");
    NodeRow out = row;
    out.id = stmt->Int(0);
    out.registered_at = stmt->Int(1);
    return out;
  }
  StatusOr<NodeRow> GetNode(RowId id) override {
    return One(DecodeNode, "node " + std::to_string(id),
               Select(kNodeColumns, "nodes", "id = ?"), id);
  }
  StatusOr<NodeRow> FindNode(std::string_view name) override {
    return One(DecodeNode, "node " + Quoted(name),
               Select(kNodeColumns, "nodes", "name = ?"), name);
  }
  StatusOr<std::vector<NodeRow>> ListNodes() override {
    return Many(DecodeNode, "listing nodes",
                Select(kNodeColumns, "nodes", "1") + " ORDER BY id");
  }
  StatusOr<GpuRow> UpsertGpu(const GpuRow& row) override {
    const std::string what = "upserting GPU " + std::to_string(row.index) +
                             " of node " + std::to_string(row.node_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<Statement> stmt = conn_.Prepare(
        "INSERT INTO gpus (" + std::string(WithoutId(kGpuColumns)) +
        ") VALUES (" + Placeholders(12) +
        ") ON CONFLICT (node_id, idx) DO UPDATE SET "
        "uuid = excluded.uuid, vendor = excluded.vendor, "
        "model = excluded.model, memory_mib = excluded.memory_mib, "
        "cc_major = excluded.cc_major, cc_minor = excluded.cc_minor, "
        "mig_capable = excluded.mig_capable, "
        "mps_capable = excluded.mps_capable, lost = excluded.lost, "
        "updated_at = excluded.updated_at "
        "RETURNING id");
    if (!stmt.ok()) return stmt.status();
    stmt->BindAll(row.node_id, row.index, row.uuid, row.vendor, row.model,
                  row.memory_mib, row.cc_major, row.cc_minor, row.mig_capable,
                  row.mps_capable, row.lost, row.updated_at);
    StatusOr<bool> has_row = stmt->Step(what);
    if (!has_row.ok()) return has_row.status();
    if (!*has_row) return Status::Internal(what + ": no id returned");
    GpuRow out = row;
    out.id = stmt->Int(0);
    return out;
  }
  StatusOr<std::vector<GpuRow>> ListGpus(
      std::optional<RowId> node_id) override {
    if (node_id) {
      return Many(DecodeGpu, "listing GPUs",
                  Select(kGpuColumns, "gpus", "node_id = ?") + " ORDER BY idx",
                  *node_id);
    }
    return Many(DecodeGpu, "listing GPUs",
                Select(kGpuColumns, "gpus", "1") + " ORDER BY node_id, idx");
  }

  // ------------------------------------------------------------ tasks
  StatusOr<TaskRow> InsertTask(const TaskRow& row) override {
    const std::string what = "inserting task " + Quoted(row.name);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    static const std::string sql =
        "INSERT INTO tasks (" + std::string(kTaskFieldColumns) +
        ", version, created_at, updated_at) VALUES (" +
        Placeholders(kTaskFieldCount + 3) + ")";
    StatusOr<Statement> stmt = conn_.Prepare(sql);
    if (!stmt.ok()) return stmt.status();
    HF_RETURN_IF_ERROR(BindTaskFields(*stmt, row));
    stmt->BindAll(row.version, row.created_at, row.updated_at);
    HF_RETURN_IF_ERROR(stmt->Run(what));
    TaskRow out = row;
    out.id = sqlite3_last_insert_rowid(conn_.db());
    return out;
  }
  StatusOr<TaskRow> GetTask(RowId id) override {
    static const std::string sql = TaskSelect() + " WHERE id = ?";
    return One(DecodeTask, "task " + std::to_string(id), sql, id);
  }
  StatusOr<std::vector<TaskRow>> ListTasks(const TaskFilter& f) override {
    HF_RETURN_IF_ERROR(CheckLimit(f.limit));
    if (PastEveryRow(f)) return std::vector<TaskRow>();
    std::string sql = TaskSelect() + " WHERE id > ?";
    if (f.state) sql += " AND state = ?";
    if (f.tenant_id) sql += " AND tenant_id = ?";
    if (f.node_id) sql += " AND node_id = ?";
    sql += " ORDER BY id LIMIT ?";
    std::optional<std::string_view> state;
    if (f.state) state = TaskStateName(*f.state);
    return ManyFiltered(DecodeTask, "listing tasks", sql, AfterId(f), state,
                        f.tenant_id, f.node_id, f.limit);
  }
  StatusOr<TaskRow> UpdateTask(const TaskRow& row) override {
    const std::string what = "task " + std::to_string(row.id);
    HF_RETURN_IF_ERROR(CheckWritable("updating " + what));
    static const std::string sql =
        "UPDATE tasks SET " + Assignments(kTaskFieldColumns) +
        ", version = version + 1, created_at = ?, updated_at = ? "
        "WHERE id = ? AND version = ?";
    StatusOr<Statement> stmt = conn_.Prepare(sql);
    if (!stmt.ok()) return stmt.status();
    HF_RETURN_IF_ERROR(BindTaskFields(*stmt, row));
    stmt->BindAll(row.created_at, row.updated_at, row.id, row.version);
    HF_RETURN_IF_ERROR(stmt->Run("updating " + what));
    if (sqlite3_changes64(conn_.db()) == 0) {
      StatusOr<TaskRow> current = GetTask(row.id);
      if (!current.ok()) return current.status();  // NotFound
      return Status::Aborted(what + " was changed concurrently (version " +
                             std::to_string(row.version) + " is stale; now " +
                             std::to_string(current->version) + ")");
    }
    TaskRow out = row;
    out.version = row.version + 1;
    return out;
  }
  StatusOr<RowId> MaxTaskId() override {
    return Scalar("reading the highest task id",
                  "SELECT COALESCE(MAX(id), 0) FROM tasks");
  }

  // ----------------------------------------------------------- slices
  Status InsertSlice(const SliceRow& row) override {
    const std::string what = "inserting slice " + std::to_string(row.id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    if (row.id <= 0) return Status::Internal(what + ": slice ids are > 0");
    StatusOr<Statement> stmt = conn_.Prepare(
        "INSERT INTO slices (" + std::string(kSliceColumns) + ") VALUES (" +
        Placeholders(ColumnCount(kSliceColumns)) + ")");
    if (!stmt.ok()) return stmt.status();
    stmt->Bind(row.id);
    HF_RETURN_IF_ERROR(BindSliceData(*stmt, row));
    return stmt->Run(what);
  }
  StatusOr<SliceRow> GetSlice(RowId id) override {
    return One(DecodeSlice, "slice " + std::to_string(id),
               Select(kSliceColumns, "slices", "id = ?"), id);
  }
  StatusOr<std::vector<SliceRow>> ListSlices(const SliceFilter& f) override {
    HF_RETURN_IF_ERROR(CheckLimit(f.limit));
    std::string sql = Select(kSliceColumns, "slices", "id > ?");
    if (f.tenant_id) sql += " AND tenant_id = ?";
    if (f.node_id) sql += " AND node_id = ?";
    if (f.gpu_index) {
      sql +=
          " AND EXISTS (SELECT 1 FROM json_each(slices.gpu_indices) "
          "WHERE json_each.value = ?)";
    }
    if (f.state) sql += " AND state = ?";
    if (f.live_only) sql += " AND state IN ('allocated', 'releasing')";
    sql += " ORDER BY id LIMIT ?";
    std::optional<std::string_view> state;
    if (f.state) state = SliceStateName(*f.state);
    return ManyFiltered(DecodeSlice, "listing slices", sql, f.after_id,
                        f.tenant_id, f.node_id, f.gpu_index, state, f.limit);
  }
  Status UpdateSlice(const SliceRow& row) override {
    const std::string what = "slice " + std::to_string(row.id);
    HF_RETURN_IF_ERROR(CheckWritable("updating " + what));
    StatusOr<Statement> stmt =
        conn_.Prepare("UPDATE slices SET " +
                      Assignments(WithoutId(kSliceColumns)) + " WHERE id = ?");
    if (!stmt.ok()) return stmt.status();
    HF_RETURN_IF_ERROR(BindSliceData(*stmt, row));
    stmt->Bind(row.id);
    HF_RETURN_IF_ERROR(stmt->Run("updating " + what));
    return ExpectChanged(what);
  }
  StatusOr<RowId> MaxSliceId() override {
    return Scalar("reading the highest slice id",
                  "SELECT COALESCE(MAX(id), 0) FROM slices");
  }

  // ---------------------------------------------------------- history
  StatusOr<RowId> AppendHistory(const HistoryRow& row) override {
    const std::string what = "appending " + Quoted(row.op) + " to history";
    HF_RETURN_IF_ERROR(CheckWritable(what));
    return Insert(what,
                  "INSERT INTO slice_history (" +
                      std::string(WithoutId(kHistoryColumns)) + ") VALUES (" +
                      Placeholders(11) + ")",
                  row.at, row.op, row.slice_id, row.task_id, row.tenant_id,
                  row.node_id, Json(row.gpu_indices).dump(), row.memory_mib,
                  row.compute_percent, row.actor, row.reason);
  }
  StatusOr<std::vector<HistoryRow>> ListHistory(
      const HistoryFilter& f) override {
    HF_RETURN_IF_ERROR(CheckLimit(f.limit));
    if (PastEveryRow(f)) return std::vector<HistoryRow>();
    std::string sql = Select(kHistoryColumns, "slice_history", "id > ?");
    if (f.tenant_id) sql += " AND tenant_id = ?";
    if (f.slice_id) sql += " AND slice_id = ?";
    if (f.task_id) sql += " AND task_id = ?";
    sql += " ORDER BY id LIMIT ?";
    return ManyFiltered(DecodeHistory, "listing history", sql, AfterId(f),
                        f.tenant_id, f.slice_id, f.task_id, f.limit);
  }

  // --------------------------------------------------- slice requests
  StatusOr<SliceRequestRow> InsertSliceRequest(
      const SliceRequestRow& row) override {
    const std::string what = "inserting a " + Quoted(row.action) +
                             " request for slice " +
                             std::to_string(row.slice_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<Statement> stmt = conn_.Prepare(
        "INSERT INTO agent_slice_requests (" +
        std::string(WithoutId(kSliceRequestColumns)) + ") VALUES (" +
        Placeholders(ColumnCount(kSliceRequestColumns) - 1) + ")");
    if (!stmt.ok()) return stmt.status();
    BindSliceRequestData(*stmt, row);
    HF_RETURN_IF_ERROR(stmt->Run(what));
    SliceRequestRow out = row;
    out.id = sqlite3_last_insert_rowid(conn_.db());
    return out;
  }
  StatusOr<SliceRequestRow> GetSliceRequest(RowId id) override {
    return One(DecodeSliceRequest, "slice request " + std::to_string(id),
               Select(kSliceRequestColumns, "agent_slice_requests", "id = ?"),
               id);
  }
  StatusOr<std::vector<SliceRequestRow>> ListSliceRequests(
      const SliceRequestFilter& f) override {
    HF_RETURN_IF_ERROR(CheckLimit(f.limit));
    std::string sql =
        Select(kSliceRequestColumns, "agent_slice_requests", "id > ?");
    if (f.node_id) sql += " AND node_id = ?";
    if (f.state) sql += " AND state = ?";
    sql += " ORDER BY id LIMIT ?";
    std::optional<std::string_view> state;
    if (f.state) state = SliceRequestStateName(*f.state);
    return ManyFiltered(DecodeSliceRequest, "listing slice requests", sql,
                        f.after_id, f.node_id, state, f.limit);
  }
  Status UpdateSliceRequest(const SliceRequestRow& row) override {
    const std::string what = "slice request " + std::to_string(row.id);
    HF_RETURN_IF_ERROR(CheckWritable("updating " + what));
    StatusOr<Statement> stmt = conn_.Prepare(
        "UPDATE agent_slice_requests SET " +
        Assignments(WithoutId(kSliceRequestColumns)) + " WHERE id = ?");
    if (!stmt.ok()) return stmt.status();
    BindSliceRequestData(*stmt, row);
    stmt->Bind(row.id);
    HF_RETURN_IF_ERROR(stmt->Run("updating " + what));
    return ExpectChanged(what);
  }

  // ------------------------------------------------------------- meta
  // -------------------------------------------------------- task logs
  StatusOr<std::int64_t> TaskLogSize(RowId task_id) override {
    return Scalar("reading the log size of task " + std::to_string(task_id),
                  "SELECT COALESCE(MAX(offset + length(data)), 0) FROM "
                  "task_log_chunks WHERE task_id = ?",
                  task_id);
  }
  Status AppendTaskLog(RowId task_id, std::int64_t offset,
                       std::string_view data) override {
    const std::string what =
        "appending to the log of task " + std::to_string(task_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<std::int64_t> size = TaskLogSize(task_id);
    if (!size.ok()) return size.status();
    if (offset != *size) {
      return Status::FailedPrecondition(
          what + ": offset " + std::to_string(offset) +
          " is not the log size " + std::to_string(*size));
    }
    if (data.empty()) return Status::Ok();
    StatusOr<Statement> stmt = conn_.Prepare(
        "INSERT INTO task_log_chunks (task_id, offset, data) VALUES (?, ?, ?)");
    if (!stmt.ok()) return stmt.status();
    stmt->Bind(task_id).Bind(offset).BindBlob(data);
    return stmt->Run(what);
  }
  StatusOr<std::string> ReadTaskLog(RowId task_id, std::int64_t offset,
                                    std::int64_t max_bytes) override {
    const std::string what =
        "reading the log of task " + std::to_string(task_id);
    HF_RETURN_IF_ERROR(CheckOpen(what));
    StatusOr<Statement> stmt = conn_.Prepare(
        "SELECT offset, data FROM task_log_chunks WHERE task_id = ? AND "
        "offset + length(data) > ? ORDER BY offset");
    if (!stmt.ok()) return stmt.status();
    stmt->Bind(task_id).Bind(offset);
    std::string out;
    while (static_cast<std::int64_t>(out.size()) < max_bytes) {
      StatusOr<bool> row = stmt->Step(what);
      if (!row.ok()) return row.status();
      if (!*row) break;
      const std::int64_t at = stmt->Int(0);
      const std::string chunk = stmt->Blob(1);
      const auto skip = static_cast<std::size_t>(std::max<std::int64_t>(
          0, offset + static_cast<std::int64_t>(out.size()) - at));
      if (skip >= chunk.size()) continue;
      const std::size_t room = static_cast<std::size_t>(max_bytes) - out.size();
      out.append(chunk, skip, std::min(room, chunk.size() - skip));
    }
    return out;
  }

  // ------------------------------------------------- idempotency keys
  Status InsertIdempotencyKey(const IdempotencyRow& row) override {
    const std::string what = "inserting Idempotency-Key " + Quoted(row.key) +
                             " of token " + std::to_string(row.token_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    return Change(what,
                  "INSERT INTO idempotency_keys (" +
                      std::string(kIdempotencyColumns) + ") VALUES (" +
                      Placeholders(8) + ")",
                  row.token_id, row.key, row.fingerprint, row.status, row.body,
                  row.task_id, row.created_at, row.expires_at)
        .status();
  }
  StatusOr<IdempotencyRow> GetIdempotencyKey(RowId token_id,
                                             std::string_view key) override {
    return One(DecodeIdempotency,
               "Idempotency-Key " + Quoted(key) + " of token " +
                   std::to_string(token_id),
               Select(kIdempotencyColumns, "idempotency_keys",
                      "token_id = ? AND key = ?"),
               token_id, key);
  }
  Status UpdateIdempotencyKey(const IdempotencyRow& row) override {
    const std::string what = "Idempotency-Key " + Quoted(row.key) +
                             " of token " + std::to_string(row.token_id);
    HF_RETURN_IF_ERROR(CheckWritable("updating " + what));
    return ChangeOne(what,
                     "UPDATE idempotency_keys SET fingerprint = ?, status = ?, "
                     "body = ?, task_id = ?, expires_at = ? "
                     "WHERE token_id = ? AND key = ?",
                     row.fingerprint, row.status, row.body, row.task_id,
                     row.expires_at, row.token_id, row.key);
  }
  Status DeleteIdempotencyKey(RowId token_id, std::string_view key) override {
    const std::string what = "deleting Idempotency-Key " + Quoted(key) +
                             " of token " + std::to_string(token_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    return Change(what,
                  "DELETE FROM idempotency_keys WHERE token_id = ? AND key = ?",
                  token_id, key)
        .status();
  }
  StatusOr<int> DeleteExpiredIdempotencyKeys(Millis now, int limit) override {
    const std::string what = "sweeping expired Idempotency-Keys";
    HF_RETURN_IF_ERROR(CheckWritable(what));
    HF_RETURN_IF_ERROR(CheckLimit(limit));
    StatusOr<std::int64_t> deleted =
        Change(what,
               "DELETE FROM idempotency_keys WHERE (token_id, key) IN ("
               "SELECT token_id, key FROM idempotency_keys "
               "WHERE expires_at <= ? LIMIT ?)",
               now, limit);
    if (!deleted.ok()) return deleted.status();
    return static_cast<int>(*deleted);
  }

  // ------------------------------------------------------ slice usage
  Status PutSliceUsage(const SliceUsageRow& row) override {
    const std::string what =
        "storing the usage of slice " + std::to_string(row.slice_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<std::int64_t> changed =
        Change(what,
               "INSERT INTO slice_usage (slice_id, reported_at, usage) "
               "VALUES (?, ?, ?) ON CONFLICT (slice_id) DO UPDATE SET "
               "reported_at = excluded.reported_at, usage = excluded.usage",
               row.slice_id, row.reported_at, row.usage);
    if (!changed.ok()) return changed.status();
    changed = Change(what,
                     "INSERT INTO slice_usage_history (slice_id, reported_at, "
                     "usage) VALUES (?, ?, ?) ON CONFLICT (slice_id, "
                     "reported_at) DO UPDATE SET usage = excluded.usage",
                     row.slice_id, row.reported_at, row.usage);
    if (!changed.ok()) return changed.status();
    // Kept: this row and the slice's newest kSliceUsageHistoryRows - 1
    // others (as the PostgreSQL store keeps them); nothing goes while the
    // slice has fewer, the subquery being NULL then.
    changed = Change(what,
                     "DELETE FROM slice_usage_history WHERE slice_id = ? AND "
                     "reported_at <> ? AND reported_at < (SELECT reported_at "
                     "FROM slice_usage_history WHERE slice_id = ? AND "
                     "reported_at <> ? ORDER BY reported_at DESC LIMIT 1 "
                     "OFFSET ?)",
                     row.slice_id, row.reported_at, row.slice_id,
                     row.reported_at, kSliceUsageHistoryRows - 2);
    return changed.ok() ? Status::Ok() : changed.status();
  }
  StatusOr<std::optional<SliceUsageRow>> GetSliceUsage(
      RowId slice_id) override {
    const std::string what =
        "reading the usage of slice " + std::to_string(slice_id);
    HF_RETURN_IF_ERROR(CheckOpen(what));
    StatusOr<Statement> stmt = conn_.Prepare(
        "SELECT reported_at, usage FROM slice_usage WHERE slice_id = ?");
    if (!stmt.ok()) return stmt.status();
    stmt->Bind(slice_id);
    StatusOr<bool> row = stmt->Step(what);
    if (!row.ok()) return row.status();
    if (!*row) return std::optional<SliceUsageRow>();
    return std::optional<SliceUsageRow>(
        SliceUsageRow{slice_id, stmt->Int(0), stmt->Text(1)});
  }
  StatusOr<std::vector<SliceUsageRow>> ListSliceUsageHistory(
      RowId slice_id, Millis since, int limit) override {
    const std::string what =
        "reading the usage history of slice " + std::to_string(slice_id);
    HF_RETURN_IF_ERROR(CheckOpen(what));
    HF_RETURN_IF_ERROR(CheckLimit(limit));
    // The newest `limit` rows from `since` on, handed out oldest first.
    return Many(
        [slice_id](Statement& stmt) -> StatusOr<SliceUsageRow> {
          return SliceUsageRow{slice_id, stmt.Int(0), stmt.Text(1)};
        },
        what,
        "SELECT reported_at, usage FROM (SELECT reported_at, usage FROM "
        "slice_usage_history WHERE slice_id = ? AND reported_at >= ? ORDER BY "
        "reported_at DESC LIMIT ?) ORDER BY reported_at",
        slice_id, since, limit);
  }

  StatusOr<std::optional<std::string>> GetMeta(std::string_view key) override {
    const std::string what = "reading meta " + Quoted(key);
    HF_RETURN_IF_ERROR(CheckOpen(what));
    StatusOr<Statement> stmt =
        conn_.Prepare("SELECT value FROM meta WHERE key = ?");
    if (!stmt.ok()) return stmt.status();
    stmt->Bind(key);
    StatusOr<bool> row = stmt->Step(what);
    if (!row.ok()) return row.status();
    if (!*row) return std::optional<std::string>();
    return std::optional<std::string>(stmt->Text(0));
  }
  Status SetMeta(std::string_view key, std::string_view value) override {
    const std::string what = "setting meta " + Quoted(key);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<std::int64_t> changed =
        Change(what,
               "INSERT INTO meta (key, value) VALUES (?, ?) "
               "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
               key, value);
    return changed.ok() ? Status::Ok() : changed.status();
  }

 private:
  static std::string Select(std::string_view columns, std::string_view table,
                            std::string_view where) {
    std::string sql = "SELECT ";
    sql += columns;
    sql += " FROM ";
    sql += table;
    sql += " WHERE ";
    sql += where;
    return sql;
  }
  static std::string TaskSelect() {
    return "SELECT id, " + std::string(kTaskFieldColumns) +
           ", version, created_at, updated_at FROM tasks";
  }

  Status CheckWritable(std::string_view what) const {
    if (!writable_) {
      return Status::Internal(std::string(what) +
                              ": not allowed in a read transaction");
    }
    return CheckOpen(what);
  }
  // A statement must never run outside the transaction: if the database
  // rolled it back (e.g. disk full), it would otherwise commit on its own.
  Status CheckOpen(std::string_view what) const {
    if (!conn_.InTransaction()) {
      return Status::Unavailable(std::string(what) +
                                 ": the database rolled the transaction back");
    }
    return Status::Ok();
  }
  static Status CheckLimit(int limit) {
    if (limit <= 0) {
      return Status::Internal("list limit must be > 0, got " +
                              std::to_string(limit));
    }
    return Status::Ok();
  }
  // NotFound unless the last statement changed a row.
  Status ExpectChanged(const std::string& what) {
    if (sqlite3_changes64(conn_.db()) == 0) return Status::NotFound(what);
    return Status::Ok();
  }

  template <typename... Args>
  StatusOr<Statement> Prepared(std::string_view what, const std::string& sql,
                               const Args&... args) {
    HF_RETURN_IF_ERROR(CheckOpen(what));
    StatusOr<Statement> stmt = conn_.Prepare(sql);
    if (stmt.ok()) stmt->BindAll(args...);
    return stmt;
  }

  // Runs an INSERT; returns the new row's id.
  template <typename... Args>
  StatusOr<RowId> Insert(const std::string& what, const std::string& sql,
                         const Args&... args) {
    StatusOr<Statement> stmt = Prepared(what, sql, args...);
    if (!stmt.ok()) return stmt.status();
    HF_RETURN_IF_ERROR(stmt->Run(what));
    return sqlite3_last_insert_rowid(conn_.db());
  }

  // Runs an UPDATE/DELETE; returns the number of rows changed.
  template <typename... Args>
  StatusOr<std::int64_t> Change(const std::string& what, const std::string& sql,
                                const Args&... args) {
    StatusOr<Statement> stmt = Prepared(what, sql, args...);
    if (!stmt.ok()) return stmt.status();
    HF_RETURN_IF_ERROR(stmt->Run(what));
    return sqlite3_changes64(conn_.db());
  }

  // Runs an UPDATE/DELETE of one row by key; NotFound(`what`) if none.
  template <typename... Args>
  Status ChangeOne(const std::string& what, const std::string& sql,
                   const Args&... args) {
    StatusOr<std::int64_t> changed = Change(what, sql, args...);
    if (!changed.ok()) return changed.status();
    if (*changed == 0) return Status::NotFound(what);
    return Status::Ok();
  }

  // Runs a query for one row; NotFound(`what`) when there is none.
  template <typename Decode, typename... Args>
  auto One(Decode decode, const std::string& what, const std::string& sql,
           const Args&... args)
      -> decltype(decode(std::declval<Statement&>())) {
    StatusOr<Statement> stmt = Prepared("reading " + what, sql, args...);
    if (!stmt.ok()) return stmt.status();
    StatusOr<bool> row = stmt->Step("reading " + what);
    if (!row.ok()) return row.status();
    if (!*row) return Status::NotFound(what);
    return decode(*stmt);
  }

  // Runs a query for any number of rows.
  template <typename Decode, typename... Args>
  RowsOf<Decode> Many(Decode decode, const std::string& what,
                      const std::string& sql, const Args&... args) {
    StatusOr<Statement> stmt = Prepared(what, sql, args...);
    if (!stmt.ok()) return stmt.status();
    return Collect(decode, *stmt, what);
  }

  // Many() for a list query whose optional filters bind only when set, in
  // the order their clauses were appended to `sql`; the limit comes last.
  template <typename Decode, typename... Filters>
  RowsOf<Decode> ManyFiltered(Decode decode, const std::string& what,
                              const std::string& sql, RowId after_id,
                              const Filters&... filters_then_limit) {
    StatusOr<Statement> stmt = Prepared(what, sql, after_id);
    if (!stmt.ok()) return stmt.status();
    (BindIfSet(*stmt, filters_then_limit), ...);
    return Collect(decode, *stmt, what);
  }

  // A client's page (`after` set) of the history or the tasks: here every
  // row's ListPosition is (0, id), as one writer commits ids in order, so
  // id order is the position order and nothing has to be held back.
  template <typename Filter>
  static RowId AfterId(const Filter& f) {
    return f.after ? f.after->id : f.after_id;
  }
  // A position with txn > 0 (from a PostgreSQL store) is past every row.
  template <typename Filter>
  static bool PastEveryRow(const Filter& f) {
    return f.after && f.after->txn > 0;
  }

  template <typename Decode>
  static RowsOf<Decode> Collect(Decode decode, Statement& stmt,
                                const std::string& what) {
    std::vector<RowOf<Decode>> rows;
    for (;;) {
      StatusOr<bool> has_row = stmt.Step(what);
      if (!has_row.ok()) return has_row.status();
      if (!*has_row) return rows;
      auto decoded = decode(stmt);
      if (!decoded.ok()) return decoded.status();
      rows.push_back(std::move(decoded).value());
    }
  }
  template <typename T>
  static void BindIfSet(Statement& stmt, const std::optional<T>& v) {
    if (v) stmt.Bind(*v);
  }
  static void BindIfSet(Statement& stmt, int limit) { stmt.Bind(limit); }

  template <typename... Args>
  StatusOr<RowId> Scalar(const std::string& what, const std::string& sql,
                         const Args&... args) {
    StatusOr<Statement> stmt = Prepared(what, sql);
    if (!stmt.ok()) return stmt.status();
    stmt->BindAll(args...);
    StatusOr<bool> row = stmt->Step(what);
    if (!row.ok()) return row.status();
    return *row ? stmt->Int(0) : 0;
  }

  Connection& conn_;
  const bool writable_;
};

}  // namespace

int SqliteSchemaVersion() { return kLatestSchemaVersion; }

// ------------------------------------------------------------ SqliteStore

struct SqliteStore::PendingWrite {
  PendingWrite(const std::function<Status(Txn&)>& f, Mutex& store_mu)
      : fn(f), mu(store_mu) {}
  const std::function<Status(Txn&)>& fn;
  Status result;
  // The store's mu_, which guards `done`. A guard here cannot name the
  // store's member, so the call keeps the lock's name; code holding mu_
  // tells the analysis that it is the same lock with `mu.AssertHeld()`.
  Mutex& mu;
  bool done HF_GUARDED_BY(mu) = false;
  CondVar done_cv;  // `done` was set
};

StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& path, const StoreOptions& options) {
  const std::string context = "sqlite database " + Quoted(path);
  const std::string lock_path = path + ".lock";
  const int lock_fd =
      ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return Status::Unavailable("cannot open lock file " + Quoted(lock_path) +
                               ": " + std::strerror(errno));
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    char owner[32] = {0};
    const ssize_t n = ::pread(lock_fd, owner, sizeof owner - 1, 0);
    ::close(lock_fd);
    std::string pid =
        n > 0 ? std::string(owner, static_cast<std::size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' '))
      pid.pop_back();
    return Status::Unavailable(
        context + " is in use by another process" +
        (pid.empty() ? std::string() : " (pid " + pid + ")") +
        "; one hf-server owns an SQLite database (use PostgreSQL for several)");
  }
  {
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(lock_fd, 0) == 0) {
      (void)!::pwrite(lock_fd, pid.data(), pid.size(), 0);
    }
  }
  auto fail = [&](const Status& s) {
    ::close(lock_fd);
    return s;
  };
  StatusOr<std::unique_ptr<Connection>> writer =
      Connection::Open(path, /*writer=*/true);
  if (!writer.ok()) return fail(writer.status().WithContext(context));
  StatusOr<int> version = Migrate(**writer);
  if (!version.ok()) return fail(version.status().WithContext(context));

  std::vector<std::unique_ptr<Connection>> readers;
  const int reader_count = std::max(1, options.read_connections);
  for (int i = 0; i < reader_count; ++i) {
    StatusOr<std::unique_ptr<Connection>> reader =
        Connection::Open(path, /*writer=*/false);
    if (!reader.ok()) return fail(reader.status().WithContext(context));
    readers.push_back(std::move(reader).value());
  }
  return std::unique_ptr<SqliteStore>(
      new SqliteStore(std::move(writer).value(), std::move(readers), *version,
                      std::max(1, options.max_batch), lock_fd));
}

SqliteStore::SqliteStore(std::unique_ptr<Connection> writer,
                         std::vector<std::unique_ptr<Connection>> readers,
                         int schema_version, int max_batch, int lock_fd)
    : lock_{lock_fd},
      writer_(std::move(writer)),
      readers_(std::move(readers)),
      schema_version_(schema_version),
      max_batch_(static_cast<std::size_t>(max_batch)) {
  for (const auto& reader : readers_) idle_readers_.push_back(reader.get());
  sqlite3_commit_hook(
      writer_->db(),
      [](void* fail) -> int {
        return static_cast<std::atomic<bool>*>(fail)->load() ? 1 : 0;
      },
      &fail_commits_for_testing_);
  writer_thread_ = std::thread([this] { WriterLoop(); });
  writer_thread_id_ = writer_thread_.get_id();
}

SqliteStore::~SqliteStore() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  queue_cv_.NotifyOne();
  writer_thread_.join();
  // Connections close with the members; the lock goes last.
}

SqliteStore::LockFile::~LockFile() {
  if (fd >= 0) ::close(fd);
}

StoreInfo SqliteStore::info() const {
  return StoreInfo{.backend = "sqlite", .schema_version = schema_version_};
}

Status SqliteStore::Write(const std::function<Status(Txn&)>& fn) {
  if (std::this_thread::get_id() == writer_thread_id_) {
    return Status::Internal("Store::Write called from inside a Write function");
  }
  PendingWrite pending(fn, mu_);
  MutexLock lock(mu_);
  if (stopping_) return Status::Unavailable("the store is closing");
  queue_.push_back(&pending);
  queue_cv_.NotifyOne();
  pending.done_cv.Wait(mu_, [&pending] {
    pending.mu.AssertHeld();  // a predicate runs with the lock (mu_) held
    return pending.done;
  });
  return pending.result;
}

void SqliteStore::WriterLoop() {
  std::vector<PendingWrite*> batch;
  std::size_t last_batch_size = 0;
  std::chrono::steady_clock::duration gather_window{};
  for (;;) {
    {
      MutexLock lock(mu_);
      queue_cv_.Wait(mu_, [this] {
        mu_.AssertHeld();  // a predicate runs with the lock held
        return stopping_ || !queue_.empty();
      });
      // The callers of the last batch were woken just now and often come
      // straight back with their next write; without a short wait they
      // would always miss this batch, and concurrent writers would
      // alternate between two half-size batches. The wait is bounded by a
      // fraction of a commit and skipped when writes come one at a time.
      const std::size_t expected = std::min(last_batch_size, max_batch_);
      if (queue_.size() < expected) {
        queue_cv_.WaitFor(mu_, gather_window, [&] {
          mu_.AssertHeld();  // a predicate runs with the lock held
          return stopping_ || queue_.size() >= expected;
        });
      }
      if (queue_.empty()) return;  // stopping, and every write is answered
      while (!queue_.empty() && batch.size() < max_batch_) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    const auto start = std::chrono::steady_clock::now();
    RunBatch(batch);
    gather_window = std::min<std::chrono::steady_clock::duration>(
        (std::chrono::steady_clock::now() - start) / 4,
        std::chrono::milliseconds(1));
    last_batch_size = batch.size();
    {
      // Notify under the lock: once `done` is seen the caller returns and
      // its PendingWrite (and condition variable) is gone.
      MutexLock lock(mu_);
      for (PendingWrite* pending : batch) {
        pending->mu.AssertHeld();  // mu_, held here
        pending->done = true;
        pending->done_cv.NotifyOne();
      }
    }
    batch.clear();
  }
}

void SqliteStore::RunBatch(const std::vector<PendingWrite*>& batch) {
  std::size_t next = 0;
  while (next < batch.size()) {
    const Status begin = writer_->Exec("BEGIN IMMEDIATE");
    if (!begin.ok()) {
      writer_->RollbackQuietly();
      for (; next < batch.size(); ++next) {
        batch[next]->result = begin.WithContext("starting a write");
      }
      return;
    }
    // The calls whose changes this transaction holds.
    std::vector<PendingWrite*> held;
    bool lost = false;
    for (; next < batch.size() && !lost; ++next) {
      PendingWrite* pending = batch[next];
      pending->result = RunInSavepoint(pending->fn);
      if (pending->result.ok()) held.push_back(pending);
      // The database may end a transaction by itself (disk full, I/O
      // error); then the calls held so far are gone, and the rest of the
      // batch starts a new transaction.
      lost = !writer_->InTransaction();
    }
    Status end =
        lost ? Status::Unavailable(std::string("the database rolled the write "
                                               "transaction back: ") +
                                   sqlite3_errmsg(writer_->db()))
             : writer_->Exec("COMMIT");
    if (!end.ok()) {
      writer_->RollbackQuietly();
      for (PendingWrite* pending : held) {
        pending->result = end.WithContext("committing");
      }
    }
  }
}

Status SqliteStore::RunInSavepoint(const std::function<Status(Txn&)>& fn) {
  HF_RETURN_IF_ERROR(writer_->Exec("SAVEPOINT write_call"));
  SqliteTxn txn(*writer_, /*writable=*/true);
  Status status = RunGuarded(fn, txn);
  if (!writer_->InTransaction()) return status;  // the caller sees `lost`
  if (status.ok()) {
    status = writer_->Exec("RELEASE write_call");
    if (status.ok()) return status;
  }
  // Undo this call alone. If even that fails, end the whole transaction so
  // that nothing of a failed call can be committed.
  if (!writer_->Exec("ROLLBACK TO write_call").ok() ||
      !writer_->Exec("RELEASE write_call").ok()) {
    writer_->RollbackQuietly();
  }
  return status;
}

Connection* SqliteStore::AcquireReader() {
  MutexLock lock(readers_mu_);
  readers_cv_.Wait(readers_mu_, [this] {
    readers_mu_.AssertHeld();  // a predicate runs with the lock held
    return !idle_readers_.empty();
  });
  Connection* reader = idle_readers_.back();
  idle_readers_.pop_back();
  return reader;
}

void SqliteStore::ReleaseReader(Connection* reader) {
  {
    MutexLock lock(readers_mu_);
    idle_readers_.push_back(reader);
  }
  readers_cv_.NotifyOne();
}

Status SqliteStore::Read(const std::function<Status(Txn&)>& fn) {
  Connection* reader = AcquireReader();
  Status status = reader->Exec("BEGIN");
  if (status.ok()) {
    SqliteTxn txn(*reader, /*writable=*/false);
    status = RunGuarded(fn, txn);
    if (reader->InTransaction()) {
      const Status end = reader->Exec(status.ok() ? "COMMIT" : "ROLLBACK");
      if (status.ok()) status = end;
    }
  }
  reader->RollbackQuietly();
  ReleaseReader(reader);
  return status;
}

}  // namespace hf::store
