// Tests of the MIG profile tables (their internal consistency), the model
// name matching, and the profile choice: smallest adequate profile, lowest
// free legal placement, and failures that say why.
#include "gpu/mig_profiles.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace hf::gpu {
namespace {

const MigModelTable& Table(std::string_view model, MemoryMib memory = 0) {
  const MigModelTable* table = FindMigTable(model, memory);
  EXPECT_NE(table, nullptr) << model;
  static const MigModelTable kEmpty;
  return table != nullptr ? *table : kEmpty;
}

const MigModelTable& A100_80() { return Table("NVIDIA A100-SXM4-80GB"); }

// The GB figure in a profile name: "3g.40gb" -> 40, "1g.10gb+me" -> 10.
int NameGb(const std::string& name) {
  const auto dot = name.find('.');
  const auto gb = name.find("gb");
  if (dot == std::string::npos || gb == std::string::npos) return -1;
  return std::stoi(name.substr(dot + 1, gb - dot - 1));
}

// ---- Table sanity -------------------------------------------------------

TEST(MigTablesTest, EveryTableIsConsistent) {
  ASSERT_FALSE(AllMigTables().empty());
  std::set<std::string> keys;
  for (const MigModelTable& t : AllMigTables()) {
    SCOPED_TRACE(t.model_key);
    EXPECT_TRUE(keys.insert(t.model_key).second) << "duplicate key";
    EXPECT_FALSE(t.source.empty());
    EXPECT_GT(t.compute_slices, 0);
    EXPECT_GT(t.memory_slices, 0);
    ASSERT_FALSE(t.profiles.empty());

    std::set<std::string> names;
    std::set<int> ids;
    int full_profiles = 0;
    for (const MigProfile& p : t.profiles) {
      SCOPED_TRACE(p.name);
      EXPECT_TRUE(names.insert(p.name).second) << "duplicate profile name";
      if (p.profile_id != -1) {
        EXPECT_TRUE(ids.insert(p.profile_id).second) << "duplicate id";
      }
      EXPECT_EQ(p.media_extensions, p.name.ends_with("+me"));
      EXPECT_TRUE(p.name.starts_with(std::to_string(p.compute_slices) + "g."));
      EXPECT_EQ(p.memory_mib, MemoryMib{NameGb(p.name)} * 1024);
      EXPECT_GE(p.compute_slices, 1);
      EXPECT_LE(p.compute_slices, t.compute_slices);
      EXPECT_GE(p.memory_slices, 1);
      EXPECT_LE(p.memory_slices, t.memory_slices);
      EXPECT_GE(p.max_instances, 1);
      ASSERT_FALSE(p.placements.empty());

      // Placements: in range, sized to the profile, ascending, distinct.
      for (std::size_t i = 0; i < p.placements.size(); ++i) {
        const MigPlacement& pl = p.placements[i];
        EXPECT_EQ(pl.size, p.memory_slices);
        EXPECT_GE(pl.start, 0);
        EXPECT_LT(pl.end(), t.memory_slices);
        if (i > 0) {
          EXPECT_LT(p.placements[i - 1].start, pl.start);
        }
      }
      if (p.media_extensions) {
        EXPECT_EQ(p.max_instances, 1);
      } else {
        // The guide's instance count is exactly the number of placements,
        // which never overlap each other.
        EXPECT_EQ(static_cast<std::size_t>(p.max_instances),
                  p.placements.size());
        for (std::size_t i = 1; i < p.placements.size(); ++i) {
          EXPECT_FALSE(p.placements[i].Overlaps(p.placements[i - 1]));
        }
      }

      if (p.compute_slices == t.compute_slices) {
        ++full_profiles;
        ASSERT_EQ(p.placements.size(), 1u);
        EXPECT_EQ(p.placements[0], (MigPlacement{0, t.memory_slices}));
        EXPECT_EQ(p.memory_mib, t.memory_mib);
        EXPECT_EQ(p.max_instances, 1);
      }
    }
    EXPECT_EQ(full_profiles, 1) << "exactly one whole-GPU profile";

    // Memory never shrinks as memory slices grow.
    std::vector<const MigProfile*> by_slices;
    for (const MigProfile& p : t.profiles) by_slices.push_back(&p);
    std::stable_sort(by_slices.begin(), by_slices.end(),
                     [](const MigProfile* a, const MigProfile* b) {
                       return a->memory_slices < b->memory_slices;
                     });
    for (std::size_t i = 1; i < by_slices.size(); ++i) {
      EXPECT_LE(by_slices[i - 1]->memory_mib, by_slices[i]->memory_mib)
          << by_slices[i - 1]->name << " vs " << by_slices[i]->name;
      if (by_slices[i - 1]->memory_slices == by_slices[i]->memory_slices) {
        EXPECT_EQ(by_slices[i - 1]->memory_mib, by_slices[i]->memory_mib)
            << "same memory slices, different memory";
      }
    }
  }
}

TEST(MigTablesTest, A100PlacementsMatchTheGuide) {
  const MigModelTable& t = A100_80();
  EXPECT_EQ(t.compute_slices, 7);
  EXPECT_EQ(t.memory_slices, 8);
  auto starts = [&](std::string_view name) {
    std::vector<int> out;
    const MigProfile* p = FindProfile(t, name);
    EXPECT_NE(p, nullptr) << name;
    if (p != nullptr) {
      for (const MigPlacement& pl : p->placements) out.push_back(pl.start);
    }
    return out;
  };
  EXPECT_EQ(starts("1g.10gb"), (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(starts("1g.20gb"), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(starts("2g.20gb"), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(starts("3g.40gb"), (std::vector<int>{0, 4}));
  EXPECT_EQ(starts("4g.40gb"), (std::vector<int>{0}));
  EXPECT_EQ(starts("7g.80gb"), (std::vector<int>{0}));
  EXPECT_EQ(FindProfile(t, "1g.10gb")->profile_id, 19);
  EXPECT_EQ(FindProfile(t, "3g.40gb")->profile_id, 9);
  EXPECT_EQ(FindProfile(t, "7g.80gb")->profile_id, 0);
}

// ---- Name matching ----------------------------------------------------

TEST(FindMigTableTest, MatchesNvmlNames) {
  struct Case {
    const char* model;
    MemoryMib memory;
    const char* key;
  };
  const Case cases[] = {
      {"NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"},
      {"NVIDIA A100 80GB PCIe", 81920, "A100-80GB"},
      {"NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"},
      {"NVIDIA A100-PCIE-40GB", 40537, "A100-40GB"},
      {"A100-SXM4-80GB", 0, "A100-80GB"},  // inventory spelling
      {"nvidia a100-sxm4-80gb", 0, "A100-80GB"},
      {"NVIDIA A100", 81920, "A100-80GB"},  // size from memory only
      {"NVIDIA A100", 40537, "A100-40GB"},
      {"NVIDIA A800-SXM4-80GB", 81920, "A100-80GB"},
      {"NVIDIA A30", 24576, "A30-24GB"},
      {"NVIDIA H100 80GB HBM3", 81559, "H100-80GB"},
      {"NVIDIA H100 PCIe", 81559, "H100-80GB"},
      {"NVIDIA H100 NVL", 95830, "H100-94GB"},
      {"NVIDIA H800", 81559, "H100-80GB"},
      {"NVIDIA H20", 97871, "H100-96GB"},
      {"NVIDIA GH200 480GB", 97871, "H100-96GB"},
      {"NVIDIA H200", 143771, "H200-141GB"},
      {"NVIDIA H200 NVL", 143771, "H200-141GB"},
      {"NVIDIA B200", 183359, "B200-180GB"},
  };
  for (const Case& c : cases) {
    const MigModelTable* t = FindMigTable(c.model, c.memory);
    ASSERT_NE(t, nullptr) << c.model;
    EXPECT_EQ(t->model_key, c.key) << c.model;
  }
}

TEST(FindMigTableTest, UnknownOrAmbiguousModelsHaveNoTable) {
  EXPECT_EQ(FindMigTable("NVIDIA GeForce RTX 4090", 24564), nullptr);
  EXPECT_EQ(FindMigTable("Tesla V100-SXM2-16GB", 16384), nullptr);
  EXPECT_EQ(FindMigTable("NVIDIA A10", 23028), nullptr);
  EXPECT_EQ(FindMigTable("NVIDIA A40", 46068), nullptr);
  EXPECT_EQ(FindMigTable("NVIDIA GB200", 189471), nullptr);
  EXPECT_EQ(FindMigTable("", 81920), nullptr);
  // An A100 with neither a size in its name nor a reported memory.
  EXPECT_EQ(FindMigTable("NVIDIA A100", 0), nullptr);
}

TEST(FindProfileTest, AcceptsNvidiaSmiSpelling) {
  const MigModelTable& t = A100_80();
  const MigProfile* p = FindProfile(t, "3g.40gb");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(FindProfile(t, "MIG 3G.40GB"), p);
  EXPECT_EQ(FindProfile(t, "3g.20gb"), nullptr);  // the 40GB card's name
  EXPECT_EQ(FindProfile(t, ""), nullptr);
}

TEST(MigComputePercentTest, RoundsDown) {
  const MigModelTable& t = A100_80();
  EXPECT_EQ(MigComputePercent(t, *FindProfile(t, "1g.10gb")), 14);
  EXPECT_EQ(MigComputePercent(t, *FindProfile(t, "3g.40gb")), 42);
  EXPECT_EQ(MigComputePercent(t, *FindProfile(t, "4g.40gb")), 57);
  EXPECT_EQ(MigComputePercent(t, *FindProfile(t, "7g.80gb")), 100);
  const MigModelTable& a30 = Table("NVIDIA A30");
  EXPECT_EQ(MigComputePercent(a30, *FindProfile(a30, "2g.12gb")), 50);
}

TEST(IsLegalPlacementTest, OnlyTheGuidesStartsAndSizes) {
  const MigModelTable& t = A100_80();
  EXPECT_TRUE(IsLegalPlacement(t, "3g.40gb", {4, 4}));
  EXPECT_TRUE(IsLegalPlacement(t, "3g.40gb", {0, 4}));
  EXPECT_FALSE(IsLegalPlacement(t, "3g.40gb", {2, 4}));  // bad start
  EXPECT_FALSE(IsLegalPlacement(t, "3g.40gb", {4, 3}));  // bad size
  EXPECT_TRUE(IsLegalPlacement(t, "1g.20gb", {6, 2}));
  EXPECT_FALSE(IsLegalPlacement(t, "1g.10gb", {7, 1}));
  EXPECT_TRUE(IsLegalPlacement(t, "7g.80gb", {0, 8}));
  EXPECT_FALSE(IsLegalPlacement(t, "9g.99gb", {0, 1}));
}

TEST(MigPlacementTest, Overlap) {
  EXPECT_TRUE((MigPlacement{0, 4}).Overlaps({3, 1}));
  EXPECT_TRUE((MigPlacement{2, 2}).Overlaps({0, 4}));
  EXPECT_FALSE((MigPlacement{0, 4}).Overlaps({4, 4}));
  EXPECT_FALSE((MigPlacement{6, 1}).Overlaps({7, 1}));
}

// ---- The choice -------------------------------------------------------

MigInstance MustChoose(const MigModelTable& t, std::optional<MemoryMib> mem,
                       std::optional<ComputePercent> pct,
                       const std::vector<MigInstance>& existing = {}) {
  StatusOr<MigInstance> r = ChooseMigInstance(t, mem, pct, existing);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : MigInstance{};
}

TEST(ChooseMigInstanceTest, SmallestProfileThatFitsMemory) {
  const MigModelTable& t = A100_80();
  EXPECT_EQ(MustChoose(t, 4096, std::nullopt),
            (MigInstance{"1g.10gb", {0, 1}}));
  EXPECT_EQ(MustChoose(t, 10240, std::nullopt).profile, "1g.10gb");
  // 15 GB: 1g.20gb and 2g.20gb both have two memory slices; the one with
  // fewer compute slices wins.
  EXPECT_EQ(MustChoose(t, 15360, std::nullopt),
            (MigInstance{"1g.20gb", {0, 2}}));
  EXPECT_EQ(MustChoose(t, 30000, std::nullopt).profile, "3g.40gb");
  EXPECT_EQ(MustChoose(t, 50000, std::nullopt).profile, "7g.80gb");
}

TEST(ChooseMigInstanceTest, ComputeShareRoundedDownDecides) {
  const MigModelTable& t = A100_80();
  EXPECT_EQ(MustChoose(t, std::nullopt, 10).profile, "1g.10gb");
  EXPECT_EQ(MustChoose(t, std::nullopt, 20).profile, "2g.20gb");  // 28%
  EXPECT_EQ(MustChoose(t, std::nullopt, 42).profile, "3g.40gb");
  // 3g of 7 slices is 42%, so half the GPU needs 4g (57%).
  EXPECT_EQ(MustChoose(t, std::nullopt, 50), (MigInstance{"4g.40gb", {0, 4}}));
  EXPECT_EQ(MustChoose(t, std::nullopt, 100), (MigInstance{"7g.80gb", {0, 8}}));
  // Both bounds: memory alone would take 1g.10gb.
  EXPECT_EQ(MustChoose(t, 4096, 50).profile, "4g.40gb");
}

TEST(ChooseMigInstanceTest, OtherModels) {
  const MigModelTable& a30 = Table("NVIDIA A30");
  EXPECT_EQ(MustChoose(a30, std::nullopt, 50).profile, "2g.12gb");
  EXPECT_EQ(MustChoose(a30, 12288, std::nullopt).profile, "2g.12gb");
  EXPECT_EQ(MustChoose(a30, 13000, std::nullopt).profile, "4g.24gb");
  const MigModelTable& h200 = Table("NVIDIA H200");
  EXPECT_EQ(MustChoose(h200, 4096, std::nullopt).profile, "1g.18gb");
  EXPECT_EQ(MustChoose(h200, 40960, std::nullopt).profile, "3g.71gb");
  const MigModelTable& a100_40 = Table("NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(MustChoose(a100_40, 8192, std::nullopt),
            (MigInstance{"1g.10gb", {0, 2}}));
}

TEST(ChooseMigInstanceTest, NeverPicksMediaExtensionProfiles) {
  for (const MigModelTable& t : AllMigTables()) {
    for (MemoryMib mem = 512; mem <= t.memory_mib; mem += 2048) {
      for (ComputePercent pct : {1, 14, 15, 25, 50, 100}) {
        StatusOr<MigInstance> r = ChooseMigInstance(t, mem, pct, {});
        ASSERT_TRUE(r.ok()) << t.model_key << " " << r.status().ToString();
        EXPECT_FALSE(r->profile.ends_with("+me")) << t.model_key;
      }
    }
  }
}

TEST(ChooseMigInstanceTest, LowestFreeStartAvoidsExistingInstances) {
  const MigModelTable& t = A100_80();
  // A 1g at slot 0 pushes a 2g to slots 2-3.
  std::vector<MigInstance> existing = {{"1g.10gb", {0, 1}}};
  EXPECT_EQ(MustChoose(t, std::nullopt, 20, existing),
            (MigInstance{"2g.20gb", {2, 2}}));
  // A 2g at slots 2-3 pushes a 3g to slots 4-7 and a 1g to slot 1.
  existing = {{"1g.10gb", {0, 1}}, {"2g.20gb", {2, 2}}};
  EXPECT_EQ(MustChoose(t, 30000, std::nullopt, existing),
            (MigInstance{"3g.40gb", {4, 4}}));
  EXPECT_EQ(MustChoose(t, 1024, std::nullopt, existing),
            (MigInstance{"1g.10gb", {1, 1}}));
  // A 1g.20gb fits the last two slots when only 6-7 are free.
  existing.clear();
  for (int s = 0; s < 6; ++s) existing.push_back({"1g.10gb", {s, 1}});
  EXPECT_EQ(MustChoose(t, 15360, std::nullopt, existing),
            (MigInstance{"1g.20gb", {6, 2}}));
}

TEST(ChooseMigInstanceTest, SevenOneSliceInstancesFillAnA100) {
  const MigModelTable& t = A100_80();
  std::vector<MigInstance> existing;
  for (int i = 0; i < 7; ++i) {
    MigInstance got = MustChoose(t, 4096, std::nullopt, existing);
    EXPECT_EQ(got, (MigInstance{"1g.10gb", {i, 1}}));
    existing.push_back(got);
  }
  StatusOr<MigInstance> eighth =
      ChooseMigInstance(t, 4096, std::nullopt, existing);
  ASSERT_FALSE(eighth.ok());
  EXPECT_EQ(eighth.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(eighth.status().message(),
            "no free placement for 1g.10gb on A100-80GB: slots 0, 1, 2, 3, "
            "4, 5 and 6 taken; no larger profile that fits has a free "
            "placement either");
}

TEST(ChooseMigInstanceTest, EveryTableFillsToItsSmallestProfilesCount) {
  for (const MigModelTable& t : AllMigTables()) {
    SCOPED_TRACE(t.model_key);
    const MigProfile& smallest = t.profiles.front();  // listed first
    std::vector<MigInstance> existing;
    while (true) {
      StatusOr<MigInstance> r =
          ChooseMigInstance(t, smallest.memory_mib, std::nullopt, existing);
      if (!r.ok()) break;
      EXPECT_EQ(r->profile, smallest.name);
      EXPECT_TRUE(IsLegalPlacement(t, r->profile, r->placement));
      existing.push_back(*r);
      ASSERT_LE(existing.size(), 8u);
    }
    EXPECT_EQ(static_cast<int>(existing.size()), smallest.max_instances);
  }
}

TEST(ChooseMigInstanceTest, TwoHalvesLeaveNoRoomForAThird) {
  const MigModelTable& t = A100_80();
  std::vector<MigInstance> existing = {{"3g.40gb", {0, 4}},
                                       {"3g.40gb", {4, 4}}};
  StatusOr<MigInstance> r = ChooseMigInstance(t, 40960, std::nullopt, existing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find(
                "no free placement for 3g.40gb on A100-80GB: slots 0-3 and "
                "4-7 taken"),
            std::string::npos)
      << r.status().message();
}

TEST(ChooseMigInstanceTest, TooLargeForAnyProfileSaysSo) {
  StatusOr<MigInstance> r =
      ChooseMigInstance(A100_80(), 90000, std::nullopt, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "no MIG profile on A100-80GB has 90000 MB (the largest, 7g.80gb, "
            "has 81920 MB and 100% compute)");
}

TEST(ChooseMigInstanceTest, RejectsMalformedRequests) {
  const MigModelTable& t = A100_80();
  EXPECT_EQ(
      ChooseMigInstance(t, std::nullopt, std::nullopt, {}).status().code(),
      StatusCode::kInvalidArgument);
  StatusOr<MigInstance> r = ChooseMigInstance(t, 0, std::nullopt, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().field(), "gpu_memory_mb");
  r = ChooseMigInstance(t, std::nullopt, 0, {});
  EXPECT_EQ(r.status().field(), "gpu_compute_ratio");
  r = ChooseMigInstance(t, std::nullopt, 101, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// A profile whose instance limit is below its placement count (as "+me"
// profiles are) is skipped for the next larger one once the limit is used.
TEST(ChooseMigInstanceTest, FallsBackToALargerProfileAtTheInstanceLimit) {
  MigModelTable t;
  t.model_key = "TEST";
  t.memory_mib = 4096;
  t.compute_slices = 2;
  t.memory_slices = 4;
  t.profiles = {
      {"1g.1gb", -1, 1, 1, 1024, 1, false, {{0, 1}, {1, 1}, {2, 1}, {3, 1}}},
      {"2g.2gb", -1, 2, 2, 2048, 2, false, {{0, 2}, {2, 2}}},
  };
  std::vector<MigInstance> existing = {{"1g.1gb", {0, 1}}};
  EXPECT_EQ(MustChoose(t, 512, std::nullopt, existing),
            (MigInstance{"2g.2gb", {2, 2}}));
  existing.push_back({"2g.2gb", {2, 2}});
  StatusOr<MigInstance> r = ChooseMigInstance(t, 512, std::nullopt, existing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("all 1 of its instances are in use"),
            std::string::npos)
      << r.status().message();
}

// FitMigInstance is ChooseMigInstance's choice without the message: the
// same profile and placement, or a failure where it fails, for random
// requests (malformed ones included) on every table as it fills and empties.
TEST(FitMigInstanceTest, AgreesWithChooseMigInstance) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pct(0, 99);
  int fits = 0;
  int failures = 0;
  for (const MigModelTable& table : AllMigTables()) {
    SCOPED_TRACE(table.model_key);
    std::uniform_int_distribution<MemoryMib> memory(-100, table.memory_mib);
    std::uniform_int_distribution<int> compute(-5, 105);
    std::vector<MigInstance> existing;
    for (int step = 0; step < 400; ++step) {
      std::optional<MemoryMib> m;
      std::optional<ComputePercent> c;
      if (pct(rng) < 85) m = memory(rng);
      if (pct(rng) < 50) c = compute(rng);
      const std::optional<MemoryMib> card =
          pct(rng) < 50 ? std::optional<MemoryMib>(table.memory_mib - 500)
                        : std::nullopt;
      const StatusOr<MigInstance> chosen =
          ChooseMigInstance(table, m, c, existing, card);
      const std::optional<MigFit> fit =
          FitMigInstance(table, m, c, existing, card);
      ASSERT_EQ(chosen.ok(), fit.has_value()) << step;
      if (!fit.has_value()) {
        ++failures;
        // Room again: drop an instance now and then.
        if (!existing.empty() && pct(rng) < 50) {
          existing.erase(
              existing.begin() +
              static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rng()) %
                                          existing.size()));
        }
        continue;
      }
      ++fits;
      EXPECT_EQ(chosen->profile, fit->profile->name) << step;
      EXPECT_EQ(chosen->placement, fit->placement) << step;
      existing.push_back(*chosen);
    }
  }
  EXPECT_GT(fits, 200);
  EXPECT_GT(failures, 200);
}

}  // namespace
}  // namespace hf::gpu
