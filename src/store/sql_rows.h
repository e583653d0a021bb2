// What the SQL backends (sqlite_store.cc, postgres_store.cc) share: one
// column list per table, the decoder that reads a row in that order and the
// binder that writes one, the JSON encoding of list and map columns, and the
// guard that turns an exception from a transaction function into a Status.
// The schema is the same in both databases (only the column types differ),
// so a row maps to the same columns in the same order in each.
//
// Decoders take a row reader `s` with Int(col), Int32(col), Bool(col),
// Text(col), OptInt(col), OptInt32(col) and OptText(col); binders take a
// parameter list with BindAll(values...) and bind in column-list order.
//
// Internal to src/store: include only from a backend's .cc file.
//
// Thread-safety: stateless functions and constants.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/gpu_compute_mode.h"
#include "common/status.h"
#include "store/store.h"

namespace hf::store::sql_rows {

using Json = nlohmann::json;

inline std::string Quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  out += s;
  out += '"';
  return out;
}

// Runs `fn`, turning an exception into Internal: a throwing function must not
// take the writer thread (or a reader's transaction) down with it.
// The names of a column list, in order ("a, b" -> {"a", "b"}).
inline std::vector<std::string_view> ColumnNames(std::string_view columns) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start < columns.size()) {
    std::size_t end = columns.find(',', start);
    if (end == std::string_view::npos) end = columns.size();
    std::string_view name = columns.substr(start, end - start);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    out.push_back(name);
    start = end + 1;
  }
  return out;
}

// Bytes as a BYTEA literal in hex format ("\x0aff...").
inline std::string HexBytea(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text = "\\x";
  text.reserve(2 + 2 * bytes.size());
  for (const char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    text += kHex[byte >> 4];
    text += kHex[byte & 0xf];
  }
  return text;
}

inline Status RunGuarded(const std::function<Status(Txn&)>& fn, Txn& txn) {
  try {
    return fn(txn);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("store function threw: ") + e.what());
  } catch (...) {
    return Status::Internal("store function threw a non-exception");
  }
}

// ------------------------------------------------------------------ JSON

// Encodes a value as compact JSON. Fails (Internal) on a string that is not
// valid UTF-8 rather than altering it.
template <typename T>
StatusOr<std::string> ToJson(const T& value, std::string_view what) {
  try {
    return Json(value).dump();
  } catch (const std::exception& e) {
    return Status::Internal("encoding " + std::string(what) + ": " + e.what());
  }
}

// Decodes a JSON column; Internal names the column when it is corrupt.
template <typename T>
Status FromJson(const std::string& text, T* out, std::string_view what) {
  try {
    *out = Json::parse(text).get<T>();
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Internal("decoding " + std::string(what) + ": " + e.what());
  }
}

template <typename Enum>
Status ParseEnum(std::optional<Enum> parsed, const std::string& text, Enum* out,
                 std::string_view what) {
  if (!parsed) {
    return Status::Internal("unknown " + std::string(what) + " " +
                            Quoted(text) + " in the database");
  }
  *out = *parsed;
  return Status::Ok();
}

// ------------------------------------------------------------ row codecs
// Each table has one column list, used by every SELECT of it, and one
// decoder that reads a row in that order.

inline constexpr std::string_view kGroupColumns = "id, name, created_at";
inline constexpr auto DecodeGroup = [](const auto& s) -> StatusOr<GroupRow> {
  GroupRow r;
  r.id = s.Int(0);
  r.name = s.Text(1);
  r.created_at = s.Int(2);
  return r;
};

inline constexpr std::string_view kTenantColumns =
    "id, name, group_id, created_at";
inline constexpr auto DecodeTenant = [](const auto& s) -> StatusOr<TenantRow> {
  TenantRow r;
  r.id = s.Int(0);
  r.name = s.Text(1);
  r.group_id = s.OptInt(2);
  r.created_at = s.Int(3);
  return r;
};

inline constexpr std::string_view kTokenColumns =
    "id, hash, role, tenant_id, description, created_at, revoked_at, "
    "node_name";
