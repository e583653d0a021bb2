#include "api/codec.h"

#include <openssl/evp.h>

#include <cmath>
#include <ctime>
#include <limits>
#include <set>
#include <vector>

#include "common/gpu_compute_mode.h"
#include "common/strict_json.h"

namespace hf::api {

namespace {

// Bounds on what an agent reports (docs/API.md, "Nodes and agents"):
// generous for any real machine, and far enough from overflow that the
// server's arithmetic on them (sums, MiB to bytes) cannot wrap.
constexpr std::int64_t kMaxGpuIndex = 1023;
constexpr std::int64_t kMaxGpuMemoryMib = std::int64_t{16} << 20;  // 16 TiB
constexpr std::int64_t kMaxCpuMilli = std::int64_t{1} << 30;       // ~1M CPUs
constexpr std::int64_t kMaxHostMemoryMib = std::int64_t{1} << 30;  // 1 PiB
constexpr std::size_t kMaxGpusPerTask = 64;
constexpr std::size_t kMaxIdentifier = 256;  // UUIDs, MIG device ids

Status Wrong(const std::string& field, const std::string& what) {
  return Status::InvalidArgument(what, field);
}

// Walks every string in `j` and fails on one longer than `max`.
Status CheckStrings(const json& j, std::size_t max, const std::string& where) {
  if (j.is_string()) {
    if (j.get_ref<const std::string&>().size() > max) {
      return Wrong(where, "is longer than " + std::to_string(max) + " bytes");
    }
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) {
      HF_RETURN_IF_ERROR(
          CheckStrings(j[i], max, where + "[" + std::to_string(i) + "]"));
    }
  } else if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      std::string at = where;
      if (!at.empty()) at += ".";
      at += key;
      if (key.size() > max) return Wrong(at, "field name is too long");
      HF_RETURN_IF_ERROR(CheckStrings(value, max, at));
    }
  }
  return Status::Ok();
}

const json* Field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

StatusOr<std::string> GetString(const json& body, const char* name,
                                bool required) {
  const json* v = Field(body, name);
  if (v == nullptr) {
    if (required) return Wrong(name, "is required");
    return std::string();
  }
  if (!v->is_string()) return Wrong(name, "must be a string");
  return v->get<std::string>();
}

StatusOr<std::optional<std::int64_t>> GetInt(const json& body,
                                             const std::string& name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::optional<std::int64_t>();
  if (it->is_number_unsigned() &&
      it->get<std::uint64_t>() >
          static_cast<std::uint64_t>(
              std::numeric_limits<std::int64_t>::max())) {
    return Wrong(name, "is out of range, got " + it->dump());
  }
  if (it->is_number_integer()) return std::optional(it->get<std::int64_t>());
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      return std::optional(static_cast<std::int64_t>(d));
    }
    return Wrong(name, "must be a whole number, got " + it->dump());
  }
  return Wrong(name, "must be an integer");
}

// GetInt, and the value must be in [min, max]; errors name `field`.
StatusOr<std::optional<std::int64_t>> GetIntIn(const json& body,
                                               const std::string& name,
                                               std::int64_t min,
                                               std::int64_t max,
                                               const std::string& field) {
  auto v = GetInt(body, name);
  if (!v.ok()) return Wrong(field, v.status().message());
  if (*v && (**v < min || **v > max)) {
    return Wrong(field, "must be " + std::to_string(min) + ".." +
                            std::to_string(max) + ", got " +
                            std::to_string(**v));
  }
  return v;
}

// An integer JSON value (an array element) in [min, max], checked on the
// 64-bit value before it is narrowed.
StatusOr<int> IntElement(const json& v, int min, int max,
                         const std::string& field) {
  const bool in_range =
      v.is_number_integer() &&
      (v.is_number_unsigned()
           ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(max)
           : v.get<std::int64_t>() >= min && v.get<std::int64_t>() <= max);
  if (!in_range) {
    return Wrong(field, "must be integers " + std::to_string(min) + ".." +
                            std::to_string(max));
  }
  return static_cast<int>(v.get<std::int64_t>());
}

StatusOr<bool> GetBool(const json& body, const char* name, bool fallback) {
  const json* v = Field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return Wrong(name, "must be true or false");
  return v->get<bool>();
}

StatusOr<store::StringMap> GetStringMap(const json& body, const char* name,
                                        std::size_t max_entries) {
  store::StringMap out;
  const json* v = Field(body, name);
  if (v == nullptr) return out;
  if (!v->is_object()) return Wrong(name, "must be an object of strings");
  if (v->size() > max_entries) {
    return Wrong(name,
                 "has more than " + std::to_string(max_entries) + " entries");
  }
  for (const auto& [key, value] : v->items()) {
    if (!value.is_string()) {
      return Wrong(std::string(name) + "." + key, "must be a string");
    }
    out[key] = value.get<std::string>();
  }
  return out;
}

// "8.0" -> (8, 0): one or two digits, a dot, one or two digits; nothing
// else (no sign, spaces or suffix).
bool ParseComputeCapability(std::string_view text, int& major, int& minor) {
  const auto dot = text.find('.');
  const auto number = [](std::string_view digits, int& out) {
    if (digits.empty() || digits.size() > 2) return false;
    out = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      out = out * 10 + (c - '0');
    }
    return true;
  };
  return dot != std::string_view::npos && number(text.substr(0, dot), major) &&
         number(text.substr(dot + 1), minor);
}

std::string Iso(store::Millis ms) { return FormatTime(ms); }

json OptionalTime(const std::optional<store::Millis>& ms) {
  return ms ? json(Iso(*ms)) : json(nullptr);
}

}  // namespace

StatusOr<json> ParseBody(std::string_view body, const Limits& limits) {
  if (body.empty()) {
    return Status::InvalidArgument("the request needs a JSON object body",
                                   "body");
  }
  StrictJsonOptions options;
  options.max_depth = limits.max_depth;
  auto parsed = ParseStrictJson(body, options);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return Status::InvalidArgument("must be a JSON object", "body");
  }
  return parsed;
}

Status CheckIdentifier(std::string_view text, const std::string& field) {
  if (HasControlCharacter(text)) {
    return Wrong(field,
                 "must not contain control characters (NUL, newline, tab, "
                 "escape, ...)");
  }
  return Status::Ok();
}

