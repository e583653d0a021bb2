#include "cli/render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

namespace hf::cli {
namespace {

constexpr std::string_view kNone = "-";

// Replaces control characters (including ESC, so a reply cannot drive the
// terminal) with spaces.
std::string Printable(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7F) c = ' ';
  }
  return out;
}

// The width of `text` on a terminal, counting UTF-8 code points.
size_t DisplayWidth(std::string_view text) {
  return static_cast<size_t>(std::count_if(
      text.begin(), text.end(),
      [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string ScalarText(const Json& value) {
  if (value.is_null()) return std::string(kNone);
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    return text.empty() ? std::string(kNone) : Printable(text);
  }
  if (value.is_boolean()) return value.get<bool>() ? "yes" : "no";
  return Printable(value.dump());
}

std::string ValueText(const Json& value) {
  if (value.is_array()) {
    if (value.empty()) return std::string(kNone);
    const bool all_scalars = std::none_of(
        value.begin(), value.end(),
        [](const Json& element) { return element.is_structured(); });
    if (!all_scalars) return Printable(value.dump());
    std::string joined;
    for (const Json& element : value) {
      if (!joined.empty()) joined += ',';
      joined += ScalarText(element);
    }
    return joined;
  }
  if (value.is_object()) {
    return value.empty() ? std::string(kNone) : Printable(value.dump());
  }
  return ScalarText(value);
}

// `CellText` with `suffix` appended unless the cell is empty ("4096" + "MB").
std::string WithSuffix(const Json& object, std::string_view key,
                       std::string_view suffix) {
  std::string text = CellText(object, key);
  if (text != kNone) text += suffix;
  return text;
}

struct Column {
  std::string_view header;
  std::function<std::string(const Json&)> cell;
};

Column Field(std::string_view header, std::string_view key) {
  return {header, [key](const Json& o) { return CellText(o, key); }};
}

Column Suffixed(std::string_view header, std::string_view key,
                std::string_view suffix) {
  return {header,
          [key, suffix](const Json& o) { return WithSuffix(o, key, suffix); }};
}

// "node-a:0,1" for a placed task: the node and the GPUs it runs on.
std::string NodeAndGpus(const Json& task) {
  std::string node = CellText(task, "node_id");
  const std::string gpus = CellText(task, "gpu_indices");
  if (node != kNone && gpus != kNone) node += ":" + gpus;
  return node;
}

// A slice's GPU(s): the index list of a multi-GPU slice, else gpu_index.
std::string SliceGpus(const Json& slice) {
  const std::string indices = CellText(slice, "gpu_indices");
  return indices != kNone ? indices : CellText(slice, "gpu_index");
}

// Whole GPUs a task asked for; "-" for a slice or CPU-only task.
std::string WholeGpus(const Json& task) {
  const auto it = task.find("gpu_required");
  if (it != task.end() && it->is_number() && it->get<double>() > 0) {
    return it->dump();
  }
  return std::string(kNone);
}

// A plan's room before/after: "9216MB frag 0.40".
std::function<std::string(const Json&)> PlanRoom(const std::string& key) {
  return [key](const Json& plan) {
    const auto it = plan.find(key);
    if (it == plan.end() || !it->is_object()) return std::string(kNone);
    const Json& room = *it;
    if (!room.contains("largest_slice_mb") || !room.contains("fragmentation")) {
      return std::string(kNone);
    }
    char frag[32];
    std::snprintf(frag, sizeof frag, "%.2f",
                  room["fragmentation"].is_number()
                      ? room["fragmentation"].get<double>()
                      : 0.0);
    return CellText(room, "largest_slice_mb") + "MB frag " + frag;
  };
}

// "2/3": moves done out of all.
std::string PlanMoves(const Json& plan) {
  const auto it = plan.find("moves");
  if (it == plan.end() || !it->is_array()) return std::string(kNone);
  const auto done = std::count_if(it->begin(), it->end(), [](const Json& m) {
    return m.is_object() && m.value("state", "") == "done";
  });
  return std::to_string(done) + "/" + std::to_string(it->size());
}

// "4" or "4 (1 lost)": a node's GPUs and how many are not healthy.
std::string NodeGpus(const Json& node) {
  const auto it = node.find("gpus");
  if (it == node.end() || !it->is_array()) return std::string(kNone);
  const auto unhealthy =
      std::count_if(it->begin(), it->end(), [](const Json& gpu) {
        return gpu.is_object() && gpu.contains("health") &&
               gpu["health"] != "ok";
      });
  std::string text = std::to_string(it->size());
  if (unhealthy > 0) text += " (" + std::to_string(unhealthy) + " lost)";
  return text;
}

std::string HeartbeatAge(const Json& node) {
  const auto it = node.find("heartbeat_age_s");
  if (it == node.end() || !it->is_number()) return std::string(kNone);
  return std::to_string(std::llround(it->get<double>())) + "s";
}

// The MIG command channel's "stuck" means nobody knows what the GPU holds;
// the table says so in words an operator will not skim past.
std::string SliceRequestState(const Json& row) {
  std::string state = CellText(row, "state");
  if (state == "stuck") state += " (HARDWARE STATE UNKNOWN)";
  return state;
}

// The agent's note that the hook does not enforce a slice or task; empty
// when there is none (null, missing, not a string).
std::string EnforcementNote(const Json& row) {
  if (!row.is_object()) return {};
  const auto it = row.find("enforcement_note");
  if (it == row.end() || !it->is_string()) return {};
  return Printable(it->get<std::string>());
}

// Appended to a row's cell when the hook is bypassed: the note itself is too
// long for a table, so it follows the table on stderr (EnforcementWarnings).
constexpr std::string_view kHookBypassed = " (HOOK BYPASSED)";

// A task's status; a cancel its node has yet to carry out shows beside it
// (the task holds its slice until the node confirms), and so does a process
// of the task that uses the GPU without the hook.
std::string TaskStatus(const Json& row) {
  std::string status = CellText(row, "status");
  const bool terminal =
      status == "succeeded" || status == "failed" || status == "cancelled";
  if (!terminal && row.is_object() && row.value("cancel_requested", false)) {
    status += " (cancelling)";
  }
  if (!EnforcementNote(row).empty()) status += kHookBypassed;
  return status;
}

// A slice's enforcement; a grant of whole GPUs (qos_level "exclusive")
// needs none, which is not the same as a slice nothing enforces ("-"). A
// slice whose hook a process bypasses says so: its list has lost "hook",
// and "-" alone would read as "nothing was ever meant to enforce it".
std::string SliceEnforcement(const Json& row) {
  std::string cell = CellText(row, "enforcement");
  if (cell == "-" && CellText(row, "kind") == "whole") return "none-needed";
  if (!EnforcementNote(row).empty()) cell += kHookBypassed;
  return cell;
}

std::vector<Column> ColumnsFor(Resource resource) {
  switch (resource) {
    case Resource::kTask:
      return {Field("ID", "id"),
              Field("NAME", "name"),
              Field("TENANT", "tenant"),
              {"STATUS", TaskStatus},
              {"GPU(S)", WholeGpus},
              Suffixed("MEMORY", "gpu_memory_mb", "MB"),
              Suffixed("COMPUTE", "gpu_compute_percent", "%"),
              Field("QOS", "qos_level"),
              {"NODE", NodeAndGpus},
              Field("PENDING_REASON", "pending_reason")};
    case Resource::kSlice:
      return {Field("ID", "id"),
              Field("TASK", "task_id"),
              Field("TENANT", "tenant"),
              Field("NODE", "node_id"),
              {"GPU", SliceGpus},
              Field("KIND", "kind"),
              Suffixed("MEMORY", "memory_mb", "MB"),
              Suffixed("COMPUTE", "compute_percent", "%"),
              Field("QOS", "qos_level"),
              {"ENFORCEMENT", SliceEnforcement},
              Field("STATE", "state"),
              Field("ORIGIN", "origin"),
              Field("CREATED", "created_at")};
    case Resource::kHistoryEntry:
      return {Field("ID", "id"),
              Field("AT", "at"),
              Field("OP", "op"),
              Field("SLICE", "slice_id"),
              Field("TASK", "task_id"),
              Field("TENANT", "tenant"),
              Field("NODE", "node_id"),
              Field("GPU", "gpu_index"),
              Suffixed("MEMORY", "memory_mb", "MB"),
              Suffixed("COMPUTE", "compute_percent", "%"),
              Field("ACTOR", "actor"),
              Field("REASON", "reason")};
    case Resource::kNode:
      return {Field("NODE", "node_id"),
              Field("CONTAINERIZED", "containerized"),
              {"GPUS", NodeGpus},
              Field("LAST_HEARTBEAT", "last_heartbeat_at"),
              {"AGE", HeartbeatAge},
              Field("RUNTIME", "runtime")};
    case Resource::kTenant:
      return {Field("NAME", "name"), Field("SHARED_GROUP", "shared_group"),
              Field("CREATED", "created_at")};
    case Resource::kGroup:
      return {Field("NAME", "name"), Field("TENANTS", "tenants")};
    case Resource::kToken:
      return {Field("ID", "id"),
              Field("ROLE", "role"),
              Field("TENANT", "tenant"),
              Field("NODE", "node"),
              Field("DESCRIPTION", "description"),
              Field("CREATED", "created_at"),
              Field("REVOKED", "revoked_at")};
    case Resource::kApproval:
      return {Field("ID", "id"),
              Field("TENANT_A", "tenant_a"),
              Field("TENANT_B", "tenant_b"),
              Field("ACTIVE", "active"),
              Field("EXPIRES", "expires_at"),
              Field("REVOKED", "revoked_at"),
              Field("BY", "created_by"),
              Field("REASON", "reason")};
    case Resource::kDefragPlan:
      return {Field("ID", "id"),
              Field("STATE", "state"),
              Field("NODE", "node_id"),
              Suffixed("GOAL", "goal_memory_mb", "MB"),
              {"MOVES_DONE", PlanMoves},
              {"BEFORE", PlanRoom("before")},
              {"AFTER", PlanRoom("after")},
              Field("MESSAGE", "message")};
    case Resource::kSliceRequest:
      return {Field("ID", "id"),
              Field("NODE", "node_id"),
              Field("ACTION", "action"),
              Field("GPU", "gpu_index"),
              Field("PROFILE", "profile"),
              {"STATE", SliceRequestState},
              Field("SLICE", "slice_id"),
              Field("TASK", "task_id"),
              Field("DEVICE", "device_id"),
              Field("CREATED", "created_at"),
              Field("ERROR", "error")};
  }
  return {};
}

// Writes an aligned table, each line prefixed by `indent` spaces.
void WriteTable(const std::vector<std::string>& headers,
                const std::vector<std::vector<std::string>>& rows,
                std::ostream& out, size_t indent = 0) {
  std::vector<size_t> widths(headers.size());
  for (size_t c = 0; c < headers.size(); ++c) {
    widths[c] = DisplayWidth(headers[c]);
    for (const auto& row : rows) {
      widths[c] = std::max(widths[c], DisplayWidth(row[c]));
    }
  }
  auto write_row = [&](const std::vector<std::string>& cells) {
    std::string line(indent, ' ');
    for (size_t c = 0; c < cells.size(); ++c) {
      line += cells[c];
      if (c + 1 < cells.size()) {
        line.append(widths[c] - DisplayWidth(cells[c]) + 2, ' ');
      }
    }
    out << line << '\n';
  };
  write_row(headers);
  for (const auto& row : rows) write_row(row);
}

std::string Uppercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](char c) {
    return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
  });
  return out;
}

