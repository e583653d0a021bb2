// MigBook (mig_book.h): orphaned partitions are recorded once and block
// their GPU until gone, a create with no room blocks its GPU until the
// partitions change or the time passes, and the recorded set survives a
// restart through its stored text.
#include "server/mig_book.h"

#include <gtest/gtest.h>

namespace hf::server {
namespace {

constexpr store::RowId kNode = 4;
const GpuKey kGpu0{kNode, 0};
const GpuKey kGpu1{kNode, 1};

TEST(MigBookTest, AnOrphanIsRecordedOnceAndBlocksItsGpuUntilGone) {
  MigBook book;
  auto first = book.NoteReport(kNode, {{0, {"MIG-a", "MIG-b"}}, {1, {}}},
                               /*owned=*/{"MIG-a"}, /*creating=*/{});
  ASSERT_EQ(first.fresh.size(), 1U);
  EXPECT_EQ(first.fresh[0], std::make_pair(0, std::string("MIG-b")));
  ASSERT_TRUE(first.noted.has_value());
  EXPECT_NE(book.Blocked(kGpu0, 0).find("MIG_PARTITION_ORPHANED"),
            std::string::npos);
  EXPECT_EQ(book.Blocked(kGpu1, 0), "");
  const auto blocked = book.AllBlocked(0);
  ASSERT_EQ(blocked.size(), 1U);
  EXPECT_EQ(blocked.begin()->first, kGpu0);
  EXPECT_EQ(blocked.begin()->second, book.Blocked(kGpu0, 0));

  // The same report again: nothing new to record or store.
  auto again = book.NoteReport(kNode, {{0, {"MIG-a", "MIG-b"}}}, {"MIG-a"}, {});
  EXPECT_TRUE(again.fresh.empty());
  EXPECT_FALSE(again.noted.has_value());

  // Destroyed: the GPU takes gold slices again and the note is dropped.
  auto gone = book.NoteReport(kNode, {{0, {"MIG-a"}}}, {"MIG-a"}, {});
  EXPECT_TRUE(gone.fresh.empty());
  ASSERT_TRUE(gone.noted.has_value());
  EXPECT_EQ(*gone.noted, "{}");
  EXPECT_EQ(book.Blocked(kGpu0, 0), "");
}

TEST(MigBookTest, AGpuWithACreateInFlightIsNotJudged) {
  MigBook book;
  auto noted = book.NoteReport(kNode, {{0, {"MIG-new"}}}, {}, {0});
  EXPECT_TRUE(noted.fresh.empty());
  EXPECT_EQ(book.Blocked(kGpu0, 0), "");
}

TEST(MigBookTest, ARecordedOrphanIsNotRecordedAgainAfterARestart) {
  MigBook before;
  auto noted = before.NoteReport(kNode, {{1, {"MIG-x"}}}, {}, {});
  ASSERT_TRUE(noted.noted.has_value());
  MigBook after;
  after.LoadNoted(*noted.noted);
  auto again = after.NoteReport(kNode, {{1, {"MIG-x"}}}, {}, {});
  EXPECT_TRUE(again.fresh.empty());
  // Still blocks its GPU: the restart forgot nothing of what it holds.
  EXPECT_NE(after.Blocked(kGpu1, 0), "");
  // Text that does not read is dropped (noted afresh).
  MigBook garbled;
  garbled.LoadNoted("{not json");
  EXPECT_EQ(garbled.NoteReport(kNode, {{1, {"MIG-x"}}}, {}, {}).fresh.size(),
            1U);
}

TEST(MigBookTest, ACreateWithNoRoomBlocksUntilThePartitionsChangeOrTimePasses) {
  MigBook book;
  (void)book.NoteReport(kNode, {{0, {"MIG-a"}}}, {"MIG-a"}, {});
  book.MarkFull(kGpu0, /*until=*/1'000);
  EXPECT_NE(book.Blocked(kGpu0, 999).find("no room"), std::string::npos);
  EXPECT_EQ(book.AllBlocked(999).size(), 1U);
  EXPECT_EQ(book.Blocked(kGpu0, 1'000), "");  // the time passed
  EXPECT_TRUE(book.AllBlocked(1'000).empty());
  // The partitions changed: tried again at once.
  (void)book.NoteReport(kNode, {{0, {}}}, {}, {});
  EXPECT_EQ(book.Blocked(kGpu0, 0), "");
}

}  // namespace
}  // namespace hf::server