Status CheckFields(const json& body,
                   std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : body.items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || key == a;
    if (!known) return Wrong(key, "unknown field '" + key + "'");
  }
  return Status::Ok();
}

StatusOr<int> RatioToPercentField(const json& value, const std::string& field) {
  if (!value.is_number() || value.is_boolean()) {
    return Wrong(field, "must be a number in (0, 1]");
  }
  const double ratio = value.get<double>();
  if (!std::isfinite(ratio) || ratio <= 0.0 || ratio > 1.0) {
    return Wrong(field, "must be in (0, 1], got " + value.dump());
  }
  // Half up; the epsilon absorbs binary representation (0.505 * 100 is
  // 50.4999...).
  const int percent = static_cast<int>(std::floor(ratio * 100.0 + 0.5 + 1e-9));
  if (percent < 1) {
    return Wrong(
        field,
        "rounds to 0% (the smallest share is 0.005 = 1%), got " + value.dump());
  }
  return std::min(percent, 100);
}

StatusOr<server::TaskCreate> ParseTaskCreate(const json& body,
                                             const Limits& limits) {
  for (const char* derived : {"qos", "qos_level"}) {
    if (body.contains(derived)) {
      return Wrong(derived,
                   "the QoS tier is derived from the GPU the task lands on "
                   "(gold: MIG, silver: MPS, bronze) and cannot be requested");
    }
  }
  HF_RETURN_IF_ERROR(CheckFields(
      body, {"name", "image", "command", "gpu_type", "gpu_required",
             "gpu_memory_mb", "gpu_compute_ratio", "gpu_compute_mode",
             "preemptible", "env", "labels", "tenant"}));
  server::TaskCreate t;
  {
    const json* cmd = Field(body, "command");
    std::size_t total = 0;
    if (cmd != nullptr) {
      if (cmd->is_string()) {
        t.command = {cmd->get<std::string>()};
        t.command_is_shell = true;
        total = t.command[0].size();
      } else if (cmd->is_array()) {
        for (const json& arg : *cmd) {
          if (!arg.is_string()) {
            return Wrong("command", "must be a string or an array of strings");
          }
          t.command.push_back(arg.get<std::string>());
          total += t.command.back().size();
        }
      } else {
        return Wrong("command", "must be a string or an array of strings");
      }
      if (total > limits.max_command) {
        return Wrong(
            "command",
            "is longer than " + std::to_string(limits.max_command) + " bytes");
      }
    }
  }
  json rest = body;
  rest.erase("command");
  HF_RETURN_IF_ERROR(CheckStrings(rest, limits.max_string, ""));
  // Names and the image are identifiers (shown in lists, passed to the
  // container runtime): no control characters. Every string of the body
  // is free of NUL already (ParseBody), which execve could not pass on.
  auto name = GetString(body, "name", true);
  if (!name.ok()) return name.status();
  HF_RETURN_IF_ERROR(CheckIdentifier(*name, "name"));
  t.name = *name;
  auto image = GetString(body, "image", false);
  if (!image.ok()) return image.status();
  HF_RETURN_IF_ERROR(CheckIdentifier(*image, "image"));
  t.image = *image;
  auto gpu_type = GetString(body, "gpu_type", false);
  if (!gpu_type.ok()) return gpu_type.status();
  if (!gpu_type->empty()) t.gpu_type = *gpu_type;
  auto required = GetInt(body, "gpu_required");
  if (!required.ok()) return required.status();
  if (*required) {
    if (**required < 0 || **required > 64) {
      return Wrong("gpu_required", "must be 0..64");
    }
    t.gpu_required = static_cast<int>(**required);
  }
  auto memory = GetInt(body, "gpu_memory_mb");
  if (!memory.ok()) return memory.status();
  t.memory_mib = *memory;
  if (const json* ratio = Field(body, "gpu_compute_ratio")) {
    auto percent = RatioToPercentField(*ratio, "gpu_compute_ratio");
    if (!percent.ok()) return percent.status();
    t.compute_percent = *percent;
  }
  auto preemptible = GetBool(body, "preemptible", false);
  if (!preemptible.ok()) return preemptible.status();
  t.preemptible = *preemptible;
  if (const json* mode = Field(body, "gpu_compute_mode")) {
    auto parsed = mode->is_string()
                      ? ParseGpuComputeMode(mode->get_ref<const std::string&>())
                      : std::nullopt;
    if (!parsed) {
      return Wrong(
          "gpu_compute_mode",
          R"(must be "strict" or "work-conserving", got )" + mode->dump());
    }
    t.gpu_compute_mode = *parsed;
  }
  auto env = GetStringMap(body, "env", limits.max_map_entries);
  if (!env.ok()) return env.status();
  t.env = std::move(*env);
  auto labels = GetStringMap(body, "labels", limits.max_map_entries);
  if (!labels.ok()) return labels.status();
  t.labels = std::move(*labels);
  if (const json* tenant = Field(body, "tenant")) {
    if (!tenant->is_string()) return Wrong("tenant", "must be a string");
    t.tenant = tenant->get<std::string>();
    HF_RETURN_IF_ERROR(CheckIdentifier(*t.tenant, "tenant"));
  }
  HF_RETURN_IF_ERROR(server::ValidateTaskCreate(t));
  return t;
}

StatusOr<server::SliceCreate> ParseSliceCreate(const json& body) {
  for (const char* derived : {"qos", "qos_level"}) {
    if (body.contains(derived)) {
      return Wrong(derived, "the QoS tier is derived and cannot be requested");
    }
  }
  HF_RETURN_IF_ERROR(
      CheckFields(body, {"tenant", "node_id", "gpu_index", "gpu_memory_mb",
                         "gpu_compute_ratio", "reason"}));
  HF_RETURN_IF_ERROR(CheckStrings(body, 4096, ""));
  server::SliceCreate s;
  auto tenant = GetString(body, "tenant", false);
  if (!tenant.ok()) return tenant.status();
  HF_RETURN_IF_ERROR(CheckIdentifier(*tenant, "tenant"));
  s.tenant = *tenant;
  auto node = GetString(body, "node_id", false);
  if (!node.ok()) return node.status();
  HF_RETURN_IF_ERROR(CheckIdentifier(*node, "node_id"));
  if (!node->empty()) s.node = *node;
  auto index = GetIntIn(body, "gpu_index", 0, kMaxGpuIndex, "gpu_index");
  if (!index.ok()) return index.status();
  if (*index) s.gpu_index = static_cast<int>(**index);
  auto memory = GetInt(body, "gpu_memory_mb");
  if (!memory.ok()) return memory.status();
  s.memory_mib = *memory;
  if (const json* ratio = Field(body, "gpu_compute_ratio")) {
    auto percent = RatioToPercentField(*ratio, "gpu_compute_ratio");
    if (!percent.ok()) return percent.status();
    s.compute_percent = *percent;
  }
  auto reason = GetString(body, "reason", false);
  if (!reason.ok()) return reason.status();
  s.reason = *reason;
  return s;
}

