// The control plane's telemetry: label classes and the live-slice counts a
// scrape serves, rendered by prometheus-cpp.
#include "server/telemetry.h"

#include <gtest/gtest.h>

namespace hf::server {
namespace {

std::string Render(const Telemetry& t) {
  metrics::Exposition e;
  e.AddRegistry(t.registry());
  e.AddSource([&t] { return t.CollectState(); });
  return e.Render();
}

store::SliceRow Slice(store::RowId id, std::string qos,
                      std::vector<std::string> enforcement) {
  store::SliceRow s;
  s.id = id;
  s.qos_level = std::move(qos);
  s.enforcement = std::move(enforcement);
  return s;
}

TEST(TelemetryTest, PendingReasonClasses) {
  EXPECT_STREQ(PendingReasonClass(""), "not_tried");
  EXPECT_STREQ(PendingReasonClass(kNotTriedReason), "not_tried");
  EXPECT_STREQ(PendingReasonClass("never fits in this cluster: it has no GPUs"),
               "infeasible");
  EXPECT_STREQ(PendingReasonClass("insufficient GPU memory: 0 of 8 GPUs fit "
                                  "4096 MB; retrying later"),
               "memory");
  EXPECT_STREQ(PendingReasonClass("insufficient GPU compute: ..."), "compute");
  EXPECT_STREQ(PendingReasonClass("not enough free whole GPUs on one node: x"),
               "whole_gpus");
  EXPECT_STREQ(PendingReasonClass("no GPU can take it now: 3 of 8"), "no_fit");
  EXPECT_STREQ(PendingReasonClass("the scheduler could not place it (x); "
                                  "retrying"),
               "error");
  EXPECT_STREQ(PendingReasonClass("something new"), "other");
}

TEST(TelemetryTest, ReleasePaths) {
  EXPECT_STREQ(ReleasePath("gc", "orphan: task 3 is failed"), "gc");
  EXPECT_STREQ(ReleasePath("agent:n1", "task succeeded"), "terminal");
  EXPECT_STREQ(
      ReleasePath("agent:n1", "task cancelled (its slice was deleted)"),
      "admin");
  EXPECT_STREQ(ReleasePath("token:4", "task cancelled"), "terminal");
  EXPECT_STREQ(ReleasePath("token:4", "no longer needed"), "admin");
  EXPECT_STREQ(ReleasePath("recovery", "x"), "other");
}

TEST(TelemetryTest, SlicesByLabelFollowPlacementChangeAndRelease) {
  Telemetry t;
  t.SliceLive(Slice(1, "bronze", {}));
  t.SliceLive(Slice(2, "bronze", {}));
  t.SliceLive(Slice(3, "silver", {"hook", "mps"}));
  std::string text = Render(t);
  EXPECT_NE(
      text.find("heteroflow_slices{enforcement=\"none\",qos=\"bronze\"} 2"),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find("heteroflow_slices{enforcement=\"hook+mps\",qos=\"silver\"} 1"),
      std::string::npos)
      << text;
  // The hook attached to slice 1: it moves, it is not counted twice.
  t.SliceLive(Slice(1, "bronze", {"hook"}));
  t.NoteReleasePath(2, "gc");
  t.SliceReleased(2);
  t.SliceReleased(2);  // a second release of the same slice counts once
  text = Render(t);
  EXPECT_NE(
      text.find("heteroflow_slices{enforcement=\"hook\",qos=\"bronze\"} 1"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find("enforcement=\"none\",qos=\"bronze\""), std::string::npos)
      << text;
  EXPECT_NE(text.find("heteroflow_slice_releases_total{path=\"gc\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("heteroflow_slice_releases_total{path=\"terminal\"} 0"),
            std::string::npos)
      << text;
  t.Bound(0.3);
  t.SetPending({{"memory", 4}});
  text = Render(t);
  EXPECT_NE(text.find("heteroflow_binds_total 1"), std::string::npos) << text;
  EXPECT_NE(
      text.find("heteroflow_scheduling_latency_seconds_bucket{le=\"0.5\"} 1"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("heteroflow_pending_tasks{reason=\"memory\"} 4"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("heteroflow_pending_tasks{reason=\"not_tried\"} 0"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace hf::server
