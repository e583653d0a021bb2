// The control plane's durable state: tenants, shared groups, tokens, nodes,
// GPUs, tasks, slices, the slice history log, the MIG command channel
// (`agent_slice_requests`) and the replies recorded for Idempotency-Keys.
//
// `Store` is the seam between the server and its database. SQLite is the
// embedded implementation (sqlite_store.h); PostgreSQL (postgres_store.h)
// serves several server instances sharing one database. Both pass the same
// contract tests (store_contract_test.h). All work happens in
// transactions: `Write` runs a function against a `Txn` and returns only once
// its changes are durable (or rolled back); `Read` runs against a consistent
// snapshot.
//
// Rows are plain values. Times are Unix epoch milliseconds. Ids are assigned
// by the store, except slice ids, which the ledger assigns (the store keeps
// whatever id it is given and reports the highest one for recovery).
//
// Thread-safety: a Store is safe to use from any number of threads. A `Txn`
// belongs to the function it was passed to and must not escape it.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/gpu_compute_mode.h"
#include "common/status.h"
#include "common/task_state.h"

namespace hf::store {

using Millis = std::int64_t;
using RowId = std::int64_t;

// ------------------------------------------------------------------- rows

struct GroupRow {
  RowId id = 0;
  std::string name;
  Millis created_at = 0;
};

struct TenantRow {
  RowId id = 0;
  std::string name;
  std::optional<RowId> group_id;  // shared tenant group, if any
  Millis created_at = 0;
};

// kMetrics reads GET /metrics and nothing else (no tenant).
enum class Role { kAdmin, kTenantAdmin, kUser, kNode, kMetrics };
std::string_view RoleName(
    Role role);  // "admin", "tenant-admin", "user", "node"
std::optional<Role> ParseRole(std::string_view name);

struct TokenRow {
  RowId id = 0;
  std::string hash;  // hex SHA-256 of the secret; the secret is never stored
  Role role = Role::kUser;
  std::optional<RowId> tenant_id;  // set for tenant-admin and user
  // Role node only: the one node name the token may act for (register,
  // heartbeat, ...); unset: any node (a cluster-wide agent token).
  std::optional<std::string> node;
  std::string description;
  Millis created_at = 0;
  std::optional<Millis> revoked_at;
};

struct NodeRow {
  RowId id = 0;
  std::string name;  // the agent's --node-id
  bool containerized = false;
  std::int64_t cpu_milli = 0;
  std::int64_t host_memory_mib = 0;
  std::string agent_version;
  std::string runtime;  // the agent's task runtime; empty: not said
  Millis registered_at = 0;
  Millis last_heartbeat_at = 0;
  // The newest report of the agent applied so far (its start count and the
  // report's number within that start): an older one arriving late is not
  // applied over it. 0/0 before the first numbered report.
  std::int64_t report_epoch = 0;
  std::int64_t report_seq = 0;
  friend bool operator==(const NodeRow&, const NodeRow&) = default;
};

struct GpuRow {
  RowId id = 0;
  RowId node_id = 0;
  int index = 0;  // unique per node
  std::string uuid;
  std::string vendor;
  std::string model;
  std::int64_t memory_mib = 0;
  int cc_major = 0;
  int cc_minor = 0;
  bool mig_capable = false;
  bool mps_capable = false;
  bool lost = false;
  Millis updated_at = 0;
};

// The task lifecycle (common/task_state.h), under its store names too.
using ::hf::IsTerminal;
using ::hf::ParseTaskState;
using ::hf::TaskState;
using ::hf::TaskStateName;

using StringMap = std::map<std::string, std::string>;

// Where a row of a list that clients page through and follow (the history,
// the tasks: docs/API.md "Lists") stands in that list: ordered by `txn`,
// then `id`. A cursor is the position of the last row a client got.
//
// Why not the id alone: on PostgreSQL, concurrent transactions (of several
// server instances) take ids from a sequence as they insert but commit in
// any order, so a reader can see id 11 while id 10 is still in flight, and
// a cursor past 11 would never return 10. There `txn` is the id of the
// inserting transaction (64 bits, never wraps; 0 for rows stored before
// schema 11), and a page returns only rows of transactions that have
// finished before every transaction still running began: any row that
// commits later has a higher txn than every row already returned. On
// SQLite `txn` is always 0: one writer, so ids commit in order.
struct ListPosition {
  std::int64_t txn = 0;
  RowId id = 0;

