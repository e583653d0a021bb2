// PostgresStore: the database URL and its connection defaults, connections,
// the schema and its migrations, the Txn over one libpqxx transaction, and
// the retry loop around a Write. See postgres_store.h for the design.
//
// Thread-safety: a Connection (and the transaction on it) is used by one
// thread at a time: each by the Write or Read that leased it from its pool.
#include "store/postgres_store.h"

#include <libpq-fe.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "store/sql_rows.h"

namespace hf::store::postgres_internal {

// One statement parameter in PostgreSQL's text format; no text means NULL.
struct Param {
  std::optional<std::string> text;
};

}  // namespace hf::store::postgres_internal

// How libpqxx passes a Param: it asks whether the value is NULL and for its
// text.
template <>
struct pqxx::string_traits<hf::store::postgres_internal::Param> {
  using Param = hf::store::postgres_internal::Param;
  static constexpr const char* name() noexcept { return "Param"; }
  static constexpr bool has_null() noexcept { return true; }
  static bool is_null(const Param& p) { return !p.text.has_value(); }
  static Param null() { return {}; }
  static std::string to_string(const Param& p) { return p.text.value_or(""); }
};

namespace hf::store {
namespace postgres_internal {
namespace {

using sql_rows::Quoted;

// Connection parameters HeteroFlow sets unless the URL sets them: give up on
// an unreachable server after 5 s, notice a dead peer within about 20 s,
// bound a stuck statement (lock waits included) at 30 s, and end a session
// that sits in an open transaction for a minute (its locks with it).
constexpr std::pair<std::string_view, std::string_view> kConnectDefaults[] = {
    {"connect_timeout", "5"},
    {"keepalives", "1"},
    {"keepalives_idle", "10"},
    {"keepalives_interval", "5"},
    {"keepalives_count", "3"},
    {"tcp_user_timeout", "20000"},
    {"client_encoding", "UTF8"},
    {"application_name", "hf-server"},
    {"options",
     "-c statement_timeout=30000 -c idle_in_transaction_session_timeout=60000"},
};

// Serialises schema migrations across processes (pg_advisory_xact_lock).
constexpr std::int64_t kMigrationLockKey = 0x4846'5343'4845'4d41;  // "HFSCHEMA"

// PostgreSQL's type oid for BYTEA (pg_type.h), to decode those columns.
constexpr pqxx::oid kByteaOid = 17;

// The password in the user-info part of a URL ("scheme://user:pw@host"), as
// written; empty when there is none.
std::string UserInfoPassword(std::string_view url) {
  const std::size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return {};
  const std::string_view rest = url.substr(scheme + 3);
  // libpq takes the user info to end at the first '@' before any '/'.
  const std::size_t at = rest.find_first_of("@/");
  if (at == std::string_view::npos || rest[at] != '@') return {};
  const std::string_view user_info = rest.substr(0, at);
  const std::size_t colon = user_info.find(':');
  if (colon == std::string_view::npos) return {};
  return std::string(user_info.substr(colon + 1));
}

// The value of a "password=" query parameter, as written; empty if none.
std::string QueryPassword(std::string_view url) {
  for (std::string_view key : {"?password=", "&password="}) {
    const std::size_t start = url.find(key);
    if (start == std::string_view::npos) continue;
    const std::string_view value = url.substr(start + key.size());
    return std::string(value.substr(0, value.find('&')));
  }
  return {};
}

// "key='value'" with the quoting libpq's conninfo syntax wants.
std::string ConninfoPair(std::string_view key, std::string_view value) {
  std::string out(key);
  out += "='";
  for (const char c : value) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  out += '\'';
  return out;
}

bool IsPortList(std::string_view port) {
  if (port.empty()) return false;
  for (std::string_view rest = port; !rest.empty();) {
    const std::string_view one = rest.substr(0, rest.find(','));
    if (one.empty() || one.size() > 5 ||
        !std::all_of(one.begin(), one.end(),
                     [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stoi(std::string(one)) > 65535) {
      return false;
    }
    rest.remove_prefix(std::min(rest.size(), one.size() + 1));
  }
  return true;
}

Status BadUrl(std::string message) {
  return Status::InvalidArgument(std::move(message), "db");
}

// The first line of a libpq/libpqxx error without its "ERROR:  " prefix. The
// DETAIL lines are left out on purpose: they quote key values (a token's
// hash).
std::string PrimaryMessage(std::string_view error) {
  std::string_view line = error.substr(0, error.find('\n'));
  for (std::string_view prefix : {"ERROR:  ", "FATAL:  "}) {
    if (line.starts_with(prefix)) line.remove_prefix(prefix.size());
  }
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) {
    line.remove_suffix(1);
  }
  return std::string(line);
}

// A libpq connection message on one line ("...failed: Connection refused\n
// \tIs the server running...?" -> "...failed: Connection refused; Is ...").
std::string OneLine(std::string_view message) {
  std::string out;
  bool gap = false;
  for (const char c : message) {
    if (c == '\n' || c == '\t' || c == '\r') {
      gap = true;
      continue;
    }
    if (gap && !out.empty()) out += "; ";
    gap = false;
    out += c;
  }
  return out;
}

// Classes of SQLSTATE after which the connection is gone: connection
// exceptions (08), the server shutting down or crashing (57P0x), and an
// idle-in-transaction timeout (25P03).
bool IsConnectionLoss(std::string_view sqlstate) {
  return sqlstate.starts_with("08") || sqlstate.starts_with("57P") ||
         sqlstate == "25P03";
}

// Translates a PostgreSQL error into the store's vocabulary, once, here at
// the boundary. `what` says what was being done ("inserting tenant "acme"").
Status SqlErrorStatus(std::string_view what, std::string_view sqlstate,
                      std::string_view error) {
  const std::string primary = PrimaryMessage(error);
  std::string message = std::string(what) + ": " + primary;
  if (sqlstate == "23505") return Status::AlreadyExists(std::move(message));
  if (sqlstate == "23503") {
    return Status::NotFound(std::string(what) +
                            ": a row it refers to does not exist (" + primary +
                            ")");
  }
  // Data exceptions: a value PostgreSQL cannot hold (bad UTF-8, out of
  // range).
  if (sqlstate.starts_with("22")) {
    return Status::InvalidArgument(std::move(message));
  }
  if (sqlstate.starts_with("40")) return Status::Aborted(std::move(message));
  // Unreachable, shutting down, out of resources (disk, connections), a
  // statement or lock timeout, a read-only standby, an I/O error.
  if (IsConnectionLoss(sqlstate) || sqlstate.starts_with("53") ||
      sqlstate.starts_with("57") || sqlstate.starts_with("58") ||
      sqlstate == "55P03" || sqlstate == "25006") {
    return Status::Unavailable(std::move(message));
  }
  return Status::Internal(std::move(message));
}

std::int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The parsed database URL: what libpq is given, how the server is named in
// messages, and the spellings of the password to keep out of them.
struct ConnectInfo {
  std::string conninfo;     // keyword='value' pairs, defaults added
  std::string description;  // "127.0.0.1:5432, database "hf", user "hf""
  std::vector<std::string> secrets;

  // `message` with every spelling of the password replaced by "***".
  std::string Scrub(std::string message) const {
    for (const std::string& secret : secrets) {
      if (secret.empty()) continue;
      for (std::size_t at = message.find(secret); at != std::string::npos;
           at = message.find(secret, at + 3)) {
        message.replace(at, secret.size(), "***");
      }
    }
    return message;
  }
};

namespace {

StatusOr<ConnectInfo> ParseUrl(const std::string& url) {
  ConnectInfo info;
  info.secrets = {UserInfoPassword(url), QueryPassword(url)};
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    std::string reason = error != nullptr ? OneLine(error) : "out of memory";
    PQfreemem(error);
    return BadUrl("database URL is not a valid PostgreSQL URI (" +
                  info.Scrub(std::move(reason)) +
                  "); expected postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME");
  }
  std::map<std::string, std::string, std::less<>> given;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val != nullptr) given[o->keyword] = o->val;
  }
  PQconninfoFree(options);

  if (auto it = given.find("password"); it != given.end()) {
    info.secrets.push_back(it->second);
  }
  const auto value = [&](std::string_view key) -> std::string {
    auto it = given.find(key);
    return it == given.end() ? std::string() : it->second;
  };
  if (value("dbname").empty()) {
    return BadUrl(
        "database URL names no database; expected "
        "postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME");
  }
  if (given.contains("port") && !IsPortList(value("port"))) {
    return BadUrl("database URL has an invalid port " +
                  Quoted(info.Scrub(value("port"))) +
                  "; expected postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME "
                  "with PORT from 1 to 65535");
  }
  for (const auto& [key, default_value] : kConnectDefaults) {
    given.try_emplace(std::string(key), default_value);
  }
  for (const auto& [key, val] : given) {
    if (!info.conninfo.empty()) info.conninfo += ' ';
    info.conninfo += ConninfoPair(key, val);
  }
  const std::string host =
      value("host").empty() ? value("hostaddr") : value("host");
  info.description =
      (host.empty() ? std::string("the default host") : host) + ":" +
      (value("port").empty() ? std::string("5432") : value("port")) +
      ", database " + Quoted(value("dbname")) + ", user " +
      (value("user").empty() ? std::string("(the default)")
                             : Quoted(value("user")));
  info.description = info.Scrub(std::move(info.description));
  return info;
}

}  // namespace

// One libpqxx connection; server notices (e.g. "relation ... already
// exists, skipping") are dropped instead of going to stderr.
class Connection {
 public:
  static StatusOr<std::unique_ptr<Connection>> Open(const ConnectInfo& info) {
    try {
      return std::unique_ptr<Connection>(new Connection(info.conninfo));
    } catch (const std::exception& e) {
      return Status::Unavailable("cannot connect to PostgreSQL at " +
                                 info.description + ": " +
                                 info.Scrub(OneLine(e.what())));
    }
  }

  pqxx::connection& get() { return conn_; }
  bool broken() const { return !conn_.is_open(); }

  // The name of `sql` prepared on this connection, preparing it on first
  // use: a statement run again skips the server's parse and plan (most of
  // the store's statements are a handful of fixed texts). At most
  // kMaxPrepared texts are kept; past that a text runs unprepared ("").
  const std::string& Prepared(const std::string& sql) {
    static const std::string kUnprepared;
    auto it = prepared_.find(sql);
    if (it != prepared_.end()) return it->second;
    if (prepared_.size() >= kMaxPrepared) return kUnprepared;
    std::string name = "hf_" + std::to_string(prepared_.size());
    conn_.prepare(name, sql);
    return prepared_.emplace(sql, std::move(name)).first->second;
  }

 private:
  static constexpr std::size_t kMaxPrepared = 512;

  explicit Connection(const std::string& conninfo)
      : conn_(conninfo), quiet_(conn_) {}

