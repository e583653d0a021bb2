#include "server/telemetry.h"

#include <algorithm>

namespace hf::server {

const char* PendingReasonClass(const std::string& r) {
  if (r.empty() || r == kNotTriedReason) return "not_tried";
  if (r.starts_with("never fits")) return "infeasible";
  if (r.starts_with("insufficient GPU memory")) return "memory";
  if (r.starts_with("insufficient GPU compute")) return "compute";
  if (r.starts_with("not enough free whole GPUs")) return "whole_gpus";
  if (r.starts_with("no GPU can take it now") || r.starts_with("no node has") ||
      r.starts_with("the placement policy chose no GPU")) {
    return "no_fit";
  }
  if (r.find("could not place it") != std::string::npos) return "error";
  return "other";
}

const char* ReleasePath(const std::string& actor, const std::string& reason) {
  if (actor == "gc") return "gc";
  if (reason.find("its slice was deleted") != std::string::npos) {
    return "admin";
  }
  if (actor.starts_with("agent:")) return "terminal";
  if (actor.starts_with("token:")) {
    return reason == "task cancelled" ? "terminal" : "admin";
  }
  return "other";
}

std::string EnforcementLabel(std::vector<std::string> enforcement) {
  if (enforcement.empty()) return "none";
  std::sort(enforcement.begin(), enforcement.end());
  std::string out;
  for (const std::string& e : enforcement) {
    out += (out.empty() ? "" : "+") + e;
  }
  return out;
}

Telemetry::Telemetry() : registry_(std::make_shared<prometheus::Registry>()) {
  binds_ = &prometheus::BuildCounter()
                .Name("heteroflow_binds_total")
                .Help("Tasks bound to a slice by the scheduler.")
                .Register(*registry_)
                .Add({});
  releases_ = &prometheus::BuildCounter()
                   .Name("heteroflow_slice_releases_total")
                   .Help(
                       "Slices released, by path: terminal (the task "
                       "ended or was cancelled), admin (an operator "
                       "deleted it), gc (orphan or lost-node collection).")
                   .Register(*registry_);
  for (const char* p : kReleasePaths) {
    release_counters_[p] = &releases_->Add({{"path", p}});
  }
  scheduling_ = &prometheus::BuildHistogram()
                     .Name("heteroflow_scheduling_latency_seconds")
                     .Help("From a task's creation to its bind.")
                     .Register(*registry_)
                     .Add({}, metrics::SecondsBuckets());
  commits_ = &prometheus::BuildHistogram()
                  .Name("heteroflow_store_commit_duration_seconds")
                  .Help(
                      "Control-plane store transactions, from the call to "
                      "the durable commit.")
                  .Register(*registry_)
                  .Add({}, metrics::SecondsBuckets());
  mig_ = &prometheus::BuildHistogram()
              .Name("heteroflow_mig_command_duration_seconds")
              .Help(
                  "MIG commands, from creation to the agent's result, by "
                  "action (create, destroy) and outcome (done, failed).")
              .Register(*registry_);
  http_requests_ = &prometheus::BuildCounter()
                        .Name("heteroflow_http_requests_total")
                        .Help(
                            "HTTP requests by route template, method and "
                            "status code.")
                        .Register(*registry_);
  http_seconds_ = &prometheus::BuildHistogram()
                       .Name("heteroflow_http_request_duration_seconds")
                       .Help(
                           "HTTP request latency by route template and "
                           "method.")
                       .Register(*registry_);
}

void Telemetry::SliceLive(const store::SliceRow& slice) {
  SliceLabels labels{slice.qos_level, EnforcementLabel(slice.enforcement)};
  MutexLock lock(mu_);
  auto [it, inserted] = slices_.try_emplace(slice.id, labels);
  if (!inserted) {
    auto old = slice_counts_.find({it->second.qos, it->second.enforcement});
    if (old != slice_counts_.end() && --old->second == 0) {
      slice_counts_.erase(old);
    }
    it->second = labels;
  }
  ++slice_counts_[{labels.qos, labels.enforcement}];
}

void Telemetry::NoteReleasePath(store::RowId id, const char* path) {
  MutexLock lock(mu_);
  release_paths_[id] = path;
}

void Telemetry::SliceReleased(store::RowId id) {
  std::string path = "other";
  {
    MutexLock lock(mu_);
    auto p = release_paths_.find(id);
    if (p != release_paths_.end()) {
      path = p->second;
      release_paths_.erase(p);
    }
    auto it = slices_.find(id);
    if (it == slices_.end()) return;  // counted once
    auto c = slice_counts_.find({it->second.qos, it->second.enforcement});
    if (c != slice_counts_.end() && --c->second == 0) slice_counts_.erase(c);
    slices_.erase(it);
  }
  auto counter = release_counters_.find(path);
  (counter != release_counters_.end() ? counter
                                      : release_counters_.find("other"))
      ->second->Increment();
}

void Telemetry::Bound(double latency_seconds) {
  binds_->Increment();
  scheduling_->Observe(std::max(0.0, latency_seconds));
}

void Telemetry::StoreCommit(double seconds) { commits_->Observe(seconds); }

void Telemetry::MigCommandFinished(const std::string& action,
                                   const std::string& outcome, double seconds) {
  mig_->Add({{"action", action}, {"outcome", outcome}},
            metrics::SecondsBuckets())
      .Observe(std::max(0.0, seconds));
}

void Telemetry::HttpRequest(const std::string& route, const std::string& method,
                            int code, double seconds) {
  http_requests_
      ->Add({{"route", route},
             {"method", method},
             {"code", std::to_string(code)}})
      .Increment();
  http_seconds_
      ->Add({{"route", route}, {"method", method}}, metrics::SecondsBuckets())
      .Observe(seconds);
}

void Telemetry::SetPending(std::map<std::string, int> by_reason) {
  MutexLock lock(mu_);
  pending_ = std::move(by_reason);
}

void Telemetry::SetHeldGpus(int gpus) {
  MutexLock lock(mu_);
  held_gpus_ = gpus;
}

metrics::Families Telemetry::CollectState() const {
  metrics::FamilyBuilder slices("heteroflow_slices",
                                "Live slices by QoS tier and enforcement.");
  metrics::FamilyBuilder pending(
      "heteroflow_pending_tasks",
      "Tasks waiting to be bound, by the class of their pending reason.");
  metrics::FamilyBuilder held(
      "heteroflow_held_gpus",
      "GPUs held for tasks that waited long for room (0: none).");
  {
    MutexLock lock(mu_);
    held.Add({}, held_gpus_);
    for (const auto& [key, n] : slice_counts_) {
      slices.Add({{"qos", key.first}, {"enforcement", key.second}}, n);
    }
    for (const char* r : kPendingReasons) {
      auto it = pending_.find(r);
      pending.Add({{"reason", r}}, it == pending_.end() ? 0 : it->second);
    }
  }
  metrics::Families out;
  out.push_back(slices.Take());
  out.push_back(pending.Take());
  out.push_back(held.Take());
  return out;
}

}  // namespace hf::server
