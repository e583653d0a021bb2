// The slice env set: one function decides it; a re-bind strips every
// variable of the old slice before the new set goes in.
#include "server/slice_env.h"

#include <gtest/gtest.h>

#include <string>

namespace hf::server {

using store::Millis;
namespace {

SliceEnvInput Silver() {
  SliceEnvInput in;
  in.slice_id = 7;
  in.gpu_index = 2;
  in.gpu_uuids = "GPU-aaa";
  in.vendor = "nvidia";
  in.qos_level = "silver";
  in.memory_mib = 4096;
  in.compute_percent = 25;
  return in;
}

TEST(SliceEnvTest, SilverSliceGetsPinningAndMpsLimits) {
  const store::StringMap env = SliceEnv(Silver());
  EXPECT_EQ(env.at("HETEROFLOW_SLICE_ID"), "7");
  EXPECT_EQ(env.at("HETEROFLOW_GPU_INDEX"), "2");
  EXPECT_EQ(env.at("HETEROFLOW_SLICE_QOS"), "silver");
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "GPU-aaa");
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-aaa");
  EXPECT_EQ(env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=4096M");
  EXPECT_EQ(env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_EQ(env.at("HETEROFLOW_SLICE_MEMORY_MB"), "4096");
}

TEST(SliceEnvTest, NoRatioMeansNoThreadPercentage) {
  SliceEnvInput in = Silver();
  in.compute_percent = 0;
  const store::StringMap env = SliceEnv(in);
  EXPECT_FALSE(env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  EXPECT_FALSE(env.contains("HETEROFLOW_SLICE_COMPUTE_PERCENT"));
  EXPECT_FALSE(env.contains("HETEROFLOW_SLICE_COMPUTE_MODE"));
}

TEST(SliceEnvTest, ComputeModeComesExactlyWithTheComputeShare) {
  SliceEnvInput in = Silver();
  EXPECT_EQ(SliceEnv(in).at("HETEROFLOW_SLICE_COMPUTE_MODE"), "work-conserving")
      << "the default";
  in.compute_mode = GpuComputeMode::kStrict;
  EXPECT_EQ(SliceEnv(in).at("HETEROFLOW_SLICE_COMPUTE_MODE"), "strict");
  in.qos_level = "bronze";
  EXPECT_EQ(SliceEnv(in).at("HETEROFLOW_SLICE_COMPUTE_MODE"), "strict");
  // Every shape of slice: the mode is there exactly when the share is.
  for (const char* qos : {"gold", "silver", "bronze", "exclusive"}) {
    for (bool whole : {false, true}) {
      for (int percent : {0, 25, 100}) {
        SCOPED_TRACE(std::string(qos) + (whole ? " whole " : " slice ") +
                     std::to_string(percent) + "%");
        SliceEnvInput shape = Silver();
        shape.qos_level = qos;
        shape.whole = whole;
        shape.compute_percent = percent;
        shape.compute_mode = GpuComputeMode::kStrict;
        const store::StringMap env = SliceEnv(shape);
        EXPECT_EQ(env.contains("HETEROFLOW_SLICE_COMPUTE_MODE"),
                  env.contains("HETEROFLOW_SLICE_COMPUTE_PERCENT"));
      }
    }
  }
  // A re-bind without a share drops the old mode too.
  store::StringMap env;
  ApplySliceEnv(in, env);
  in.compute_percent = 0;
  ApplySliceEnv(in, env);
  EXPECT_FALSE(env.contains("HETEROFLOW_SLICE_COMPUTE_MODE"));
}

TEST(SliceEnvTest, GoldPinsTheMigDeviceOnlyOnceItExists) {
  SliceEnvInput in = Silver();
  in.qos_level = "gold";
  store::StringMap env = SliceEnv(in);
  EXPECT_FALSE(env.contains("CUDA_VISIBLE_DEVICES"));
  EXPECT_FALSE(env.contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
  in.mig_device_id = "MIG-GPU-aaa/1/0";
  env = SliceEnv(in);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), "MIG-GPU-aaa/1/0");
}

TEST(SliceEnvTest, OtherVendorsGetNoNvidiaVariables) {
  SliceEnvInput in = Silver();
  in.vendor = "ascend";
  in.qos_level = "bronze";
  const store::StringMap env = SliceEnv(in);
  EXPECT_FALSE(env.contains("CUDA_VISIBLE_DEVICES"));
  EXPECT_FALSE(env.contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
  EXPECT_EQ(env.at("HETEROFLOW_SLICE_QOS"), "bronze");
}

TEST(SliceEnvTest, RebindStripsEveryOldVariable) {
  store::StringMap env = {{"USER_VAR", "x"}};
  ApplySliceEnv(Silver(), env);
  SliceEnvInput next = Silver();
  next.slice_id = 9;
  next.gpu_index = 0;
  next.gpu_uuids = "GPU-bbb";
  next.compute_percent = 0;  // the old thread percentage must go
  next.qos_level = "bronze";
  ApplySliceEnv(next, env);
  EXPECT_EQ(env.at("USER_VAR"), "x");
  EXPECT_EQ(env.at("HETEROFLOW_SLICE_ID"), "9");
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "GPU-bbb");
  EXPECT_FALSE(env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  EXPECT_EQ(env, [&] {
    store::StringMap expected = SliceEnv(next);
    expected["USER_VAR"] = "x";
    return expected;
  }());
}

TEST(SliceEnvTest, ReservedNames) {
  EXPECT_TRUE(IsReservedEnvName("HETEROFLOW_SLICE_ID"));
  EXPECT_TRUE(IsReservedEnvName("CUDA_MPS_PIPE_DIRECTORY"));
  EXPECT_TRUE(IsReservedEnvName("CUDA_VISIBLE_DEVICES"));
  EXPECT_TRUE(IsReservedEnvName("NVIDIA_VISIBLE_DEVICES"));
  EXPECT_FALSE(IsReservedEnvName("PATH"));
  EXPECT_FALSE(IsReservedEnvName("HETEROFLOWX"));
}

TEST(SliceEnvTest, AnUnboundTaskKeepsNothingOfItsBinding) {
  store::TaskRow task;
  task.state = store::TaskState::kScheduled;
  task.slice_id = 12;
  task.node_id = 3;
  task.gpu_indices = {1};
  ApplySliceEnv(Silver(), task.env);
  task.env["USER_VAR"] = "x";
  task.labels["heteroflow.mig_device_id"] = "MIG-1";
  task.labels["team"] = "vision";
  UnbindTask(task, "its node was lost");
  EXPECT_EQ(task.state, store::TaskState::kPending);
  EXPECT_FALSE(task.slice_id.has_value());
  EXPECT_FALSE(task.node_id.has_value());
  EXPECT_TRUE(task.gpu_indices.empty());
  EXPECT_EQ(task.env, (store::StringMap{{"USER_VAR", "x"}}));
  EXPECT_EQ(task.labels, (store::StringMap{{"team", "vision"}}));
  EXPECT_EQ(task.pending_reason, "its node was lost");
}

}  // namespace
}  // namespace hf::server
