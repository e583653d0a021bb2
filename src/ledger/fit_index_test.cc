// Tests for FitIndex, the augmented B+-tree behind Best-Fit placement:
// insert, erase and SetAttrs; FindFirst's ordering by (primary, rank, id), its
// min_primary bound, its pruning on every attribute (model mask included) and
// the caller's accept predicate; SizeOf / Contains / KeyOf; several trees in
// one pool; and randomized comparisons against a brute-force model, small
// (many ties) and large (trees several levels deep that split, merge,
// redistribute and collapse).
#include "ledger/fit_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

namespace hf::ledger {
namespace {

using Slot = FitIndex::Slot;

constexpr std::uint64_t kAllModels = ~std::uint64_t{0};

FitAttrs Attrs(std::int64_t compute, std::int64_t cpu = 1000,
               std::int64_t host = 1000, std::uint64_t mask = 1) {
  return FitAttrs{compute, cpu, host, mask};
}

FitAttrs Need(std::int64_t compute = 0, std::int64_t cpu = 0,
              std::int64_t host = 0, std::uint64_t mask = kAllModels) {
  return FitAttrs{compute, cpu, host, mask};
}

bool AcceptAll(Slot) { return true; }

TEST(FitAttrsTest, CoversChecksEveryAttribute) {
  const FitAttrs have{50, 2000, 4096, 0b0110};
  EXPECT_TRUE(have.Covers(FitAttrs{50, 2000, 4096, 0b0010}));
  EXPECT_TRUE(have.Covers(FitAttrs{0, 0, 0, kAllModels}));
  EXPECT_FALSE(have.Covers(FitAttrs{51, 0, 0, kAllModels}));
  EXPECT_FALSE(have.Covers(FitAttrs{0, 2001, 0, kAllModels}));
  EXPECT_FALSE(have.Covers(FitAttrs{0, 0, 4097, kAllModels}));
  EXPECT_FALSE(have.Covers(FitAttrs{0, 0, 0, 0b1001}));
  EXPECT_FALSE(have.Covers(FitAttrs{0, 0, 0, 0}));  // no model allowed
}

TEST(FitIndexTest, EmptyTree) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  EXPECT_EQ(index.SizeOf(root), 0u);
  EXPECT_FALSE(index.Contains(0));
  EXPECT_FALSE(index.Contains(12345));
  EXPECT_EQ(index.FindFirst(root, 0, Need(), AcceptAll), FitIndex::kNil);
}

TEST(FitIndexTest, InsertTracksSizeContainsAndKey) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  index.Insert(root, 3, FitKey{100, 0, 3}, Attrs(50));
  EXPECT_EQ(index.SizeOf(root), 1u);
  EXPECT_TRUE(index.Contains(3));
  EXPECT_FALSE(index.Contains(2));
  EXPECT_EQ(index.KeyOf(3), (FitKey{100, 0, 3}));
  index.Insert(root, 7, FitKey{50, 0, 7}, Attrs(50));
  index.Insert(root, 1, FitKey{75, 0, 1}, Attrs(50));
  EXPECT_EQ(index.SizeOf(root), 3u);
  EXPECT_TRUE(index.Contains(7));
  EXPECT_TRUE(index.Contains(1));
}

TEST(FitIndexTest, FindFirstReturnsSmallestPrimary) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  const std::int64_t primaries[] = {500, 100, 900, 300, 700};
  for (Slot s = 0; s < 5; ++s) {
    index.Insert(root, s, FitKey{primaries[s], 0, s}, Attrs(100));
  }
  EXPECT_EQ(index.FindFirst(root, 0, Need(), AcceptAll), 1u);  // 100
}

