// JSON in and out of the REST API (docs/API.md): parsing request bodies into
// the control plane's input structs, strictly (unknown top-level fields,
// wrong types and out-of-range values are errors naming the field), and
// rendering rows into the documented JSON shapes.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/strict_json.h"
#include "server/control_plane.h"

namespace hf::api {

using nlohmann::json;

struct Limits {
  std::size_t max_depth = 16;
  std::size_t max_string = 4096;
  std::size_t max_command = 65536;
  std::size_t max_map_entries = 256;
};

// Parses a request body with ParseStrictJson (common/strict_json.h: no
// duplicate keys, numbers in range, no NUL, ...; errors name the field by
// its path, "gpus[0].memory_mb", or "body"), nesting at most max_depth; a
// non-object top level is InvalidArgument too.
StatusOr<json> ParseBody(std::string_view body, const Limits& limits = {});

// InvalidArgument naming `field` when `text` has a control character
// (HasControlCharacter): for names and identifiers (free text such as a
// reason may hold newlines).
Status CheckIdentifier(std::string_view text, const std::string& field);

// Converts a ratio in (0, 1] to a percent, rounded half up; InvalidArgument
// (naming `field`) when out of range or rounding to 0.
StatusOr<int> RatioToPercentField(const json& value, const std::string& field);

StatusOr<server::TaskCreate> ParseTaskCreate(const json& body,
                                             const Limits& limits = {});
StatusOr<server::SliceCreate> ParseSliceCreate(const json& body);
// POST /api/v1/defrag/plans: every field optional.
StatusOr<server::DefragPlanCreate> ParseDefragPlanCreate(const json& body);
// PATCH /api/v1/slices/{id}: {"memory_mb", "reason"}.
StatusOr<server::SliceResizeRequest> ParseSliceResize(const json& body);
StatusOr<server::NodeReport> ParseNodeReport(const json& body,
                                             bool name_required);
StatusOr<std::vector<server::RunningTask>> ParseRunningTasks(const json& body);
StatusOr<std::vector<server::TaskStateReport>> ParseTaskStates(
    const json& body);
StatusOr<server::MigResult> ParseMigResult(const json& body);
StatusOr<server::ApprovalCreate> ParseApprovalCreate(const json& body);
// Standard base64 (RFC 4648, padded) to bytes; InvalidArgument naming
// `field` for anything else.
StatusOr<std::string> DecodeBase64(std::string_view text,
                                   const std::string& field);
// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD, so it can go
// into a JSON string.
std::string ValidUtf8(std::string_view bytes);
// An RFC 3339 time ("2026-12-01T00:00:00Z", fractions and +hh:mm offsets
// accepted) as epoch ms; InvalidArgument naming `field` otherwise.
StatusOr<store::Millis> ParseTime(std::string_view text,
                                  const std::string& field);

// Rejects any top-level field of `body` outside `allowed`.
Status CheckFields(const json& body,
                   std::initializer_list<std::string_view> allowed);

std::string FormatTime(store::Millis millis);  // RFC 3339, UTC, ms

// Renderers; names are resolved through the control plane's caches.
json TaskJson(server::ControlPlane& cp, const store::TaskRow& task);
json SliceJson(server::ControlPlane& cp, const store::SliceRow& slice);
json HistoryJson(server::ControlPlane& cp, const store::HistoryRow& h);
// GET /api/v1/slices/{id}/usage: {"slice_id", "items": [...]}, oldest first.
json SliceUsageHistoryJson(store::RowId slice_id,
                           const std::vector<server::HookUsage>& usage);
json SliceRequestJson(server::ControlPlane& cp,
                      const store::SliceRequestRow& row);
json TenantJson(server::ControlPlane& cp, const store::TenantRow& tenant);
json TokenJson(server::ControlPlane& cp, const store::TokenRow& token);
json ApprovalJson(server::ControlPlane& cp, const store::ApprovalRow& row,
                  store::Millis now);
json NodeJson(const server::NodeView& node, store::Millis now);
json TaskLogJson(store::RowId task_id, const server::TaskLog& log);
json StatsJson(const server::SliceStats& stats);

}  // namespace hf::api
