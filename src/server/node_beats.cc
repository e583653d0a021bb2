// NodeBeats (node_beats.h).
#include "server/node_beats.h"

namespace hf::server {

using store::Millis;
using store::RowId;

void NodeBeats::Seen(RowId node, Millis monotonic_now) {
  MutexLock lock(mu_);
  seen_[node] = monotonic_now;
}

std::vector<std::pair<RowId, Millis>> NodeBeats::SeenTimes() const {
  MutexLock lock(mu_);
  return {seen_.begin(), seen_.end()};
}

void NodeBeats::Applied(const wire::NodeReport& report,
                        const store::NodeRow& row, Millis wall_now,
                        Millis monotonic_now) {
  Last last;
  last.report = report;
  last.report.number.reset();
  last.number = report.number;
  last.row = row;
  last.written_at = wall_now;
  MutexLock lock(mu_);
  seen_[row.id] = monotonic_now;
  names_[row.id] = report.name;
  last_[report.name] = std::move(last);
}

NodeBeats::Decision NodeBeats::Classify(const wire::NodeReport& report,
                                        Millis wall_now, Millis monotonic_now) {
  MutexLock lock(mu_);
  auto it = last_.find(report.name);
  if (it == last_.end()) return {};
  Last& last = it->second;
  if (last.number.has_value() != report.number.has_value()) return {};
  if (report.number && !(*last.number < *report.number)) return {};
  // Equal but for the number (cleared in the stored copy).
  wire::NodeReport bare = report;
  bare.number.reset();
  if (!(bare == last.report)) return {};
  seen_[last.row.id] = monotonic_now;
  // Nodes that registered together (a cluster's agents restarted) do not
  // all come due together: each waits write_every plus up to 7/8 of it,
  // by its id.
  const Millis every = write_every_ + write_every_ / 8 * (last.row.id % 8);
  if (wall_now - last.written_at >= every || wall_now < last.written_at) {
    // Noted once written (Written); until then the report is not applied.
    return {Kind::kRefresh, last.row};
  }
  last.number = report.number;
  last.beat_at = wall_now;
  return {Kind::kRepeat, last.row};
}

void NodeBeats::Written(const wire::NodeReport& report,
                        const store::NodeRow& row, Millis wall_now) {
  MutexLock lock(mu_);
  auto it = last_.find(report.name);
  if (it == last_.end() || it->second.row.id != row.id) return;
  it->second.number = report.number;
  it->second.row = row;
  it->second.written_at = wall_now;
  it->second.beat_at.reset();
}

std::optional<wire::ReportNumber> NodeBeats::NewestNumber(
    const std::string& node_name) const {
  MutexLock lock(mu_);
  auto it = last_.find(node_name);
  if (it == last_.end()) return std::nullopt;
  return it->second.number;
}

std::optional<Millis> NodeBeats::LastBeatAt(RowId node) const {
  MutexLock lock(mu_);
  auto name = names_.find(node);
  if (name == names_.end()) return std::nullopt;
  auto it = last_.find(name->second);
  if (it == last_.end()) return std::nullopt;
  return it->second.beat_at;
}

void NodeBeats::Forget() {
  MutexLock lock(mu_);
  last_.clear();
  names_.clear();
}

}  // namespace hf::server