inline constexpr auto DecodeToken = [](const auto& s) -> StatusOr<TokenRow> {
  TokenRow r;
  r.id = s.Int(0);
  r.hash = s.Text(1);
  const std::string role = s.Text(2);
  HF_RETURN_IF_ERROR(ParseEnum(ParseRole(role), role, &r.role, "token role"));
  r.tenant_id = s.OptInt(3);
  r.description = s.Text(4);
  r.created_at = s.Int(5);
  r.revoked_at = s.OptInt(6);
  r.node = s.OptText(7);
  return r;
};

inline constexpr std::string_view kApprovalColumns =
    "id, tenant_a, tenant_b, reason, created_by, created_at, expires_at, "
    "revoked_at";
inline constexpr auto DecodeApproval =
    [](const auto& s) -> StatusOr<ApprovalRow> {
  ApprovalRow r;
  r.id = s.Int(0);
  r.tenant_a = s.Int(1);
  r.tenant_b = s.Int(2);
  r.reason = s.Text(3);
  r.created_by = s.Text(4);
  r.created_at = s.Int(5);
  r.expires_at = s.Int(6);
  r.revoked_at = s.OptInt(7);
  return r;
};

inline constexpr std::string_view kIdempotencyColumns =
    "token_id, key, fingerprint, status, body, task_id, created_at, "
    "expires_at";
inline constexpr auto DecodeIdempotency =
    [](const auto& s) -> StatusOr<IdempotencyRow> {
  IdempotencyRow r;
  r.token_id = s.Int(0);
  r.key = s.Text(1);
  r.fingerprint = s.Text(2);
  r.status = s.Int32(3);
  r.body = s.Text(4);
  r.task_id = s.OptInt(5);
  r.created_at = s.Int(6);
  r.expires_at = s.Int(7);
  return r;
};

inline constexpr std::string_view kNodeColumns =
    "id, name, containerized, cpu_milli, host_memory_mib, agent_version, "
    "registered_at, last_heartbeat_at, report_epoch, report_seq, runtime";
inline constexpr auto DecodeNode = [](const auto& s) -> StatusOr<NodeRow> {
  NodeRow r;
  r.id = s.Int(0);
  r.name = s.Text(1);
  r.containerized = s.Bool(2);
  r.cpu_milli = s.Int(3);
  r.host_memory_mib = s.Int(4);
  r.agent_version = s.Text(5);
  r.registered_at = s.Int(6);
  r.last_heartbeat_at = s.Int(7);
  r.report_epoch = s.Int(8);
  r.report_seq = s.Int(9);
  r.runtime = s.Text(10);
  return r;
};

inline constexpr std::string_view kGpuColumns =
    "id, node_id, idx, uuid, vendor, model, memory_mib, cc_major, cc_minor, "
    "mig_capable, mps_capable, lost, updated_at";
inline constexpr auto DecodeGpu = [](const auto& s) -> StatusOr<GpuRow> {
  GpuRow r;
  r.id = s.Int(0);
  r.node_id = s.Int(1);
  r.index = s.Int32(2);
  r.uuid = s.Text(3);
  r.vendor = s.Text(4);
  r.model = s.Text(5);
  r.memory_mib = s.Int(6);
  r.cc_major = s.Int32(7);
  r.cc_minor = s.Int32(8);
  r.mig_capable = s.Bool(9);
  r.mps_capable = s.Bool(10);
  r.lost = s.Bool(11);
  r.updated_at = s.Int(12);
  return r;
};

// The columns BindTaskFields binds, in order: all but id, version and the
// times, which the INSERT and the compare-and-set UPDATE treat differently.
inline constexpr std::string_view kTaskFieldColumns =
    "tenant_id, name, image, command, command_is_shell, gpu_type, "
    "gpu_required, memory_mib, compute_percent, preemptible, user_env, env, "
    "labels, state, pending_reason, slice_id, node_id, gpu_indices, "
    "exit_code, message, cancel_requested, gpu_compute_mode";
inline constexpr int kTaskFieldCount = 22;