TEST(FitIndexTest, FindFirstHonoursMinPrimaryBound) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  const std::int64_t primaries[] = {500, 100, 900, 300, 700};
  for (Slot s = 0; s < 5; ++s) {
    index.Insert(root, s, FitKey{primaries[s], 0, s}, Attrs(100));
  }
  EXPECT_EQ(index.FindFirst(root, 100, Need(), AcceptAll), 1u);  // inclusive
  EXPECT_EQ(index.FindFirst(root, 101, Need(), AcceptAll), 3u);  // 300
  EXPECT_EQ(index.FindFirst(root, 301, Need(), AcceptAll), 0u);  // 500
  EXPECT_EQ(index.FindFirst(root, 900, Need(), AcceptAll), 2u);
  EXPECT_EQ(index.FindFirst(root, 901, Need(), AcceptAll), FitIndex::kNil);
  EXPECT_EQ(index.FindFirst(root, -5, Need(), AcceptAll), 1u);
}

TEST(FitIndexTest, TiesBreakByRankThenId) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  index.Insert(root, 0, FitKey{100, 5, 0}, Attrs(100));
  index.Insert(root, 1, FitKey{100, 2, 1}, Attrs(100));
  index.Insert(root, 2, FitKey{100, 2, 2}, Attrs(100));
  index.Insert(root, 3, FitKey{200, 0, 3}, Attrs(100));
  EXPECT_EQ(index.FindFirst(root, 0, Need(), AcceptAll), 1u);
  // Skipping slot 1 yields the next in key order: same rank, larger id.
  EXPECT_EQ(index.FindFirst(root, 0, Need(), [](Slot s) { return s != 1; }),
            2u);
  EXPECT_EQ(
      index.FindFirst(root, 0, Need(), [](Slot s) { return s != 1 && s != 2; }),
      0u);
  EXPECT_EQ(index.FindFirst(root, 0, Need(), [](Slot s) { return s == 3; }),
            3u);
}

TEST(FitIndexTest, FitKeyOrdering) {
  EXPECT_LT((FitKey{1, 9, 9}), (FitKey{2, 0, 0}));
  EXPECT_LT((FitKey{1, 1, 9}), (FitKey{1, 2, 0}));
  EXPECT_LT((FitKey{1, 1, 1}), (FitKey{1, 1, 2}));
  EXPECT_EQ((FitKey{1, 1, 1}), (FitKey{1, 1, 1}));
}

TEST(FitIndexTest, FindFirstPrunesOnEachAttribute) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  // Increasing primary; each later entry is stronger in one attribute.
  index.Insert(root, 0, FitKey{10, 0, 0}, FitAttrs{10, 100, 100, 0b001});
  index.Insert(root, 1, FitKey{20, 0, 1}, FitAttrs{90, 100, 100, 0b001});
  index.Insert(root, 2, FitKey{30, 0, 2}, FitAttrs{10, 900, 100, 0b001});
  index.Insert(root, 3, FitKey{40, 0, 3}, FitAttrs{10, 100, 900, 0b001});
  index.Insert(root, 4, FitKey{50, 0, 4}, FitAttrs{10, 100, 100, 0b100});
  EXPECT_EQ(index.FindFirst(root, 0, Need(0, 0, 0, 0b001), AcceptAll), 0u);
  EXPECT_EQ(index.FindFirst(root, 0, Need(50), AcceptAll), 1u);
  EXPECT_EQ(index.FindFirst(root, 0, Need(0, 500), AcceptAll), 2u);
  EXPECT_EQ(index.FindFirst(root, 0, Need(0, 0, 500), AcceptAll), 3u);
  EXPECT_EQ(index.FindFirst(root, 0, Need(0, 0, 0, 0b100), AcceptAll), 4u);
  EXPECT_EQ(index.FindFirst(root, 0, Need(0, 0, 0, 0b110), AcceptAll), 4u);
  EXPECT_EQ(index.FindFirst(root, 0, Need(0, 0, 0, 0b010), AcceptAll),
            FitIndex::kNil);
  EXPECT_EQ(index.FindFirst(root, 0, Need(0, 0, 0, 0), AcceptAll),
            FitIndex::kNil);
  // Aggregates pass (max compute 90, max cpu 900) but no single entry has
  // both: the exact check must reject every entry.
  EXPECT_EQ(index.FindFirst(root, 0, Need(50, 500), AcceptAll), FitIndex::kNil);
  EXPECT_EQ(index.FindFirst(root, 0, Need(91), AcceptAll), FitIndex::kNil);
}