  pqxx::connection conn_;
  pqxx::quiet_errorhandler quiet_;  // declared last: unregistered first
  std::unordered_map<std::string, std::string> prepared_;  // sql -> name
};

// Why a transaction was rolled back, when running it again may help.
enum class Retry {
  kNo,
  kSerialization,  // serialization failure or deadlock: run it again
  kReconnect,      // the connection broke before COMMIT: reconnect, rerun
  // A statement run without a savepoint was refused (a duplicate, a missing
  // row it refers to): run it all again with a savepoint per statement, so
  // that the refused one is undone alone and `fn` sees its error.
  kWithSavepoints,
};

namespace {

// ------------------------------------------------------------- migrations

// The schema, one step per version, applied in order and never edited once
// released: a change is a new step. Version N is kMigrations[N - 1]; the
// steps match SQLite's (sqlite_store.cc) one for one.
constexpr const char* kMigrations[] = {
    // 1: the initial schema.
    R"sql(
CREATE TABLE shared_groups (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  created_at BIGINT NOT NULL
);
CREATE TABLE tenants (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  group_id BIGINT REFERENCES shared_groups(id) ON DELETE SET NULL,
  created_at BIGINT NOT NULL
);
CREATE INDEX tenants_by_group ON tenants(group_id);
CREATE TABLE tokens (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  hash TEXT NOT NULL UNIQUE,
  role TEXT NOT NULL,
  tenant_id BIGINT REFERENCES tenants(id),
  description BYTEA NOT NULL,
  created_at BIGINT NOT NULL,
  revoked_at BIGINT
);
CREATE INDEX tokens_by_tenant ON tokens(tenant_id, id);
CREATE TABLE nodes (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  containerized BOOLEAN NOT NULL,
  cpu_milli BIGINT NOT NULL,
  host_memory_mib BIGINT NOT NULL,
  agent_version TEXT NOT NULL,
  registered_at BIGINT NOT NULL,
  last_heartbeat_at BIGINT NOT NULL
);
CREATE TABLE gpus (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  node_id BIGINT NOT NULL REFERENCES nodes(id),
  idx INTEGER NOT NULL,
  uuid TEXT NOT NULL,
  vendor TEXT NOT NULL,
  model TEXT NOT NULL,
  memory_mib BIGINT NOT NULL,
  cc_major INTEGER NOT NULL,
  cc_minor INTEGER NOT NULL,
  mig_capable BOOLEAN NOT NULL,
  mps_capable BOOLEAN NOT NULL,
  lost BOOLEAN NOT NULL,
  updated_at BIGINT NOT NULL,
  UNIQUE (node_id, idx)
);
CREATE TABLE tasks (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  tenant_id BIGINT NOT NULL REFERENCES tenants(id),
  name TEXT NOT NULL,
  image TEXT NOT NULL,
  command TEXT NOT NULL,            -- JSON array of strings
  command_is_shell BOOLEAN NOT NULL,
  gpu_type TEXT NOT NULL,
  gpu_required INTEGER NOT NULL,
  memory_mib BIGINT,
  compute_percent INTEGER,
  preemptible BOOLEAN NOT NULL,
  user_env TEXT NOT NULL,           -- JSON object of strings
  env TEXT NOT NULL,                -- JSON object of strings
  labels TEXT NOT NULL,             -- JSON object of strings
  state TEXT NOT NULL,
  pending_reason TEXT NOT NULL,
  slice_id BIGINT,
  node_id BIGINT REFERENCES nodes(id),
  gpu_indices TEXT NOT NULL,        -- JSON array of integers
  exit_code INTEGER,
  message TEXT NOT NULL,
  cancel_requested BOOLEAN NOT NULL,
  version BIGINT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX tasks_by_state ON tasks(state, id);
CREATE INDEX tasks_by_tenant ON tasks(tenant_id, id);
CREATE INDEX tasks_by_node ON tasks(node_id, id);
CREATE TABLE slices (
  id BIGINT PRIMARY KEY,            -- assigned by the ledger
  task_id BIGINT REFERENCES tasks(id),
  tenant_id BIGINT NOT NULL REFERENCES tenants(id),
  node_id BIGINT NOT NULL REFERENCES nodes(id),
  whole BOOLEAN NOT NULL,
  gpu_indices TEXT NOT NULL,        -- JSON array of integers
  memory_mib BIGINT NOT NULL,
  compute_percent INTEGER NOT NULL,
  compute_defaulted BOOLEAN NOT NULL,
  qos_level TEXT NOT NULL,
  enforcement TEXT NOT NULL,        -- JSON array of strings
  state TEXT NOT NULL,
  origin TEXT NOT NULL,
  mig_device_id TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  released_at BIGINT
);
CREATE INDEX slices_by_state ON slices(state, id);
CREATE INDEX slices_by_node ON slices(node_id, id);
CREATE INDEX slices_by_tenant ON slices(tenant_id, id);
CREATE INDEX slices_by_task ON slices(task_id);
-- An append-only log: no foreign keys, so that it outlives what it names.
CREATE TABLE slice_history (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  at BIGINT NOT NULL,
  op TEXT NOT NULL,
  slice_id BIGINT,
  task_id BIGINT,
  tenant_id BIGINT,
  node_id BIGINT,
  gpu_indices TEXT NOT NULL,        -- JSON array of integers
  memory_mib BIGINT NOT NULL,
  compute_percent INTEGER NOT NULL,
  actor TEXT NOT NULL,
  reason BYTEA NOT NULL
);
CREATE INDEX slice_history_by_tenant ON slice_history(tenant_id, id);
CREATE INDEX slice_history_by_slice ON slice_history(slice_id, id);
CREATE INDEX slice_history_by_task ON slice_history(task_id, id);
-- slice_id and task_id carry no foreign key: the server may queue a request
-- before it writes the slice row in the same transaction.
CREATE TABLE agent_slice_requests (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  node_id BIGINT NOT NULL REFERENCES nodes(id),
  slice_id BIGINT NOT NULL,
  task_id BIGINT,
  action TEXT NOT NULL,
  gpu_index INTEGER NOT NULL,
  gpu_uuid TEXT NOT NULL,
  profile TEXT NOT NULL,
  state TEXT NOT NULL,
  device_id TEXT NOT NULL,
  error TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  deadline_at BIGINT NOT NULL,
  claimed_at BIGINT,
  finished_at BIGINT
);
CREATE INDEX agent_slice_requests_by_node
  ON agent_slice_requests(node_id, state, id);
CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value BYTEA NOT NULL
);
)sql",
    // 2: node tokens bound to one node; cross-tenant sharing approvals.
    R"sql(
ALTER TABLE tokens ADD COLUMN node_name TEXT;
CREATE TABLE sharing_approvals (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  tenant_a BIGINT NOT NULL REFERENCES tenants(id),
  tenant_b BIGINT NOT NULL REFERENCES tenants(id),
  reason BYTEA NOT NULL,
  created_by TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  revoked_at BIGINT,
  CHECK (tenant_a < tenant_b)
);
)sql",
    // 3: task logs shipped by agents.
    R"sql(
CREATE TABLE task_log_chunks (
  task_id BIGINT NOT NULL REFERENCES tasks(id),
  "offset" BIGINT NOT NULL,
  data BYTEA NOT NULL,
  PRIMARY KEY (task_id, "offset")
);
)sql",
    // 4: the replies of POSTs sent with an Idempotency-Key, per token.
    R"sql(
CREATE TABLE idempotency_keys (
  token_id BIGINT NOT NULL,
  key TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  status INTEGER NOT NULL,
  body BYTEA NOT NULL,
  task_id BIGINT,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
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
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
       'qos_relabelled', id, task_id, tenant_id, node_id, gpu_indices,
       memory_mib, compute_percent, 'migration',
       convert_to('qos_level ' || qos_level || ' -> exclusive: a grant of whole GPUs has no MIG, MPS or hook limit', 'UTF8')
  FROM slices WHERE whole AND qos_level <> 'exclusive' ORDER BY id;
UPDATE tasks
   SET env = jsonb_set(env::jsonb, '{HETEROFLOW_SLICE_QOS}',
                       '"exclusive"')::text
 WHERE slice_id IN (SELECT id FROM slices WHERE whole)
   AND env::jsonb ? 'HETEROFLOW_SLICE_QOS';
UPDATE slices SET qos_level = 'exclusive', enforcement = '[]'
 WHERE whole AND qos_level <> 'exclusive';
)sql",
    // 6: the newest agent report applied per node, so that a report
    // delivered late is not applied over a newer one.
    R"sql(
ALTER TABLE nodes ADD COLUMN report_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN report_seq BIGINT NOT NULL DEFAULT 0;
)sql",
    // 7: how the hook shares a GPU's time (a task's gpu_compute_mode).
    // Tasks stored before it get the default; the slice env of a bound one
    // names it beside its compute share, as a bind does now.
    R"sql(
ALTER TABLE tasks ADD COLUMN gpu_compute_mode TEXT NOT NULL
  DEFAULT 'work-conserving';
UPDATE tasks
   SET env = jsonb_set(env::jsonb, '{HETEROFLOW_SLICE_COMPUTE_MODE}',
                       '"work-conserving"')::text
 WHERE state IN ('scheduled', 'running')
   AND env::jsonb ? 'HETEROFLOW_SLICE_COMPUTE_PERCENT';
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
  slice_id BIGINT PRIMARY KEY,
  reported_at BIGINT NOT NULL,
  usage TEXT NOT NULL
);
)sql",
    // 10: each slice's stored usage over time (the newest
    // kSliceUsageHistoryRows per slice), for a chart of the recent past.
    // It starts with the one row each slice has now.
    R"sql(
CREATE TABLE slice_usage_history (
  slice_id BIGINT NOT NULL,
  reported_at BIGINT NOT NULL,
  usage TEXT NOT NULL,
  PRIMARY KEY (slice_id, reported_at)
);
INSERT INTO slice_usage_history (slice_id, reported_at, usage)
SELECT slice_id, reported_at, usage FROM slice_usage;
)sql",
    // 11: the transaction that inserted each history and task row, so that
    // clients page those lists in an order no later commit can reach back
    // into (ListPosition in store.h). The rows stored before it are all
    // committed (ALTER TABLE waits for every transaction writing the
    // table), so they get 0 and keep their id order, ahead of every new
    // row: a cursor handed out before it still means the same place. The
    // default is set after the column is added, so that the existing rows
    // are not rewritten with this transaction's id.
    R"sql(
ALTER TABLE slice_history ADD COLUMN txid BIGINT NOT NULL DEFAULT 0;
ALTER TABLE slice_history ALTER COLUMN txid SET DEFAULT txid_current();
CREATE INDEX slice_history_by_txid ON slice_history(txid, id);
ALTER TABLE tasks ADD COLUMN txid BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ALTER COLUMN txid SET DEFAULT txid_current();
CREATE INDEX tasks_by_txid ON tasks(txid, id);
)sql",
    // 12: each node's task runtime as its agent reports it, which decides
    // what the node can start a task from; '' (not said) for the nodes
    // stored before it, until their next report.
    R"sql(
ALTER TABLE nodes ADD COLUMN runtime TEXT NOT NULL DEFAULT '';
)sql",
};

constexpr int kLatestSchemaVersion = static_cast<int>(std::size(kMigrations));

// Applies the missing migrations, one transaction each, and returns the
// schema version. Each step holds an advisory lock and re-reads the version
// under it (READ COMMITTED: after the lock it sees every earlier commit), so
// servers opening a new database at once do not both apply a step.
StatusOr<int> Migrate(pqxx::connection& conn) {
  for (;;) {
    pqxx::work tx(conn);
    tx.exec_params("SELECT pg_advisory_xact_lock($1)", kMigrationLockKey);
    tx.exec0(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)");
    const int current =
        tx.exec1("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")[0]
            .as<int>();
    if (current > kLatestSchemaVersion) {
      return Status::FailedPrecondition(
          "database schema version " + std::to_string(current) +
          " is newer than this hf-server (" +
          std::to_string(kLatestSchemaVersion) + ")");
    }
    if (current == kLatestSchemaVersion) {
      tx.commit();
      return current;
    }
    const int next = current + 1;
    tx.exec(kMigrations[next - 1], "schema migration " + std::to_string(next));
    tx.exec_params0(
        "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
        next, NowMillis());
    tx.commit();
  }
}