  friend auto operator<=>(const ListPosition&, const ListPosition&) = default;
};

struct TaskRow {
  RowId id = 0;
  RowId tenant_id = 0;
  std::string name;
  std::string image;
  std::vector<std::string>
      command;  // argv; a shell string is {"/bin/sh", "-c", s}
  bool command_is_shell = false;  // `command` came in as one string
  std::string gpu_type = "nvidia";
  int gpu_required = 0;                    // > 0: whole GPUs
  std::optional<std::int64_t> memory_mib;  // slice memory
  std::optional<int> compute_percent;      // slice compute, 1..100
  bool preemptible = false;
  // How the hook shares the GPU's time (hook-enforced compute shares only).
  GpuComputeMode gpu_compute_mode = kDefaultGpuComputeMode;
  StringMap user_env;  // as the user sent it
  StringMap env;       // effective: user_env + the slice's variables
  StringMap labels;
  TaskState state = TaskState::kPending;
  std::string pending_reason;
  std::optional<RowId> slice_id;
  std::optional<RowId> node_id;
  std::vector<int> gpu_indices;
  std::optional<int> exit_code;
  std::string message;
  bool cancel_requested = false;
  std::int64_t version = 0;  // bumped by every UpdateTask (compare-and-set)
  Millis created_at = 0;
  Millis updated_at = 0;
  // Set by the store when it reads the row (ListPosition); never written.
  std::int64_t txn = 0;

  ListPosition position() const { return {txn, id}; }
};

// A slice's measured usage as its node last reported it (the hook's
// counters and what the agent measured), kept so that every server
// instance serves it, and after a restart.
struct SliceUsageRow {
  RowId slice_id = 0;
  Millis reported_at = 0;
  std::string usage;  // JSON object, written by the server
};

// How many stored usage rows the history keeps per slice (the newest):
// two hours at the leader's 30 s storing cadence, more rows when the usage
// moves faster. Enough for a chart of the recent past; a slice's whole
// life is in its operation log, not here.
inline constexpr int kSliceUsageHistoryRows = 240;

enum class SliceState { kAllocated, kReleasing, kReleased };
std::string_view SliceStateName(SliceState state);
std::optional<SliceState> ParseSliceState(std::string_view name);

struct SliceRow {
  RowId id = 0;                  // assigned by the ledger
  std::optional<RowId> task_id;  // none for an operator reservation
  RowId tenant_id = 0;
  RowId node_id = 0;
  bool whole = false;            // whole GPUs rather than a slice
  std::vector<int> gpu_indices;  // on node_id; one for a slice
  std::int64_t memory_mib = 0;   // accounted per slice (whole: sum of GPUs)
  int compute_percent = 0;       // accounted per GPU
  bool compute_defaulted = false;
  std::string qos_level;  // "gold", "silver", "bronze"; whole: "exclusive"
  std::vector<std::string> enforcement;  // e.g. {"mps", "hook"}
  SliceState state = SliceState::kAllocated;
  std::string origin;  // "scheduler", "admin", "compensation"
  std::string mig_device_id;
  Millis created_at = 0;
  std::optional<Millis> released_at;
  // A slice on a GPU in MIG mode: the partition the ledger charges it as
  // (profile, first memory slot); empty / -1 otherwise.
  std::string mig_profile;
  int mig_start = -1;
};

struct HistoryRow {
  RowId id = 0;  // assigned by the store, increasing
  Millis at = 0;
  std::string op;  // "allocate", "release", "restore", "compensate", ...
  std::optional<RowId> slice_id;
  std::optional<RowId> task_id;
  std::optional<RowId> tenant_id;
  std::optional<RowId> node_id;
  std::vector<int> gpu_indices;
  std::int64_t memory_mib = 0;
  int compute_percent = 0;
  std::string actor;   // "scheduler", "gc", "token:12", "agent:node-1", ...
  std::string reason;  // for people
  // Set by the store when it reads the row (ListPosition); never written.
  std::int64_t txn = 0;