StatusOr<server::DefragPlanCreate> ParseDefragPlanCreate(const json& body) {
  HF_RETURN_IF_ERROR(
      CheckFields(body, {"node_id", "goal_memory_mb", "max_moves"}));
  server::DefragPlanCreate d;
  auto node = GetString(body, "node_id", false);
  if (!node.ok()) return node.status();
  HF_RETURN_IF_ERROR(CheckIdentifier(*node, "node_id"));
  if (!node->empty()) d.node = *node;
  auto goal = GetInt(body, "goal_memory_mb");
  if (!goal.ok()) return goal.status();
  if (*goal && **goal < 1) {
    return Wrong("goal_memory_mb", "must be a positive number of MiB");
  }
  d.goal_memory_mib = *goal;
  auto moves = GetIntIn(body, "max_moves", 1, 64, "max_moves");
  if (!moves.ok()) return moves.status();
  if (*moves) d.max_moves = static_cast<int>(**moves);
  return d;
}

StatusOr<server::SliceResizeRequest> ParseSliceResize(const json& body) {
  HF_RETURN_IF_ERROR(CheckFields(body, {"memory_mb", "reason"}));
  HF_RETURN_IF_ERROR(CheckStrings(body, 1024, ""));
  server::SliceResizeRequest r;
  auto memory = GetInt(body, "memory_mb");
  if (!memory.ok()) return memory.status();
  if (!*memory) return Wrong("memory_mb", "is required");
  r.memory_mib = **memory;
  auto reason = GetString(body, "reason", false);
  if (!reason.ok()) return reason.status();
  r.reason = *reason;
  return r;
}

StatusOr<server::ApprovalCreate> ParseApprovalCreate(const json& body) {
  HF_RETURN_IF_ERROR(CheckFields(
      body, {"tenant_a", "tenant_b", "reason", "expires_at", "ttl_s"}));
  HF_RETURN_IF_ERROR(CheckStrings(body, 4096, ""));
  server::ApprovalCreate a;
  auto tenant_a = GetString(body, "tenant_a", true);
  if (!tenant_a.ok()) return tenant_a.status();
  a.tenant_a = *tenant_a;
  auto tenant_b = GetString(body, "tenant_b", true);
  if (!tenant_b.ok()) return tenant_b.status();
  a.tenant_b = *tenant_b;
  auto reason = GetString(body, "reason", true);
  if (!reason.ok()) return reason.status();
  a.reason = *reason;
  auto expires = GetString(body, "expires_at", false);
  if (!expires.ok()) return expires.status();
  if (!expires->empty()) {
    auto at = ParseTime(*expires, "expires_at");
    if (!at.ok()) return at.status();
    a.expires_at = *at;
  }
  auto ttl = GetInt(body, "ttl_s");
  if (!ttl.ok()) return ttl.status();
  a.ttl_s = *ttl;
  return a;
}

StatusOr<std::string> DecodeBase64(std::string_view text,
                                   const std::string& field) {
  const auto bad = [&] {
    return Status::InvalidArgument("must be standard padded base64", field);
  };
  if (text.size() % 4 != 0) return bad();
  const auto valid = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '+' || c == '/';
  };
  std::size_t padding = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '=' && i + 2 >= text.size()) {
      ++padding;
    } else if (!valid(c) || padding > 0) {
      return bad();
    }
  }
  std::string out(text.size() / 4 * 3, '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(text.data()),
                      static_cast<int>(text.size()));
  if (n < 0) return bad();
  out.resize(static_cast<std::size_t>(n) - padding);
  return out;
}

