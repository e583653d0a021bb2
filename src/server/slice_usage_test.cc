// SliceUsage (slice_usage.h): a report is kept only for a live slice, which
// reports are worth storing, a release drops what it held, and the stored
// row reads back as written.
#include "server/slice_usage.h"

#include <gtest/gtest.h>

namespace hf::server {
namespace {

HookUsage Usage(std::int64_t used_bytes, store::Millis at) {
  HookUsage u;
  u.report.attached = true;
  u.report.processes = 1;
  u.report.quota_bytes = 1'000'000;
  u.report.used_bytes = used_bytes;
  u.task_id = 9;
  u.reported_at = at;
  return u;
}

const auto kLive = [] { return true; };

TEST(SliceUsageTest, OnlyALiveSliceKeepsItsReport) {
  SliceUsage book;
  EXPECT_TRUE(book.Record(1, Usage(10, 0), [] { return false; }));
  EXPECT_FALSE(book.Latest(1).has_value());
  book.Record(1, Usage(10, 0), kLive);
  ASSERT_TRUE(book.Latest(1).has_value());
  EXPECT_EQ(book.Latest(1)->report.used_bytes, 10);
  book.Forget({1});
  EXPECT_FALSE(book.Latest(1).has_value());
}

TEST(SliceUsageTest, TellsWhetherTheLastReportNamedAnUnhookedProcess) {
  SliceUsage book;
  HookUsage bad = Usage(10, 0);
  bad.report.unhooked_pids = {4242};
  EXPECT_TRUE(book.Record(1, bad, kLive));  // nothing before it
  EXPECT_FALSE(book.Record(1, Usage(10, 1), kLive));
  EXPECT_TRUE(book.Record(1, Usage(10, 2), kLive));
}

TEST(SliceUsageTest, StoresWhatChangedMateriallyOrGrewOld) {
  SliceUsage book;
  book.Record(1, Usage(100'000, 0), kLive);
  auto due = book.DueForStore({1, 2});  // 2: no report
  ASSERT_EQ(due.size(), 1U);
  book.MarkStored(due);
  // 4% of the quota later, soon after: not worth a write.
  book.Record(1, Usage(140'000, 1'000), kLive);
  EXPECT_TRUE(book.DueForStore({1}).empty());
  // More than 5%: stored.
  book.Record(1, Usage(160'000, 2'000), kLive);
  ASSERT_EQ(book.DueForStore({1}).size(), 1U);
  book.MarkStored(book.DueForStore({1}));
  // Unchanged but old: stored again.
  book.Record(1, Usage(160'000, 2'000 + kSliceUsagePersistMs), kLive);
  EXPECT_EQ(book.DueForStore({1}).size(), 1U);
  // A released slice's row is not remembered as stored.
  const auto late = book.DueForStore({1});
  book.Forget({1});
  book.MarkStored(late);
  book.Record(1, Usage(160'000, 2'000 + kSliceUsagePersistMs), kLive);
  EXPECT_EQ(book.DueForStore({1}).size(), 1U);
}

TEST(SliceUsageTest, TheStoredRowReadsBackAsWritten) {
  const HookUsage u = Usage(123, 456);
  const store::SliceUsageRow row = SliceUsage::ToRow(5, u);
  EXPECT_EQ(row.slice_id, 5);
  EXPECT_EQ(row.reported_at, 456);
  auto back = SliceUsage::FromRow(row);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->task_id, 9);
  EXPECT_EQ(back->report.used_bytes, 123);
  EXPECT_EQ(back->report.quota_bytes, u.report.quota_bytes);
  EXPECT_FALSE(SliceUsage::FromRow({5, 456, "not json"}).has_value());
}

}  // namespace
}  // namespace hf::server
