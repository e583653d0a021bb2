// NodeBeats (node_beats.h): which heartbeats are repeats, when a repeat's
// row is due, and what a restart forgets.
#include "server/node_beats.h"

#include <gtest/gtest.h>

namespace hf::server {
namespace {

using Kind = NodeBeats::Kind;
using wire::NodeReport;
using wire::ReportNumber;

constexpr store::Millis kEvery = 15'000;

NodeReport Report(std::optional<std::int64_t> seq, bool lost = false) {
  NodeReport r;
  r.name = "n1";
  r.cpu_milli = 64'000;
  wire::GpuReport g;
  g.uuid = "GPU-0";
  g.model = "A100";
  g.memory_mib = 81'920;
  g.lost = lost;
  r.gpus = {g};
  if (seq) r.number = ReportNumber{1, *seq};
  return r;
}

store::NodeRow Row(store::RowId id) {
  store::NodeRow row;
  row.id = id;
  row.name = "n1";
  return row;
}

TEST(NodeBeatsTest, OnlyANewerRepeatOfTheAppliedReportIsARepeat) {
  NodeBeats beats(kEvery);
  EXPECT_EQ(beats.Classify(Report(1), 0, 0).kind, Kind::kApply);  // unknown
  beats.Applied(Report(1), Row(8), 1'000, 50);
  const NodeBeats::Decision repeat = beats.Classify(Report(2), 2'000, 60);
  EXPECT_EQ(repeat.kind, Kind::kRepeat);
  EXPECT_EQ(repeat.row.id, 8);
  EXPECT_EQ(beats.LastBeatAt(8), 2'000);
  EXPECT_EQ(beats.NewestNumber("n1"), (ReportNumber{1, 2}));
  // Seen at the repeat.
  ASSERT_EQ(beats.SeenTimes().size(), 1U);
  EXPECT_EQ(beats.SeenTimes()[0].second, 60);
  // Not newer, changed, or numbered differently: applied in full.
  EXPECT_EQ(beats.Classify(Report(2), 3'000, 70).kind, Kind::kApply);
  EXPECT_EQ(beats.Classify(Report(3, /*lost=*/true), 3'000, 70).kind,
            Kind::kApply);
  EXPECT_EQ(beats.Classify(Report(std::nullopt), 3'000, 70).kind, Kind::kApply);
  NodeReport other = Report(3);
  other.name = "n2";
  EXPECT_EQ(beats.Classify(other, 3'000, 70).kind, Kind::kApply);
}

TEST(NodeBeatsTest, UnnumberedReportsRepeatToo) {
  NodeBeats beats(kEvery);
  beats.Applied(Report(std::nullopt), Row(1), 0, 0);
  EXPECT_EQ(beats.Classify(Report(std::nullopt), 1'000, 1).kind, Kind::kRepeat);
  EXPECT_EQ(beats.Classify(Report(5), 1'000, 1).kind, Kind::kApply);
}

TEST(NodeBeatsTest, ARepeatIsDueAWriteAfterItsNodesShareOfTheSpread) {
  // Node 8 waits kEvery (8 % 8 = 0); node 15 waits kEvery + 7/8 of it.
  for (const auto& [id, wait] :
       {std::pair<store::RowId, store::Millis>{8, kEvery},
        {15, kEvery + kEvery / 8 * 7}}) {
    NodeBeats beats(kEvery);
    beats.Applied(Report(1), Row(id), 0, 0);
    EXPECT_EQ(beats.Classify(Report(2), wait - 1, 1).kind, Kind::kRepeat) << id;
    const NodeBeats::Decision due = beats.Classify(Report(3), wait, 2);
    EXPECT_EQ(due.kind, Kind::kRefresh) << id;
    // Not taken as applied until written: the number stays the last one.
    EXPECT_EQ(beats.NewestNumber("n1"), (ReportNumber{1, 2}));
    store::NodeRow written = due.row;
    written.last_heartbeat_at = wait;
    beats.Written(Report(3), written, wait);
    EXPECT_EQ(beats.NewestNumber("n1"), (ReportNumber{1, 3}));
    EXPECT_EQ(beats.LastBeatAt(id), std::nullopt);  // the row has it
    EXPECT_EQ(beats.Classify(Report(4), wait + 1, 3).kind, Kind::kRepeat);
  }
}

TEST(NodeBeatsTest, ForgetKeepsTheSeenTimesOnly) {
  NodeBeats beats(kEvery);
  beats.Applied(Report(1), Row(3), 0, 10);
  beats.Forget();
  EXPECT_EQ(beats.Classify(Report(2), 1'000, 20).kind, Kind::kApply);
  EXPECT_EQ(beats.NewestNumber("n1"), std::nullopt);
  ASSERT_EQ(beats.SeenTimes().size(), 1U);
  EXPECT_EQ(beats.SeenTimes()[0].second, 10);
}

}  // namespace
}  // namespace hf::server
