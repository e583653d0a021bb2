// The hook's configuration from the slice environment.
#include "hook/config.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace hf::hook {
namespace {

std::map<std::string, std::string> g_env;

const char* FakeEnv(const char* name, void* /*ctx*/) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

HookConfig Read(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  return ReadConfig(&FakeEnv, nullptr);
}

TEST(HookConfigTest, NoSliceVariablesMeansInactive) {
  HookConfig c = Read({{"HETEROFLOW_SLICE_ID", "4"}});
  EXPECT_FALSE(c.active);
}

TEST(HookConfigTest, SliceVariablesGiveQuotaShareAndRegion) {
  HookConfig c = Read({{"HETEROFLOW_SLICE_MEMORY_MB", "4096"},
                       {"HETEROFLOW_SLICE_COMPUTE_PERCENT", "25"},
                       {"HETEROFLOW_SLICE_ID", "17"},
                       {"HETEROFLOW_GPU_UUID", "GPU-1"}});
  ASSERT_TRUE(c.active);
  EXPECT_EQ(c.quota_bytes, uint64_t{4096} << 20);
  EXPECT_EQ(c.compute_percent, 25u);
  EXPECT_STREQ(c.region_path, "/dev/shm/heteroflow-slice-17");
  EXPECT_STREQ(c.gpu_uuid, "GPU-1");
  EXPECT_EQ(c.bad_variable, nullptr);
}

TEST(HookConfigTest, TheAgentsRegionPathWins) {
  HookConfig c = Read({{"HETEROFLOW_SLICE_MEMORY_MB", "64"},
                       {"HETEROFLOW_SLICE_ID", "17"},
                       {"HETEROFLOW_HOOK_REGION", "/run/hf/slice-17"}});
  EXPECT_STREQ(c.region_path, "/run/hf/slice-17");
}

TEST(HookConfigTest, NoSliceIdMeansAPrivateRegion) {
  HookConfig c = Read({{"HETEROFLOW_SLICE_MEMORY_MB", "64"}});
  ASSERT_TRUE(c.active);
  EXPECT_STREQ(c.region_path, "");
}

TEST(HookConfigTest, AHundredPercentIsNoLimit) {
  HookConfig c = Read({{"HETEROFLOW_SLICE_COMPUTE_PERCENT", "100"}});
  EXPECT_EQ(c.compute_percent, 0u);
  EXPECT_EQ(c.quota_bytes, kUnlimited);
}

TEST(HookConfigTest, ABadMemoryValueFailsClosedAndIsNamed) {
  for (const char* bad :
       {"", "12x", "-5", "0", "1.5", "99999999999999999999"}) {
    HookConfig c = Read({{"HETEROFLOW_SLICE_MEMORY_MB", bad}});
    EXPECT_TRUE(c.active) << bad;
    EXPECT_EQ(c.quota_bytes, 0u) << bad;
    ASSERT_NE(c.bad_variable, nullptr) << bad;
    EXPECT_STREQ(c.bad_variable, "HETEROFLOW_SLICE_MEMORY_MB");
  }
}

TEST(HookConfigTest, ABadComputeValueIsNamedAndIgnored) {
  HookConfig c = Read({{"HETEROFLOW_SLICE_MEMORY_MB", "64"},
                       {"HETEROFLOW_SLICE_COMPUTE_PERCENT", "101"}});
  ASSERT_NE(c.bad_variable, nullptr);
  EXPECT_STREQ(c.bad_variable, "HETEROFLOW_SLICE_COMPUTE_PERCENT");
  EXPECT_EQ(c.compute_percent, 0u);
  EXPECT_EQ(c.quota_bytes, uint64_t{64} << 20);
}

TEST(HookConfigTest, SamplingIsOnUnlessTurnedOff) {
  EXPECT_TRUE(Read({{"HETEROFLOW_SLICE_MEMORY_MB", "64"}}).sampling);
  HookConfig off = Read({{"HETEROFLOW_SLICE_MEMORY_MB", "64"},
                         {"HETEROFLOW_HOOK_SAMPLING", "off"}});
  EXPECT_FALSE(off.sampling);
  EXPECT_EQ(off.bad_variable, nullptr);
  HookConfig bad = Read({{"HETEROFLOW_SLICE_MEMORY_MB", "64"},
                         {"HETEROFLOW_HOOK_SAMPLING", "sometimes"}});
  ASSERT_NE(bad.bad_variable, nullptr);
  EXPECT_STREQ(bad.bad_variable, "HETEROFLOW_HOOK_SAMPLING");
  EXPECT_TRUE(bad.sampling);
  EXPECT_EQ(bad.quota_bytes, uint64_t{64} << 20);  // nothing else lost
}

TEST(HookConfigTest, DisableTurnsTheHookOff) {
  HookConfig c = Read(
      {{"HETEROFLOW_SLICE_MEMORY_MB", "64"}, {"HETEROFLOW_HOOK_DISABLE", "1"}});
  EXPECT_FALSE(c.active);
}

TEST(HookConfigTest, ParseUnsignedRejectsAnythingButDigits) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseUnsigned("18446744073709551615", &v));
  EXPECT_EQ(v, ~uint64_t{0});
  EXPECT_FALSE(ParseUnsigned("18446744073709551616", &v));
  EXPECT_FALSE(ParseUnsigned(" 1", &v));
  EXPECT_FALSE(ParseUnsigned("+1", &v));
  EXPECT_FALSE(ParseUnsigned(nullptr, &v));
}

// Found by hook_config_fuzz: a HETEROFLOW_GPU_UUID longer than the buffer
// was cut short silently.
TEST(HookConfigTest, ATooLongGpuUuidIsFlaggedNotTruncated) {
  const std::string list = "GPU-" + std::string(200, 'a');
  HookConfig c = Read(
      {{"HETEROFLOW_SLICE_MEMORY_MB", "64"}, {"HETEROFLOW_GPU_UUID", list}});
  EXPECT_STREQ(c.gpu_uuid, "");
  ASSERT_NE(c.bad_variable, nullptr);
  EXPECT_STREQ(c.bad_variable, "HETEROFLOW_GPU_UUID");
  EXPECT_EQ(c.quota_bytes, uint64_t{64} << 20);  // the quota still holds
  const std::string fits(127, 'b');
  c = Read(
      {{"HETEROFLOW_SLICE_MEMORY_MB", "64"}, {"HETEROFLOW_GPU_UUID", fits}});
  EXPECT_EQ(c.gpu_uuid, fits);
  EXPECT_EQ(c.bad_variable, nullptr);
}

}  // namespace
}  // namespace hf::hook
