// DockerRuntime against testing/fake-docker, a stand-in CLI that records
// every call and keeps container state in files.
#include "runtime/docker_runtime.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "runtime/runtime_test_util.h"

namespace hf::runtime {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

using Argv = std::vector<std::string>;

class DockerRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("FAKE_DOCKER_STATE", state_.path().c_str(), 1);
    unsetenv("FAKE_DOCKER_DOWN");
    options_.docker = HF_FAKE_DOCKER;
    runtime_ = std::make_unique<DockerRuntime>(options_);
  }
  void TearDown() override {
    unsetenv("FAKE_DOCKER_STATE");
    unsetenv("FAKE_DOCKER_DOWN");
  }

  // Every CLI call so far, without the program name.
  std::vector<Argv> Calls() const {
    std::ifstream in(state_.path() / "calls");
    std::vector<Argv> calls;
    std::string line;
    while (std::getline(in, line)) {
      Argv argv;
      std::string arg;
      for (char c : line) {
        if (c == '\x1f') {
          argv.push_back(arg);
          arg.clear();
        } else {
          arg += c;
        }
      }
      calls.push_back(argv);
    }
    return calls;
  }

  // Drives the fake's test controls (__exit, __dead, __log).
  void Fake(const std::string& args) {
    const std::string command = std::string(HF_FAKE_DOCKER) + " " + args;
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }

  static TaskSpec Spec(std::int64_t id) {
    TaskSpec spec;
    spec.task_id = id;
    spec.tenant = "acme";
    spec.image = "registry.local/train:2";
    spec.command = {"python", "train.py", "--epochs", "3"};
    return spec;
  }

  ScratchDir state_;
  DockerRuntimeOptions options_;
  std::unique_ptr<DockerRuntime> runtime_;
};

TEST_F(DockerRuntimeTest, WholeGpuSliceArgv) {
  TaskSpec spec = Spec(7);
  spec.slice_id = 3;
  spec.gpu_indices = {0, 1};
  spec.env = {{"HETEROFLOW_SLICE_ID", "3"},
              {"HETEROFLOW_SLICE_QOS", "bronze"},
              {"CUDA_VISIBLE_DEVICES", "GPU-aaa,GPU-bbb"}};
  const Argv expected = {"run",
                         "-d",
                         "--name",
                         "hf-task-7",
                         "--label",
                         "heteroflow.slice=3",
                         "--label",
                         "heteroflow.task=7",
                         "--label",
                         "heteroflow.tenant=acme",
                         "--runtime=nvidia",
                         "-e",
                         "HETEROFLOW_SLICE_ID=3",
                         "-e",
                         "HETEROFLOW_SLICE_QOS=bronze",
                         "-e",
                         "NVIDIA_VISIBLE_DEVICES=0,1",
                         "registry.local/train:2",
                         "python",
                         "train.py",
                         "--epochs",
                         "3"};
  Argv full = expected;
  full.insert(full.begin(), HF_FAKE_DOCKER);
  EXPECT_EQ(runtime_->RunArgv(spec), full);

  ASSERT_TRUE(runtime_->Start(spec).ok());
  ASSERT_EQ(Calls().size(), 1u);
  EXPECT_EQ(Calls()[0], expected);
  StatusOr<TaskStatus> status = runtime_->Poll(7);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->state, TaskState::kRunning);
}

TEST_F(DockerRuntimeTest, MigSliceArgv) {
  TaskSpec spec = Spec(8);
  spec.command.clear();  // the image's own command
  spec.mig_device = "MIG-4f1c2a7e-2222-5b6c-9d8e-123456789abc";
  spec.env = {{"HETEROFLOW_SLICE_QOS", "gold"}};
  ASSERT_TRUE(runtime_->Start(spec).ok());
  EXPECT_EQ(Calls().at(0),
            (Argv{"run", "-d", "--name", "hf-task-8", "--label",
                  "heteroflow.task=8", "--label", "heteroflow.tenant=acme",
                  "--runtime=nvidia", "-e", "HETEROFLOW_SLICE_QOS=gold", "-e",
                  "NVIDIA_VISIBLE_DEVICES=" + spec.mig_device,
                  "registry.local/train:2"}));
}