TEST(FitIndexTest, AcceptPredicateHasTheLastWord) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  for (Slot s = 0; s < 10; ++s) {
    index.Insert(root, s, FitKey{static_cast<std::int64_t>(s) * 10, 0, s},
                 Attrs(100));
  }
  std::vector<Slot> asked;
  const Slot found = index.FindFirst(root, 25, Need(), [&](Slot s) {
    asked.push_back(s);
    return s % 4 == 0;
  });
  EXPECT_EQ(found, 4u);
  // Only entries at or above the bound are offered, in key order.
  for (Slot s : asked) EXPECT_GE(s, 3u);
  ASSERT_FALSE(asked.empty());
  EXPECT_EQ(asked.back(), 4u);
  EXPECT_EQ(index.FindFirst(root, 0, Need(), [](Slot) { return false; }),
            FitIndex::kNil);
}

TEST(FitIndexTest, EraseRemovesEntry) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  for (Slot s = 0; s < 6; ++s) {
    index.Insert(root, s, FitKey{static_cast<std::int64_t>(s), 0, s},
                 Attrs(100));
  }
  index.Erase(root, 0);
  EXPECT_FALSE(index.Contains(0));
  EXPECT_EQ(index.SizeOf(root), 5u);
  EXPECT_EQ(index.FindFirst(root, 0, Need(), AcceptAll), 1u);
  index.Erase(root, 3);
  EXPECT_EQ(index.FindFirst(root, 3, Need(), AcceptAll), 4u);
  for (Slot s : {1u, 2u, 4u, 5u}) index.Erase(root, s);
  EXPECT_EQ(root, FitIndex::kNil);
  EXPECT_EQ(index.SizeOf(root), 0u);
  EXPECT_EQ(index.FindFirst(root, 0, Need(), AcceptAll), FitIndex::kNil);
}

TEST(FitIndexTest, ErasedSlotCanBeReinsertedWithANewKey) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  index.Insert(root, 0, FitKey{10, 0, 0}, Attrs(100));
  index.Insert(root, 1, FitKey{20, 0, 1}, Attrs(100));
  index.Erase(root, 0);
  index.Insert(root, 0, FitKey{30, 0, 0}, Attrs(100));
  EXPECT_EQ(index.KeyOf(0).primary, 30);
  EXPECT_EQ(index.FindFirst(root, 0, Need(), AcceptAll), 1u);
  EXPECT_EQ(index.FindFirst(root, 21, Need(), AcceptAll), 0u);
}

TEST(FitIndexTest, SetAttrsUpdatesAggregates) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  for (Slot s = 0; s < 8; ++s) {
    index.Insert(root, s, FitKey{static_cast<std::int64_t>(s), 0, s},
                 Attrs(10));
  }
  EXPECT_EQ(index.FindFirst(root, 0, Need(60), AcceptAll), FitIndex::kNil);
  index.SetAttrs(root, 5, Attrs(60));
  EXPECT_EQ(index.FindFirst(root, 0, Need(60), AcceptAll), 5u);
  index.SetAttrs(root, 2, Attrs(70));
  EXPECT_EQ(index.FindFirst(root, 0, Need(60), AcceptAll), 2u);
  index.SetAttrs(root, 2, Attrs(0));
  index.SetAttrs(root, 5, Attrs(0));
  EXPECT_EQ(index.FindFirst(root, 0, Need(60), AcceptAll), FitIndex::kNil);
  // Keys and sizes do not move.
  EXPECT_EQ(index.SizeOf(root), 8u);
  EXPECT_EQ(index.KeyOf(5).primary, 5);
  // Model mask updates too.
  index.SetAttrs(root, 7, Attrs(10, 1000, 1000, 0b1000));
  EXPECT_EQ(index.FindFirst(root, 0, Need(0, 0, 0, 0b1000), AcceptAll), 7u);
}