  ListPosition position() const { return {txn, id}; }
};

// An admin's approval for two tenants outside one shared group to share GPUs
// (docs/CONTRACT.md section 7): with a reason and an expiry, revocable.
struct ApprovalRow {
  RowId id = 0;
  RowId tenant_a = 0;  // the lower tenant id of the pair
  RowId tenant_b = 0;
  std::string reason;
  std::string created_by;  // actor, as in HistoryRow ("token:12")
  Millis created_at = 0;
  Millis expires_at = 0;
  std::optional<Millis> revoked_at;

  // In force at `now`: not revoked and not yet expired.
  bool ActiveAt(Millis now) const { return !revoked_at && now < expires_at; }
};

// A POST carried out under an `Idempotency-Key` (docs/API.md, "Idempotent
// POSTs"): what the request was and, once it finished, the reply a repeat
// gets. Keys are scoped to the caller's token.
struct IdempotencyRow {
  RowId token_id = 0;       // the caller's token (no foreign key: tokens are
                            // never deleted, and the record is swept anyway)
  std::string key;          // the header's value, 1..255 visible ASCII
  std::string fingerprint;  // of the request's method, target and body
  int status = 0;           // the reply's HTTP status; 0: not finished yet
  std::string body;         // the reply's body (any bytes)
  // POST /api/v1/tasks: the task it created, recorded in the transaction
  // that inserted it (so a repeat finds it even when `body` was never
  // written).
  std::optional<RowId> task_id;
  Millis created_at = 0;
  Millis expires_at = 0;  // swept after this
};

enum class SliceRequestState { kPending, kClaimed, kDone, kFailed, kStuck };
std::string_view SliceRequestStateName(SliceRequestState state);
std::optional<SliceRequestState> ParseSliceRequestState(std::string_view name);

struct SliceRequestRow {
  RowId id = 0;
  RowId node_id = 0;
  RowId slice_id = 0;
  std::optional<RowId> task_id;
  std::string action;  // "create" or "destroy"
  int gpu_index = 0;
  std::string gpu_uuid;
  std::string profile;  // e.g. "1g.10gb"
  SliceRequestState state = SliceRequestState::kPending;
  std::string device_id;
  std::string error;
  Millis created_at = 0;
  Millis deadline_at = 0;  // past it, a pending/claimed row is stuck
  std::optional<Millis> claimed_at;
  std::optional<Millis> finished_at;
  // A create: the memory slot the partition must start at (where the
  // ledger charged it); -1: wherever the driver puts it.
  int mig_start = -1;
};

// --------------------------------------------------------------- filters
// Every list returns rows with id > after_id in ascending id order, at most
// `limit` (> 0) of them: every row the transaction sees, for the server's
// own scans.
//
// The history and the tasks are also paged for clients: with `after` set,
// a list returns, in ListPosition order, the rows past that position
// (after_id is then ignored), and only rows that no row committing later
// can precede. On PostgreSQL that holds back rows of transactions that
// committed while an older one is still running (for as long as it runs:
// milliseconds for the server's own); on SQLite nothing is held back.

struct TaskFilter {
  std::optional<TaskState> state;
  std::optional<RowId> tenant_id;
  std::optional<RowId> node_id;
  RowId after_id = 0;
  std::optional<ListPosition> after;  // a client's page (see above)
  int limit = 100;
};

struct SliceFilter {
  std::optional<RowId> tenant_id;
  std::optional<RowId> node_id;
  std::optional<int> gpu_index;     // matches any of the slice's GPUs
  std::optional<SliceState> state;  // none: every state
  bool live_only = false;           // allocated or releasing
  RowId after_id = 0;
  int limit = 100;
};

struct HistoryFilter {
  std::optional<RowId> tenant_id;
  std::optional<RowId> slice_id;
  std::optional<RowId> task_id;
  RowId after_id = 0;
  std::optional<ListPosition> after;  // a client's page (see above)
  int limit = 100;
};

struct SliceRequestFilter {
  std::optional<RowId> node_id;
  std::optional<SliceRequestState> state;
  RowId after_id = 0;
  int limit = 100;
};

// ------------------------------------------------------------ transaction

// One transaction. Methods return NotFound for a missing row, AlreadyExists
// for a duplicate unique key, Aborted when a compare-and-set loses, and
// Internal/Unavailable for database failures (with the database's message).
// In a `Read` transaction every mutating method fails with Internal.
class Txn {
 public:
  virtual ~Txn() = default;