// Checks that the database is UTF-8 (text columns hold names in any script)
// and migrates it; returns the schema version. libpqxx exceptions become a
// Status.
StatusOr<int> PrepareDatabase(pqxx::connection& conn) {
  try {
    pqxx::nontransaction query(conn);
    const std::string encoding =
        query.exec1("SHOW server_encoding")[0].as<std::string>();
    if (encoding != "UTF8") {
      return Status::FailedPrecondition(
          "the database's encoding is " + encoding +
          "; HeteroFlow needs UTF8 (CREATE DATABASE ... ENCODING 'UTF8')");
    }
    query.commit();
    return Migrate(conn);
  } catch (const pqxx::sql_error& e) {
    return SqlErrorStatus("preparing the schema", e.sqlstate(), e.what());
  } catch (const std::exception& e) {
    return Status::Unavailable("preparing the schema: " + OneLine(e.what()));
  }
}

// ------------------------------------------------------------ parameters

// "$n", a statement's n-th parameter. (Appended, not `"$" + to_string(n)`:
// GCC 12 at -O3 takes that concatenation for an overlapping copy, a false
// -Wrestrict, GCC bug 105651.)
std::string Placeholder(std::size_t n) {
  std::string out = std::to_string(n);
  out.insert(out.begin(), '$');
  return out;
}

// The parameters of one statement, bound in order; Add() returns the
// placeholder of the value it appends, for SQL built clause by clause.
// A text value PostgreSQL cannot take (a NUL byte) is remembered in
// status() rather than silently cut short.
class Params {
 public:
  Params& Bind(std::int64_t v) { return Push(std::to_string(v)); }
  Params& Bind(int v) { return Push(std::to_string(v)); }
  Params& Bind(bool v) { return Push(v ? "true" : "false"); }
  Params& Bind(std::string_view v) {
    if (v.find('\0') != std::string_view::npos && status_.ok()) {
      status_ = Status::InvalidArgument(
          "a text value holds a NUL byte, which PostgreSQL text cannot store");
    }
    return Push(std::string(v));
  }
  Params& Bind(const std::string& v) { return Bind(std::string_view(v)); }
  Params& Bind(const char* v) { return Bind(std::string_view(v)); }
  Params& Bind(std::nullopt_t) {
    values_.push_back(Param{});
    return *this;
  }
  template <typename T>
  Params& Bind(const std::optional<T>& v) {
    if (!v) return Bind(std::nullopt);
    return Bind(*v);
  }
  // Any bytes, for a BYTEA column (hex format: "\x0aff...").
  Params& BindBytes(std::string_view v) { return Push(sql_rows::HexBytea(v)); }
  template <typename... Args>
  Params& BindAll(const Args&... args) {
    (Bind(args), ...);
    return *this;
  }
  template <typename T>
  std::string Add(const T& v) {
    Bind(v);
    return Placeholder(values_.size());
  }
  // A value already in PostgreSQL's text form and checked (ArrayColumns).
  std::string AddLiteral(std::string text) {
    Push(std::move(text));
    return Placeholder(values_.size());
  }
  // A failure found while building a value (it fails the statement).
  void Fail(Status status) {
    if (status_.ok()) status_ = std::move(status);
  }

  const std::vector<Param>& values() const { return values_; }
  const Status& status() const { return status_; }

 private:
  Params& Push(std::string text) {
    values_.push_back(Param{std::move(text)});
    return *this;
  }

  std::vector<Param> values_;
  Status status_;
};

// "$first, ..., $(first + count - 1)".
std::string Placeholders(int count, int first = 1) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    if (i > 0) out += ", ";
    out += Placeholder(static_cast<std::size_t>(first) +
                       static_cast<std::size_t>(i));
  }
  return out;
}

// "a, b" -> "a = $first, b = $(first + 1)" for an UPDATE of every column.
std::string Assignments(std::string_view columns, int first = 1) {
  std::string out;
  int n = first;
  for (std::string_view name : sql_rows::ColumnNames(columns)) {
    if (!out.empty()) out += ", ";
    out += name;
    out += " = ";
    out += Placeholder(static_cast<std::size_t>(n++));
  }
  return out;
}

// The parameters of one statement over many rows: a PostgreSQL array per
// column, each bound as one parameter and unnested back into rows
// (Unnest()). So a batch is one statement and one round trip, and its text,
// and so its prepared plan, is the same for any number of rows (multi-row
// VALUES would need a text, and a prepared statement, per row count).
// Rows are added with the binders of sql_rows (BindAll, in column order),
// each followed by EndRow(). A column's SQL type follows from the C++ type
// bound to it, the same for every row (a null optional<T> has T's type).
class ArrayColumns {
 public:
  ArrayColumns& Bind(std::int64_t v) {
    return Add("bigint", std::to_string(v));
  }
  ArrayColumns& Bind(int v) { return Add("integer", std::to_string(v)); }
  ArrayColumns& Bind(bool v) { return Add("boolean", v ? "t" : "f"); }
  ArrayColumns& Bind(std::string_view v) {
    if (v.find('\0') != std::string_view::npos && status_.ok()) {
      status_ = Status::InvalidArgument(
          "a text value holds a NUL byte, which PostgreSQL text cannot store");
    }
    return Add("text", Element(v));
  }
  ArrayColumns& Bind(const std::string& v) { return Bind(std::string_view(v)); }
  ArrayColumns& Bind(const char* v) { return Bind(std::string_view(v)); }
  template <typename T>
  ArrayColumns& Bind(const std::optional<T>& v) {
    if (v) return Bind(*v);
    return Add(TypeOf(T{}), "NULL");
  }
  // Any bytes, for a BYTEA column (hex format, as Params::BindBytes).
  ArrayColumns& BindBytes(std::string_view v) {
    return Add("bytea", Element(sql_rows::HexBytea(v)));
  }
  template <typename... Args>
  ArrayColumns& BindAll(const Args&... args) {
    (Bind(args), ...);
    return *this;
  }
  void EndRow() {
    if (column_ != columns_.size() && status_.ok()) {
      status_ =
          Status::Internal("a batch row bound " + std::to_string(column_) +
                           " columns, not " + std::to_string(columns_.size()));
    }
    column_ = 0;
    ++rows_;
  }

  int rows() const { return rows_; }
  const Status& status() const { return status_; }

  // Binds every column's array to `params` and returns
  // "unnest($a::type[], $b::type[], ...)", which yields the rows in the
  // order they were added. `arrays`, if given, receives each column's
  // array ("$a::type[]"), to refer to again in the statement.
  std::string Unnest(Params& params,
                     std::vector<std::string>* arrays = nullptr) const {
    if (!status_.ok()) params.Fail(status_);
    std::string sql = "unnest(";
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      std::string array = params.AddLiteral(columns_[i].array + "}") +
                          "::" + std::string(columns_[i].type) + "[]";
      if (i > 0) sql += ", ";
      sql += array;
      if (arrays != nullptr) arrays->push_back(std::move(array));
    }
    return sql + ")";
  }

 private:
  struct Column {
    std::string_view type;
    std::string array = "{";  // the literal, without its closing brace
  };

  static std::string_view TypeOf(std::int64_t) { return "bigint"; }
  static std::string_view TypeOf(int) { return "integer"; }
  static std::string_view TypeOf(bool) { return "boolean"; }
  static std::string_view TypeOf(const std::string&) { return "text"; }

  // An array element: double-quoted, with `"` and `\` escaped, so that any
  // text (empty, "NULL", braces, commas, newlines) stays itself.
  static std::string Element(std::string_view v) {
    std::string out;
    out.reserve(v.size() + 2);
    out += '"';
    for (const char c : v) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
    return out;
  }

  ArrayColumns& Add(std::string_view type, std::string_view element) {
    if (rows_ == 0) {
      columns_.push_back(Column{type});
    } else if (column_ >= columns_.size() || columns_[column_].type != type) {
      if (status_.ok()) {
        status_ =
            Status::Internal("a batch row's column " + std::to_string(column_) +
                             " does not match the first row's");
      }
      ++column_;
      return *this;
    }
    std::string& array = columns_[column_].array;
    if (rows_ > 0) array += ',';
    array += element;
    ++column_;
    return *this;
  }

  std::vector<Column> columns_;
  std::size_t column_ = 0;  // the next column of the current row
  int rows_ = 0;
  Status status_;
};

// "a, b" -> "a = v.a, b = v.b": an UPDATE of every column from the row
// `v` of a FROM clause.
std::string AssignmentsFrom(std::string_view columns, std::string_view v) {
  std::string out;
  for (std::string_view name : sql_rows::ColumnNames(columns)) {
    if (!out.empty()) out += ", ";
    out += name;
    out += " = ";
    out += v;
    out += '.';
    out += name;
  }
  return out;
}

// ------------------------------------------------------------------- rows

// Reads the columns of one result row in the form sql_rows' decoders want;
// BYTEA columns come back as their bytes. A value of the wrong form throws
// (libpqxx), which the Txn turns into Internal.
class RowReader {
 public:
  explicit RowReader(const pqxx::row& row) : row_(row) {}

  std::int64_t Int(int col) const { return row_[col].as<std::int64_t>(); }
  int Int32(int col) const { return row_[col].as<int>(); }
  bool Bool(int col) const { return row_[col].as<bool>(); }
  bool IsNull(int col) const { return row_[col].is_null(); }
  std::string Text(int col) const {
    const pqxx::field field = row_[col];
    if (field.is_null()) return {};
    if (field.type() == kByteaOid) return pqxx::binarystring(field).str();
    return {field.c_str(), field.size()};
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

 private:
  pqxx::row row_;  // a handle on the shared result
};

template <typename Decode>
using RowOf = std::remove_cvref_t<
    decltype(std::declval<Decode>()(std::declval<RowReader&>()).value())>;
template <typename Decode>
using RowsOf = StatusOr<std::vector<RowOf<Decode>>>;

// `decode`, then the `txid` column that follows the row's columns (the
// row's ListPosition).
template <int kTxnColumn, typename Decode>
auto WithTxn(Decode decode) {
  return [decode](const RowReader& s) -> StatusOr<RowOf<Decode>> {
    StatusOr<RowOf<Decode>> row = decode(s);
    if (row.ok()) row->txn = s.Int(kTxnColumn);
    return row;
  };
}

// ------------------------------------------------------------------- Txn

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
using sql_rows::WithoutId;

// The Txn over one open libpqxx transaction. `writable` is false for a
// Read, whose mutating methods all fail with Internal.
class PgTxn final : public Txn {
 public:
  // Without `savepoints`, statements that change rows run bare (no
  // round trips for a savepoint): the first one refused dooms the
  // transaction with Retry::kWithSavepoints, and it is run again with them.
  PgTxn(pqxx::dbtransaction& tx, Connection& conn, bool writable,
        bool savepoints)
      : tx_(tx), conn_(conn), writable_(writable), savepoints_(savepoints) {}

  // The error that made the transaction unusable, if one did, and whether
  // running it again may help.
  const std::optional<Status>& doomed() const { return doomed_; }
  Retry retry() const { return retry_; }

