#include "server/mig_book.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace hf::server {

void MigBook::LoadNoted(const std::string& text) {
  if (text.empty()) return;
  // Written by this server only; anything unreadable is noted afresh.
  const nlohmann::json j =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  MutexLock lock(mu_);
  for (const auto& [device, where] : j.items()) {
    if (where.is_object() && where.contains("node") &&
        where["node"].is_number_integer() && where.contains("gpu") &&
        where["gpu"].is_number_integer()) {
      noted_[device] =
          GpuKey{where["node"].get<store::RowId>(), where["gpu"].get<int>()};
    }
  }
}

MigBook::Noted MigBook::NoteReport(
    store::RowId node, const std::map<int, std::vector<std::string>>& reported,
    const std::set<std::string>& owned, const std::set<int>& creating) {
  Noted out;
  MutexLock lock(mu_);
  for (const auto& [index, devices] : reported) {
    const GpuKey key{node, index};
    reported_[key] = devices;
    if (creating.contains(index)) continue;  // cannot tell yet
    std::set<std::string> orphans;
    for (const std::string& d : devices) {
      if (owned.contains(d)) continue;
      orphans.insert(d);
      if (!noted_.contains(d)) out.fresh.emplace_back(index, d);
    }
    if (orphans.empty()) {
      orphans_.erase(key);
    } else {
      orphans_[key] = std::move(orphans);
    }
  }
  // Forget the notes of partitions gone from the GPUs reported now.
  bool pruned = false;
  for (auto it = noted_.begin(); it != noted_.end();) {
    const GpuKey& where = it->second;
    auto now_there = reported.find(where.index);
    const bool gone = where.node_id == node && now_there != reported.end() &&
                      std::ranges::find(now_there->second, it->first) ==
                          now_there->second.end();
    if (gone) {
      it = noted_.erase(it);
      pruned = true;
    } else {
      ++it;
    }
  }
  if (out.fresh.empty() && !pruned) return out;
  for (const auto& [index, device] : out.fresh) {
    noted_[device] = GpuKey{node, index};
  }
  out.noted = NotedTextLocked();
  return out;
}

std::string MigBook::NotedTextLocked() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [device, where] : noted_) {
    j[device] = {{"node", where.node_id}, {"gpu", where.index}};
  }
  return j.dump();
}

void MigBook::MarkFull(const GpuKey& gpu, store::Millis until) {
  MutexLock lock(mu_);
  full_[gpu] = Full{reported_[gpu], until};
}

std::string MigBook::Blocked(const GpuKey& gpu, store::Millis now) const {
  MutexLock lock(mu_);
  return BlockedLocked(gpu, now);
}

std::string MigBook::BlockedLocked(const GpuKey& gpu, store::Millis now) const {
  auto orphans = orphans_.find(gpu);
  if (orphans != orphans_.end() && !orphans->second.empty()) {
    return "holds " + std::to_string(orphans->second.size()) +
           " partition(s) no slice owns (MIG_PARTITION_ORPHANED); it takes "
           "no new gold slice until they are gone";
  }
  auto full = full_.find(gpu);
  auto reported = reported_.find(gpu);
  if (full != full_.end() && reported != reported_.end() &&
      full->second.devices == reported->second && now < full->second.until) {
    return "had no room for the last partition asked of it; it takes no new "
           "gold slice until its partitions change";
  }
  return "";
}

std::map<GpuKey, std::string> MigBook::AllBlocked(store::Millis now) const {
  MutexLock lock(mu_);
  std::map<GpuKey, std::string> out;
  const auto note = [&](const GpuKey& key) {
    mu_.AssertHeld();  // runs here, under mu_
    if (out.contains(key)) return;
    std::string why = BlockedLocked(key, now);
    if (!why.empty()) out.emplace(key, std::move(why));
  };
  for (const auto& [key, orphans] : orphans_) note(key);
  for (const auto& [key, full] : full_) note(key);
  return out;
}

}  // namespace hf::server
