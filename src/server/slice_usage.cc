#include "server/slice_usage.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace hf::server {
namespace {

bool WorthStoring(const HookUsage& now, const HookUsage* stored) {
  if (stored == nullptr) return true;
  const wire::HookReport& a = now.report;
  const wire::HookReport& b = stored->report;
  if (a.attached != b.attached || a.processes != b.processes ||
      a.quota_ooms != b.quota_ooms || a.physical_ooms != b.physical_ooms ||
      a.quota_bytes != b.quota_bytes || a.unhooked_pids != b.unhooked_pids ||
      a.share_achieved_percent.has_value() !=
          b.share_achieved_percent.has_value() ||
      std::abs(a.share_achieved_percent.value_or(0) -
               b.share_achieved_percent.value_or(0)) > 5 ||
      a.interference.has_value() != b.interference.has_value() ||
      std::abs(a.interference.value_or(0) - b.interference.value_or(0)) >
          0.05 ||
      now.task_id != stored->task_id) {
    return true;
  }
  const std::int64_t scale = std::max<std::int64_t>(
      {a.quota_bytes.value_or(0), a.used_bytes, b.used_bytes, 1});
  if (std::llabs(a.used_bytes - b.used_bytes) * 20 > scale) return true;
  return now.reported_at - stored->reported_at >= kSliceUsagePersistMs;
}

}  // namespace

bool SliceUsage::Record(store::RowId slice, const HookUsage& usage,
                        const std::function<bool()>& live) {
  MutexLock lock(mu_);
  if (!live()) return true;
  auto previous = latest_.find(slice);
  const bool was_hooked = previous == latest_.end() ||
                          previous->second.report.unhooked_pids.empty();
  latest_[slice] = usage;
  return was_hooked;
}

std::optional<HookUsage> SliceUsage::Latest(store::RowId slice) const {
  MutexLock lock(mu_);
  auto it = latest_.find(slice);
  if (it == latest_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::pair<store::RowId, HookUsage>> SliceUsage::DueForStore(
    const std::vector<store::RowId>& slices) const {
  std::vector<std::pair<store::RowId, HookUsage>> due;
  MutexLock lock(mu_);
  for (store::RowId id : slices) {
    auto now = latest_.find(id);
    if (now == latest_.end()) continue;
    auto stored = stored_.find(id);
    if (WorthStoring(now->second,
                     stored == stored_.end() ? nullptr : &stored->second)) {
      due.emplace_back(id, now->second);
    }
  }
  return due;
}

void SliceUsage::MarkStored(
    const std::vector<std::pair<store::RowId, HookUsage>>& rows) {
  MutexLock lock(mu_);
  for (const auto& [id, usage] : rows) {
    if (latest_.contains(id)) stored_[id] = usage;  // a release drops both
  }
}

void SliceUsage::Forget(const std::vector<store::RowId>& released) {
  MutexLock lock(mu_);
  for (store::RowId id : released) {
    latest_.erase(id);
    stored_.erase(id);
  }
}

store::SliceUsageRow SliceUsage::ToRow(store::RowId slice,
                                       const HookUsage& usage) {
  nlohmann::json j = wire::ToJson(usage.report);
  j["task_id"] = usage.task_id;
  return {slice, usage.reported_at, j.dump()};
}

std::optional<HookUsage> SliceUsage::FromRow(const store::SliceUsageRow& row) {
  const nlohmann::json j =
      nlohmann::json::parse(row.usage, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  HookUsage u;
  u.reported_at = row.reported_at;
  if (auto it = j.find("task_id"); it != j.end() && it->is_number_integer()) {
    u.task_id = it->get<store::RowId>();
  }
  u.report = wire::ReadHookReport(j);
  return u;
}

}  // namespace hf::server