// A table of arbitrary objects: one column per key, in first-seen order.
void WriteGenericTable(const Json& items, std::ostream& out, size_t indent) {
  std::vector<std::string> keys;
  for (const Json& item : items) {
    for (const auto& [key, value] : item.items()) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        keys.push_back(key);
      }
    }
  }
  std::vector<std::string> headers;
  headers.reserve(keys.size());
  for (const auto& key : keys) headers.push_back(Uppercase(key));
  std::vector<std::vector<std::string>> rows;
  for (const Json& item : items) {
    std::vector<std::string>& row = rows.emplace_back();
    for (const auto& key : keys) row.push_back(CellText(item, key));
  }
  WriteTable(headers, rows, out, indent);
}

bool IsArrayOfObjects(const Json& value) {
  return value.is_array() && !value.empty() &&
         std::all_of(value.begin(), value.end(),
                     [](const Json& element) { return element.is_object(); });
}

void WriteDetail(const Json& object, std::ostream& out, size_t indent) {
  size_t width = 0;
  for (const auto& [key, value] : object.items()) {
    width = std::max(width, DisplayWidth(key) + 1);
  }
  const std::string pad(indent, ' ');
  for (const auto& [key, value] : object.items()) {
    const std::string label = Printable(key) + ":";
    if (value.is_object() && !value.empty()) {
      out << pad << label << '\n';
      WriteDetail(value, out, indent + 2);
    } else if (IsArrayOfObjects(value)) {
      out << pad << label << '\n';
      WriteGenericTable(value, out, indent + 2);
    } else {
      out << pad << label << std::string(width - DisplayWidth(label) + 1, ' ')
          << ValueText(value) << '\n';
    }
  }
}

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "HTTP error";
  }
}