std::string ValidUtf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  std::size_t i = 0;
  while (i < in.size()) {
    const auto b = static_cast<unsigned char>(in[i]);
    std::size_t len = 0;
    std::uint32_t min = 0;
    if (b < 0x80) {
      len = 1;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2;
      min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3;
      min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4;
      min = 0x10000;
    }
    bool ok = len > 0 && i + len <= in.size();
    std::uint32_t cp = len == 1 ? b : (b & (0x7F >> len));
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(in[i + k]);
      ok = (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
    if (ok) {
      out.append(in.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      ++i;
    }
  }
  return out;
}

StatusOr<store::Millis> ParseTime(std::string_view text,
                                  const std::string& field) {
  const auto bad = [&] {
    return Status::InvalidArgument(
        "must be an RFC 3339 time such as 2026-12-01T18:00:00Z (got '" +
            std::string(text.substr(0, 64)) + "')",
        field);
  };
  std::tm tm{};
  int consumed = 0;
  const std::string s(text);
  // NOLINTNEXTLINE(cert-err34-c): the count and the checks below validate
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year,
                  &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec,
                  &consumed) != 6 ||
      consumed != 19) {
    return bad();
  }
  if (tm.tm_year < 1970 || tm.tm_year > 9999 || tm.tm_mon < 1 ||
      tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
      tm.tm_min > 59 || tm.tm_sec > 60) {
    return bad();
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  std::size_t pos = 19;
  std::int64_t millis = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      if (digits < 3) millis = millis * 10 + (s[pos] - '0');
      ++digits;
      ++pos;
    }
    if (digits == 0) return bad();
    for (int d = digits; d < 3; ++d) millis *= 10;
  }
  std::int64_t offset_s = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos + 6 == s.size() && (s[pos] == '+' || s[pos] == '-') &&
             s[pos + 3] == ':') {
    const auto digit = [&](std::size_t i) {
      return s[i] >= '0' && s[i] <= '9';
    };
    if (!digit(pos + 1) || !digit(pos + 2) || !digit(pos + 4) ||
        !digit(pos + 5)) {
      return bad();
    }
    const int hh = (s[pos + 1] - '0') * 10 + (s[pos + 2] - '0');
    const int mm = (s[pos + 4] - '0') * 10 + (s[pos + 5] - '0');
    if (hh > 23 || mm > 59) return bad();
    offset_s = (hh * 3600LL + mm * 60LL) * (s[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != s.size()) return bad();
  const std::time_t seconds = timegm(&tm);
  return (static_cast<std::int64_t>(seconds) - offset_s) * 1000 + millis;
}

StatusOr<server::NodeReport> ParseNodeReport(const json& body,
                                             bool name_required) {
  HF_RETURN_IF_ERROR(CheckFields(
      body, {"node_id", "containerized", "hook_available", "runtime",
             "cpu_milli", "host_memory_mb", "gpus", "agent_version", "tasks",
             "report_epoch", "report_seq"}));
  HF_RETURN_IF_ERROR(CheckStrings(body, 4096, ""));
  server::NodeReport r;
  auto name = GetString(body, "node_id", name_required);
  if (!name.ok()) return name.status();
  HF_RETURN_IF_ERROR(CheckIdentifier(*name, "node_id"));
  r.name = *name;
  auto containerized = GetBool(body, "containerized", false);
  if (!containerized.ok()) return containerized.status();
  r.containerized = *containerized;
  auto hook = GetBool(body, "hook_available", false);
  if (!hook.ok()) return hook.status();
  r.hook_available = *hook;
  auto runtime = GetString(body, "runtime", false);
  if (!runtime.ok()) return runtime.status();
  if (runtime->size() > 32 ||
      !std::all_of(runtime->begin(), runtime->end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
               c == '_';
      })) {
    return Wrong("runtime",
                 "must name the agent's task runtime, such as \"process\" or "
                 "\"docker\" (lower-case letters, digits, '-' and '_', at "
                 "most 32)");
  }
  r.runtime = *runtime;
  auto cpu = GetIntIn(body, "cpu_milli", 0, kMaxCpuMilli, "cpu_milli");
  if (!cpu.ok()) return cpu.status();
  r.cpu_milli = cpu->value_or(0);
  auto host =
      GetIntIn(body, "host_memory_mb", 0, kMaxHostMemoryMib, "host_memory_mb");
  if (!host.ok()) return host.status();
  r.host_memory_mib = host->value_or(0);
  auto version = GetString(body, "agent_version", false);
  if (!version.ok()) return version.status();
  HF_RETURN_IF_ERROR(CheckIdentifier(*version, "agent_version"));
  r.agent_version = *version;
  auto epoch =
      GetIntIn(body, "report_epoch", 1, wire::kMaxReportNumber, "report_epoch");
  if (!epoch.ok()) return epoch.status();
  auto seq =
      GetIntIn(body, "report_seq", 0, wire::kMaxReportNumber, "report_seq");
  if (!seq.ok()) return seq.status();
  if (epoch->has_value() != seq->has_value()) {
    return Wrong(epoch->has_value() ? "report_seq" : "report_epoch",
                 "is required with the other of report_epoch and report_seq");
  }
  if (*epoch) r.number = server::ReportNumber{**epoch, **seq};
  // Every report lists the node's GPUs (an empty list for a node without
  // any): a GPU left out is treated as gone.
  const json* gpus = Field(body, "gpus");
  if (gpus == nullptr) {
    return Wrong("gpus", "is required (the node's GPUs, [] for none)");
  }
  {
    if (!gpus->is_array()) return Wrong("gpus", "must be an array");
    if (gpus->size() > 64) return Wrong("gpus", "at most 64 GPUs per node");
    for (std::size_t i = 0; i < gpus->size(); ++i) {
      const json& g = (*gpus)[i];
      const std::string at = "gpus[" + std::to_string(i) + "]";
      if (!g.is_object()) return Wrong(at, "must be an object");
      for (const auto& [key, value] : g.items()) {
        static const std::set<std::string> kGpuFields = {
            "index",       "uuid",        "vendor",
            "model",       "memory_mb",   "compute_capability",
            "mig_capable", "mps_capable", "health",
            "mig_devices"};
        if (!kGpuFields.contains(key)) {
          std::string where = at;
          where += ".";
          where += key;
          return Wrong(where, "unknown field '" + key + "'");
        }
      }
      server::GpuReport gr;
      // Ranges are checked on the 64-bit value, before it is narrowed.
      auto index = GetIntIn(g, "index", 0, kMaxGpuIndex, at + ".index");
      if (!index.ok()) return index.status();
      if (!*index) return Wrong(at + ".index", "is required");
      gr.index = static_cast<int>(**index);
      auto uuid = GetString(g, "uuid", true);
      if (!uuid.ok()) return Wrong(at + ".uuid", uuid.status().message());
      HF_RETURN_IF_ERROR(CheckIdentifier(*uuid, at + ".uuid"));
      gr.uuid = *uuid;
      auto vendor = GetString(g, "vendor", false);
      if (!vendor.ok()) return Wrong(at + ".vendor", vendor.status().message());
      if (!vendor->empty()) gr.vendor = *vendor;
      auto model = GetString(g, "model", false);
      if (!model.ok()) return Wrong(at + ".model", model.status().message());
      HF_RETURN_IF_ERROR(CheckIdentifier(*model, at + ".model"));
      gr.model = *model;
      auto memory =
          GetIntIn(g, "memory_mb", 1, kMaxGpuMemoryMib, at + ".memory_mb");
      if (!memory.ok()) return memory.status();
      if (!*memory) return Wrong(at + ".memory_mb", "is required");
      gr.memory_mib = **memory;
      auto cc = GetString(g, "compute_capability", false);
      if (!cc.ok()) {
        return Wrong(at + ".compute_capability", cc.status().message());
      }
      if (!cc->empty() &&
          !ParseComputeCapability(*cc, gr.cc_major, gr.cc_minor)) {
        return Wrong(at + ".compute_capability",
                     "must look like \"8.0\" (0..99 each side), got \"" +
                         cc->substr(0, 16) + "\"");
      }
      auto mig = GetBool(g, "mig_capable", false);
      if (!mig.ok()) return Wrong(at + ".mig_capable", mig.status().message());
      gr.mig_capable = *mig;
      auto mps = GetBool(g, "mps_capable", false);
      if (!mps.ok()) return Wrong(at + ".mps_capable", mps.status().message());
      gr.mps_capable = *mps;
      auto health = GetString(g, "health", false);
      if (!health.ok()) return Wrong(at + ".health", health.status().message());
      if (!health->empty() && *health != "ok" && *health != "lost") {
        return Wrong(at + ".health", "must be \"ok\" or \"lost\"");
      }
      gr.lost = *health == "lost";
      if (const json* devices = Field(g, "mig_devices")) {
        if (!devices->is_array() || devices->size() > 64) {
          return Wrong(at + ".mig_devices",
                       "must be an array of at most 64 MIG device UUIDs");
        }
        gr.mig_devices.emplace();
        for (const json& d : *devices) {
          if (!d.is_string() || d.get<std::string>().empty() ||
              d.get<std::string>().size() > kMaxIdentifier) {
            return Wrong(at + ".mig_devices",
                         "must hold MIG device UUIDs (1.." +
                             std::to_string(kMaxIdentifier) + " bytes)");
          }
          HF_RETURN_IF_ERROR(
              CheckIdentifier(d.get<std::string>(), at + ".mig_devices"));
          gr.mig_devices->push_back(d.get<std::string>());
        }
      }
      r.gpus.push_back(std::move(gr));
    }
  }
  return r;
}

