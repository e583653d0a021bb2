// The control plane's Prometheus series (docs/METRICS.md): event counters
// and histograms updated where the event happens (binds, releases, MIG
// commands, commits, HTTP requests), and the live slices by label kept here
// so a scrape counts them without the ledger's lock.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/thread_annotations.h"
#include "metrics/metrics.h"
#include "store/store.h"

namespace hf::server {

// The bounded label values of heteroflow_slice_releases_total{path}.
inline constexpr const char* kReleasePaths[] = {"terminal", "admin", "gc",
                                                "other"};
// heteroflow_pending_tasks{reason}: the class of a pending task's reason.
inline constexpr const char* kPendingReasons[] = {
    "not_tried", "memory",     "compute", "whole_gpus",
    "no_fit",    "infeasible", "error",   "other"};

// A new task's pending_reason until the scheduler has tried it.
inline constexpr const char* kNotTriedReason = "waiting for the scheduler";

// The class of a pending task's `pending_reason` (one of kPendingReasons):
// "not_tried" for none or kNotTriedReason.
const char* PendingReasonClass(const std::string& pending_reason);
// The release path of a release by `actor` for `reason` (kReleasePaths).
const char* ReleasePath(const std::string& actor, const std::string& reason);
// "mps+hook"; "none" when empty. Sorted, so the same set is one label.
std::string EnforcementLabel(std::vector<std::string> enforcement);

class Telemetry {
 public:
  Telemetry();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // A slice is live (placed, restored, or its enforcement changed).
  void SliceLive(const store::SliceRow& slice);
  // The release of slice `id` being written goes by `path` (kReleasePaths);
  // set, not added, so a transaction that reruns notes it once.
  void NoteReleasePath(store::RowId id, const char* path);
  // A slice is released (after the commit): counted once, by the path noted.
  void SliceReleased(store::RowId id);
  void Bound(double latency_seconds);
  void StoreCommit(double seconds);
  void MigCommandFinished(const std::string& action, const std::string& outcome,
                          double seconds);
  void HttpRequest(const std::string& route, const std::string& method,
                   int code, double seconds);
  // Pending tasks by reason class, after each bind pass.
  void SetPending(std::map<std::string, int> by_reason);
  // GPUs held for a task that waited long (0: no hold), after each pass.
  void SetHeldGpus(int gpus);

  // heteroflow_slices, heteroflow_pending_tasks and heteroflow_held_gpus.
  metrics::Families CollectState() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* binds_;
  prometheus::Family<prometheus::Counter>* releases_;
  prometheus::Histogram* scheduling_;
  prometheus::Histogram* commits_;
  prometheus::Family<prometheus::Histogram>* mig_;
  prometheus::Family<prometheus::Counter>* http_requests_;
  prometheus::Family<prometheus::Histogram>* http_seconds_;
  std::map<std::string, prometheus::Counter*> release_counters_;

  mutable Mutex mu_;
  struct SliceLabels {
    std::string qos;
    std::string enforcement;
  };
  std::unordered_map<store::RowId, SliceLabels> slices_ HF_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, int> slice_counts_
      HF_GUARDED_BY(mu_);
  std::map<std::string, int> pending_ HF_GUARDED_BY(mu_);
  int held_gpus_ HF_GUARDED_BY(mu_) = 0;
  std::unordered_map<store::RowId, const char*> release_paths_
      HF_GUARDED_BY(mu_);
};

}  // namespace hf::server
