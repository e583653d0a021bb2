// The interference measure from the regions' kernel counters.
#include "agent/interference.h"

#include <gtest/gtest.h>

namespace hf::agent {
namespace {

// A slice's counters, grown round by round.
class Counters {
 public:
  // `n` more launches of class `key`, each taking `ns`.
  Counters& Add(std::uint64_t key, std::uint64_t n, std::uint64_t ns) {
    KernelCounts& k = classes_[key];
    k.key = key;
    k.samples += n;
    k.total_ns += n * ns;
    return *this;
  }
  std::vector<KernelCounts> Now() const {
    std::vector<KernelCounts> out;
    for (const auto& [key, k] : classes_) out.push_back(k);
    return out;
  }

 private:
  std::map<std::uint64_t, KernelCounts> classes_;
};

TEST(InterferenceMeterTest, SharedTimeAgainstTheSlicesOwnTimeAlone) {
  InterferenceMeter m;
  Counters c;
  m.Observe(1, c.Now(), false);  // the first round only starts the counters
  for (int i = 0; i < 3; ++i) m.Observe(1, c.Add(7, 20, 1000).Now(), false);
  EXPECT_FALSE(m.Read(1).ratio) << "alone: nothing to compare yet";
  for (int i = 0; i < 3; ++i) m.Observe(1, c.Add(7, 20, 1500).Now(), true);
  const InterferenceMeter::Reading r = m.Read(1);
  ASSERT_TRUE(r.ratio);
  EXPECT_NEAR(*r.ratio, 1.5, 1e-9);
  EXPECT_GT(r.samples, 20);
  EXPECT_LE(r.samples, 60);
}

TEST(InterferenceMeterTest, EachClassIsComparedWithItsOwnBaseline) {
  InterferenceMeter m;
  Counters c;
  m.Observe(1, c.Now(), false);
  // A short and a long kernel: a mix that changes while shared must not
  // read as interference.
  m.Observe(1, c.Add(1, 10, 100).Add(2, 10, 10000).Now(), false);
  m.Observe(1, c.Add(1, 50, 100).Add(2, 1, 10000).Now(), true);
  ASSERT_TRUE(m.Read(1).ratio);
  EXPECT_NEAR(*m.Read(1).ratio, 1.0, 1e-9);
  // Both twice as slow.
  m.Observe(1, c.Add(1, 30, 200).Add(2, 30, 20000).Now(), true);
  EXPECT_GT(*m.Read(1).ratio, 1.7);
}

TEST(InterferenceMeterTest, NeverAloneIsNotMeasured) {
  InterferenceMeter m;
  Counters c;
  m.Observe(1, c.Now(), true);
  for (int i = 0; i < 10; ++i) m.Observe(1, c.Add(7, 50, 3000).Now(), true);
  EXPECT_FALSE(m.Read(1).ratio);
}

TEST(InterferenceMeterTest, AFigureFadesWhenTheSliceIsAloneAgain) {
  InterferenceMeter m;
  Counters c;
  m.Observe(1, c.Now(), false);
  m.Observe(1, c.Add(7, 20, 1000).Now(), false);
  m.Observe(1, c.Add(7, 20, 2000).Now(), true);
  ASSERT_TRUE(m.Read(1).ratio);
  // Idle rounds age nothing.
  for (int i = 0; i < 20; ++i) m.Observe(1, c.Now(), false);
  ASSERT_TRUE(m.Read(1).ratio);
  for (int i = 0; i < 10; ++i) m.Observe(1, c.Add(7, 20, 1000).Now(), false);
  EXPECT_FALSE(m.Read(1).ratio);
}

TEST(InterferenceMeterTest, ANewRegionStartsAfreshAndSlicesAreForgotten) {
  InterferenceMeter m;
  Counters c;
  m.Observe(1, c.Now(), false);
  m.Observe(1, c.Add(7, 20, 1000).Now(), false);
  m.Observe(1, c.Add(7, 20, 1000).Now(), true);
  ASSERT_TRUE(m.Read(1).ratio);
  // The counters went back (a new region): no negative growth is taken.
  Counters fresh;
  m.Observe(1, fresh.Add(7, 1, 50).Now(), true);
  EXPECT_NEAR(*m.Read(1).ratio, 1.0, 0.2);
  m.Retain({2});
  EXPECT_FALSE(m.Read(1).ratio);
}

}  // namespace
}  // namespace hf::agent
