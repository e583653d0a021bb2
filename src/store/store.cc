// The backend-independent half of the store: the names of the enumerations
// as they are stored and shown, and `OpenStore`, which picks a backend from
// the database URL (the server's --db flag).
//
// Thread-safety: every function here is stateless and safe to call from any
// thread.
#include "store/store.h"

#include <array>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

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

}  // namespace hf::store