  // Groups.
  virtual StatusOr<GroupRow> InsertGroup(const GroupRow& row) = 0;  // id set
  virtual StatusOr<GroupRow> GetGroup(RowId id) = 0;
  virtual StatusOr<GroupRow> FindGroup(std::string_view name) = 0;
  virtual StatusOr<std::vector<GroupRow>> ListGroups() = 0;
  // Deletes the group; its tenants' group_id becomes null.
  virtual Status DeleteGroup(RowId id) = 0;

  // Tenants.
  virtual StatusOr<TenantRow> InsertTenant(const TenantRow& row) = 0;
  virtual StatusOr<TenantRow> GetTenant(RowId id) = 0;
  virtual StatusOr<TenantRow> FindTenant(std::string_view name) = 0;
  virtual StatusOr<std::vector<TenantRow>> ListTenants() = 0;
  virtual Status SetTenantGroup(RowId tenant_id,
                                std::optional<RowId> group_id) = 0;

  // Tokens.
  virtual StatusOr<TokenRow> InsertToken(const TokenRow& row) = 0;
  virtual StatusOr<TokenRow> GetToken(RowId id) = 0;
  virtual StatusOr<TokenRow> FindTokenByHash(std::string_view hash) = 0;
  // tenant_id set: only that tenant's tokens.
  virtual StatusOr<std::vector<TokenRow>> ListTokens(
      std::optional<RowId> tenant_id) = 0;
  virtual Status RevokeToken(RowId id, Millis at) = 0;  // idempotent

  // Sharing approvals, ascending id.
  virtual StatusOr<ApprovalRow> InsertApproval(const ApprovalRow& row) = 0;
  virtual StatusOr<ApprovalRow> GetApproval(RowId id) = 0;
  virtual StatusOr<std::vector<ApprovalRow>> ListApprovals() = 0;
  virtual Status RevokeApproval(RowId id, Millis at) = 0;  // idempotent

  // Nodes and GPUs. Upserts key on the node name / (node_id, index) and
  // return the stored row with its id.
  virtual StatusOr<NodeRow> UpsertNode(const NodeRow& row) = 0;
  virtual StatusOr<NodeRow> GetNode(RowId id) = 0;
  virtual StatusOr<NodeRow> FindNode(std::string_view name) = 0;
  virtual StatusOr<std::vector<NodeRow>> ListNodes() = 0;
  virtual StatusOr<GpuRow> UpsertGpu(const GpuRow& row) = 0;
  // node_id set: only that node's GPUs; ordered by (node_id, index).
  virtual StatusOr<std::vector<GpuRow>> ListGpus(
      std::optional<RowId> node_id) = 0;

  // Tasks. UpdateTask writes every field of `row` if the stored version
  // equals row.version (else Aborted) and stores version + 1; returns the
  // stored row.
  virtual StatusOr<TaskRow> InsertTask(const TaskRow& row) = 0;
  // Tells the store's task feed (Store::WatchTasks) of task `id` when this
  // transaction commits. Only a process that does not schedule calls it
  // (a follower): the leader queues its own tasks itself, and notifying
  // costs PostgreSQL a lock at every commit. A no-op where there is no feed.
  virtual Status NotifyTaskCreated(RowId id) {
    (void)id;
    return Status::Ok();
  }
  virtual StatusOr<TaskRow> GetTask(RowId id) = 0;
  virtual StatusOr<std::vector<TaskRow>> ListTasks(const TaskFilter& f) = 0;
  virtual StatusOr<TaskRow> UpdateTask(const TaskRow& row) = 0;
  virtual StatusOr<RowId> MaxTaskId() = 0;  // 0 when there are none