namespace {

// A heartbeat's `tasks[].hook` (docs/API.md): the task's hook region.
StatusOr<server::HookReport> ParseHookReport(const json& hook,
                                             const std::string& at) {
  if (!hook.is_object()) return Wrong(at, "must be an object");
  server::HookReport r;
  auto attached = GetBool(hook, "attached", false);
  if (!attached.ok()) return Wrong(at + ".attached", "must be true or false");
  r.attached = *attached;
  const auto count = [&](const char* name, std::int64_t& into) -> Status {
    auto v = GetInt(hook, name);
    if (!v.ok() || (*v && **v < 0)) {
      return Wrong(at + "." + name, "must be a non-negative integer");
    }
    into = v->value_or(0);
    return Status::Ok();
  };
  std::int64_t processes = 0;
  HF_RETURN_IF_ERROR(count("attaches", r.attaches));
  HF_RETURN_IF_ERROR(count("processes", processes));
  HF_RETURN_IF_ERROR(count("used_bytes", r.used_bytes));
  HF_RETURN_IF_ERROR(count("peak_bytes", r.peak_bytes));
  HF_RETURN_IF_ERROR(count("quota_ooms", r.quota_ooms));
  HF_RETURN_IF_ERROR(count("physical_ooms", r.physical_ooms));
  HF_RETURN_IF_ERROR(count("driver_bytes", r.driver_bytes));
  r.processes = static_cast<int>(std::min<std::int64_t>(processes, 1 << 20));
  if (const json* share = Field(hook, "share_achieved_percent");
      share != nullptr && !share->is_null()) {
    if (!share->is_number() || share->get<double>() < 0 ||
        share->get<double>() > 100) {
      return Wrong(at + ".share_achieved_percent", "must be a number 0..100");
    }
    r.share_achieved_percent = share->get<double>();
  }
  if (const json* ratio = Field(hook, "interference");
      ratio != nullptr && !ratio->is_null()) {
    if (!ratio->is_number() || !(ratio->get<double>() > 0) ||
        ratio->get<double>() > wire::kMaxInterference) {
      return Wrong(
          at + ".interference",
          "must be a number above 0 and at most " +
              std::to_string(static_cast<int>(wire::kMaxInterference)));
    }
    r.interference = ratio->get<double>();
    HF_RETURN_IF_ERROR(count("interference_samples", r.interference_samples));
  }
  if (const json* pids = Field(hook, "unhooked_pids")) {
    if (!pids->is_array() || pids->size() > wire::kMaxUnhookedPids) {
      return Wrong(at + ".unhooked_pids",
                   "must be an array of at most " +
                       std::to_string(wire::kMaxUnhookedPids) + " pids");
    }
    for (const json& pid : *pids) {
      if (!pid.is_number_integer() || pid.get<std::int64_t>() <= 0) {
        return Wrong(at + ".unhooked_pids", "must hold pids (integers > 0)");
      }
      r.unhooked_pids.push_back(pid.get<std::int64_t>());
    }
  }
  auto reason = GetString(hook, "unhooked_reason", false);
  if (!reason.ok() || reason->size() > wire::kMaxUnhookedReason) {
    return Wrong(at + ".unhooked_reason",
                 "must be a string of at most " +
                     std::to_string(wire::kMaxUnhookedReason) + " bytes");
  }
  if (!r.unhooked_pids.empty()) r.unhooked_reason = *reason;
  if (Field(hook, "quota_bytes") != nullptr) {  // null: no cap
    std::int64_t quota = 0;
    HF_RETURN_IF_ERROR(count("quota_bytes", quota));
    r.quota_bytes = quota;
  }
  return r;
}

}  // namespace