TEST_F(DockerRuntimeTest, MpsSliceArgvMountsThePipeTheHookAndItsRegion) {
  TaskSpec spec = Spec(9);
  spec.command = {"./bench"};
  spec.gpu_indices = {2};
  spec.mps_pipe_dir = "/run/heteroflow/mps";
  spec.preload_library = "/opt/heteroflow/lib/libhf-hook.so";
  spec.hook_region = "/var/lib/heteroflow/hook/slice-4.region";
  spec.env = {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "30"},
              {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4096M"}};
  spec.labels = {{"team", "vision"}};
  ASSERT_TRUE(runtime_->Start(spec).ok());
  EXPECT_EQ(Calls().at(0),
            (Argv{"run",
                  "-d",
                  "--name",
                  "hf-task-9",
                  "--label",
                  "heteroflow.task=9",
                  "--label",
                  "heteroflow.tenant=acme",
                  "--label",
                  "team=vision",
                  "--runtime=nvidia",
                  "-v",
                  "/run/heteroflow/mps:/run/heteroflow/mps",
                  "--ipc=host",
                  "-v",
                  "/opt/heteroflow/lib/libhf-hook.so:/opt/heteroflow/lib/"
                  "libhf-hook.so:ro",
                  "-v",
                  "/var/lib/heteroflow/hook/slice-4.region:/var/lib/"
                  "heteroflow/hook/slice-4.region",
                  "-e",
                  "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
                  "-e",
                  "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M",
                  "-e",
                  "CUDA_MPS_PIPE_DIRECTORY=/run/heteroflow/mps",
                  "-e",
                  "HETEROFLOW_HOOK_REGION=/var/lib/heteroflow/hook/"
                  "slice-4.region",
                  "-e",
                  "LD_PRELOAD=/opt/heteroflow/lib/libhf-hook.so",
                  "-e",
                  "NVIDIA_VISIBLE_DEVICES=2",
                  "registry.local/train:2",
                  "./bench"}));
}

// The /etc/ld.so.preload route: the agent's preload file is mounted
// read-only over the image's /etc/ld.so.preload, so a launcher that clears
// LD_PRELOAD still loads the hook; "env" mounts nothing of the kind.
TEST_F(DockerRuntimeTest, ThePreloadRouteMountsThePreloadFileReadOnly) {
  const std::string hook = "/opt/heteroflow/lib/libhf-hook.so";
  const std::string file = "/var/lib/heteroflow/hook/ld.so.preload";
  const std::string mount = file + ":/etc/ld.so.preload:ro";
  const std::string env = "LD_PRELOAD=" + hook;
  struct Case {
    PreloadRoute route;
    bool mounted;
    bool env;
  };
  std::int64_t id = 20;
  for (const Case& c : {Case{PreloadRoute::kEnv, false, true},
                        Case{PreloadRoute::kLdSoPreload, true, false},
                        Case{PreloadRoute::kBoth, true, true}}) {
    TaskSpec spec = Spec(id);
    spec.gpu_indices = {0};
    spec.preload_library = hook;
    spec.preload_route = c.route;
    spec.preload_file = file;
    ASSERT_TRUE(runtime_->Start(spec).ok());
    const Argv argv = Calls().back();
    const auto has = [&](const std::string& arg) {
      return std::find(argv.begin(), argv.end(), arg) != argv.end();
    };
    SCOPED_TRACE(std::string(PreloadRouteName(c.route)));
    EXPECT_TRUE(has(hook + ":" + hook + ":ro"));
    EXPECT_EQ(has(mount), c.mounted);
    EXPECT_EQ(has(env), c.env);
    // The engine holds the mount as asked (the fake reports its binds).
    std::ifstream name(state_.path() / "names" /
                       DockerRuntime::ContainerName(id));
    std::string container;
    std::getline(name, container);
    std::ifstream binds(state_.path() / "containers" / container / "binds");
    std::ostringstream all_binds;
    all_binds << binds.rdbuf();
    const std::string all = all_binds.str();
    EXPECT_EQ(all.find(mount) != std::string::npos, c.mounted) << all;
    ++id;
  }
  // Without a file to mount, the route cannot be taken.
  TaskSpec spec = Spec(id);
  spec.preload_library = hook;
  spec.preload_route = PreloadRoute::kLdSoPreload;
  EXPECT_EQ(runtime_->Start(spec).code(), StatusCode::kInvalidArgument);
}

TEST_F(DockerRuntimeTest, NoGpuMeansNoNvidiaRuntime) {
  ASSERT_TRUE(runtime_->Start(Spec(10)).ok());
  const std::vector<Argv> calls = Calls();
  for (const std::string& arg : calls.at(0)) {
    EXPECT_EQ(arg.find("--runtime"), std::string::npos);
    EXPECT_EQ(arg.find("VISIBLE_DEVICES"), std::string::npos);
  }
}

TEST_F(DockerRuntimeTest, PollMapsContainerStates) {
  for (std::int64_t id : {1, 2, 3, 4, 5}) {
    ASSERT_TRUE(runtime_->Start(Spec(id)).ok());
  }
  Fake("__exit hf-task-1 3");
  Fake("__exit hf-task-2 137");
  Fake("__exit hf-task-3 137 --oom");
  Fake("__dead hf-task-4");

  TaskStatus status = *runtime_->Poll(1);
  EXPECT_EQ(status.state, TaskState::kExited);
  EXPECT_EQ(status.exit_code, 3);
  status = *runtime_->Poll(2);
  EXPECT_EQ(status.state, TaskState::kSignaled);
  EXPECT_EQ(status.signal, 9);
  EXPECT_FALSE(status.oom_killed);
  status = *runtime_->Poll(3);
  EXPECT_EQ(status.state, TaskState::kSignaled);
  EXPECT_TRUE(status.oom_killed);
  status = *runtime_->Poll(4);
  EXPECT_EQ(status.state, TaskState::kLost);
  status = *runtime_->Poll(5);
  EXPECT_EQ(status.state, TaskState::kRunning);
  EXPECT_EQ(Calls().back(),
            (Argv{"inspect", "--type", "container", "hf-task-5"}));
}

TEST_F(DockerRuntimeTest, CommandMissingFromTheImageIsAFailedTask) {
  TaskSpec spec = Spec(11);
  spec.command = {"no-such-command-train"};
  ASSERT_TRUE(runtime_->Start(spec).ok());
  StatusOr<TaskStatus> status = runtime_->Poll(11);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, TaskState::kFailed);
  EXPECT_EQ(status->exit_code, 127);
  EXPECT_NE(status->message.find("executable file not found"),
            std::string::npos)
      << status->message;
}