inline constexpr auto DecodeTask = [](const auto& s) -> StatusOr<TaskRow> {
  TaskRow r;
  r.id = s.Int(0);
  const std::string what = "task " + std::to_string(r.id);
  r.tenant_id = s.Int(1);
  r.name = s.Text(2);
  r.image = s.Text(3);
  HF_RETURN_IF_ERROR(FromJson(s.Text(4), &r.command, what + " command"));
  r.command_is_shell = s.Bool(5);
  r.gpu_type = s.Text(6);
  r.gpu_required = s.Int32(7);
  r.memory_mib = s.OptInt(8);
  r.compute_percent = s.OptInt32(9);
  r.preemptible = s.Bool(10);
  HF_RETURN_IF_ERROR(FromJson(s.Text(11), &r.user_env, what + " user_env"));
  HF_RETURN_IF_ERROR(FromJson(s.Text(12), &r.env, what + " env"));
  HF_RETURN_IF_ERROR(FromJson(s.Text(13), &r.labels, what + " labels"));
  const std::string state = s.Text(14);
  HF_RETURN_IF_ERROR(
      ParseEnum(ParseTaskState(state), state, &r.state, what + " state"));
  r.pending_reason = s.Text(15);
  r.slice_id = s.OptInt(16);
  r.node_id = s.OptInt(17);
  HF_RETURN_IF_ERROR(
      FromJson(s.Text(18), &r.gpu_indices, what + " gpu_indices"));
  r.exit_code = s.OptInt32(19);
  r.message = s.Text(20);
  r.cancel_requested = s.Bool(21);
  const std::string mode = s.Text(22);
  HF_RETURN_IF_ERROR(ParseEnum(ParseGpuComputeMode(mode), mode,
                               &r.gpu_compute_mode,
                               what + " gpu_compute_mode"));
  r.version = s.Int(23);
  r.created_at = s.Int(24);
  r.updated_at = s.Int(25);
  return r;
};

// Binds every column of kTaskFieldColumns.
template <typename Binder>
Status BindTaskFields(Binder& s, const TaskRow& r) {
  StatusOr<std::string> command = ToJson(r.command, "task command");
  StatusOr<std::string> user_env = ToJson(r.user_env, "task user_env");
  StatusOr<std::string> env = ToJson(r.env, "task env");
  StatusOr<std::string> labels = ToJson(r.labels, "task labels");
  for (const auto* encoded : {&command, &user_env, &env, &labels}) {
    if (!encoded->ok()) return encoded->status();
  }
  s.BindAll(r.tenant_id, r.name, r.image, *command, r.command_is_shell,
            r.gpu_type, r.gpu_required, r.memory_mib, r.compute_percent,
            r.preemptible, *user_env, *env, *labels, TaskStateName(r.state),
            r.pending_reason, r.slice_id, r.node_id, Json(r.gpu_indices).dump(),
            r.exit_code, r.message, r.cancel_requested,
            GpuComputeModeName(r.gpu_compute_mode));
  return Status::Ok();
}

// The number of columns in a column list.
constexpr int ColumnCount(std::string_view columns) {
  int count = 1;
  for (char c : columns) count += c == ',';
  return count;
}

inline constexpr std::string_view kSliceColumns =
    "id, task_id, tenant_id, node_id, whole, gpu_indices, memory_mib, "
    "compute_percent, compute_defaulted, qos_level, enforcement, state, "
    "origin, mig_device_id, created_at, released_at, mig_profile, mig_start";

inline constexpr auto DecodeSlice = [](const auto& s) -> StatusOr<SliceRow> {
  SliceRow r;
  r.id = s.Int(0);
  const std::string what = "slice " + std::to_string(r.id);
  r.task_id = s.OptInt(1);
  r.tenant_id = s.Int(2);
  r.node_id = s.Int(3);
  r.whole = s.Bool(4);
  HF_RETURN_IF_ERROR(
      FromJson(s.Text(5), &r.gpu_indices, what + " gpu_indices"));
  r.memory_mib = s.Int(6);
  r.compute_percent = s.Int32(7);
  r.compute_defaulted = s.Bool(8);
  r.qos_level = s.Text(9);
  HF_RETURN_IF_ERROR(
      FromJson(s.Text(10), &r.enforcement, what + " enforcement"));
  const std::string state = s.Text(11);
  HF_RETURN_IF_ERROR(
      ParseEnum(ParseSliceState(state), state, &r.state, what + " state"));
  r.origin = s.Text(12);
  r.mig_device_id = s.Text(13);
  r.created_at = s.Int(14);
  r.released_at = s.OptInt(15);
  r.mig_profile = s.Text(16);
  r.mig_start = s.Int32(17);
  return r;
};

