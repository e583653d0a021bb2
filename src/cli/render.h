// How hfctl shows the server's replies and errors to a person.
//
// Tables: one column set per resource (docs/CLI.md lists them); a missing,
// null or empty field shows as "-", so a column never goes blank and `awk`
// keeps counting columns. Details (`get`): every field the server sent, in its
// order, nested objects indented and arrays of objects as small tables.
// Errors: one line per problem, "hfctl: ..." on stderr, with a hint where the
// cause is usually on the caller's side (token, server address).
//
// JSON objects are kept in the server's field order (ordered_json), so
// `-o json` and the detail view show fields as the server wrote them.
//
// Thread-safety: pure functions writing to the stream they are given.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>

#include "cli/settings.h"

namespace hf::cli {

using Json = nlohmann::ordered_json;

// The resources that have a table layout.
enum class Resource {
  kTask,
  kSlice,
  kHistoryEntry,
  kNode,
  kTenant,
  kGroup,
  kToken,
  kSliceRequest,
  kApproval,
  kDefragPlan,
};

// The text of `object[key]` for a table cell: "-" when the key is missing,
// null, an empty string or an empty array; strings as they are; booleans as
// "yes"/"no"; arrays of scalars joined with ','; anything else as compact
// JSON. Control characters become spaces so a row stays one line.
std::string CellText(const Json& object, std::string_view key);

// Writes `items` (a JSON array of objects of `resource`) as an aligned table
// with a header row. Columns are separated by two spaces; no trailing spaces.
// Non-object items are shown with every cell "-".
void RenderTable(Resource resource, const Json& items, std::ostream& out);

// The warnings, one "warning: ...\n" line each, for the objects of `items`
// (a JSON array of `resource`) whose `enforcement_note` is a non-empty
// string: a slice or task whose agent reported a process using the GPU
// without the hook. Empty for other resources and when no note is set:
//   "warning: slice 4 (task 7) is not enforced by the hook: <note>"
//   "warning: task 7 (slice 4) is not enforced by the hook: <note>"
std::string EnforcementWarnings(Resource resource, const Json& items);

// Writes one object as "field: value" lines: scalars as in CellText, objects
// as indented "key: value" blocks, arrays of objects as indented tables whose
// columns are the union of their keys. A non-object is written as JSON.
void RenderDetail(const Json& object, std::ostream& out);

// The message for an HTTP error reply, one or more lines each starting
// "hfctl: " and ending in '\n':
//   "hfctl: 400 invalid_argument: <message> (field: <field>)"
// from the API's {"error", "message", "field"} body; a body that is not
// such JSON is shown as "<status> <reason phrase>: <first line of body>".
// 401 adds a hint on the token (where it came from, or that none is set);
// 403 a hint to check the token's role with `hfctl whoami`.
std::string FormatHttpError(int status, std::string_view body,
                            const Settings& settings);

// The message when no reply arrived, '\n'-terminated:
//   "hfctl: cannot reach the server at URL (reason); is hf-server running?
//    set --server or HF_SERVER"
// (one line) where `reason` is the transport's ("connection refused").
std::string FormatUnreachable(const Settings& settings,
                              std::string_view reason);

}  // namespace hf::cli