TEST_F(DockerRuntimeTest, StartErrorsAreClassified) {
  ASSERT_TRUE(runtime_->Start(Spec(12)).ok());
  const Status twice = runtime_->Start(Spec(12));
  EXPECT_EQ(twice.code(), StatusCode::kAlreadyExists) << twice.ToString();

  TaskSpec spec = Spec(13);
  spec.image = "registry.local/no-such-image:1";
  const Status missing = runtime_->Start(spec);
  EXPECT_EQ(missing.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("pull access denied"), std::string::npos);
  EXPECT_EQ(missing.message().find("Run 'docker"), std::string::npos)
      << missing.message();

  spec.image = "";
  EXPECT_EQ(runtime_->Start(spec).code(), StatusCode::kInvalidArgument);
}

TEST_F(DockerRuntimeTest, UnknownContainerIsNotFound) {
  EXPECT_EQ(runtime_->Poll(77).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(runtime_->Kill(77, std::chrono::seconds(1)).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(runtime_->Remove(77).code(), StatusCode::kNotFound);
  EXPECT_EQ(runtime_->ReadLog(77, 0, 100).status().code(),
            StatusCode::kNotFound);
}

TEST_F(DockerRuntimeTest, EngineDownIsUnavailableWithTheMessage) {
  setenv("FAKE_DOCKER_DOWN", "1", 1);
  const auto expect_down = [](const Status& status) {
    EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
    EXPECT_NE(status.message().find("Cannot connect to the Docker daemon"),
              std::string::npos)
        << status.message();
  };
  expect_down(runtime_->Start(Spec(1)));
  expect_down(runtime_->Poll(1).status());
  expect_down(runtime_->Kill(1, std::chrono::seconds(1)));
  expect_down(runtime_->Adopt().status());
  expect_down(runtime_->Remove(1));
  expect_down(runtime_->ReadLog(1, 0, 10).status());
}

TEST_F(DockerRuntimeTest, MissingCliIsUnavailable) {
  DockerRuntimeOptions options;
  options.docker = "/nonexistent/bin/docker";
  DockerRuntime runtime(options);
  EXPECT_EQ(runtime.Poll(1).status().code(), StatusCode::kUnavailable);
}

TEST_F(DockerRuntimeTest, DefaultCliIsFoundOnPath) {
  ScratchDir bin;
  fs::create_symlink(HF_FAKE_DOCKER, bin.path() / "docker");
  const std::string old_path = std::getenv("PATH");
  setenv("PATH", (bin.path().string() + ":" + old_path).c_str(), 1);
  DockerRuntime runtime;  // "docker" on PATH
  const Status started = runtime.Start(Spec(3));
  setenv("PATH", old_path.c_str(), 1);
  EXPECT_TRUE(started.ok()) << started.ToString();
  EXPECT_EQ(Calls().size(), 1u);
}

TEST_F(DockerRuntimeTest, KillStopsWithTheGraceInWholeSeconds) {
  ASSERT_TRUE(runtime_->Start(Spec(14)).ok());
  ASSERT_TRUE(runtime_->Kill(14, std::chrono::milliseconds(1500)).ok());
  EXPECT_EQ(Calls().back(), (Argv{"stop", "-t", "2", "hf-task-14"}));
  const TaskStatus status = *runtime_->Poll(14);
  EXPECT_EQ(status.state, TaskState::kSignaled);
  EXPECT_EQ(status.signal, 15);
  EXPECT_EQ(status.exit_code, 143);
  // An image that ignores SIGTERM is killed once the grace is up.
  TaskSpec stubborn = Spec(15);
  stubborn.image = "registry.local/ignores-sigterm:1";
  ASSERT_TRUE(runtime_->Start(stubborn).ok());
  ASSERT_TRUE(runtime_->Kill(15, std::chrono::milliseconds(0)).ok());
  EXPECT_EQ(Calls().back(), (Argv{"stop", "-t", "0", "hf-task-15"}));
  EXPECT_EQ(runtime_->Poll(15)->signal, 9);
}

TEST_F(DockerRuntimeTest, RemoveRefusesARunningContainer) {
  ASSERT_TRUE(runtime_->Start(Spec(16)).ok());
  const Status running = runtime_->Remove(16);
  EXPECT_EQ(running.code(), StatusCode::kFailedPrecondition)
      << running.ToString();
  ASSERT_TRUE(runtime_->Kill(16, std::chrono::seconds(1)).ok());
  ASSERT_TRUE(runtime_->Remove(16).ok());
  EXPECT_EQ(Calls().back(), (Argv{"rm", "hf-task-16"}));
  EXPECT_EQ(runtime_->Poll(16).status().code(), StatusCode::kNotFound);
}

TEST_F(DockerRuntimeTest, AdoptFindsLabelledContainersOnly) {
  for (std::int64_t id : {5, 2, 9}) {
    TaskSpec spec = Spec(id);
    spec.slice_id = id * 10;
    ASSERT_TRUE(runtime_->Start(spec).ok());
  }
  Fake("__exit hf-task-9 0");
  // Not ours: no label; a label on a container with a foreign name.
  Fake("run -d --name someone-else busybox sleep 1 >/dev/null");
  Fake("run -d --name impostor --label heteroflow.task=4 busybox >/dev/null");

  // A new runtime object: nothing is remembered in memory.
  DockerRuntime fresh(options_);
  StatusOr<std::vector<AdoptedTask>> adopted = fresh.Adopt();
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  ASSERT_EQ(adopted->size(), 3u);
  EXPECT_EQ((*adopted)[0].task_id, 2);
  EXPECT_EQ((*adopted)[1].task_id, 5);
  EXPECT_EQ((*adopted)[2].task_id, 9);
  EXPECT_EQ((*adopted)[0].status.state, TaskState::kRunning);
  EXPECT_EQ((*adopted)[2].status.state, TaskState::kExited);
  EXPECT_EQ((*adopted)[1].labels.at("heteroflow.slice"), "50");
  EXPECT_EQ((*adopted)[1].labels.at("heteroflow.tenant"), "acme");

  const std::vector<Argv> calls = Calls();
  EXPECT_EQ(calls.at(calls.size() - 2),
            (Argv{"ps", "-a", "-q", "--no-trunc", "--filter",
                  "label=heteroflow.task"}));
  EXPECT_EQ(calls.back().at(0), "inspect");
}

TEST_F(DockerRuntimeTest, AdoptWithNothingToAdopt) {
  StatusOr<std::vector<AdoptedTask>> adopted = runtime_->Adopt();
  ASSERT_TRUE(adopted.ok());
  EXPECT_TRUE(adopted->empty());
  EXPECT_EQ(Calls().size(), 1u);  // no inspect of nothing
}

TEST_F(DockerRuntimeTest, ReadLogInterleavesStreamsAndSlices) {
  ASSERT_TRUE(runtime_->Start(Spec(17)).ok());
  Fake("__log hf-task-17 1 epoch-1");
  Fake("__log hf-task-17 2 warning");
  Fake("__log hf-task-17 1 epoch-2");
  StatusOr<LogChunk> all = runtime_->ReadLog(17, 0, 1000);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->data, "epoch-1\nwarning\nepoch-2\n");
  EXPECT_EQ(all->next_offset, 24);
  StatusOr<LogChunk> part = runtime_->ReadLog(17, 8, 7);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(part->data, "warning");
  EXPECT_EQ(part->next_offset, 15);
  StatusOr<LogChunk> end = runtime_->ReadLog(17, 24, 100);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->data, "");
  EXPECT_EQ(end->next_offset, 24);
}