TEST(FitIndexTest, SeveralTreesShareOnePool) {
  FitIndex index;
  FitIndex::Root a = FitIndex::kNil;
  FitIndex::Root b = FitIndex::kNil;
  index.Insert(a, 0, FitKey{10, 0, 0}, Attrs(100));
  index.Insert(b, 1, FitKey{5, 0, 1}, Attrs(100));
  index.Insert(a, 2, FitKey{20, 0, 2}, Attrs(100));
  EXPECT_EQ(index.SizeOf(a), 2u);
  EXPECT_EQ(index.SizeOf(b), 1u);
  EXPECT_EQ(index.FindFirst(a, 0, Need(), AcceptAll), 0u);
  EXPECT_EQ(index.FindFirst(b, 0, Need(), AcceptAll), 1u);
  index.Erase(a, 0);
  index.Insert(b, 0, FitKey{1, 0, 0}, Attrs(100));  // moved to tree b
  EXPECT_EQ(index.FindFirst(a, 0, Need(), AcceptAll), 2u);
  EXPECT_EQ(index.FindFirst(b, 0, Need(), AcceptAll), 0u);
  EXPECT_EQ(index.SizeOf(a), 1u);
  EXPECT_EQ(index.SizeOf(b), 2u);
}

TEST(FitIndexTest, SparseSlotsGrowThePool) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  index.Insert(root, 1000, FitKey{7, 0, 1000}, Attrs(100));
  EXPECT_TRUE(index.Contains(1000));
  EXPECT_FALSE(index.Contains(999));
  EXPECT_EQ(index.FindFirst(root, 0, Need(), AcceptAll), 1000u);
}

TEST(FitIndexTest, ManySequentialInsertsStayOrdered) {
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  constexpr Slot kN = 2000;
  for (Slot s = 0; s < kN; ++s) {
    // Descending primaries, inserted in ascending slot order.
    index.Insert(root, s, FitKey{static_cast<std::int64_t>(kN - s), 0, s},
                 Attrs(s % 100));
  }
  EXPECT_EQ(index.SizeOf(root), kN);
  EXPECT_EQ(index.FindFirst(root, 0, Need(), AcceptAll), kN - 1);
  // Smallest primary with compute >= 99: slot s with s % 100 == 99 and the
  // largest s, i.e. s = 1999.
  EXPECT_EQ(index.FindFirst(root, 0, Need(99), AcceptAll), 1999u);
  EXPECT_EQ(index.FindFirst(root, 2, Need(99), AcceptAll), 1899u);
}

// ----------------------------------------------------------- randomized