  // ----------------------------------------------------------- groups
  StatusOr<GroupRow> InsertGroup(const GroupRow& row) override {
    const std::string what = "inserting group " + Quoted(row.name);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<RowId> id = Insert(what,
                                "INSERT INTO shared_groups (name, created_at) "
                                "VALUES ($1, $2) RETURNING id",
                                Params().BindAll(row.name, row.created_at));
    if (!id.ok()) return id.status();
    GroupRow out = row;
    out.id = *id;
    return out;
  }
  StatusOr<GroupRow> GetGroup(RowId id) override {
    return One(DecodeGroup, "group " + std::to_string(id),
               Select(kGroupColumns, "shared_groups", "id = $1"),
               Params().Bind(id));
  }
  StatusOr<GroupRow> FindGroup(std::string_view name) override {
    return One(DecodeGroup, "group " + Quoted(name),
               Select(kGroupColumns, "shared_groups", "name = $1"),
               Params().Bind(name));
  }
  StatusOr<std::vector<GroupRow>> ListGroups() override {
    return Many(DecodeGroup, "listing groups",
                Select(kGroupColumns, "shared_groups", "TRUE") + " ORDER BY id",
                Params());
  }
  Status DeleteGroup(RowId id) override {
    const std::string what = "group " + std::to_string(id);
    HF_RETURN_IF_ERROR(CheckWritable("deleting " + what));
    // Explicit, as in SQLite, besides the foreign key's ON DELETE SET NULL.
    StatusOr<std::int64_t> cleared =
        Change("clearing the tenants of " + what,
               "UPDATE tenants SET group_id = NULL WHERE group_id = $1",
               Params().Bind(id));
    if (!cleared.ok()) return cleared.status();
    return ChangeOne(what, "DELETE FROM shared_groups WHERE id = $1",
                     Params().Bind(id));
  }

  // ---------------------------------------------------------- tenants
  StatusOr<TenantRow> InsertTenant(const TenantRow& row) override {
    const std::string what = "inserting tenant " + Quoted(row.name);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    StatusOr<RowId> id =
        Insert(what,
               "INSERT INTO tenants (name, group_id, created_at) "
               "VALUES ($1, $2, $3) RETURNING id",
               Params().BindAll(row.name, row.group_id, row.created_at));
    if (!id.ok()) return id.status();
    TenantRow out = row;
    out.id = *id;
    return out;
  }
  StatusOr<TenantRow> GetTenant(RowId id) override {
    return One(DecodeTenant, "tenant " + std::to_string(id),
               Select(kTenantColumns, "tenants", "id = $1"), Params().Bind(id));
  }
  StatusOr<TenantRow> FindTenant(std::string_view name) override {
    return One(DecodeTenant, "tenant " + Quoted(name),
               Select(kTenantColumns, "tenants", "name = $1"),
               Params().Bind(name));
  }
  StatusOr<std::vector<TenantRow>> ListTenants() override {
    return Many(DecodeTenant, "listing tenants",
                Select(kTenantColumns, "tenants", "TRUE") + " ORDER BY id",
                Params());
  }
  Status SetTenantGroup(RowId tenant_id,
                        std::optional<RowId> group_id) override {
    const std::string what = "tenant " + std::to_string(tenant_id);
    HF_RETURN_IF_ERROR(CheckWritable("setting the group of " + what));
    return ChangeOne(what, "UPDATE tenants SET group_id = $1 WHERE id = $2",
                     Params().BindAll(group_id, tenant_id));
  }

  // ----------------------------------------------------------- tokens
  StatusOr<TokenRow> InsertToken(const TokenRow& row) override {
    // The hash names the key but is a credential's fingerprint: show a
    // prefix only.
    const std::string what =
        "inserting token with hash " + Quoted(row.hash.substr(0, 12));
    HF_RETURN_IF_ERROR(CheckWritable(what));
    Params params;
    params.BindAll(row.hash, RoleName(row.role), row.tenant_id)
        .BindBytes(row.description)
        .BindAll(row.created_at, row.revoked_at, row.node);
    StatusOr<RowId> id =
        Insert(what,
               "INSERT INTO tokens (" + std::string(WithoutId(kTokenColumns)) +
                   ") VALUES (" + Placeholders(7) + ") RETURNING id",
               params);
    if (!id.ok()) return id.status();
    TokenRow out = row;
    out.id = *id;
    return out;
  }
  StatusOr<TokenRow> GetToken(RowId id) override {
    return One(DecodeToken, "token " + std::to_string(id),
               Select(kTokenColumns, "tokens", "id = $1"), Params().Bind(id));
  }
  StatusOr<TokenRow> FindTokenByHash(std::string_view hash) override {
    return One(DecodeToken, "token with that hash",
               Select(kTokenColumns, "tokens", "hash = $1"),
               Params().Bind(hash));
  }
  StatusOr<std::vector<TokenRow>> ListTokens(
      std::optional<RowId> tenant_id) override {
    Params params;
    const std::string where =
        tenant_id ? "tenant_id = " + params.Add(*tenant_id) : "TRUE";
    return Many(DecodeToken, "listing tokens",
                Select(kTokenColumns, "tokens", where) + " ORDER BY id",
                params);
  }
  Status RevokeToken(RowId id, Millis at) override {
    const std::string what = "token " + std::to_string(id);
    HF_RETURN_IF_ERROR(CheckWritable("revoking " + what));
    return ChangeOne(what,
                     "UPDATE tokens SET revoked_at = COALESCE(revoked_at, $1) "
                     "WHERE id = $2",
                     Params().BindAll(at, id));
  }

  // ------------------------------------------------ sharing approvals
  StatusOr<ApprovalRow> InsertApproval(const ApprovalRow& row) override {
    const std::string what = "inserting the sharing approval of tenants " +
                             std::to_string(row.tenant_a) + " and " +
                             std::to_string(row.tenant_b);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    Params params;
    params.BindAll(row.tenant_a, row.tenant_b)
        .BindBytes(row.reason)
        .BindAll(row.created_by, row.created_at, row.expires_at,
                 row.revoked_at);
    StatusOr<RowId> id =
        Insert(what,
               "INSERT INTO sharing_approvals (" +
                   std::string(WithoutId(kApprovalColumns)) + ") VALUES (" +
                   Placeholders(7) + ") RETURNING id",
               params);
    if (!id.ok()) return id.status();
    ApprovalRow out = row;
    out.id = *id;
    return out;
  }
  StatusOr<ApprovalRow> GetApproval(RowId id) override {
    return One(DecodeApproval, "sharing approval " + std::to_string(id),
               Select(kApprovalColumns, "sharing_approvals", "id = $1"),
               Params().Bind(id));
  }
  StatusOr<std::vector<ApprovalRow>> ListApprovals() override {
    return Many(
        DecodeApproval, "listing sharing approvals",
        Select(kApprovalColumns, "sharing_approvals", "TRUE") + " ORDER BY id",
        Params());
  }
  Status RevokeApproval(RowId id, Millis at) override {
    const std::string what = "sharing approval " + std::to_string(id);
    HF_RETURN_IF_ERROR(CheckWritable("revoking " + what));
    return ChangeOne(what,
                     "UPDATE sharing_approvals SET revoked_at = "
                     "COALESCE(revoked_at, $1) WHERE id = $2",
                     Params().BindAll(at, id));
  }