// Binds every column of kSliceColumns but id.
template <typename Binder>
Status BindSliceData(Binder& s, const SliceRow& r) {
  StatusOr<std::string> enforcement =
      ToJson(r.enforcement, "slice enforcement");
  if (!enforcement.ok()) return enforcement.status();
  s.BindAll(r.task_id, r.tenant_id, r.node_id, r.whole,
            Json(r.gpu_indices).dump(), r.memory_mib, r.compute_percent,
            r.compute_defaulted, r.qos_level, *enforcement,
            SliceStateName(r.state), r.origin, r.mig_device_id, r.created_at,
            r.released_at, r.mig_profile, r.mig_start);
  return Status::Ok();
}

inline constexpr std::string_view kHistoryColumns =
    "id, at, op, slice_id, task_id, tenant_id, node_id, gpu_indices, "
    "memory_mib, compute_percent, actor, reason";

inline constexpr auto DecodeHistory =
    [](const auto& s) -> StatusOr<HistoryRow> {
  HistoryRow r;
  r.id = s.Int(0);
  r.at = s.Int(1);
  r.op = s.Text(2);
  r.slice_id = s.OptInt(3);
  r.task_id = s.OptInt(4);
  r.tenant_id = s.OptInt(5);
  r.node_id = s.OptInt(6);
  HF_RETURN_IF_ERROR(
      FromJson(s.Text(7), &r.gpu_indices,
               "history " + std::to_string(r.id) + " gpu_indices"));
  r.memory_mib = s.Int(8);
  r.compute_percent = s.Int32(9);
  r.actor = s.Text(10);
  r.reason = s.Text(11);
  return r;
};

inline constexpr std::string_view kSliceRequestColumns =
    "id, node_id, slice_id, task_id, action, gpu_index, gpu_uuid, profile, "
    "state, device_id, error, created_at, deadline_at, claimed_at, "
    "finished_at, mig_start";

inline constexpr auto DecodeSliceRequest =
    [](const auto& s) -> StatusOr<SliceRequestRow> {
  SliceRequestRow r;
  r.id = s.Int(0);
  r.node_id = s.Int(1);
  r.slice_id = s.Int(2);
  r.task_id = s.OptInt(3);
  r.action = s.Text(4);
  r.gpu_index = s.Int32(5);
  r.gpu_uuid = s.Text(6);
  r.profile = s.Text(7);
  const std::string state = s.Text(8);
  HF_RETURN_IF_ERROR(
      ParseEnum(ParseSliceRequestState(state), state, &r.state,
                "slice request " + std::to_string(r.id) + " state"));
  r.device_id = s.Text(9);
  r.error = s.Text(10);
  r.created_at = s.Int(11);
  r.deadline_at = s.Int(12);
  r.claimed_at = s.OptInt(13);
  r.finished_at = s.OptInt(14);
  r.mig_start = s.Int32(15);
  return r;
};

// Binds every column of kSliceRequestColumns but id.
template <typename Binder>
void BindSliceRequestData(Binder& s, const SliceRequestRow& r) {
  s.BindAll(r.node_id, r.slice_id, r.task_id, r.action, r.gpu_index, r.gpu_uuid,
            r.profile, SliceRequestStateName(r.state), r.device_id, r.error,
            r.created_at, r.deadline_at, r.claimed_at, r.finished_at,
            r.mig_start);
}

// The columns of a list, without the leading "id, ".
constexpr std::string_view WithoutId(std::string_view columns) {
  return columns.substr(4);
}

}  // namespace hf::store::sql_rows