// Seeded random draws: integers, and attributes in the ranges the tests
// use.
class Draws {
 public:
  explicit Draws(std::uint64_t seed) : rng_(seed) {}
  std::int64_t Uniform(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  FitAttrs Attrs() {
    return FitAttrs{Uniform(0, 100), Uniform(0, 8000), Uniform(0, 64000),
                    std::uint64_t{1} << Uniform(0, 5)};
  }
  std::mt19937_64& engine() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

// A brute-force model of a FitIndex holding several trees.
struct ModelEntry {
  int tree = -1;  // -1: in no tree
  FitKey key;
  FitAttrs attrs;
};

// A FitIndex of several trees and its model, changed together.
struct Modelled {
  Modelled(int trees, Slot slots)
      : roots(static_cast<std::size_t>(trees), FitIndex::kNil), model(slots) {}

  void Insert(Slot slot, int tree, const FitKey& key, const FitAttrs& attrs) {
    model[slot] = ModelEntry{tree, key, attrs};
    index.Insert(roots[static_cast<std::size_t>(tree)], slot, key, attrs);
  }
  void Erase(Slot slot) {
    index.Erase(roots[static_cast<std::size_t>(model[slot].tree)], slot);
    model[slot].tree = -1;
  }
  void SetAttrs(Slot slot, const FitAttrs& attrs) {
    model[slot].attrs = attrs;
    index.SetAttrs(roots[static_cast<std::size_t>(model[slot].tree)], slot,
                   attrs);
  }
  // Every tree holds as many entries as the model, and an empty one is nil.
  ::testing::AssertionResult SizesMatch() const {
    for (std::size_t t = 0; t < roots.size(); ++t) {
      const auto n = static_cast<std::size_t>(std::count_if(
          model.begin(), model.end(),
          [&](const ModelEntry& m) { return m.tree == static_cast<int>(t); }));
      if (index.SizeOf(roots[t]) != n ||
          (roots[t] == FitIndex::kNil) != (n == 0)) {
        return ::testing::AssertionFailure()
               << "tree " << t << " holds " << index.SizeOf(roots[t])
               << ", the model " << n;
      }
    }
    return ::testing::AssertionSuccess();
  }

  FitIndex index;
  std::vector<FitIndex::Root> roots;
  std::vector<ModelEntry> model;
};

Slot BruteFindFirst(const std::vector<ModelEntry>& model, int tree,
                    std::int64_t min_primary, const FitAttrs& need,
                    const std::function<bool(Slot)>& accept) {
  std::optional<Slot> best;
  for (Slot s = 0; s < model.size(); ++s) {
    const ModelEntry& e = model[s];
    if (e.tree != tree || e.key.primary < min_primary ||
        !e.attrs.Covers(need) || !accept(s)) {
      continue;
    }
    if (!best || e.key < model[*best].key) best = s;
  }
  return best.value_or(FitIndex::kNil);
}

TEST(FitIndexRandomTest, MatchesBruteForceModel) {
  constexpr int kTrees = 3;
  constexpr Slot kSlots = 200;
  constexpr int kOps = 6000;
  Draws draws(20240607);
  Modelled m(kTrees, kSlots);
  int finds = 0;
  int found_non_nil = 0;

  for (int op = 0; op < kOps; ++op) {
    const int kind = static_cast<int>(draws.Uniform(0, 9));
    const Slot slot = static_cast<Slot>(draws.Uniform(0, kSlots - 1));
    const ModelEntry& e = m.model[slot];
    if (kind <= 2) {  // insert or erase
      if (e.tree < 0) {
        const int tree = static_cast<int>(draws.Uniform(0, kTrees - 1));
        // Few distinct primaries and ranks, so ties are common.
        const FitKey key{draws.Uniform(0, 40),
                         static_cast<std::uint64_t>(draws.Uniform(0, 3)), slot};
        m.Insert(slot, tree, key, draws.Attrs());
      } else {
        m.Erase(slot);
      }
    } else if (kind <= 4) {  // set attrs
      if (e.tree >= 0) m.SetAttrs(slot, draws.Attrs());
    } else {  // find
      const int tree = static_cast<int>(draws.Uniform(0, kTrees - 1));
      const std::int64_t min_primary = draws.Uniform(-5, 45);
      std::uint64_t mask = 0;
      while (mask == 0) mask = static_cast<std::uint64_t>(draws.Uniform(0, 63));
      const FitAttrs need{draws.Uniform(0, 100), draws.Uniform(0, 8000),
                          draws.Uniform(0, 64000), mask};
      const Slot modulus = static_cast<Slot>(draws.Uniform(1, 4));
      const Slot residue = static_cast<Slot>(draws.Uniform(0, modulus - 1));
      const auto accept = [&](Slot s) {
        return modulus == 1 || s % modulus != residue;
      };
      const Slot want =
          BruteFindFirst(m.model, tree, min_primary, need, accept);
      const Slot got =
          m.index.FindFirst(m.roots[tree], min_primary, need, accept);
      ++finds;
      found_non_nil += want != FitIndex::kNil;
      ASSERT_EQ(got, want) << "op " << op << " tree " << tree << " min "
                           << min_primary;
      // A loose query (no attribute limits) must also agree.
      const FitAttrs loose{0, 0, 0, kAllModels};
      ASSERT_EQ(m.index.FindFirst(m.roots[tree], min_primary, loose, AcceptAll),
                BruteFindFirst(m.model, tree, min_primary, loose, AcceptAll))
          << "op " << op;
    }
    // Sizes, membership and keys after every step.
    ASSERT_TRUE(m.SizesMatch()) << "op " << op;
    ASSERT_EQ(m.index.Contains(slot), e.tree >= 0) << "op " << op;
    if (e.tree >= 0) {
      ASSERT_EQ(m.index.KeyOf(slot), e.key) << "op " << op;
    }
  }
  // The run exercised both outcomes.
  EXPECT_GT(finds, 1000);
  EXPECT_GT(found_non_nil, 100);
  EXPECT_LT(found_non_nil, finds);
}

// The slots FindFirst must offer to `accept`, in order: every entry of the
// tree at or above the bound whose attributes cover `need`, in key order, up
// to and including the first one accepted.
std::vector<Slot> BruteOffers(const std::vector<ModelEntry>& model, int tree,
                              std::int64_t min_primary, const FitAttrs& need,
                              const std::function<bool(Slot)>& accept) {
  std::vector<Slot> order;
  for (Slot s = 0; s < model.size(); ++s) {
    const ModelEntry& e = model[s];
    if (e.tree == tree && e.key.primary >= min_primary &&
        e.attrs.Covers(need)) {
      order.push_back(s);
    }
  }
  std::sort(order.begin(), order.end(),
            [&](Slot a, Slot b) { return model[a].key < model[b].key; });
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (accept(order[i])) {
      order.resize(i + 1);
      break;
    }
  }
  return order;
}

TEST(FitIndexTest, OffersEveryCandidateInKeyOrderAcrossNodes) {
  // Enough entries for several levels; the accept predicate sees every
  // covering entry at or above the bound, once each, in key order.
  FitIndex index;
  FitIndex::Root root = FitIndex::kNil;
  constexpr Slot kN = 40 * FitIndex::kFanout * FitIndex::kFanout / 4;
  for (Slot s = 0; s < kN; ++s) {
    // Interleaved primaries so neighbouring slots land in different leaves.
    const auto primary = static_cast<std::int64_t>((s * 7919) % kN);
    index.Insert(
        root, s,
        FitKey{primary / 3, static_cast<std::uint64_t>(primary % 3), s},
        Attrs(static_cast<std::int64_t>(s % 10) * 10));
  }
  std::vector<Slot> asked;
  EXPECT_EQ(index.FindFirst(root, 100, Need(80),
                            [&](Slot s) {
                              asked.push_back(s);
                              return false;
                            }),
            FitIndex::kNil);
  std::vector<Slot> want;
  for (Slot s = 0; s < kN; ++s) {
    if (s % 10 >= 8 && static_cast<std::int64_t>((s * 7919) % kN) / 3 >= 100) {
      want.push_back(s);
    }
  }
  std::sort(want.begin(), want.end(),
            [&](Slot a, Slot b) { return index.KeyOf(a) < index.KeyOf(b); });
  EXPECT_EQ(asked, want);
}

// Large trees, several levels deep, driven through phases that make every
// node operation happen: ascending, descending and random bulk inserts (leaf
// and inner splits, new roots), churn (erase and reinsert under new keys,
// SetAttrs), and bulk erases to a handful of entries and to empty (borrowing
// from and merging with siblings, roots collapsing). After each phase and
// every few operations, queries must match a brute-force model, both the
// answer and the exact sequence of slots offered to `accept`.
TEST(FitIndexRandomTest, LargeTreesMatchBruteForceModel) {
  constexpr int kTrees = 3;
  constexpr Slot kSlots = 6000;
  Draws draws(20261206);
  Modelled m(kTrees, kSlots);
  int queries = 0;
  int found_non_nil = 0;

  const auto insert = [&](Slot slot, int tree, std::int64_t primary) {
    const FitKey key{primary, static_cast<std::uint64_t>(draws.Uniform(0, 2)),
                     slot};
    m.Insert(slot, tree, key, draws.Attrs());
  };

  const auto check = [&](const char* phase) {
    ASSERT_TRUE(m.SizesMatch()) << phase;
    for (int q = 0; q < 6; ++q) {
      const int tree = static_cast<int>(draws.Uniform(0, kTrees - 1));
      const std::int64_t min_primary = draws.Uniform(-10, 3100);
      std::uint64_t mask = 0;
      while (mask == 0) mask = static_cast<std::uint64_t>(draws.Uniform(0, 63));
      const FitAttrs need{draws.Uniform(0, 90), draws.Uniform(0, 7000),
                          draws.Uniform(0, 60000), mask};
      const Slot modulus = static_cast<Slot>(draws.Uniform(1, 5));
      const auto accept = [&](Slot s) {
        return modulus == 1 || s % modulus == 0;
      };
      std::vector<Slot> offered;
      const Slot got =
          m.index.FindFirst(m.roots[tree], min_primary, need, [&](Slot s) {
            offered.push_back(s);
            return accept(s);
          });
      const std::vector<Slot> want =
          BruteOffers(m.model, tree, min_primary, need, accept);
      ++queries;
      found_non_nil += got != FitIndex::kNil;
      ASSERT_EQ(got, BruteFindFirst(m.model, tree, min_primary, need, accept))
          << phase << " tree " << tree << " min " << min_primary;
      ASSERT_EQ(offered, want) << phase << " tree " << tree;
    }
    for (Slot s = 0; s < kSlots; s += 7) {
      ASSERT_EQ(m.index.Contains(s), m.model[s].tree >= 0) << phase;
      if (m.model[s].tree >= 0) {
        ASSERT_EQ(m.index.KeyOf(s), m.model[s].key) << phase;
        ASSERT_EQ(m.index.AttrsOf(s), m.model[s].attrs) << phase;
      }
    }
  };

  for (int round = 0; round < 2; ++round) {
    // Ascending keys into tree 0, descending into tree 1, random into 2.
    for (Slot s = 0; s < kSlots; ++s) {
      if (s % 3 == 0) insert(s, 0, static_cast<std::int64_t>(s));
      if (s % 3 == 1) insert(s, 1, static_cast<std::int64_t>(kSlots - s));
      if (s % 3 == 2) insert(s, 2, draws.Uniform(0, 3000));
      if (s % 500 == 0) check("bulk insert");
    }
    check("after bulk insert");
    // Churn: moves between trees under new keys, attribute changes.
    for (int op = 0; op < 20000; ++op) {
      const Slot slot = static_cast<Slot>(draws.Uniform(0, kSlots - 1));
      const int kind = static_cast<int>(draws.Uniform(0, 3));
      if (kind == 0 && m.model[slot].tree >= 0) {
        m.SetAttrs(slot, draws.Attrs());
      } else if (m.model[slot].tree >= 0) {
        m.Erase(slot);
      } else {
        insert(slot, static_cast<int>(draws.Uniform(0, kTrees - 1)),
               draws.Uniform(0, 3000));
      }
      if (op % 1000 == 0) check("churn");
    }
    check("after churn");
    // Erase in key order from the front, from the back and at random, down
    // to a few entries per tree, then everything.
    std::vector<Slot> order;
    for (Slot s = 0; s < kSlots; ++s) {
      if (m.model[s].tree >= 0) order.push_back(s);
    }
    std::sort(order.begin(), order.end(),
              [&](Slot a, Slot b) { return m.model[a].key < m.model[b].key; });
    std::shuffle(order.begin() + static_cast<std::ptrdiff_t>(order.size() / 2),
                 order.end(), draws.engine());
    std::size_t front = 0;
    std::size_t back = order.size() / 2;
    for (std::size_t k = 0; k + 20 < order.size(); ++k) {
      // Alternate the sorted front half's ends with the shuffled back half.
      Slot slot = 0;
      if (k % 3 == 0 && front < back) {
        slot = order[front++];
      } else if (k % 3 == 1 && front < back) {
        slot = order[--back];
      } else {
        slot = order.back();
        order.pop_back();
        if (order.size() < back) back = order.size();
      }
      if (m.model[slot].tree < 0) continue;
      m.Erase(slot);
      if (k % 700 == 0) check("bulk erase");
    }
    check("a few left");
    for (Slot s = 0; s < kSlots; ++s) {
      if (m.model[s].tree >= 0) m.Erase(s);
    }
    check("empty");
  }
  EXPECT_GT(queries, 300);
  EXPECT_GT(found_non_nil, 50);
  EXPECT_LT(found_non_nil, queries);
}

}  // namespace
}  // namespace hf::ledger