  // Slices. InsertSlice keeps row.id (AlreadyExists if taken).
  virtual Status InsertSlice(const SliceRow& row) = 0;
  virtual StatusOr<SliceRow> GetSlice(RowId id) = 0;
  virtual StatusOr<std::vector<SliceRow>> ListSlices(const SliceFilter& f) = 0;
  virtual Status UpdateSlice(const SliceRow& row) = 0;  // NotFound if absent
  virtual StatusOr<RowId> MaxSliceId() = 0;             // 0 when none

  // The slice history log (append only).
  virtual StatusOr<RowId> AppendHistory(const HistoryRow& row) = 0;
  virtual StatusOr<std::vector<HistoryRow>> ListHistory(
      const HistoryFilter& f) = 0;

  // The MIG command channel (`agent_slice_requests`).
  virtual StatusOr<SliceRequestRow> InsertSliceRequest(
      const SliceRequestRow& row) = 0;
  virtual StatusOr<SliceRequestRow> GetSliceRequest(RowId id) = 0;
  virtual StatusOr<std::vector<SliceRequestRow>> ListSliceRequests(
      const SliceRequestFilter& f) = 0;
  virtual Status UpdateSliceRequest(const SliceRequestRow& row) = 0;

  // Task logs: the bytes of a task's stdout+stderr as its agent shipped
  // them, in order. AppendTaskLog adds `data` at `offset`, which must be the
  // current size (FailedPrecondition otherwise, naming the size).
  virtual StatusOr<std::int64_t> TaskLogSize(RowId task_id) = 0;
  virtual Status AppendTaskLog(RowId task_id, std::int64_t offset,
                               std::string_view data) = 0;
  // Up to `max_bytes` from `offset` (fewer at the end; "" past it).
  virtual StatusOr<std::string> ReadTaskLog(RowId task_id, std::int64_t offset,
                                            std::int64_t max_bytes) = 0;

  // Idempotency keys, one row per (token_id, key).
  // AlreadyExists when the pair is taken (whether or not it has expired).
  virtual Status InsertIdempotencyKey(const IdempotencyRow& row) = 0;
  virtual StatusOr<IdempotencyRow> GetIdempotencyKey(RowId token_id,
                                                     std::string_view key) = 0;
  // Writes every field but the pair and created_at; NotFound if absent.
  virtual Status UpdateIdempotencyKey(const IdempotencyRow& row) = 0;
  virtual Status DeleteIdempotencyKey(RowId token_id,
                                      std::string_view key) = 0;  // idempotent
  // Deletes up to `limit` (> 0) rows with expires_at <= now; returns how
  // many it deleted.
  virtual StatusOr<int> DeleteExpiredIdempotencyKeys(Millis now, int limit) = 0;

  // Per-slice usage: PutSliceUsage inserts or replaces the slice's row and
  // appends it to the slice's usage history (replacing a history row with
  // the same reported_at), which keeps at most kSliceUsageHistoryRows rows
  // per slice: in the same transaction, it drops all but this row and the
  // newest kSliceUsageHistoryRows - 1 others.
  // GetSliceUsage is nullopt when none was stored. Rows stay after the
  // slice is released.
  virtual Status PutSliceUsage(const SliceUsageRow& row) = 0;
  virtual StatusOr<std::optional<SliceUsageRow>> GetSliceUsage(
      RowId slice_id) = 0;
  // The slice's usage history with reported_at >= since, oldest first, at
  // most `limit` (> 0) rows: the oldest ones from `since` on.
  virtual StatusOr<std::vector<SliceUsageRow>> ListSliceUsageHistory(
      RowId slice_id, Millis since, int limit) = 0;

  // Small key/value settings (e.g. "admin_bootstrapped").
  virtual StatusOr<std::optional<std::string>> GetMeta(
      std::string_view key) = 0;
  virtual Status SetMeta(std::string_view key, std::string_view value) = 0;