// A string member of `object`, or "" when it is missing or not a string.
std::string StringMember(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return {};
  return Printable(it->get<std::string>());
}

}  // namespace

std::string CellText(const Json& object, std::string_view key) {
  if (!object.is_object()) return std::string(kNone);
  const auto it = object.find(key);
  if (it == object.end()) return std::string(kNone);
  return ValueText(*it);
}

void RenderTable(Resource resource, const Json& items, std::ostream& out) {
  const std::vector<Column> columns = ColumnsFor(resource);
  std::vector<std::string> headers;
  headers.reserve(columns.size());
  for (const Column& column : columns) {
    headers.emplace_back(column.header);
  }
  std::vector<std::vector<std::string>> rows;
  if (items.is_array()) {
    for (const Json& item : items) {
      std::vector<std::string>& row = rows.emplace_back();
      for (const Column& column : columns) row.push_back(column.cell(item));
    }
  }
  WriteTable(headers, rows, out);
}

std::string EnforcementWarnings(Resource resource, const Json& items) {
  if (!items.is_array()) return {};
  if (resource != Resource::kSlice && resource != Resource::kTask) return {};
  const bool slice = resource == Resource::kSlice;
  std::string text;
  for (const Json& item : items) {
    const std::string note = EnforcementNote(item);
    if (note.empty()) continue;
    std::string subject = slice ? "slice " + CellText(item, "id")
                                : "task " + CellText(item, "id");
    const std::string other = CellText(item, slice ? "task_id" : "slice_id");
    if (other != kNone)
      subject += slice ? " (task " + other + ")" : " (slice " + other + ")";
    text += "warning: ";
    text += subject;
    text += " is not enforced by the hook: ";
    text += note;
    text += "\n";
  }
  return text;
}