StatusOr<std::vector<server::RunningTask>> ParseRunningTasks(const json& body) {
  std::vector<server::RunningTask> out;
  const json* tasks = Field(body, "tasks");
  if (tasks == nullptr) return out;
  if (!tasks->is_array()) return Wrong("tasks", "must be an array");
  if (tasks->size() > 10000) return Wrong("tasks", "too many entries");
  for (std::size_t i = 0; i < tasks->size(); ++i) {
    const json& t = (*tasks)[i];
    const std::string at = "tasks[" + std::to_string(i) + "]";
    if (!t.is_object()) return Wrong(at, "must be an object");
    server::RunningTask r;
    auto id = GetInt(t, "task_id");
    if (!id.ok() || !*id || **id <= 0) {
      return Wrong(at + ".task_id", "must be a task id (an integer > 0)");
    }
    r.task_id = **id;
    auto state = GetString(t, "state", true);
    if (!state.ok()) return Wrong(at + ".state", state.status().message());
    r.state = *state;
    if (const json* idx = Field(t, "gpu_indices")) {
      if (!idx->is_array() || idx->size() > kMaxGpusPerTask) {
        return Wrong(at + ".gpu_indices", "must be an array of at most " +
                                              std::to_string(kMaxGpusPerTask) +
                                              " GPU indices");
      }
      for (const json& v : *idx) {
        auto index = IntElement(v, 0, static_cast<int>(kMaxGpuIndex),
                                at + ".gpu_indices");
        if (!index.ok()) return index.status();
        r.gpu_indices.push_back(*index);
      }
    }
    if (const json* hook = Field(t, "hook")) {
      auto parsed = ParseHookReport(*hook, at + ".hook");
      if (!parsed.ok()) return parsed.status();
      r.hook = *parsed;
    }
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<std::vector<server::TaskStateReport>> ParseTaskStates(
    const json& body) {
  HF_RETURN_IF_ERROR(CheckFields(body, {"states"}));
  const json* states = Field(body, "states");
  if (states == nullptr || !states->is_array()) {
    return Wrong("states", "must be an array");
  }
  if (states->size() > 10000) return Wrong("states", "too many entries");
  std::vector<server::TaskStateReport> out;
  for (std::size_t i = 0; i < states->size(); ++i) {
    const json& s = (*states)[i];
    const std::string at = "states[" + std::to_string(i) + "]";
    if (!s.is_object()) return Wrong(at, "must be an object");
    server::TaskStateReport r;
    auto id = GetInt(s, "task_id");
    if (!id.ok() || !*id || **id <= 0) {
      return Wrong(at + ".task_id", "must be a task id (an integer > 0)");
    }
    r.task_id = **id;
    auto state = GetString(s, "state", true);
    if (!state.ok()) return Wrong(at + ".state", state.status().message());
    auto parsed = store::ParseTaskState(*state);
    if (!parsed) return Wrong(at + ".state", "unknown state '" + *state + "'");
    r.state = *parsed;
    auto code = GetIntIn(s, "exit_code", std::numeric_limits<int>::min(),
                         std::numeric_limits<int>::max(), at + ".exit_code");
    if (!code.ok()) return code.status();
    if (*code) r.exit_code = static_cast<int>(**code);
    auto message = GetString(s, "message", false);
    if (!message.ok())
      return Wrong(at + ".message", message.status().message());
    r.message = *message;
    auto slice = GetInt(s, "slice_id");
    if (!slice.ok()) return Wrong(at + ".slice_id", slice.status().message());
    if (*slice) {
      if (**slice <= 0) return Wrong(at + ".slice_id", "must be positive");
      r.slice_id = **slice;
    }
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<server::MigResult> ParseMigResult(const json& body) {
  HF_RETURN_IF_ERROR(
      CheckFields(body, {"ok", "device_id", "error", "orphaned"}));
  server::MigResult r;
  const json* ok = Field(body, "ok");
  if (ok == nullptr || !ok->is_boolean()) {
    return Wrong("ok", "is required (true or false)");
  }
  r.ok = ok->get<bool>();
  auto device = GetString(body, "device_id", false);
  if (!device.ok()) return device.status();
  if (device->size() > kMaxIdentifier) {
    return Wrong("device_id",
                 "is longer than " + std::to_string(kMaxIdentifier) + " bytes");
  }
  HF_RETURN_IF_ERROR(CheckIdentifier(*device, "device_id"));
  r.device_id = *device;
  auto error = GetString(body, "error", false);
  if (!error.ok()) return error.status();
  r.error = error->substr(0, 4096);
  auto orphaned = GetBool(body, "orphaned", false);
  if (!orphaned.ok()) return orphaned.status();
  r.orphaned = *orphaned;
  return r;
}

std::string FormatTime(store::Millis millis) {
  const std::time_t seconds = static_cast<std::time_t>(millis / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(millis % 1000));
  return buf;
}

json TaskJson(server::ControlPlane& cp, const store::TaskRow& t) {
  json j;
  j["id"] = t.id;
  j["name"] = t.name;
  j["tenant"] = cp.TenantName(t.tenant_id);
  j["image"] = t.image;
  if (t.command_is_shell && t.command.size() == 1) {
    j["command"] = t.command[0];
  } else {
    j["command"] = t.command;
  }
  j["gpu_type"] = t.gpu_type;
  j["gpu_required"] = t.gpu_required;
  j["gpu_memory_mb"] = t.memory_mib ? json(*t.memory_mib) : json(nullptr);
  j["gpu_compute_ratio"] =
      t.compute_percent ? json(*t.compute_percent / 100.0) : json(nullptr);
  j["gpu_compute_percent"] =
      t.compute_percent ? json(*t.compute_percent) : json(nullptr);
  j["gpu_compute_mode"] = GpuComputeModeName(t.gpu_compute_mode);
  j["preemptible"] = t.preemptible;
  j["env"] = t.env;
  j["labels"] = t.labels;
  j["status"] = store::TaskStateName(t.state);
  j["pending_reason"] =
      t.pending_reason.empty() ? json(nullptr) : json(t.pending_reason);
  j["slice_id"] = t.slice_id ? json(*t.slice_id) : json(nullptr);
  j["node_id"] = t.node_id ? json(cp.NodeName(*t.node_id)) : json(nullptr);
  j["gpu_indices"] = t.gpu_indices;
  auto qos = t.env.find("HETEROFLOW_SLICE_QOS");
  j["qos_level"] = qos == t.env.end() ? json(nullptr) : json(qos->second);
  j["exit_code"] = t.exit_code ? json(*t.exit_code) : json(nullptr);
  j["message"] = t.message;
  // Why the hook does not enforce the task's slice, as its agent last
  // reported (processes of the task that use the GPU without the hook).
  j["enforcement_note"] = nullptr;
  if (t.slice_id && !store::IsTerminal(t.state)) {
    auto usage = cp.SliceHookUsage(*t.slice_id);
    if (usage && usage->task_id == t.id &&
        !usage->report.unhooked_pids.empty()) {
      j["enforcement_note"] = usage->report.unhooked_reason;
    }
  }
  j["cancel_requested"] = t.cancel_requested;
  j["created_at"] = Iso(t.created_at);
  j["updated_at"] = Iso(t.updated_at);
  return j;
}

json SliceJson(server::ControlPlane& cp, const store::SliceRow& s) {
  json j;
  j["id"] = s.id;
  j["task_id"] = s.task_id ? json(*s.task_id) : json(nullptr);
  j["tenant"] = cp.TenantName(s.tenant_id);
  j["node_id"] = cp.NodeName(s.node_id);
  const int first = s.gpu_indices.empty() ? 0 : s.gpu_indices[0];
  j["gpu_index"] = first;
  j["gpu_indices"] = s.gpu_indices;
  std::string uuids;
  for (int index : s.gpu_indices) {
    if (!uuids.empty()) uuids += ",";
    uuids += cp.GpuUuid(s.node_id, index);
  }
  j["gpu_uuid"] = uuids;
  j["memory_mb"] = s.memory_mib;
  j["compute_percent"] = s.compute_percent;
  j["compute_defaulted"] = s.compute_defaulted;
  j["kind"] = s.whole ? "whole" : "slice";
  j["qos_level"] = s.qos_level;
  j["enforcement"] = s.enforcement;
  j["state"] = store::SliceStateName(s.state);
  j["origin"] = s.origin;
  j["mig_device_id"] =
      s.mig_device_id.empty() ? json(nullptr) : json(s.mig_device_id);
  j["created_at"] = Iso(s.created_at);
  j["released_at"] = OptionalTime(s.released_at);
  // What the hook measured in the task (its agent's last report); null
  // when nothing was reported (no hook, or not running).
  j["hook"] = nullptr;
  j["enforcement_note"] = nullptr;
  auto usage = s.state == store::SliceState::kReleased
                   ? std::nullopt
                   : cp.SliceHookUsage(s.id);
  if (usage) {
    const server::HookReport& h = usage->report;
    j["hook"] = {
        {"attached", h.attached},
        {"processes", h.processes},
        {"used_bytes", h.used_bytes},
        {"driver_bytes", h.driver_bytes},
        {"peak_bytes", h.peak_bytes},
        {"quota_bytes", h.quota_bytes ? json(*h.quota_bytes) : json(nullptr)},
        {"quota_ooms", h.quota_ooms},
        {"physical_ooms", h.physical_ooms},
        {"unhooked_pids", h.unhooked_pids},
        {"share_achieved_percent", h.share_achieved_percent
                                       ? json(*h.share_achieved_percent)
                                       : json(nullptr)},
        {"interference",
         h.interference ? json(*h.interference) : json(nullptr)},
        {"interference_samples", h.interference_samples},
        {"reported_at", Iso(usage->reported_at)}};
    if (!h.unhooked_pids.empty()) j["enforcement_note"] = h.unhooked_reason;
  }
  return j;
}

json SliceUsageHistoryJson(store::RowId slice_id,
                           const std::vector<server::HookUsage>& usage) {
  json items = json::array();
  for (const server::HookUsage& u : usage) {
    const server::HookReport& h = u.report;
    items.push_back(
        {{"reported_at", Iso(u.reported_at)},
         {"used_bytes", h.used_bytes},
         {"peak_bytes", h.peak_bytes},
         {"quota_bytes", h.quota_bytes ? json(*h.quota_bytes) : json(nullptr)},
         {"quota_ooms", h.quota_ooms},
         {"physical_ooms", h.physical_ooms},
         {"share_achieved_percent", h.share_achieved_percent
                                        ? json(*h.share_achieved_percent)
                                        : json(nullptr)},
         {"interference",
          h.interference ? json(*h.interference) : json(nullptr)}});
  }
  return {{"slice_id", slice_id}, {"items", std::move(items)}};
}

json HistoryJson(server::ControlPlane& cp, const store::HistoryRow& h) {
  json j;
  j["id"] = h.id;
  j["at"] = Iso(h.at);
  j["op"] = h.op;
  j["slice_id"] = h.slice_id ? json(*h.slice_id) : json(nullptr);
  j["task_id"] = h.task_id ? json(*h.task_id) : json(nullptr);
  j["tenant"] = h.tenant_id ? json(cp.TenantName(*h.tenant_id)) : json(nullptr);
  j["node_id"] = h.node_id ? json(cp.NodeName(*h.node_id)) : json(nullptr);
  j["gpu_index"] =
      h.gpu_indices.empty() ? json(nullptr) : json(h.gpu_indices[0]);
  j["gpu_indices"] = h.gpu_indices;
  j["memory_mb"] = h.memory_mib;
  j["compute_percent"] = h.compute_percent;
  j["actor"] = h.actor;
  j["reason"] = h.reason;
  return j;
}

json SliceRequestJson(server::ControlPlane& cp,
                      const store::SliceRequestRow& r) {
  json j;
  j["id"] = r.id;
  j["node_id"] = cp.NodeName(r.node_id);
  j["slice_id"] = r.slice_id;
  j["task_id"] = r.task_id ? json(*r.task_id) : json(nullptr);
  j["action"] = r.action;
  j["gpu_index"] = r.gpu_index;
  j["gpu_uuid"] = r.gpu_uuid;
  j["profile"] = r.profile;
  j["placement_start"] = r.mig_start >= 0 ? json(r.mig_start) : json(nullptr);
  j["state"] = store::SliceRequestStateName(r.state);
  j["device_id"] = r.device_id.empty() ? json(nullptr) : json(r.device_id);
  j["error"] = r.error.empty() ? json(nullptr) : json(r.error);
  j["message"] = r.state == store::SliceRequestState::kStuck
                     ? json("HARDWARE STATE UNKNOWN")
                     : json(nullptr);
  j["created_at"] = Iso(r.created_at);
  j["deadline_at"] = Iso(r.deadline_at);
  j["claimed_at"] = OptionalTime(r.claimed_at);
  j["finished_at"] = OptionalTime(r.finished_at);
  return j;
}

json TenantJson(server::ControlPlane& cp, const store::TenantRow& t) {
  json j;
  j["name"] = t.name;
  j["shared_group"] =
      t.group_id ? json(cp.GroupName(*t.group_id)) : json(nullptr);
  j["created_at"] = Iso(t.created_at);
  return j;
}

json TokenJson(server::ControlPlane& cp, const store::TokenRow& t) {
  json j;
  j["id"] = t.id;
  j["role"] = store::RoleName(t.role);
  j["tenant"] = t.tenant_id ? json(cp.TenantName(*t.tenant_id)) : json(nullptr);
  j["node"] = t.node ? json(*t.node) : json(nullptr);
  j["description"] = t.description;
  j["created_at"] = Iso(t.created_at);
  j["revoked_at"] = OptionalTime(t.revoked_at);
  return j;
}

json ApprovalJson(server::ControlPlane& cp, const store::ApprovalRow& a,
                  store::Millis now) {
  json j;
  j["id"] = a.id;
  j["tenant_a"] = cp.TenantName(a.tenant_a);
  j["tenant_b"] = cp.TenantName(a.tenant_b);
  j["reason"] = a.reason;
  j["created_by"] = a.created_by;
  j["created_at"] = Iso(a.created_at);
  j["expires_at"] = Iso(a.expires_at);
  j["revoked_at"] = OptionalTime(a.revoked_at);
  j["active"] = a.ActiveAt(now);
  return j;
}

json TaskLogJson(store::RowId task_id, const server::TaskLog& log) {
  json j;
  j["task_id"] = task_id;
  j["offset"] = log.offset;
  j["next_offset"] = log.offset + static_cast<std::int64_t>(log.data.size());
  j["size"] = log.size;
  j["truncated"] = log.truncated;
  j["data"] = ValidUtf8(log.data);
  return j;
}

json NodeJson(const server::NodeView& v, store::Millis now) {
  json j;
  j["node_id"] = v.node.name;
  j["containerized"] = v.node.containerized;
  j["hook_available"] = v.hook_available;
  j["runtime"] = v.node.runtime.empty() ? json(nullptr) : json(v.node.runtime);
  j["cpu_milli"] = v.node.cpu_milli;
  j["host_memory_mb"] = v.node.host_memory_mib;
  j["agent_version"] = v.node.agent_version;
  j["registered_at"] = Iso(v.node.registered_at);
  j["last_heartbeat_at"] = Iso(v.node.last_heartbeat_at);
  j["heartbeat_age_s"] =
      static_cast<double>(now - v.node.last_heartbeat_at) / 1000.0;
  json gpus = json::array();
  for (const store::GpuRow& g : v.gpus) {
    gpus.push_back({{"index", g.index},
                    {"uuid", g.uuid},
                    {"vendor", g.vendor},
                    {"model", g.model},
                    {"memory_mb", g.memory_mib},
                    {"compute_capability", std::to_string(g.cc_major) + "." +
                                               std::to_string(g.cc_minor)},
                    {"mig_capable", g.mig_capable},
                    {"mps_capable", g.mps_capable},
                    {"health", g.lost ? "lost" : "ok"}});
  }
  j["gpus"] = std::move(gpus);
  return j;
}

json StatsJson(const server::SliceStats& s) {
  json j;
  j["scope"] = s.cluster_scope ? "cluster" : "tenant";
  // null, as in whoami, when the view belongs to no tenant (node tokens).
  j["tenant"] =
      s.cluster_scope || s.tenant.empty() ? json(nullptr) : json(s.tenant);
  json totals = {{"nodes", s.nodes},
                 {"gpus", s.gpus},
                 {"live_slices", s.live_slices},
                 {"accounted_memory_mb", s.accounted_memory_mib}};
  if (s.cluster_scope) {
    totals["total_memory_mb"] = s.total_memory_mib;
    totals["free_memory_mb"] = s.free_memory_mib;
    totals["pending_tasks"] = s.pending_tasks;
  }
  j["totals"] = std::move(totals);
  json gpus = json::array();
  std::map<std::string, json> nodes;
  std::int64_t free_sum = 0;
  for (const server::GpuStats& g : s.per_gpu) {
    json e = {{"node_id", g.node},
              {"gpu_index", g.index},
              {"gpu_uuid", g.uuid},
              {"model", g.model},
              {"vendor", g.vendor},
              {"health", g.lost ? "lost" : "ok"},
              {"mig_capable", g.mig_capable},
              {"mps_capable", g.mps_capable},
              {"qos_level", g.qos_level},
              {"accounted_memory_mb", g.accounted_memory_mib},
              {"accounted_compute_percent", g.accounted_compute_percent},
              {"tenants", g.tenants}};
    json& n = nodes[g.node];
    if (n.is_null()) {
      n = {{"node_id", g.node}, {"gpus", 0}, {"accounted_memory_mb", 0}};
      if (s.cluster_scope) {
        n["total_memory_mb"] = 0;
        n["free_memory_mb"] = 0;
      }
    }
    n["gpus"] = n["gpus"].get<int>() + 1;
    n["accounted_memory_mb"] =
        n["accounted_memory_mb"].get<std::int64_t>() + g.accounted_memory_mib;
    if (s.cluster_scope) {
      const std::int64_t free = g.total_memory_mib - g.accounted_memory_mib;
      e["total_memory_mb"] = g.total_memory_mib;
      e["free_memory_mb"] = free;
      e["free_compute_percent"] = 100 - g.accounted_compute_percent;
      e["slices"] = g.slices;
      e["whole_gpu_task"] = g.whole_owned;
      n["total_memory_mb"] =
          n["total_memory_mb"].get<std::int64_t>() + g.total_memory_mib;
      n["free_memory_mb"] = n["free_memory_mb"].get<std::int64_t>() + free;
      if (!g.lost && !g.whole_owned) free_sum += free;
    }
    gpus.push_back(std::move(e));
  }
  json node_list = json::array();
  for (auto& [name, n] : nodes) node_list.push_back(std::move(n));
  j["nodes"] = std::move(node_list);
  j["gpus"] = std::move(gpus);
  if (s.cluster_scope) {
    // "Enough memory in total, nothing fits" made visible (docs/CONTRACT.md
    // section 10).
    j["fragmentation"] = {
        {"largest_placeable_slice_mb", s.largest_placeable_slice_mib},
        {"free_memory_mb", free_sum},
        {"stranded_memory_mb", free_sum - s.largest_placeable_slice_mib},
        {"fragmentation_ratio",
         free_sum > 0
             ? 1.0 - static_cast<double>(s.largest_placeable_slice_mib) /
                         static_cast<double>(free_sum)
             : 0.0}};
    // The placement policy, and what the learned hf-frag knows so far.
    json placement = {{"policy", s.policy}};
    if (s.policy_learns) {
      placement["mode"] = s.policy_cold_start ? "best-fit" : "hf-frag";
      placement["tasks_learned"] = s.policy_tasks_learned;
    }
    // The GPUs held for waiting tasks (Scheduler), in the order the holds
    // began; `hold` is the first of them (the one that began first), or
    // null.
    json holds = json::array();
    for (const server::HoldStats& h : s.holds) {
      holds.push_back({{"task_id", h.task_id},
                       {"node_id", h.node},
                       {"gpu_indices", h.gpu_indices},
                       {"since", FormatTime(h.since)}});
    }
    placement["hold"] = holds.empty() ? json(nullptr) : holds.front();
    placement["holds"] = std::move(holds);
    j["placement"] = std::move(placement);
  } else {
    j["fragmentation"] = nullptr;
    j["placement"] = nullptr;
  }
  return j;
}

}  // namespace hf::api
