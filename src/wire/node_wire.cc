#include "wire/node_wire.h"

#include <string>

namespace hf::wire {

namespace {

std::optional<std::int64_t> Integer(const json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned() &&
      it->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
    return std::nullopt;
  }
  return it->get<std::int64_t>();
}

std::optional<ReportNumber> ReadNumber(const json& j) {
  auto epoch = Integer(j, "report_epoch");
  auto seq = Integer(j, "report_seq");
  if (!epoch || !seq) return std::nullopt;
  return ReportNumber{*epoch, *seq};
}

}  // namespace

json ToJson(const ReportNumber& number) {
  return {{"report_epoch", number.epoch}, {"report_seq", number.seq}};
}

json ToJson(const GpuReport& g) {
  json j = {{"index", g.index},
            {"uuid", g.uuid},
            {"vendor", g.vendor},
            {"model", g.model},
            {"memory_mb", g.memory_mib},
            {"compute_capability",
             std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
            {"mig_capable", g.mig_capable},
            {"mps_capable", g.mps_capable},
            {"health", g.lost ? "lost" : "ok"}};
  if (g.mig_devices) j["mig_devices"] = *g.mig_devices;
  return j;
}

json ToJson(const NodeReport& r, bool with_name) {
  json gpus = json::array();
  for (const GpuReport& g : r.gpus) gpus.push_back(ToJson(g));
  json j = {
      {"containerized", r.containerized}, {"hook_available", r.hook_available},
      {"cpu_milli", r.cpu_milli},         {"host_memory_mb", r.host_memory_mib},
      {"agent_version", r.agent_version}, {"gpus", std::move(gpus)}};
  if (with_name) j["node_id"] = r.name;
  if (!r.runtime.empty()) j["runtime"] = r.runtime;
  if (r.number) j.update(ToJson(*r.number));
  return j;
}

json ToJson(const HookReport& h) {
  json j = {
      {"attached", h.attached},
      {"attaches", h.attaches},
      {"processes", h.processes},
      {"used_bytes", h.used_bytes},
      {"peak_bytes", h.peak_bytes},
      {"quota_bytes", h.quota_bytes ? json(*h.quota_bytes) : json(nullptr)},
      {"quota_ooms", h.quota_ooms},
      {"physical_ooms", h.physical_ooms},
      {"driver_bytes", h.driver_bytes}};
  if (h.share_achieved_percent) {
    j["share_achieved_percent"] = *h.share_achieved_percent;
  }
  if (h.interference) {
    j["interference"] = *h.interference;
    j["interference_samples"] = h.interference_samples;
  }
  if (!h.unhooked_pids.empty()) {
    j["unhooked_pids"] = h.unhooked_pids;
    j["unhooked_reason"] = h.unhooked_reason;
  }
  return j;
}

json ToJson(const RunningTask& t) {
  json j = {{"task_id", t.task_id},
            {"state", t.state},
            {"gpu_indices", t.gpu_indices}};
  if (t.hook) j["hook"] = ToJson(*t.hook);
  return j;
}

json ToJson(const HeartbeatReply& reply) {
  json quotas = json::array();
  for (const QuotaDirective& q : reply.quotas) {
    quotas.push_back(
        {{"task_id", q.task_id},
         {"slice_id", q.slice_id},
         {"memory_mb", q.memory_mib ? json(*q.memory_mib) : json(nullptr)}});
  }
  json j = {{"ok", true}, {"quotas", std::move(quotas)}};
  if (reply.newer_applied) {
    j["applied"] = false;
    j["newer_report"] = ToJson(*reply.newer_applied);
  }
  return j;
}

json ToJson(const TaskStateReport& r) {
  json j = {{"task_id", r.task_id},
            {"state", std::string(TaskStateName(r.state))},
            {"message", r.message}};
  if (r.exit_code) j["exit_code"] = *r.exit_code;
  if (r.slice_id) j["slice_id"] = *r.slice_id;
  return j;
}

json ToJson(const MigResult& r) {
  json j = {{"ok", r.ok}};
  if (!r.device_id.empty()) j["device_id"] = r.device_id;
  if (!r.ok) {
    j["error"] = r.error;
    j["orphaned"] = r.orphaned;
  }
  return j;
}

HeartbeatReply ReadHeartbeatReply(const json& reply) {
  HeartbeatReply out;
  if (!reply.is_object()) return out;
  if (auto it = reply.find("quotas"); it != reply.end() && it->is_array()) {
    for (const json& q : *it) {
      auto task = Integer(q, "task_id");
      auto slice = Integer(q, "slice_id");
      if (!task || !slice || !q.contains("memory_mb")) continue;
      QuotaDirective d{*task, *slice, std::nullopt};
      if (!q["memory_mb"].is_null()) {
        auto mb = Integer(q, "memory_mb");
        if (!mb || *mb < 0) continue;
        d.memory_mib = *mb;
      }
      out.quotas.push_back(d);
    }
  }
  if (auto it = reply.find("newer_report"); it != reply.end()) {
    out.newer_applied = ReadNumber(*it);
    if (!out.newer_applied) out.newer_applied = ReportNumber{};
  }
  return out;
}

HookReport ReadHookReport(const json& hook) {
  HookReport h;
  if (!hook.is_object()) return h;
  if (auto it = hook.find("attached"); it != hook.end() && it->is_boolean()) {
    h.attached = it->get<bool>();
  }
  h.attaches = Integer(hook, "attaches").value_or(0);
  h.processes = static_cast<int>(Integer(hook, "processes").value_or(0));
  h.used_bytes = Integer(hook, "used_bytes").value_or(0);
  h.peak_bytes = Integer(hook, "peak_bytes").value_or(0);
  h.quota_bytes = Integer(hook, "quota_bytes");
  h.quota_ooms = Integer(hook, "quota_ooms").value_or(0);
  h.physical_ooms = Integer(hook, "physical_ooms").value_or(0);
  h.driver_bytes = Integer(hook, "driver_bytes").value_or(0);
  if (auto it = hook.find("share_achieved_percent");
      it != hook.end() && it->is_number()) {
    h.share_achieved_percent = it->get<double>();
  }
  if (auto it = hook.find("interference");
      it != hook.end() && it->is_number()) {
    h.interference = it->get<double>();
    h.interference_samples = Integer(hook, "interference_samples").value_or(0);
  }
  if (auto it = hook.find("unhooked_pids");
      it != hook.end() && it->is_array()) {
    for (const json& pid : *it) {
      if (pid.is_number_integer()) {
        h.unhooked_pids.push_back(pid.get<std::int64_t>());
      }
    }
  }
  if (auto it = hook.find("unhooked_reason");
      it != hook.end() && it->is_string()) {
    h.unhooked_reason = it->get<std::string>();
  }
  return h;
}

}  // namespace hf::wire