void RenderDetail(const Json& object, std::ostream& out) {
  if (!object.is_object()) {
    out << object.dump(2) << '\n';
    return;
  }
  WriteDetail(object, out, 0);
}

std::string FormatHttpError(int status, std::string_view body,
                            const Settings& settings) {
  std::string line = "hfctl: " + std::to_string(status) + " ";
  const Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("error") &&
      parsed["error"].is_string()) {
    line += StringMember(parsed, "error");
    const std::string message = StringMember(parsed, "message");
    if (!message.empty()) line += ": " + message;
    const std::string field = StringMember(parsed, "field");
    if (!field.empty()) line += " (field: " + field + ")";
  } else {
    // Not the API's error shape: a proxy's page, or a server too old or new.
    line += ReasonPhrase(status);
    std::string_view first_line = body.substr(0, body.find('\n'));
    constexpr size_t kMaxEcho = 200;
    if (first_line.size() > kMaxEcho)
      first_line = first_line.substr(0, kMaxEcho);
    const std::string echo = Printable(first_line);
    if (echo.find_first_not_of(' ') != std::string::npos) line += ": " + echo;
  }
  line += '\n';

  if (status == 401) {
    if (settings.token.empty()) {
      line +=
          "hfctl: hint: no token is set; pass --token or --token-file, set "
          "HF_TOKEN, or put \"token\" in the config file";
      if (!settings.config_path.empty()) {
        line += " (" + settings.config_path + ")";
      }
      line += '\n';
    } else {
      line += "hfctl: hint: the server did not accept the token from " +
              settings.token_source +
              "; it may be mistyped, revoked, or meant for another server\n";
    }
  } else if (status == 403) {
    line +=
        "hfctl: hint: this token's role may not do that; `hfctl whoami` "
        "shows its role and tenant\n";
  }
  return line;
}

std::string FormatUnreachable(const Settings& settings,
                              std::string_view reason) {
  std::string text = "hfctl: cannot reach the server at " +
                     settings.server.ToString() + " (" + std::string(reason) +
                     "); is hf-server running? set --server or HF_SERVER\n";
  if (settings.server_source != "--server" &&
      settings.server_source != "default") {
    text += "hfctl: (that address is from " + settings.server_source + ")\n";
  }
  return text;
}

}  // namespace hf::cli