  // Batches: the single-row calls above for many rows at once, with the
  // same effect as calling them one by one in order, and for a backend
  // whose every statement is a round trip to a server (PostgreSQL) one
  // statement per batch instead of one per row. The defaults here do call
  // the single-row methods one by one (SQLite, in process, gains nothing
  // from more). An empty batch does nothing.
  //
  // When a batch call fails, some of its rows may have been written
  // already: return the error from the Write function, so that the whole
  // transaction rolls back.

  // UpdateTasks: for each row, in order, what UpdateTask would return for
  // it: the stored row, or Aborted (a stale version) / NotFound for a row
  // whose claim is lost, which is then not written; the others are. Any
  // other failure fails the whole call.
  virtual StatusOr<std::vector<StatusOr<TaskRow>>> UpdateTasks(
      std::span<const TaskRow> rows);
  virtual Status InsertSlices(std::span<const SliceRow> rows);
  // The ids of the appended rows, in order (increasing).
  virtual StatusOr<std::vector<RowId>> AppendHistories(
      std::span<const HistoryRow> rows);
  // The stored rows (ids set), in order.
  virtual StatusOr<std::vector<SliceRequestRow>> InsertSliceRequests(
      std::span<const SliceRequestRow> rows);
};

// ------------------------------------------------------------------ store

struct StoreInfo {
  std::string backend;  // "sqlite", "postgres"
  int schema_version = 0;
};

// A running feed of the tasks committed by any process on the database
// (Store::WatchTasks). Destroying it stops the feed; no callback runs after
// the destructor returns.
class TaskFeed {
 public:
  virtual ~TaskFeed() = default;
};

class Store {
 public:
  virtual ~Store() = default;

  // Runs `fn` in a read-write transaction. If `fn` returns OK, its changes
  // are committed and durable (fsynced) before Write returns OK; if `fn`
  // fails, its changes are rolled back and its Status is returned. A commit
  // failure is returned as Unavailable/Internal and nothing of `fn` is kept.
  // `fn` may run on another thread than the caller's (group commit) and must
  // not call Write or Read itself. `fn` may also run more than once (a
  // backend reruns a transaction that lost a serialization conflict), so it
  // must set, not accumulate, what it hands out.
  virtual Status Write(const std::function<Status(Txn&)>& fn) = 0;

  // Runs `fn` against a consistent read-only snapshot. As with Write, `fn`
  // may run more than once (again on a new connection when the first broke).
  virtual Status Read(const std::function<Status(Txn&)>& fn) = 0;

  virtual StoreInfo info() const = 0;

  // Calls `on_created(id)`, on a thread of the feed's own, for each task
  // committed by any process on the database from now on, and
  // `on_created(0)` when some may have been missed (the feed started or
  // reconnected): the caller then reads what it needs afresh. Null when the
  // backend has no such feed (SQLite: one process owns the database, and
  // it knows what it creates).
  virtual std::unique_ptr<TaskFeed> WatchTasks(
      const std::function<void(RowId)>& on_created) {
    (void)on_created;
    return nullptr;
  }
};

struct StoreOptions {
  int read_connections = 4;  // connections for concurrent readers
  int max_batch = 256;       // group commit: most Write calls per commit
  // PostgreSQL: connections for concurrent writers. Their commits overlap,
  // so PostgreSQL flushes them to its WAL together (its group commit);
  // SERIALIZABLE isolation and the reruns keep them correct. SQLite has a
  // single writer and batches instead (max_batch).
  int write_connections = 8;
};

// Opens the store named by `url`: "sqlite:PATH" (created and migrated when
// new) or a PostgreSQL connection URI, "postgres://USER[:PASSWORD]@HOST
// [:PORT]/DBNAME" ("postgresql://" too; the database must exist). The
// schema is migrated to the newest version on open; a database from a newer
// version of HeteroFlow is refused (FailedPrecondition). A malformed URL is
// InvalidArgument with field "db"; a server that cannot be reached is
// Unavailable (naming host and port, never the password).
StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& url,
                                           const StoreOptions& options = {});

}  // namespace hf::store
