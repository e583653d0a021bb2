// The backend-independent half of the store: the names of the enumerations
// as they are stored and shown, `OpenStore`, which picks a backend from
// the database URL (the server's --db flag), and the batch calls of Txn
// done row by row (for a backend without its own).
//
// Thread-safety: every function here is stateless and safe to call from any
// thread.
#include "store/store.h"

#include <array>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace hf::store {
namespace {

// One table per enumeration: the single place a name is spelled, used by both
// directions of the conversion.
template <typename Enum>
struct NamedValue {
  Enum value;
  std::string_view name;
};

constexpr std::array<NamedValue<Role>, 5> kRoleNames = {{
    {Role::kAdmin, "admin"},
    {Role::kTenantAdmin, "tenant-admin"},
    {Role::kUser, "user"},
    {Role::kNode, "node"},
    {Role::kMetrics, "metrics"},
}};

constexpr std::array<NamedValue<SliceState>, 3> kSliceStateNames = {{
    {SliceState::kAllocated, "allocated"},
    {SliceState::kReleasing, "releasing"},
    {SliceState::kReleased, "released"},
}};

constexpr std::array<NamedValue<SliceRequestState>, 5> kSliceRequestStateNames =
    {{
        {SliceRequestState::kPending, "pending"},
        {SliceRequestState::kClaimed, "claimed"},
        {SliceRequestState::kDone, "done"},
        {SliceRequestState::kFailed, "failed"},
        {SliceRequestState::kStuck, "stuck"},
    }};

template <typename Enum, std::size_t N>
std::string_view NameOf(const std::array<NamedValue<Enum>, N>& table,
                        Enum value) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

template <typename Enum, std::size_t N>
std::optional<Enum> ValueOf(const std::array<NamedValue<Enum>, N>& table,
                            std::string_view name) {
  for (const auto& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

constexpr std::string_view kSqlitePrefix = "sqlite:";

Status BadUrl(std::string message) {
  return Status::InvalidArgument(std::move(message), "db");
}

}  // namespace

std::string_view RoleName(Role role) { return NameOf(kRoleNames, role); }
std::optional<Role> ParseRole(std::string_view name) {
  return ValueOf(kRoleNames, name);
}

std::string_view SliceStateName(SliceState state) {
  return NameOf(kSliceStateNames, state);
}
std::optional<SliceState> ParseSliceState(std::string_view name) {
  return ValueOf(kSliceStateNames, name);
}

std::string_view SliceRequestStateName(SliceRequestState state) {
  return NameOf(kSliceRequestStateNames, state);
}
std::optional<SliceRequestState> ParseSliceRequestState(std::string_view name) {
  return ValueOf(kSliceRequestStateNames, name);
}

StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& url,
                                           const StoreOptions& options) {
  const std::string_view view(url);
  if (view.starts_with("postgres://") || view.starts_with("postgresql://")) {
    // The URL may hold a password: it is not repeated in messages.
    StatusOr<std::unique_ptr<PostgresStore>> postgres =
        PostgresStore::Open(url, options);
    if (!postgres.ok()) return postgres.status();
    return std::unique_ptr<Store>(std::move(postgres).value());
  }
  if (!view.starts_with(kSqlitePrefix)) {
    return BadUrl(
        "unknown database URL \"" + url +
        "\": expected sqlite:PATH (e.g. sqlite:/var/lib/heteroflow/hf.db) or "
        "postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME");
  }
  const std::string path(view.substr(kSqlitePrefix.size()));
  if (path.empty()) {
    return BadUrl("database URL \"" + url +
                  "\" names no file: use sqlite:PATH");
  }
  if (path.starts_with("//")) {
    return BadUrl("database URL \"" + url +
                  "\": write sqlite:PATH (sqlite:/abs/path or "
                  "sqlite:relative/path), not sqlite://");
  }
  if (path == ":memory:" || path.starts_with("file:")) {
    return BadUrl("database URL \"" + url +
                  "\": in-memory and URI databases are not supported; the "
                  "store must be a file so that it survives restarts");
  }

  const std::filesystem::path parent =
      std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code error;
    std::filesystem::create_directories(parent, error);
    if (error) {
      return Status::Unavailable("creating the directory \"" + parent.string() +
                                 "\" of the database: " + error.message());
    }
  }

  StatusOr<std::unique_ptr<SqliteStore>> sqlite =
      SqliteStore::Open(path, options);
  if (!sqlite.ok()) return sqlite.status();
  return std::unique_ptr<Store>(std::move(sqlite).value());
}

// ---------------------------------------------------------------- batches

StatusOr<std::vector<StatusOr<TaskRow>>> Txn::UpdateTasks(
    std::span<const TaskRow> rows) {
  std::vector<StatusOr<TaskRow>> out;
  out.reserve(rows.size());
  for (const TaskRow& row : rows) {
    StatusOr<TaskRow> stored = UpdateTask(row);
    if (!stored.ok() && stored.status().code() != StatusCode::kAborted &&
        stored.status().code() != StatusCode::kNotFound) {
      return stored.status();
    }
    out.push_back(std::move(stored));
  }
  return out;
}

Status Txn::InsertSlices(std::span<const SliceRow> rows) {
  for (const SliceRow& row : rows) HF_RETURN_IF_ERROR(InsertSlice(row));
  return Status::Ok();
}

StatusOr<std::vector<RowId>> Txn::AppendHistories(
    std::span<const HistoryRow> rows) {
  std::vector<RowId> ids;
  ids.reserve(rows.size());
  for (const HistoryRow& row : rows) {
    StatusOr<RowId> id = AppendHistory(row);
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  return ids;
}

StatusOr<std::vector<SliceRequestRow>> Txn::InsertSliceRequests(
    std::span<const SliceRequestRow> rows) {
  std::vector<SliceRequestRow> out;
  out.reserve(rows.size());
  for (const SliceRequestRow& row : rows) {
    StatusOr<SliceRequestRow> stored = InsertSliceRequest(row);
    if (!stored.ok()) return stored.status();
    out.push_back(*std::move(stored));
  }
  return out;
}

}  // namespace hf::store
