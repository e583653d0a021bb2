// The Runtime contract: one suite that every implementation must pass, so
// the agent can rely on the same answers from the process runtime and from
// Docker (here through testing/fake-docker).
//
// What it pins down beyond runtime.h's comments: Kill of a running task
// ends it as "killed by signal 15" when the task honours SIGTERM; Kill of a
// finished task is OK; Remove frees the id for a new Start; Adopt lists
// every held task in id order with the heteroflow.* labels.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <functional>
#include <memory>

#include "runtime/docker_runtime.h"
#include "runtime/process_runtime.h"
#include "runtime/runtime_test_util.h"

namespace hf::runtime {
namespace {

using testing::ScratchDir;
using testing::WaitFinished;

struct Backend {
  const char* name;
  // Makes a runtime whose state lives under `dir`.
  std::function<std::unique_ptr<Runtime>(const std::filesystem::path& dir)>
      make;
};

std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param.name;
}

std::unique_ptr<Runtime> MakeProcess(const std::filesystem::path& dir) {
  ProcessRuntimeOptions options;
  options.state_dir = dir;
  options.shim_path = HF_TASK_SHIM_PATH;
  StatusOr<std::unique_ptr<ProcessRuntime>> runtime =
      ProcessRuntime::Create(options);
  EXPECT_TRUE(runtime.ok()) << runtime.status().ToString();
  return runtime.ok() ? std::move(runtime).value() : nullptr;
}

std::unique_ptr<Runtime> MakeDocker(const std::filesystem::path& dir) {
  setenv("FAKE_DOCKER_STATE", dir.c_str(), 1);
  DockerRuntimeOptions options;
  options.docker = HF_FAKE_DOCKER;
  return std::make_unique<DockerRuntime>(options);
}

class RuntimeContractTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    runtime_ = GetParam().make(dir_.path());
    ASSERT_NE(runtime_, nullptr);
  }

  // A task that runs until stopped, valid for every runtime.
  static TaskSpec LongTask(std::int64_t id) {
    TaskSpec spec;
    spec.task_id = id;
    spec.tenant = "acme";
    spec.image = "busybox:1";
    spec.command = {"sleep", "300"};
    return spec;
  }

  ScratchDir dir_;
  std::unique_ptr<Runtime> runtime_;
};

TEST_P(RuntimeContractTest, UnknownTasksAreNotFound) {
  EXPECT_EQ(runtime_->Poll(999).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(runtime_->Kill(999, std::chrono::seconds(1)).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(runtime_->Remove(999).code(), StatusCode::kNotFound);
  EXPECT_EQ(runtime_->ReadLog(999, 0, 10).status().code(),
            StatusCode::kNotFound);
}

TEST_P(RuntimeContractTest, InvalidSpecIsInvalidArgument) {
  TaskSpec spec = LongTask(0);
  EXPECT_EQ(runtime_->Start(spec).code(), StatusCode::kInvalidArgument);
  spec = LongTask(1);
  spec.gpu_indices = {0};
  spec.mig_device = "MIG-x";
  EXPECT_EQ(runtime_->Start(spec).code(), StatusCode::kInvalidArgument);
}

TEST_P(RuntimeContractTest, StartingTwiceIsAlreadyExists) {
  ASSERT_TRUE(runtime_->Start(LongTask(1)).ok());
  EXPECT_EQ(runtime_->Start(LongTask(1)).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(runtime_->Poll(1)->state, TaskState::kRunning);
  ASSERT_TRUE(runtime_->Kill(1, std::chrono::seconds(5)).ok());
}

TEST_P(RuntimeContractTest, KillEndsATaskWithSigterm) {
  ASSERT_TRUE(runtime_->Start(LongTask(2)).ok());
  ASSERT_TRUE(runtime_->Kill(2, std::chrono::seconds(5)).ok());
  const TaskStatus status = WaitFinished(*runtime_, 2);
  EXPECT_EQ(status.state, TaskState::kSignaled) << DescribeTaskStatus(status);
  EXPECT_EQ(status.signal, 15);
  EXPECT_TRUE(runtime_->Kill(2, std::chrono::seconds(1)).ok());
}

TEST_P(RuntimeContractTest, RemoveRefusesRunningAndFreesTheId) {
  ASSERT_TRUE(runtime_->Start(LongTask(3)).ok());
  EXPECT_EQ(runtime_->Remove(3).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(runtime_->Kill(3, std::chrono::seconds(5)).ok());
  ASSERT_TRUE(runtime_->Remove(3).ok());
  EXPECT_EQ(runtime_->Poll(3).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(runtime_->Start(LongTask(3)).ok());
  ASSERT_TRUE(runtime_->Kill(3, std::chrono::seconds(5)).ok());
}

TEST_P(RuntimeContractTest, AdoptListsHeldTasksInIdOrder) {
  for (std::int64_t id : {12, 4, 8}) {
    TaskSpec spec = LongTask(id);
    spec.slice_id = 100 + id;
    ASSERT_TRUE(runtime_->Start(spec).ok());
  }
  ASSERT_TRUE(runtime_->Kill(8, std::chrono::seconds(5)).ok());
  ASSERT_TRUE(runtime_->Remove(8).ok());
  ASSERT_TRUE(runtime_->Kill(12, std::chrono::seconds(5)).ok());

  std::unique_ptr<Runtime> fresh = GetParam().make(dir_.path());
  StatusOr<std::vector<AdoptedTask>> adopted = fresh->Adopt();
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  ASSERT_EQ(adopted->size(), 2u);
  EXPECT_EQ((*adopted)[0].task_id, 4);
  EXPECT_EQ((*adopted)[0].status.state, TaskState::kRunning);
  EXPECT_EQ((*adopted)[0].labels.at("heteroflow.task"), "4");
  EXPECT_EQ((*adopted)[0].labels.at("heteroflow.tenant"), "acme");
  EXPECT_EQ((*adopted)[0].labels.at("heteroflow.slice"), "104");
  EXPECT_EQ((*adopted)[1].task_id, 12);
  EXPECT_TRUE((*adopted)[1].status.finished());
  ASSERT_TRUE(fresh->Kill(4, std::chrono::seconds(5)).ok());
}

INSTANTIATE_TEST_SUITE_P(Runtimes, RuntimeContractTest,
                         ::testing::Values(Backend{"Process", &MakeProcess},
                                           Backend{"Docker", &MakeDocker}),
                         BackendName);

}  // namespace
}  // namespace hf::runtime
