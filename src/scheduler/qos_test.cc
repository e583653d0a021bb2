// Tests for QoS derivation (docs/CONTRACT.md section 3): gold when MIG mode is
// on, else silver when MPS is usable on compute capability >= 7.0, else bronze;
// a containerized node is forced to bronze; non-NVIDIA GPUs are bronze with no
// run-time enforcement; the enforcement list of each case; SupportsMpsLimits;
// QosLevelName.
#include "scheduler/qos.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace hf::scheduler {
namespace {

using Enforcement = std::vector<std::string>;

ledger::GpuSpec Nvidia(int cc_major, int cc_minor, bool mig, bool mps) {
  ledger::GpuSpec g;
  g.uuid = "GPU-1";
  g.vendor = "nvidia";
  g.model = "test";
  g.memory_mib = 40960;
  g.compute_capability_major = cc_major;
  g.compute_capability_minor = cc_minor;
  g.mig_capable = mig;
  g.mps_capable = mps;
  return g;
}

TEST(QosLevelNameTest, NamesEveryLevel) {
  EXPECT_EQ(QosLevelName(QosLevel::kGold), "gold");
  EXPECT_EQ(QosLevelName(QosLevel::kSilver), "silver");
  EXPECT_EQ(QosLevelName(QosLevel::kBronze), "bronze");
  EXPECT_EQ(QosLevelName(QosLevel::kExclusive), "exclusive");
}

// Issue 14: a whole-GPU grant on an MPS-capable card was called silver, and
// the agent then ran it under MPS limits; no MPS limit applies to it.
TEST(DeriveQosTest, WholeGpusAreExclusiveOnAnyGpuWithNothingEnforced) {
  ledger::GpuSpec other = Nvidia(8, 0, false, false);
  other.vendor = "amd";
  for (const ledger::GpuSpec& gpu :
       {Nvidia(8, 0, false, true), Nvidia(8, 0, false, false),
        Nvidia(6, 0, false, false), other}) {
    for (bool containerized : {false, true}) {
      for (bool hook : {false, true}) {
        SCOPED_TRACE(gpu.vendor + " mps=" + std::to_string(gpu.mps_capable) +
                     " containerized=" + std::to_string(containerized) +
                     " hook=" + std::to_string(hook));
        const QosDecision d = DeriveQos(gpu, containerized, hook, true);
        EXPECT_EQ(d.level, QosLevel::kExclusive);
        EXPECT_EQ(d.enforcement, Enforcement{});
        EXPECT_FALSE(d.hook_eligible) << "a whole GPU has no quota";
        EXPECT_NE(d.explanation.find("exclusive"), std::string::npos);
        EXPECT_EQ(d.explanation.find("silver"), std::string::npos);
      }
    }
  }
  // The same card sliced keeps its tier.
  EXPECT_EQ(DeriveQos(Nvidia(8, 0, false, true), false, false).level,
            QosLevel::kSilver);
}

TEST(SupportsMpsLimitsTest, FromComputeCapabilitySevenOn) {
  EXPECT_FALSE(SupportsMpsLimits(3, 5));
  EXPECT_FALSE(SupportsMpsLimits(6, 0));
  EXPECT_FALSE(SupportsMpsLimits(6, 1));
  EXPECT_FALSE(SupportsMpsLimits(6, 9));
  EXPECT_TRUE(SupportsMpsLimits(7, 0));
  EXPECT_TRUE(SupportsMpsLimits(7, 5));
  EXPECT_TRUE(SupportsMpsLimits(8, 0));
  EXPECT_TRUE(SupportsMpsLimits(9, 0));
  EXPECT_TRUE(SupportsMpsLimits(10, 0));
}

TEST(DeriveQosTest, MigModeIsGoldEnforcedByMigOnly) {
  for (bool hook : {false, true}) {
    const QosDecision d = DeriveQos(Nvidia(8, 0, true, true), false, hook);
    EXPECT_EQ(d.level, QosLevel::kGold) << hook;
    // The hardware enforces the partition; never the hook with MIG.
    EXPECT_EQ(d.enforcement, Enforcement{"mig"}) << hook;
    EXPECT_FALSE(d.hook_eligible) << hook;
    EXPECT_FALSE(d.explanation.empty());
    EXPECT_NE(d.explanation.find("gold"), std::string::npos);
  }
}

TEST(DeriveQosTest, MigWinsOverMps) {
  EXPECT_EQ(DeriveQos(Nvidia(8, 0, true, false), false, false).level,
            QosLevel::kGold);
  EXPECT_EQ(DeriveQos(Nvidia(9, 0, true, true), false, false).level,
            QosLevel::kGold);
}

TEST(DeriveQosTest, MpsOnVoltaOrNewerIsSilver) {
  const QosDecision with_hook =
      DeriveQos(Nvidia(7, 0, false, true), false, true);
  EXPECT_EQ(with_hook.level, QosLevel::kSilver);
  // The hook is listed only once the agent reports it attached.
  EXPECT_EQ(with_hook.enforcement, Enforcement{"mps"});
  EXPECT_TRUE(with_hook.hook_eligible);
  EXPECT_NE(with_hook.explanation.find("silver"), std::string::npos);
  EXPECT_NE(with_hook.explanation.find("once the agent reports it attached"),
            std::string::npos);

  const QosDecision no_hook =
      DeriveQos(Nvidia(8, 6, false, true), false, false);
  EXPECT_EQ(no_hook.level, QosLevel::kSilver);
  EXPECT_EQ(no_hook.enforcement, Enforcement{"mps"});
  EXPECT_FALSE(no_hook.hook_eligible);
  EXPECT_EQ(no_hook.explanation.find("hook"), std::string::npos);
}

TEST(DeriveQosTest, MpsBelowComputeCapabilitySevenIsBronze) {
  // A stale or wrong mps_capable bit on a Pascal GPU must not promise silver.
  const QosDecision d = DeriveQos(Nvidia(6, 1, false, true), false, true);
  EXPECT_EQ(d.level, QosLevel::kBronze);
  EXPECT_EQ(d.enforcement, Enforcement{});
  EXPECT_TRUE(d.hook_eligible);
}

TEST(DeriveQosTest, NoMigNoMpsIsBronze) {
  const QosDecision hook = DeriveQos(Nvidia(8, 0, false, false), false, true);
  EXPECT_EQ(hook.level, QosLevel::kBronze);
  EXPECT_EQ(hook.enforcement, Enforcement{});
  EXPECT_TRUE(hook.hook_eligible);
  EXPECT_NE(hook.explanation.find("bronze"), std::string::npos);
  EXPECT_NE(hook.explanation.find("hook"), std::string::npos);

  const QosDecision none = DeriveQos(Nvidia(8, 0, false, false), false, false);
  EXPECT_EQ(none.level, QosLevel::kBronze);
  EXPECT_EQ(none.enforcement, Enforcement{});
  EXPECT_NE(none.explanation.find("bronze"), std::string::npos);
}

TEST(DeriveQosTest, PreVoltaGpuIsBronzeWithHook) {
  const QosDecision d = DeriveQos(Nvidia(5, 2, false, false), false, true);
  EXPECT_EQ(d.level, QosLevel::kBronze);
  EXPECT_EQ(d.enforcement, Enforcement{});
  EXPECT_TRUE(d.hook_eligible);
}

TEST(DeriveQosTest, ContainerizedNodeIsForcedToBronze) {
  // Even a MIG GPU or an MPS-capable Ampere GPU.
  for (const ledger::GpuSpec& gpu :
       {Nvidia(8, 0, true, true), Nvidia(8, 0, true, false),
        Nvidia(8, 0, false, true), Nvidia(7, 0, false, true)}) {
    const QosDecision d = DeriveQos(gpu, /*node_containerized=*/true, false);
    EXPECT_EQ(d.level, QosLevel::kBronze);
    EXPECT_EQ(d.enforcement, Enforcement{});
    EXPECT_EQ(std::find(d.enforcement.begin(), d.enforcement.end(), "mig"),
              d.enforcement.end());
  }
}

TEST(DeriveQosTest, ContainerizedNodeNeverReportsMigOrMps) {
  const QosDecision d = DeriveQos(Nvidia(8, 0, true, true), true, true);
  EXPECT_EQ(d.level, QosLevel::kBronze);
  for (const std::string& e : d.enforcement) {
    EXPECT_NE(e, "mig");
    EXPECT_NE(e, "mps");
  }
}

TEST(DeriveQosTest, NonNvidiaIsBronzeWithoutEnforcement) {
  for (const char* vendor : {"ascend", "amd", "intel", "NVIDIA-like"}) {
    ledger::GpuSpec g = Nvidia(8, 0, true, true);  // bits must be ignored
    g.vendor = vendor;
    for (bool containerized : {false, true}) {
      for (bool hook : {false, true}) {
        const QosDecision d = DeriveQos(g, containerized, hook);
        EXPECT_EQ(d.level, QosLevel::kBronze) << vendor;
        EXPECT_EQ(d.enforcement, Enforcement{}) << vendor << " hook " << hook;
        EXPECT_FALSE(d.hook_eligible) << vendor;
        EXPECT_FALSE(d.explanation.empty());
      }
    }
  }
}

TEST(DeriveQosTest, EveryDecisionHasAnExplanationNamingItsLevel) {
  for (bool mig : {false, true}) {
    for (bool mps : {false, true}) {
      for (int major : {6, 7, 8}) {
        for (bool containerized : {false, true}) {
          for (bool hook : {false, true}) {
            const QosDecision d =
                DeriveQos(Nvidia(major, 0, mig, mps), containerized, hook);
            EXPECT_NE(d.explanation.find(QosLevelName(d.level)),
                      std::string::npos)
                << d.explanation;
          }
        }
      }
    }
  }
}

TEST(AddHookEnforcementTest, AppendsOnceAfterMpsAndNeverToMig) {
  EXPECT_EQ(AddHookEnforcement({}), Enforcement{"hook"});
  EXPECT_EQ(AddHookEnforcement({"mps"}), (Enforcement{"mps", "hook"}));
  EXPECT_EQ(AddHookEnforcement({"mps", "hook"}), (Enforcement{"mps", "hook"}));
  EXPECT_EQ(AddHookEnforcement({"hook"}), Enforcement{"hook"});
  EXPECT_EQ(AddHookEnforcement({"mig"}), Enforcement{"mig"});
}

}  // namespace
}  // namespace hf::scheduler