  // ---------------------------------------------------- nodes and GPUs
  StatusOr<NodeRow> UpsertNode(const NodeRow& row) override {
    const std::string what = "upserting node " + Quoted(row.name);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    static const std::string sql =
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
        "RETURNING id, registered_at";
    StatusOr<pqxx::result> result =
        Exec(what, sql,
             Params().BindAll(row.name, row.containerized, row.cpu_milli,
                              row.host_memory_mib, row.agent_version,
                              row.registered_at, row.last_heartbeat_at,
                              row.report_epoch, row.report_seq, row.runtime),
             /*changes=*/true);
    if (!result.ok()) return result.status();
    NodeRow out = row;
    return Guarded(what, [&]() -> StatusOr<NodeRow> {
      out.id = (*result)[0][0].as<RowId>();
      out.registered_at = (*result)[0][1].as<Millis>();
      return out;
    });
  }
  StatusOr<NodeRow> GetNode(RowId id) override {
    return One(DecodeNode, "node " + std::to_string(id),
               Select(kNodeColumns, "nodes", "id = $1"), Params().Bind(id));
  }
  StatusOr<NodeRow> FindNode(std::string_view name) override {
    return One(DecodeNode, "node " + Quoted(name),
               Select(kNodeColumns, "nodes", "name = $1"), Params().Bind(name));
  }
  StatusOr<std::vector<NodeRow>> ListNodes() override {
    return Many(DecodeNode, "listing nodes",
                Select(kNodeColumns, "nodes", "TRUE") + " ORDER BY id",
                Params());
  }
  StatusOr<GpuRow> UpsertGpu(const GpuRow& row) override {
    const std::string what = "upserting GPU " + std::to_string(row.index) +
                             " of node " + std::to_string(row.node_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    static const std::string sql =
        "INSERT INTO gpus (" + std::string(WithoutId(kGpuColumns)) +
        ") VALUES (" + Placeholders(12) +
        ") ON CONFLICT (node_id, idx) DO UPDATE SET "
        "uuid = excluded.uuid, vendor = excluded.vendor, "
        "model = excluded.model, memory_mib = excluded.memory_mib, "
        "cc_major = excluded.cc_major, cc_minor = excluded.cc_minor, "
        "mig_capable = excluded.mig_capable, "
        "mps_capable = excluded.mps_capable, lost = excluded.lost, "
        "updated_at = excluded.updated_at "
        "RETURNING id";
    StatusOr<RowId> id =
        Insert(what, sql,
               Params().BindAll(row.node_id, row.index, row.uuid, row.vendor,
                                row.model, row.memory_mib, row.cc_major,
                                row.cc_minor, row.mig_capable, row.mps_capable,
                                row.lost, row.updated_at));
    if (!id.ok()) return id.status();
    GpuRow out = row;
    out.id = *id;
    return out;
  }
  StatusOr<std::vector<GpuRow>> ListGpus(
      std::optional<RowId> node_id) override {
    Params params;
    const std::string sql =
        node_id
            ? Select(kGpuColumns, "gpus", "node_id = " + params.Add(*node_id)) +
                  " ORDER BY idx"
            : Select(kGpuColumns, "gpus", "TRUE") + " ORDER BY node_id, idx";
    return Many(DecodeGpu, "listing GPUs", sql, params);
  }

  // ------------------------------------------------------------ tasks
  StatusOr<TaskRow> InsertTask(const TaskRow& row) override {
    const std::string what = "inserting task " + Quoted(row.name);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    static const std::string sql =
        "INSERT INTO tasks (" + std::string(kTaskFieldColumns) +
        ", version, created_at, updated_at) VALUES (" +
        Placeholders(kTaskFieldCount + 3) + ") RETURNING id";
    Params params;
    HF_RETURN_IF_ERROR(BindTaskFields(params, row).WithContext(what));
    params.BindAll(row.version, row.created_at, row.updated_at);
    StatusOr<RowId> id = Insert(what, sql, params);
    if (!id.ok()) return id.status();
    TaskRow out = row;
    out.id = *id;
    return out;
  }
  Status NotifyTaskCreated(RowId id) override {
    // Delivered by PostgreSQL when the transaction commits, never if it
    // rolls back.
    return Exec("notifying the task feed of task " + std::to_string(id),
                "SELECT pg_notify($1, $2)",
                Params().BindAll(std::string(PostgresStore::kTaskChannel),
                                 std::to_string(id)),
                /*changes=*/false)
        .status();
  }
  StatusOr<TaskRow> GetTask(RowId id) override {
    static const std::string sql = TaskSelect() + " WHERE id = $1";
    return One(WithTxn<kTaskColumnCount>(DecodeTask),
               "task " + std::to_string(id), sql, Params().Bind(id));
  }
  StatusOr<std::vector<TaskRow>> ListTasks(const TaskFilter& f) override {
    HF_RETURN_IF_ERROR(CheckLimit(f.limit));
    Params params;
    std::string sql = TaskSelect() + " WHERE " + PageWhere(f, params);
    if (f.state) sql += " AND state = " + params.Add(TaskStateName(*f.state));
    if (f.tenant_id) sql += " AND tenant_id = " + params.Add(*f.tenant_id);
    if (f.node_id) sql += " AND node_id = " + params.Add(*f.node_id);
    sql += PageOrder(f, params);
    return Many(WithTxn<kTaskColumnCount>(DecodeTask), "listing tasks", sql,
                params);
  }
  StatusOr<TaskRow> UpdateTask(const TaskRow& row) override {
    const std::string what = "task " + std::to_string(row.id);
    HF_RETURN_IF_ERROR(CheckWritable("updating " + what));
    static const std::string sql =
        "UPDATE tasks SET " + Assignments(kTaskFieldColumns) +
        ", version = version + 1, created_at = $" +
        std::to_string(kTaskFieldCount + 1) + ", updated_at = $" +
        std::to_string(kTaskFieldCount + 2) + " WHERE id = $" +
        std::to_string(kTaskFieldCount + 3) + " AND version = $" +
        std::to_string(kTaskFieldCount + 4);
    Params params;
    HF_RETURN_IF_ERROR(BindTaskFields(params, row).WithContext(what));
    params.BindAll(row.created_at, row.updated_at, row.id, row.version);
    StatusOr<std::int64_t> changed = Change("updating " + what, sql, params);
    if (!changed.ok()) return changed.status();
    if (*changed == 0) {
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
                  "SELECT COALESCE(MAX(id), 0) FROM tasks", Params());
  }

  // ----------------------------------------------------------- slices
  Status InsertSlice(const SliceRow& row) override {
    const std::string what = "inserting slice " + std::to_string(row.id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    if (row.id <= 0) return Status::Internal(what + ": slice ids are > 0");
    static const std::string sql =
        "INSERT INTO slices (" + std::string(kSliceColumns) + ") VALUES (" +
        Placeholders(ColumnCount(kSliceColumns)) + ")";
    Params params;
    params.Bind(row.id);
    HF_RETURN_IF_ERROR(BindSliceData(params, row).WithContext(what));
    return Change(what, sql, params).status();
  }
  StatusOr<SliceRow> GetSlice(RowId id) override {
    return One(DecodeSlice, "slice " + std::to_string(id),
               Select(kSliceColumns, "slices", "id = $1"), Params().Bind(id));
  }
  StatusOr<std::vector<SliceRow>> ListSlices(const SliceFilter& f) override {
    HF_RETURN_IF_ERROR(CheckLimit(f.limit));
    Params params;
    std::string sql =
        Select(kSliceColumns, "slices", "id > " + params.Add(f.after_id));
    if (f.tenant_id) sql += " AND tenant_id = " + params.Add(*f.tenant_id);
    if (f.node_id) sql += " AND node_id = " + params.Add(*f.node_id);
    if (f.gpu_index) {
      // A JSON array contains a number when the number is one of its
      // elements.
      sql += " AND gpu_indices::jsonb @> to_jsonb(" + params.Add(*f.gpu_index) +
             "::integer)";
    }
    if (f.state) sql += " AND state = " + params.Add(SliceStateName(*f.state));
    if (f.live_only) sql += " AND state IN ('allocated', 'releasing')";
    sql += " ORDER BY id LIMIT " + params.Add(f.limit);
    return Many(DecodeSlice, "listing slices", sql, params);
  }
  Status UpdateSlice(const SliceRow& row) override {
    const std::string what = "slice " + std::to_string(row.id);
    HF_RETURN_IF_ERROR(CheckWritable("updating " + what));
    static const int count = ColumnCount(kSliceColumns) - 1;
    static const std::string sql = "UPDATE slices SET " +
                                   Assignments(WithoutId(kSliceColumns)) +
                                   " WHERE id = $" + std::to_string(count + 1);
    Params params;
    HF_RETURN_IF_ERROR(BindSliceData(params, row).WithContext(what));
    params.Bind(row.id);
    return ChangeOne(what, sql, params);
  }
  StatusOr<RowId> MaxSliceId() override {
    return Scalar("reading the highest slice id",
                  "SELECT COALESCE(MAX(id), 0) FROM slices", Params());
  }

  // ---------------------------------------------------------- history
  StatusOr<RowId> AppendHistory(const HistoryRow& row) override {
    const std::string what = "appending " + Quoted(row.op) + " to history";
    HF_RETURN_IF_ERROR(CheckWritable(what));
    static const std::string sql = "INSERT INTO slice_history (" +
                                   std::string(WithoutId(kHistoryColumns)) +
                                   ") VALUES (" + Placeholders(11) +
                                   ") RETURNING id";
    Params params;
    params
        .BindAll(row.at, row.op, row.slice_id, row.task_id, row.tenant_id,
                 row.node_id, sql_rows::Json(row.gpu_indices).dump(),
                 row.memory_mib, row.compute_percent, row.actor)
        .BindBytes(row.reason);
    return Insert(what, sql, params);
  }
  StatusOr<std::vector<HistoryRow>> ListHistory(
      const HistoryFilter& f) override {
    HF_RETURN_IF_ERROR(CheckLimit(f.limit));
    Params params;
    static const std::string columns = std::string(kHistoryColumns) + ", txid";
    std::string sql = Select(columns, "slice_history", PageWhere(f, params));
    if (f.tenant_id) sql += " AND tenant_id = " + params.Add(*f.tenant_id);
    if (f.slice_id) sql += " AND slice_id = " + params.Add(*f.slice_id);
    if (f.task_id) sql += " AND task_id = " + params.Add(*f.task_id);
    sql += PageOrder(f, params);
    return Many(WithTxn<kHistoryColumnCount>(DecodeHistory), "listing history",
                sql, params);
  }

  // --------------------------------------------------- slice requests
  StatusOr<SliceRequestRow> InsertSliceRequest(
      const SliceRequestRow& row) override {
    const std::string what = "inserting a " + Quoted(row.action) +
                             " request for slice " +
                             std::to_string(row.slice_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    static const std::string sql =
        "INSERT INTO agent_slice_requests (" +
        std::string(WithoutId(kSliceRequestColumns)) + ") VALUES (" +
        Placeholders(ColumnCount(kSliceRequestColumns) - 1) + ") RETURNING id";
    Params params;
    BindSliceRequestData(params, row);
    StatusOr<RowId> id = Insert(what, sql, params);
    if (!id.ok()) return id.status();
    SliceRequestRow out = row;
    out.id = *id;
    return out;
  }
  StatusOr<SliceRequestRow> GetSliceRequest(RowId id) override {
    return One(DecodeSliceRequest, "slice request " + std::to_string(id),
               Select(kSliceRequestColumns, "agent_slice_requests", "id = $1"),
               Params().Bind(id));
  }
  StatusOr<std::vector<SliceRequestRow>> ListSliceRequests(
      const SliceRequestFilter& f) override {
    HF_RETURN_IF_ERROR(CheckLimit(f.limit));
    Params params;
    std::string sql = Select(kSliceRequestColumns, "agent_slice_requests",
                             "id > " + params.Add(f.after_id));
    if (f.node_id) sql += " AND node_id = " + params.Add(*f.node_id);
    if (f.state) {
      sql += " AND state = " + params.Add(SliceRequestStateName(*f.state));
    }
    sql += " ORDER BY id LIMIT " + params.Add(f.limit);
    return Many(DecodeSliceRequest, "listing slice requests", sql, params);
  }
  Status UpdateSliceRequest(const SliceRequestRow& row) override {
    const std::string what = "slice request " + std::to_string(row.id);
    HF_RETURN_IF_ERROR(CheckWritable("updating " + what));
    static const int count = ColumnCount(kSliceRequestColumns) - 1;
    static const std::string sql =
        "UPDATE agent_slice_requests SET " +
        Assignments(WithoutId(kSliceRequestColumns)) + " WHERE id = $" +
        std::to_string(count + 1);
    Params params;
    BindSliceRequestData(params, row);
    params.Bind(row.id);
    return ChangeOne(what, sql, params);
  }

  // -------------------------------------------------------- task logs
  StatusOr<std::int64_t> TaskLogSize(RowId task_id) override {
    return Scalar("reading the log size of task " + std::to_string(task_id),
                  "SELECT COALESCE(MAX(\"offset\" + length(data)), 0) FROM "
                  "task_log_chunks WHERE task_id = $1",
                  Params().Bind(task_id));
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
    Params params;
    params.BindAll(task_id, offset).BindBytes(data);
    return Change(what,
                  "INSERT INTO task_log_chunks (task_id, \"offset\", data) "
                  "VALUES ($1, $2, $3)",
                  params)
        .status();
  }
  StatusOr<std::string> ReadTaskLog(RowId task_id, std::int64_t offset,
                                    std::int64_t max_bytes) override {
    const std::string what =
        "reading the log of task " + std::to_string(task_id);
    if (max_bytes <= 0) return std::string();
    // Only the chunks that overlap [offset, offset + max_bytes).
    const std::int64_t end =
        offset > std::numeric_limits<std::int64_t>::max() - max_bytes
            ? std::numeric_limits<std::int64_t>::max()
            : offset + max_bytes;
    StatusOr<pqxx::result> result =
        Exec(what,
             "SELECT \"offset\", data FROM task_log_chunks WHERE task_id = $1 "
             "AND \"offset\" + length(data) > $2 AND \"offset\" < $3 "
             "ORDER BY \"offset\"",
             Params().BindAll(task_id, offset, end), /*changes=*/false);
    if (!result.ok()) return result.status();
    return Guarded(what, [&]() -> StatusOr<std::string> {
      std::string out;
      for (const pqxx::row& row : *result) {
        const RowReader reader(row);
        const std::int64_t at = reader.Int(0);
        const std::string chunk = reader.Text(1);
        const auto skip = static_cast<std::size_t>(std::max<std::int64_t>(
            0, offset + static_cast<std::int64_t>(out.size()) - at));
        if (skip >= chunk.size()) continue;
        const std::size_t room =
            static_cast<std::size_t>(max_bytes) - out.size();
        out.append(chunk, skip, std::min(room, chunk.size() - skip));
        if (out.size() >= static_cast<std::size_t>(max_bytes)) break;
      }
      return out;
    });
  }

  // ------------------------------------------------- idempotency keys
  Status InsertIdempotencyKey(const IdempotencyRow& row) override {
    const std::string what = "inserting Idempotency-Key " + Quoted(row.key) +
                             " of token " + std::to_string(row.token_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    Params params;
    params.BindAll(row.token_id, row.key, row.fingerprint, row.status)
        .BindBytes(row.body)
        .BindAll(row.task_id, row.created_at, row.expires_at);
    return Change(what,
                  "INSERT INTO idempotency_keys (" +
                      std::string(kIdempotencyColumns) + ") VALUES (" +
                      Placeholders(8) + ")",
                  params)
        .status();
  }
  StatusOr<IdempotencyRow> GetIdempotencyKey(RowId token_id,
                                             std::string_view key) override {
    return One(DecodeIdempotency,
               "Idempotency-Key " + Quoted(key) + " of token " +
                   std::to_string(token_id),
               Select(kIdempotencyColumns, "idempotency_keys",
                      "token_id = $1 AND key = $2"),
               Params().BindAll(token_id, key));
  }
  Status UpdateIdempotencyKey(const IdempotencyRow& row) override {
    const std::string what = "Idempotency-Key " + Quoted(row.key) +
                             " of token " + std::to_string(row.token_id);
    HF_RETURN_IF_ERROR(CheckWritable("updating " + what));
    Params params;
    params.BindAll(row.fingerprint, row.status)
        .BindBytes(row.body)
        .BindAll(row.task_id, row.expires_at, row.token_id, row.key);
    return ChangeOne(what,
                     "UPDATE idempotency_keys SET fingerprint = $1, "
                     "status = $2, body = $3, task_id = $4, expires_at = $5 "
                     "WHERE token_id = $6 AND key = $7",
                     params);
  }
  Status DeleteIdempotencyKey(RowId token_id, std::string_view key) override {
    const std::string what = "deleting Idempotency-Key " + Quoted(key) +
                             " of token " + std::to_string(token_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    return Change(
               what,
               "DELETE FROM idempotency_keys WHERE token_id = $1 AND key = $2",
               Params().BindAll(token_id, key))
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
               "WHERE expires_at <= $1 LIMIT $2)",
               Params().BindAll(now, limit));
    if (!deleted.ok()) return deleted.status();
    return static_cast<int>(*deleted);
  }

  // ------------------------------------------------------ slice usage
  Status PutSliceUsage(const SliceUsageRow& row) override {
    const std::string what =
        "storing the usage of slice " + std::to_string(row.slice_id);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    // One statement: the latest row, the history row, and the history
    // trimmed to that row and the slice's newest kSliceUsageHistoryRows - 1
    // others. The trim sees the table as it was before the statement and
    // never touches the row the statement writes (a row may be changed only
    // once per statement).
    return Change(
               what,
               "WITH latest AS (INSERT INTO slice_usage (slice_id, "
               "reported_at, usage) VALUES ($1, $2, $3) ON CONFLICT "
               "(slice_id) DO UPDATE SET reported_at = excluded.reported_at, "
               "usage = excluded.usage), "
               "appended AS (INSERT INTO slice_usage_history (slice_id, "
               "reported_at, usage) VALUES ($1, $2, $3) ON CONFLICT "
               "(slice_id, reported_at) DO UPDATE SET usage = excluded.usage) "
               "DELETE FROM slice_usage_history WHERE slice_id = $1 AND "
               "reported_at <> $2 AND reported_at < (SELECT reported_at FROM "
               "slice_usage_history "
               "WHERE slice_id = $1 AND reported_at <> $2 ORDER BY "
               "reported_at DESC LIMIT 1 OFFSET $4)",
               Params().BindAll(row.slice_id, row.reported_at, row.usage,
                                kSliceUsageHistoryRows - 2))
        .status();
  }
  StatusOr<std::optional<SliceUsageRow>> GetSliceUsage(
      RowId slice_id) override {
    const std::string what =
        "reading the usage of slice " + std::to_string(slice_id);
    StatusOr<pqxx::result> result = Exec(
        what, "SELECT reported_at, usage FROM slice_usage WHERE slice_id = $1",
        Params().Bind(slice_id), /*changes=*/false);
    if (!result.ok()) return result.status();
    if (result->empty()) return std::optional<SliceUsageRow>();
    return Guarded(what, [&]() -> StatusOr<std::optional<SliceUsageRow>> {
      RowReader r((*result)[0]);
      SliceUsageRow row;
      row.slice_id = slice_id;
      row.reported_at = r.Int(0);
      row.usage = r.Text(1);
      return std::optional<SliceUsageRow>(row);
    });
  }
  StatusOr<std::vector<SliceUsageRow>> ListSliceUsageHistory(
      RowId slice_id, Millis since, int limit) override {
    HF_RETURN_IF_ERROR(CheckLimit(limit));
    // The newest `limit` rows from `since` on, handed out oldest first.
    return Many(
        [slice_id](const RowReader& r) -> StatusOr<SliceUsageRow> {
          return SliceUsageRow{slice_id, r.Int(0), r.Text(1)};
        },
        "reading the usage history of slice " + std::to_string(slice_id),
        "SELECT reported_at, usage FROM (SELECT reported_at, usage FROM "
        "slice_usage_history WHERE slice_id = $1 AND reported_at >= $2 "
        "ORDER BY reported_at DESC LIMIT $3) AS newest ORDER BY reported_at",
        Params().BindAll(slice_id, since, limit));
  }

  // ------------------------------------------------------------- meta
  StatusOr<std::optional<std::string>> GetMeta(std::string_view key) override {
    const std::string what = "reading meta " + Quoted(key);
    StatusOr<pqxx::result> result =
        Exec(what, "SELECT value FROM meta WHERE key = $1", Params().Bind(key),
             /*changes=*/false);
    if (!result.ok()) return result.status();
    if (result->empty()) return std::optional<std::string>();
    return Guarded(what, [&]() -> StatusOr<std::optional<std::string>> {
      return std::optional<std::string>(RowReader((*result)[0]).Text(0));
    });
  }
  Status SetMeta(std::string_view key, std::string_view value) override {
    const std::string what = "setting meta " + Quoted(key);
    HF_RETURN_IF_ERROR(CheckWritable(what));
    Params params;
    params.Bind(key).BindBytes(value);
    return Change(what,
                  "INSERT INTO meta (key, value) VALUES ($1, $2) "
                  "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                  params)
        .status();
  }

  // ---------------------------------------------------------- batches
  // One statement each (ArrayColumns), where the single-row calls take a
  // round trip per row: a bind pass writes hundreds of rows at once.
  StatusOr<std::vector<StatusOr<TaskRow>>> UpdateTasks(
      std::span<const TaskRow> rows) override {
    std::vector<StatusOr<TaskRow>> out;
    if (rows.empty()) return out;
    const std::string what =
        "updating " + std::to_string(rows.size()) + " tasks";
    HF_RETURN_IF_ERROR(CheckWritable(what));
    // A task twice in one batch: its second row must be checked against
    // the version the first one stored, which one statement cannot do.
    std::unordered_set<RowId> ids;
    for (const TaskRow& row : rows) {
      if (!ids.insert(row.id).second) return Txn::UpdateTasks(rows);
    }
    ArrayColumns columns;
    for (const TaskRow& row : rows) {
      HF_RETURN_IF_ERROR(
          BindTaskFields(columns, row)
              .WithContext("updating task " + std::to_string(row.id)));
      columns.BindAll(row.created_at, row.updated_at, row.id, row.version);
      columns.EndRow();
    }
    // The compare-and-set of UpdateTask, row by row: only the rows whose
    // stored version matches are written, and RETURNING names them.
    // `t.id = ANY(ids)` tells the planner how few tasks the join needs, so
    // that on a large table it fetches them through the primary key, as
    // UpdateTask does, rather than hash the whole table for each batch.
    Params params;
    std::vector<std::string> arrays;
    const std::string unnest = columns.Unnest(params, &arrays);
    const std::string& ids_array = arrays.at(kTaskFieldCount + 2);
    const std::string sql =
        "UPDATE tasks AS t SET " + AssignmentsFrom(kTaskFieldColumns, "v") +
        ", version = t.version + 1, created_at = v.created_at, "
        "updated_at = v.updated_at FROM " +
        unnest + " AS v(" + std::string(kTaskFieldColumns) +
        ", created_at, updated_at, id, version) WHERE t.id = ANY(" + ids_array +
        ") AND t.id = v.id AND t.version = v.version " + "RETURNING t.id";
    StatusOr<pqxx::result> result = Exec(what, sql, params, /*changes=*/true);
    if (!result.ok()) return result.status();
    std::unordered_set<RowId> updated;
    HF_RETURN_IF_ERROR(Guarded(what, [&]() -> Status {
      for (const pqxx::row& row : *result) updated.insert(row[0].as<RowId>());
      return Status::Ok();
    }));
    if (updated.size() < rows.size()) {
      // Claims lost (rare): which tasks are gone and which moved on, for
      // the same answers as UpdateTask's.
      StatusOr<std::map<RowId, std::int64_t>> now = TaskVersions(rows, updated);
      if (!now.ok()) return now.status();
      out.reserve(rows.size());
      for (const TaskRow& row : rows) {
        if (updated.contains(row.id)) {
          out.push_back(Stored(row));
          continue;
        }
        const std::string task = "task " + std::to_string(row.id);
        auto it = now->find(row.id);
        if (it == now->end()) {
          out.push_back(Status::NotFound(task));
        } else {
          out.push_back(
              Status::Aborted(task + " was changed concurrently (version " +
                              std::to_string(row.version) + " is stale; now " +
                              std::to_string(it->second) + ")"));
        }
      }
      return out;
    }
    out.reserve(rows.size());
    for (const TaskRow& row : rows) out.push_back(Stored(row));
    return out;
  }
  Status InsertSlices(std::span<const SliceRow> rows) override {
    if (rows.empty()) return Status::Ok();
    const std::string what =
        "inserting " + std::to_string(rows.size()) + " slices";
    HF_RETURN_IF_ERROR(CheckWritable(what));
    ArrayColumns columns;
    for (const SliceRow& row : rows) {
      const std::string slice = "inserting slice " + std::to_string(row.id);
      if (row.id <= 0) return Status::Internal(slice + ": slice ids are > 0");
      columns.Bind(row.id);
      HF_RETURN_IF_ERROR(BindSliceData(columns, row).WithContext(slice));
      columns.EndRow();
    }
    Params params;
    const std::string sql = "INSERT INTO slices (" +
                            std::string(kSliceColumns) + ") SELECT * FROM " +
                            columns.Unnest(params);
    return Change(what, sql, params).status();
  }
  StatusOr<std::vector<RowId>> AppendHistories(
      std::span<const HistoryRow> rows) override {
    if (rows.empty()) return std::vector<RowId>{};
    const std::string what =
        "appending " + std::to_string(rows.size()) + " rows to history";
    HF_RETURN_IF_ERROR(CheckWritable(what));
    ArrayColumns columns;
    for (const HistoryRow& row : rows) {
      columns
          .BindAll(row.at, row.op, row.slice_id, row.task_id, row.tenant_id,
                   row.node_id, sql_rows::Json(row.gpu_indices).dump(),
                   row.memory_mib, row.compute_percent, row.actor)
          .BindBytes(row.reason);
      columns.EndRow();
    }
    Params params;
    return InsertReturningIds(what, "slice_history", WithoutId(kHistoryColumns),
                              columns, params);
  }
  StatusOr<std::vector<SliceRequestRow>> InsertSliceRequests(
      std::span<const SliceRequestRow> rows) override {
    std::vector<SliceRequestRow> out;
    if (rows.empty()) return out;
    const std::string what =
        "inserting " + std::to_string(rows.size()) + " slice requests";
    HF_RETURN_IF_ERROR(CheckWritable(what));
    ArrayColumns columns;
    for (const SliceRequestRow& row : rows) {
      BindSliceRequestData(columns, row);
      columns.EndRow();
    }
    Params params;
    StatusOr<std::vector<RowId>> ids =
        InsertReturningIds(what, "agent_slice_requests",
                           WithoutId(kSliceRequestColumns), columns, params);
    if (!ids.ok()) return ids.status();
    out.assign(rows.begin(), rows.end());
    for (std::size_t i = 0; i < out.size(); ++i) out[i].id = (*ids)[i];
    return out;
  }

 private:
  // UpdateTask's answer for a row it wrote.
  static TaskRow Stored(const TaskRow& row) {
    TaskRow out = row;
    out.version = row.version + 1;
    return out;
  }

  // The stored version of each task of `rows` not in `skip` (absent: the
  // task is gone).
  StatusOr<std::map<RowId, std::int64_t>> TaskVersions(
      std::span<const TaskRow> rows, const std::unordered_set<RowId>& skip) {
    std::string ids = "{";
    for (const TaskRow& row : rows) {
      if (skip.contains(row.id)) continue;
      if (ids.size() > 1) ids += ',';
      ids += std::to_string(row.id);
    }
    ids += '}';
    Params params;
    const std::string sql = "SELECT id, version FROM tasks WHERE id = ANY(" +
                            params.AddLiteral(std::move(ids)) + "::bigint[])";
    const std::string what = "reading the versions of tasks it lost";
    StatusOr<pqxx::result> result = Exec(what, sql, params, /*changes=*/false);
    if (!result.ok()) return result.status();
    return Guarded(what, [&]() -> StatusOr<std::map<RowId, std::int64_t>> {
      std::map<RowId, std::int64_t> versions;
      for (const pqxx::row& row : *result) {
        versions[row[0].as<RowId>()] = row[1].as<std::int64_t>();
      }
      return versions;
    });
  }

  // Inserts the rows of `columns` (named `names`: every column but the id)
  // into `table`; returns their new ids in the order the rows were added.
  // The identity column numbers the rows in the order the SELECT yields
  // them, which ORDER BY ord pins to the order they were added.
  StatusOr<std::vector<RowId>> InsertReturningIds(const std::string& what,
                                                  std::string_view table,
                                                  std::string_view names,
                                                  const ArrayColumns& columns,
                                                  Params& params) {
    const std::string sql =
        "INSERT INTO " + std::string(table) + " (" + std::string(names) +
        ") SELECT " + std::string(names) + " FROM " + columns.Unnest(params) +
        " WITH ORDINALITY AS v(" + std::string(names) + ", ord) ORDER BY ord " +
        "RETURNING id";
    StatusOr<pqxx::result> result = Exec(what, sql, params, /*changes=*/true);
    if (!result.ok()) return result.status();
    return Guarded(what, [&]() -> StatusOr<std::vector<RowId>> {
      if (static_cast<int>(result->size()) != columns.rows()) {
        return Status::Internal(what + ": " + std::to_string(result->size()) +
                                " ids returned");
      }
      std::vector<RowId> ids;
      ids.reserve(result->size());
      for (const pqxx::row& row : *result) ids.push_back(row[0].as<RowId>());
      return ids;
    });
  }

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
           ", version, created_at, updated_at, txid FROM tasks";
  }
  // The columns of TaskSelect() and kHistoryColumns before `txid`.
  static constexpr int kTaskColumnCount = sql_rows::kTaskFieldCount + 4;
  static constexpr int kHistoryColumnCount = 12;

  // The condition that starts a list of the history or the tasks: past
  // `after` in (txid, id) order, and only rows of transactions below the
  // reading snapshot's xmin. Every transaction below xmin has finished, and
  // any transaction that is still running, or that gets its id after this
  // snapshot, has one at or above xmin; so no row that commits later can
  // come before the last row returned, and a cursor past it skips nothing.
  // Without `after`: every visible row with id > after_id (the server's
  // own scans, which must see the newest commits and their own inserts).
  template <typename Filter>
  static std::string PageWhere(const Filter& f, Params& params) {
    if (!f.after) return "id > " + params.Add(f.after_id);
    return "(txid, id) > (" + params.Add(f.after->txn) + ", " +
           params.Add(f.after->id) +
           ") AND txid < (SELECT txid_snapshot_xmin(txid_current_snapshot()))";
  }
  template <typename Filter>
  static std::string PageOrder(const Filter& f, Params& params) {
    return std::string(f.after ? " ORDER BY txid, id" : " ORDER BY id") +
           " LIMIT " + params.Add(f.limit);
  }

  Status CheckWritable(std::string_view what) const {
    if (!writable_) {
      return Status::Internal(std::string(what) +
                              ": not allowed in a read transaction");
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

  // Marks the transaction unusable: every later statement fails with
  // `status`, and the store rolls it back.
  Status Doom(Status status, Retry retry) {
    if (!doomed_) {
      doomed_ = status;
      retry_ = retry;
    }
    return status;
  }

  // The Status of the exception being handled, thrown by a statement of
  // this transaction (inside the savepoint "hf_statement" if `in_savepoint`).
  // REQUIRES: called from a catch block.
  Status Failed(std::string_view what, bool in_savepoint) {
    try {
      throw;
    } catch (const pqxx::sql_error& e) {
      Status status = SqlErrorStatus(what, e.sqlstate(), e.what());
      if (IsConnectionLoss(e.sqlstate())) {
        return Doom(status, Retry::kReconnect);
      }
      if (!in_savepoint) {
        // A bare statement refused by a rule (not by a conflict): the
        // transaction is lost, so it runs again with savepoints, where
        // `fn` sees this error and may go on.
        if (e.sqlstate().starts_with("40")) {  // a conflict: run it again
          return Doom(status, Retry::kSerialization);
        }
        return Doom(status, bare_change_ ? Retry::kWithSavepoints : Retry::kNo);
      }
      // Undo the refused statement alone; the transaction goes on.
      try {
        tx_.exec0(
            "ROLLBACK TO SAVEPOINT hf_statement; "
            "RELEASE SAVEPOINT hf_statement");
      } catch (const std::exception& undo) {
        return Doom(Status::Unavailable(std::string(what) +
                                        ": rolling back a failed statement: " +
                                        PrimaryMessage(undo.what())),
                    Retry::kNo);
      }
      return status;
    } catch (const pqxx::broken_connection& e) {
      return Doom(Status::Unavailable(std::string(what) +
                                      ": lost the connection to PostgreSQL: " +
                                      OneLine(e.what())),
                  Retry::kReconnect);
    } catch (const pqxx::serialization_failure& e) {
      return Doom(
          Status::Aborted(std::string(what) + ": " + PrimaryMessage(e.what())),
          Retry::kSerialization);
    } catch (const pqxx::deadlock_detected& e) {
      return Doom(
          Status::Aborted(std::string(what) + ": " + PrimaryMessage(e.what())),
          Retry::kSerialization);
    } catch (const pqxx::transaction_rollback& e) {
      return Doom(Status::Unavailable(std::string(what) + ": " +
                                      PrimaryMessage(e.what())),
                  Retry::kNo);
    } catch (const std::exception& e) {
      return Doom(
          Status::Internal(std::string(what) + ": " + PrimaryMessage(e.what())),
          Retry::kNo);
    }
  }

  // Runs one statement. One that changes rows runs in a savepoint, so that
  // when PostgreSQL refuses it (a duplicate, a missing row it refers to)
  // only it is undone, as in SQLite.
  // One statement, prepared on the connection where it can be.
  template <typename Args>
  pqxx::result Run(const std::string& sql, const Args& args) {
    const std::string& name = conn_.Prepared(sql);
    if (name.empty()) return tx_.exec_params(sql, args);
    return tx_.exec_prepared(name, args);
  }

  StatusOr<pqxx::result> Exec(std::string_view what, const std::string& sql,
                              const Params& params, bool changes) {
    if (doomed_) return *doomed_;
    if (!params.status().ok()) return params.status().WithContext(what);
    const auto args = pqxx::prepare::make_dynamic_params(params.values());
    if (!changes) {
      try {
        return Run(sql, args);
      } catch (...) {
        return Failed(what, /*in_savepoint=*/false);
      }
    }
    if (!savepoints_) {
      bare_change_ = true;
      try {
        pqxx::result result = Run(sql, args);
        bare_change_ = false;
        return result;
      } catch (...) {
        return Failed(what, /*in_savepoint=*/false);
      }
    }
    try {
      tx_.exec0("SAVEPOINT hf_statement");
    } catch (...) {
      return Failed(what, /*in_savepoint=*/false);
    }
    try {
      pqxx::result result = Run(sql, args);
      tx_.exec0("RELEASE SAVEPOINT hf_statement");
      return result;
    } catch (...) {
      return Failed(what, /*in_savepoint=*/true);
    }
  }

  // Runs `read` (which reads a result's values) and turns a value of the
  // wrong form into Internal.
  template <typename Read>
  static auto Guarded(std::string_view what, Read read) -> decltype(read()) {
    try {
      return read();
    } catch (const std::exception& e) {
      return Status::Internal("decoding " + std::string(what) + ": " +
                              e.what());
    }
  }

  // Runs an INSERT ... RETURNING id (or an upsert); returns the row's id.
  StatusOr<RowId> Insert(const std::string& what, const std::string& sql,
                         const Params& params) {
    StatusOr<pqxx::result> result = Exec(what, sql, params, /*changes=*/true);
    if (!result.ok()) return result.status();
    return Guarded(what, [&]() -> StatusOr<RowId> {
      if (result->empty()) return Status::Internal(what + ": no id returned");
      return (*result)[0][0].as<RowId>();
    });
  }

  // Runs an INSERT/UPDATE/DELETE; returns the number of rows changed.
  StatusOr<std::int64_t> Change(const std::string& what, const std::string& sql,
                                const Params& params) {
    StatusOr<pqxx::result> result = Exec(what, sql, params, /*changes=*/true);
    if (!result.ok()) return result.status();
    return static_cast<std::int64_t>(result->affected_rows());
  }

  // Runs an UPDATE/DELETE of one row by key; NotFound(`what`) if none.
  Status ChangeOne(const std::string& what, const std::string& sql,
                   const Params& params) {
    StatusOr<std::int64_t> changed = Change(what, sql, params);
    if (!changed.ok()) return changed.status();
    if (*changed == 0) return Status::NotFound(what);
    return Status::Ok();
  }

  // Runs a query for one row; NotFound(`what`) when there is none.
  template <typename Decode>
  auto One(Decode decode, const std::string& what, const std::string& sql,
           const Params& params)
      -> decltype(decode(std::declval<RowReader&>())) {
    StatusOr<pqxx::result> result =
        Exec("reading " + what, sql, params, /*changes=*/false);
    if (!result.ok()) return result.status();
    if (result->empty()) return Status::NotFound(what);
    return Guarded(what, [&] { return decode(RowReader((*result)[0])); });
  }

  // Runs a query for any number of rows.
  template <typename Decode>
  RowsOf<Decode> Many(Decode decode, const std::string& what,
                      const std::string& sql, const Params& params) {
    StatusOr<pqxx::result> result = Exec(what, sql, params, /*changes=*/false);
    if (!result.ok()) return result.status();
    return Guarded(what, [&]() -> RowsOf<Decode> {
      std::vector<RowOf<Decode>> rows;
      rows.reserve(result->size());
      for (const pqxx::row& row : *result) {
        auto decoded = decode(RowReader(row));
        if (!decoded.ok()) return decoded.status();
        rows.push_back(std::move(decoded).value());
      }
      return rows;
    });
  }

  // Runs a query for one integer (0 when it returns no row).
  StatusOr<std::int64_t> Scalar(const std::string& what, const std::string& sql,
                                const Params& params) {
    StatusOr<pqxx::result> result = Exec(what, sql, params, /*changes=*/false);
    if (!result.ok()) return result.status();
    return Guarded(what, [&]() -> StatusOr<std::int64_t> {
      if (result->empty()) return std::int64_t{0};
      return (*result)[0][0].as<std::int64_t>();
    });
  }

  pqxx::dbtransaction& tx_;
  Connection& conn_;
  const bool writable_;
  std::optional<Status> doomed_;
  Retry retry_ = Retry::kNo;
  const bool savepoints_ = true;
  bool bare_change_ = false;  // a statement without a savepoint is running
};

// The store whose Write is running on this thread, to refuse a nested Write
// (with every writer leased it would wait for itself).
thread_local const PostgresStore* writing_store = nullptr;

// Sleeps a random time before attempt `attempt` + 1 of a transaction that
// lost a serialization conflict: 1 ms up to 2^attempt ms (at most 100 ms),
// so that the competing writers spread out.
void BackOff(int attempt) {
  thread_local std::minstd_rand random(std::random_device{}());
  const int ceiling = std::min(100, 1 << std::min(attempt, 10));
  std::uniform_int_distribution<int> millis(1, ceiling);
  std::this_thread::sleep_for(std::chrono::milliseconds(millis(random)));
}

}  // namespace
}  // namespace postgres_internal

using postgres_internal::ConnectInfo;
using postgres_internal::Connection;
using postgres_internal::PgTxn;
using postgres_internal::Retry;

int PostgresSchemaVersion() { return postgres_internal::kLatestSchemaVersion; }

StatusOr<std::unique_ptr<PostgresStore>> PostgresStore::Open(
    const std::string& url, const StoreOptions& options) {
  StatusOr<ConnectInfo> info = postgres_internal::ParseUrl(url);
  if (!info.ok()) return info.status();
  StatusOr<std::unique_ptr<Connection>> conn = Connection::Open(*info);
  if (!conn.ok()) return conn.status();
  StatusOr<int> version = postgres_internal::PrepareDatabase((*conn)->get());
  if (!version.ok()) {
    return version.status().WithContext("PostgreSQL at " + info->description);
  }
  return std::unique_ptr<PostgresStore>(new PostgresStore(
      std::make_unique<ConnectInfo>(std::move(info).value()),
      std::move(conn).value(), std::max(1, options.read_connections),
      std::max(1, options.write_connections), *version));
}

PostgresStore::PostgresStore(std::unique_ptr<ConnectInfo> info,
                             std::unique_ptr<Connection> writer,
                             int read_connections, int write_connections,
                             int schema_version)
    : info_(std::move(info)), schema_version_(schema_version) {
  // The migration's connection is the first writer; the others connect on
  // first use.
  writers_.slots.resize(static_cast<std::size_t>(write_connections));
  writers_.slots.front().conn = std::move(writer);
  readers_.slots.resize(static_cast<std::size_t>(read_connections));
  for (Pool* pool : {&writers_, &readers_}) {
    for (Slot& slot : pool->slots) pool->idle.push_back(&slot);
  }
}

PostgresStore::~PostgresStore() = default;

namespace {

// The task feed: one connection of its own LISTENing on the task channel,
// and a thread waiting on it (await_notification wakes at least every
// kFeedPollUs to see whether it is to stop). A broken connection is opened
// again after a pause; every (re)connect reports 0 first, since
// notifications sent while it was away are lost.
class PgTaskFeed final : public TaskFeed {
 public:
  PgTaskFeed(const postgres_internal::ConnectInfo& info,
             std::function<void(RowId)> on_created)
      : info_(info), on_created_(std::move(on_created)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~PgTaskFeed() override {
    stop_.store(true);
    thread_.join();
  }
  PgTaskFeed(const PgTaskFeed&) = delete;
  PgTaskFeed& operator=(const PgTaskFeed&) = delete;

 private:
  static constexpr long kFeedPollUs = 200'000;
  static constexpr auto kReconnectPause = std::chrono::milliseconds(500);

  class Receiver final : public pqxx::notification_receiver {
   public:
    Receiver(pqxx::connection_base& conn,
             const std::function<void(RowId)>& on_created)
        : pqxx::notification_receiver(conn, PostgresStore::kTaskChannel),
          on_created_(on_created) {}
    void operator()(const std::string& payload, int /*backend_pid*/) override {
      RowId id = 0;
      const auto [end, error] =
          std::from_chars(payload.data(), payload.data() + payload.size(), id);
      // A payload that is not an id (nothing of ours sends one) still says
      // something changed: read afresh.
      on_created_(error == std::errc() && end == payload.data() + payload.size()
                      ? id
                      : 0);
    }

   private:
    const std::function<void(RowId)>& on_created_;
  };

  void Run() {
    while (!stop_.load()) {
      StatusOr<std::unique_ptr<postgres_internal::Connection>> conn =
          postgres_internal::Connection::Open(info_);
      if (!conn.ok()) {
        Pause();
        continue;
      }
      try {
        Receiver receiver((*conn)->get(), on_created_);
        (*conn)->get().get_notifs();  // LISTEN is in effect from here
        on_created_(0);
        while (!stop_.load()) {
          (*conn)->get().await_notification(0, kFeedPollUs);
          if ((*conn)->broken()) break;
        }
      } catch (const std::exception&) {
        // The connection broke: listen again on a new one (the 0 it
        // reports then makes the listener read afresh).
      }
      Pause();
    }
  }

  void Pause() {
    const auto until = std::chrono::steady_clock::now() + kReconnectPause;
    while (!stop_.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  const postgres_internal::ConnectInfo& info_;
  std::function<void(RowId)> on_created_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<TaskFeed> PostgresStore::WatchTasks(
    const std::function<void(RowId)>& on_created) {
  return std::make_unique<PgTaskFeed>(*info_, on_created);
}

StoreInfo PostgresStore::info() const {
  return StoreInfo{.backend = "postgres", .schema_version = schema_version_};
}

Status PostgresStore::Write(const std::function<Status(Txn&)>& fn) {
  if (postgres_internal::writing_store == this) {
    return Status::Internal("Store::Write called from inside a Write function");
  }
  Slot* slot = Acquire(writers_);
  postgres_internal::writing_store = this;
  Status status = Run(*slot, /*write=*/true, fn);
  postgres_internal::writing_store = nullptr;
  Release(writers_, slot);
  return status;
}

Status PostgresStore::Read(const std::function<Status(Txn&)>& fn) {
  Slot* slot = Acquire(readers_);
  Status status = Run(*slot, /*write=*/false, fn);
  Release(readers_, slot);
  return status;
}

Status PostgresStore::Run(Slot& slot, bool write,
                          const std::function<Status(Txn&)>& fn) {
  bool reconnected = false;
  bool savepoints = false;
  for (int attempt = 1;; ++attempt) {
    Retry retry = Retry::kNo;
    Status status = RunOnce(slot, write, savepoints, fn, &retry);
    switch (retry) {
      case Retry::kNo:
        return status;
      case Retry::kWithSavepoints:
        if (savepoints) return status;
        savepoints = true;
        --attempt;  // not a lost conflict
        break;
      case Retry::kReconnect:
        // Once: a connection that died while idle (a server restart) is
        // replaced silently; a server that is down fails the next connect.
        if (reconnected) return status;
        reconnected = true;
        break;
      case Retry::kSerialization:
        if (attempt >= kMaxWriteAttempts) {
          return Status::Aborted("gave up after " + std::to_string(attempt) +
                                 " attempts that lost serialization "
                                 "conflicts: " +
                                 status.message());
        }
        postgres_internal::BackOff(attempt);
        break;
    }
  }
}

Status PostgresStore::RunOnce(Slot& slot, bool write, bool savepoints,
                              const std::function<Status(Txn&)>& fn,
                              Retry* retry) {
  if (slot.conn != nullptr && slot.conn->broken()) slot.conn.reset();
  if (slot.conn == nullptr) {
    StatusOr<std::unique_ptr<Connection>> conn = Connection::Open(*info_);
    if (!conn.ok()) return conn.status();
    slot.conn = std::move(conn).value();
  }
  pqxx::connection& conn = slot.conn->get();
  // Closes the connection once the transaction on it is gone if it broke,
  // or may have: it is not used again.
  struct ConnectionGuard {
    Slot& slot;
    bool drop = false;
    ~ConnectionGuard() {
      if (drop || slot.conn->broken()) slot.conn.reset();
    }
  } guard{slot};

  const char* step = "starting a transaction";
  try {
    std::unique_ptr<pqxx::dbtransaction> tx;
    if (write) {
      tx = std::make_unique<pqxx::transaction<pqxx::serializable>>(conn);
    } else {
      tx = std::make_unique<
          pqxx::transaction<pqxx::repeatable_read, pqxx::read_only>>(conn);
    }
    PgTxn txn(*tx, *slot.conn, write, savepoints);
    Status status = sql_rows::RunGuarded(fn, txn);
    if (txn.doomed()) {
      // Not committed, even if `fn` ignored the error.
      *retry = txn.retry();
      guard.drop = *retry == Retry::kReconnect;
      return *txn.doomed();
    }
    if (!status.ok()) return status;  // rolled back with `tx`
    step = "committing";
    tx->commit();
    return Status::Ok();
  } catch (const pqxx::in_doubt_error& e) {
    guard.drop = true;
    return Status::Unavailable(
        "committing: lost the connection to PostgreSQL; the outcome is "
        "unknown (it may or may not have been committed): " +
        postgres_internal::OneLine(e.what()));
  } catch (const pqxx::broken_connection& e) {
    guard.drop = true;
    *retry = Retry::kReconnect;
    return Status::Unavailable(std::string(step) +
                               ": lost the connection to PostgreSQL: " +
                               postgres_internal::OneLine(e.what()));
  } catch (const pqxx::serialization_failure& e) {
    *retry = Retry::kSerialization;
    return Status::Aborted(std::string(step) + ": " +
                           postgres_internal::PrimaryMessage(e.what()));
  } catch (const pqxx::deadlock_detected& e) {
    *retry = Retry::kSerialization;
    return Status::Aborted(std::string(step) + ": " +
                           postgres_internal::PrimaryMessage(e.what()));
  } catch (const pqxx::sql_error& e) {
    if (postgres_internal::IsConnectionLoss(e.sqlstate())) {
      guard.drop = true;
      *retry = Retry::kReconnect;
    }
    return postgres_internal::SqlErrorStatus(step, e.sqlstate(), e.what());
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string(step) + ": " +
                               postgres_internal::OneLine(e.what()));
  }
}

PostgresStore::Slot* PostgresStore::Acquire(Pool& pool) {
  MutexLock lock(pool.mu);
  pool.cv.Wait(pool.mu, [&pool] {
    pool.mu.AssertHeld();  // a predicate runs with the lock held
    return !pool.idle.empty();
  });
  Slot* slot = pool.idle.back();
  pool.idle.pop_back();
  return slot;
}

void PostgresStore::Release(Pool& pool, Slot* slot) {
  {
    MutexLock lock(pool.mu);
    pool.idle.push_back(slot);
  }
  pool.cv.NotifyOne();
}

}  // namespace hf::store