TEST(ParseDockerInspectTest, ReadsTheFieldsItNeedsAndIgnoresTheRest) {
  // Shaped like the real CLI's output, trimmed; Labels may be null.
  const char* json = R"([
    {"Id": "abc123", "Name": "/hf-task-3", "RestartCount": 0,
     "State": {"Status": "exited", "Running": false, "OOMKilled": false,
               "Dead": false, "Pid": 0, "ExitCode": 2, "Error": "",
               "StartedAt": "2024-05-01T10:00:00Z"},
     "Config": {"Labels": {"heteroflow.task": "3", "team": "nlp"},
                "Env": ["A=1"]},
     "HostConfig": {"Runtime": "nvidia"}},
    {"Id": "def456", "Name": "/plain", "State": {"Status": "running"},
     "Config": {"Labels": null}}
  ])";
  StatusOr<std::vector<InspectedContainer>> parsed = ParseDockerInspect(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].id, "abc123");
  EXPECT_EQ((*parsed)[0].name, "hf-task-3");
  EXPECT_EQ((*parsed)[0].labels.at("team"), "nlp");
  EXPECT_EQ((*parsed)[0].status.state, TaskState::kExited);
  EXPECT_EQ((*parsed)[0].status.exit_code, 2);
  EXPECT_EQ((*parsed)[1].status.state, TaskState::kRunning);
  EXPECT_TRUE((*parsed)[1].labels.empty());
}

TEST(ParseDockerInspectTest, RefusesMalformedOutput) {
  for (const char* bad :
       {"", "not json", "{}", R"([{"Id": "x"}])",
        R"([{"Id": "x", "State": {"Status": "exited", "ExitCode": "two"}}])"}) {
    EXPECT_EQ(ParseDockerInspect(bad).status().code(), StatusCode::kInternal)
        << bad;
  }
}

TEST(ClassifyDockerErrorTest, MapsTheCliMessages) {
  EXPECT_EQ(ClassifyDockerError("x", 1,
                                "Cannot connect to the Docker daemon at "
                                "unix:///var/run/docker.sock.")
                .code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(ClassifyDockerError("x", 1, "Error: No such object: y").code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ClassifyDockerError("x", 125, "something else broke").code(),
            StatusCode::kInternal);
}

}  // namespace
}  // namespace hf::runtime
