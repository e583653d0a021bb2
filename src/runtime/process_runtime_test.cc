// ProcessRuntime against real processes and the real hf-task-shim.
#include "runtime/process_runtime.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/runtime_test_util.h"
#include "runtime/task_files.h"

namespace hf::runtime {
namespace {

namespace fs = std::filesystem;
namespace tf = task_files;
using std::chrono::milliseconds;
using testing::Eventually;
using testing::ScratchDir;
using testing::WaitFinished;

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// True when `pid` no longer runs (gone, or a zombie nobody reaped).
bool ProcessGone(pid_t pid) {
  const std::optional<tf::ProcessIdentity> identity = tf::IdentityOf(pid);
  return !identity || !tf::IsAlive(*identity);
}

class ProcessRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { runtime_ = MakeRuntime(); }

  std::unique_ptr<ProcessRuntime> MakeRuntime(
      milliseconds start_timeout = std::chrono::seconds(10)) {
    ProcessRuntimeOptions options;
    options.state_dir = dir_.path() / "state";
    options.shim_path = HF_TASK_SHIM_PATH;
    options.start_timeout = start_timeout;
    StatusOr<std::unique_ptr<ProcessRuntime>> runtime =
        ProcessRuntime::Create(options);
    EXPECT_TRUE(runtime.ok()) << runtime.status().ToString();
    return runtime.ok() ? std::move(runtime).value() : nullptr;
  }

  // A spec running `script` with sh; $1 in the script is the scratch dir.
  TaskSpec ShellTask(std::int64_t id, const std::string& script) const {
    TaskSpec spec;
    spec.task_id = id;
    spec.tenant = "acme";
    spec.command = {"sh", "-c", script, "sh", dir_.path().string()};
    return spec;
  }

  fs::path Scratch(const std::string& name) const { return dir_.path() / name; }

  ScratchDir dir_;
  std::unique_ptr<ProcessRuntime> runtime_;
};

TEST_F(ProcessRuntimeTest, EnvAndGpuPinningReachTheChild) {
  setenv("HF_AGENT_ONLY_SECRET", "leak", 1);
  TaskSpec spec = ShellTask(1, "env > \"$1/env.out\"");
  spec.env = {{"HETEROFLOW_SLICE_ID", "3"},
              {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"},
              {"CUDA_VISIBLE_DEVICES", "GPU-stale"}};
  spec.gpu_indices = {1, 3};
  spec.mps_pipe_dir = "/run/hf-mps";
  ASSERT_TRUE(runtime_->Start(spec).ok());
  TaskStatus status = WaitFinished(*runtime_, 1);
  EXPECT_EQ(status.state, TaskState::kExited) << DescribeTaskStatus(status);
  EXPECT_EQ(status.exit_code, 0);
  unsetenv("HF_AGENT_ONLY_SECRET");

  const std::string env = ReadText(Scratch("env.out"));
  EXPECT_NE(env.find("HETEROFLOW_SLICE_ID=3\n"), std::string::npos) << env;
  EXPECT_NE(env.find("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50\n"),
            std::string::npos);
  EXPECT_NE(env.find("CUDA_VISIBLE_DEVICES=1,3\n"), std::string::npos);
  EXPECT_NE(env.find("NVIDIA_VISIBLE_DEVICES=1,3\n"), std::string::npos);
  EXPECT_NE(env.find("CUDA_MPS_PIPE_DIRECTORY=/run/hf-mps\n"),
            std::string::npos);
  EXPECT_NE(env.find("PATH=/usr/local/sbin:"), std::string::npos);
  EXPECT_EQ(env.find("HF_AGENT_ONLY_SECRET"), std::string::npos);
}

TEST_F(ProcessRuntimeTest, MigDeviceAndPreloadReachTheChild) {
  TaskSpec spec = ShellTask(
      2,
      "echo \"$NVIDIA_VISIBLE_DEVICES|$CUDA_VISIBLE_DEVICES|$LD_PRELOAD\" "
      "> \"$1/env.out\"");
  spec.mig_device = "MIG-4f1c2a7e-1111-5b6c-9d8e-123456789abc";
  // A library that cannot be loaded only makes ld.so complain in the log.
  spec.preload_library = "/nonexistent/libhf-hook.so";
  ASSERT_TRUE(runtime_->Start(spec).ok());
  EXPECT_EQ(WaitFinished(*runtime_, 2).state, TaskState::kExited);
  EXPECT_EQ(ReadText(Scratch("env.out")), spec.mig_device + "|" +
                                              spec.mig_device +
                                              "|/nonexistent/libhf-hook.so\n");
}

// A preload library the task's userland cannot load (here: it needs a
// version its dependency lacks, as the hook built against a newer glibc
// does in an older one) stops the program in the loader; the loader's own
// line is what the agent adds to the failure reason (LoaderErrorOfTask).
TEST_F(ProcessRuntimeTest, TheLoadersLineNamesALibraryItRefused) {
  TaskSpec spec = ShellTask(20, "echo ran");
  spec.preload_library = HF_NEEDS_VERSION_LIB;
  spec.env = {{"LD_LIBRARY_PATH", HF_VERSIONED_OLD_DIR}};
  ASSERT_TRUE(runtime_->Start(spec).ok());
  const TaskStatus status = WaitFinished(*runtime_, 20);
  ASSERT_EQ(status.state, TaskState::kExited) << DescribeTaskStatus(status);
  EXPECT_NE(status.exit_code, 0);
  const std::string line = LoaderErrorOfTask(*runtime_, 20, -1);
  EXPECT_NE(line.find("version `HF_TEST_2' not found (required by " +
                      std::string(HF_NEEDS_VERSION_LIB) + ")"),
            std::string::npos)
      << line;
  auto log = runtime_->ReadLog(20, 0, 1 << 16);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->data.find("ran"), std::string::npos) << log->data;

  // A library that is not there: the loader only warns and the program
  // runs; when it then fails, the warning is the line found.
  TaskSpec missing = ShellTask(21, "exit 3");
  missing.preload_library = "/nonexistent/libhf-hook.so";
  ASSERT_TRUE(runtime_->Start(missing).ok());
  EXPECT_EQ(WaitFinished(*runtime_, 21).exit_code, 3);
  EXPECT_NE(LoaderErrorOfTask(*runtime_, 21, -1)
                .find("object '/nonexistent/libhf-hook.so' from LD_PRELOAD "
                      "cannot be preloaded"),
            std::string::npos);
  // An ordinary failure has no such line.
  ASSERT_TRUE(runtime_->Start(ShellTask(22, "echo failing; exit 4")).ok());
  EXPECT_EQ(WaitFinished(*runtime_, 22).exit_code, 4);
  EXPECT_EQ(LoaderErrorOfTask(*runtime_, 22, -1), "");
}

TEST_F(ProcessRuntimeTest, ExitCodeIsReported) {
  ASSERT_TRUE(runtime_->Start(ShellTask(3, "exit 7")).ok());
  const TaskStatus status = WaitFinished(*runtime_, 3);
  EXPECT_EQ(status.state, TaskState::kExited);
  EXPECT_EQ(status.exit_code, 7);
}

TEST_F(ProcessRuntimeTest, DeathBySignalIsReportedAsSignal) {
  ASSERT_TRUE(runtime_->Start(ShellTask(4, "kill -KILL $$")).ok());
  const TaskStatus status = WaitFinished(*runtime_, 4);
  EXPECT_EQ(status.state, TaskState::kSignaled);
  EXPECT_EQ(status.signal, SIGKILL);
}

TEST_F(ProcessRuntimeTest, ExecFailureIsAFailedTaskNotAHang) {
  TaskSpec spec;
  spec.task_id = 5;
  spec.command = {"no-such-command-hf-test", "--flag"};
  ASSERT_TRUE(runtime_->Start(spec).ok());
  StatusOr<TaskStatus> status = runtime_->Poll(5);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, TaskState::kFailed);
  EXPECT_EQ(status->exit_code, 127);
  EXPECT_NE(status->message.find("no-such-command-hf-test"), std::string::npos)
      << status->message;
  EXPECT_NE(status->message.find("No such file or directory"),
            std::string::npos);
  StatusOr<LogChunk> log = runtime_->ReadLog(5, 0, 4096);
  ASSERT_TRUE(log.ok());
  EXPECT_NE(log->data.find("cannot execute"), std::string::npos);
}

TEST_F(ProcessRuntimeTest, KillStopsTheWholeProcessGroup) {
  ASSERT_TRUE(runtime_
                  ->Start(ShellTask(6,
                                    "sleep 300 & echo $! > \"$1/gpid\"; "
                                    "wait"))
                  .ok());
  ASSERT_TRUE(Eventually([&] { return !ReadText(Scratch("gpid")).empty(); }));
  const pid_t grandchild = std::stoi(ReadText(Scratch("gpid")));
  EXPECT_FALSE(ProcessGone(grandchild));
  EXPECT_EQ(runtime_->Poll(6)->state, TaskState::kRunning);

  ASSERT_TRUE(runtime_->Kill(6, std::chrono::seconds(5)).ok());
  const TaskStatus status = *runtime_->Poll(6);  // settled when Kill returns
  EXPECT_EQ(status.state, TaskState::kSignaled) << DescribeTaskStatus(status);
  EXPECT_EQ(status.signal, SIGTERM);
  EXPECT_TRUE(Eventually([&] { return ProcessGone(grandchild); }));
  // Killing a finished task is fine.
  EXPECT_TRUE(runtime_->Kill(6, milliseconds(10)).ok());
}

TEST_F(ProcessRuntimeTest, KillEscalatesToSigkillAfterTheGrace) {
  ASSERT_TRUE(runtime_
                  ->Start(ShellTask(7,
                                    "trap '' TERM; touch \"$1/ready\"; "
                                    "while :; do sleep 0.05; done"))
                  .ok());
  ASSERT_TRUE(Eventually([&] { return fs::exists(Scratch("ready")); }));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(runtime_->Kill(7, milliseconds(200)).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(200));
  const TaskStatus status = *runtime_->Poll(7);
  EXPECT_EQ(status.state, TaskState::kSignaled);
  EXPECT_EQ(status.signal, SIGKILL);
}

TEST_F(ProcessRuntimeTest, LeftoversOfTheGroupDieWithTheLeader) {
  ASSERT_TRUE(
      runtime_->Start(ShellTask(8, "sleep 300 & echo $! > \"$1/gpid\"; exit 0"))
          .ok());
  EXPECT_EQ(WaitFinished(*runtime_, 8).state, TaskState::kExited);
  const pid_t grandchild = std::stoi(ReadText(Scratch("gpid")));
  EXPECT_TRUE(Eventually([&] { return ProcessGone(grandchild); }));
}

TEST_F(ProcessRuntimeTest, LogHoldsStdoutAndStderrAndReadsByOffset) {
  ASSERT_TRUE(runtime_->Start(ShellTask(9, "echo out; echo err >&2")).ok());
  WaitFinished(*runtime_, 9);
  StatusOr<LogChunk> all = runtime_->ReadLog(9, 0, 1 << 20);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->data, "out\nerr\n");
  EXPECT_EQ(all->next_offset, 8);
  EXPECT_EQ(ReadText(runtime_->LogPath(9)), "out\nerr\n");

  StatusOr<LogChunk> part = runtime_->ReadLog(9, 4, 2);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(part->data, "er");
  EXPECT_EQ(part->next_offset, 6);
  StatusOr<LogChunk> end = runtime_->ReadLog(9, 8, 100);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->data, "");
  EXPECT_EQ(end->next_offset, 8);
  EXPECT_EQ(runtime_->ReadLog(9, -1, 10).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ProcessRuntimeTest, IdentityErrors) {
  EXPECT_EQ(runtime_->Poll(404).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(runtime_->Kill(404, milliseconds(10)).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(runtime_->Remove(404).code(), StatusCode::kNotFound);
  EXPECT_EQ(runtime_->ReadLog(404, 0, 10).status().code(),
            StatusCode::kNotFound);
  TaskSpec invalid = ShellTask(0, "true");
  EXPECT_EQ(runtime_->Start(invalid).code(), StatusCode::kInvalidArgument);

  ASSERT_TRUE(runtime_->Start(ShellTask(10, "exit 1")).ok());
  EXPECT_EQ(runtime_->Start(ShellTask(10, "exit 2")).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(WaitFinished(*runtime_, 10).exit_code, 1);
  // Removed, the id is free again.
  ASSERT_TRUE(runtime_->Remove(10).ok());
  EXPECT_FALSE(fs::exists(runtime_->TaskDir(10)));
  EXPECT_EQ(runtime_->Poll(10).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(runtime_->Start(ShellTask(10, "exit 2")).ok());
  EXPECT_EQ(WaitFinished(*runtime_, 10).exit_code, 2);
}

TEST_F(ProcessRuntimeTest, RemovingARunningTaskIsRefused) {
  ASSERT_TRUE(runtime_->Start(ShellTask(11, "exec sleep 300")).ok());
  EXPECT_EQ(runtime_->Remove(11).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(runtime_->Kill(11, std::chrono::seconds(5)).ok());
  EXPECT_TRUE(runtime_->Remove(11).ok());
}

TEST_F(ProcessRuntimeTest, ANewRuntimeAdoptsRunningTasksAndLearnsTheirEnd) {
  TaskSpec waiting =
      ShellTask(21, "while [ ! -e \"$1/go\" ]; do sleep 0.01; done; exit 5");
  waiting.slice_id = 4;
  waiting.labels = {{"team", "vision"}};
  ASSERT_TRUE(runtime_->Start(waiting).ok());
  ASSERT_TRUE(runtime_->Start(ShellTask(20, "exit 3")).ok());
  WaitFinished(*runtime_, 20);
  runtime_.reset();  // the agent goes away

  std::unique_ptr<ProcessRuntime> again = MakeRuntime();
  StatusOr<std::vector<AdoptedTask>> adopted = again->Adopt();
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  ASSERT_EQ(adopted->size(), 2u);
  EXPECT_EQ((*adopted)[0].task_id, 20);
  EXPECT_EQ((*adopted)[0].status.exit_code, 3);
  EXPECT_EQ((*adopted)[1].task_id, 21);
  EXPECT_EQ((*adopted)[1].status.state, TaskState::kRunning);
  EXPECT_EQ((*adopted)[1].labels, (StringMap{{"heteroflow.slice", "4"},
                                             {"heteroflow.task", "21"},
                                             {"heteroflow.tenant", "acme"},
                                             {"team", "vision"}}));

  std::ofstream(Scratch("go")).put('\n');
  const TaskStatus status = WaitFinished(*again, 21);
  EXPECT_EQ(status.state, TaskState::kExited);
  EXPECT_EQ(status.exit_code, 5);
}

TEST_F(ProcessRuntimeTest, TasksSurviveAnAgentKilledWithSigkill) {
  runtime_.reset();
  const pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    // The "agent": start a task, then die the hard way.
    std::unique_ptr<ProcessRuntime> runtime = MakeRuntime();
    const Status started =
        runtime == nullptr
            ? Status::Internal("no runtime")
            : runtime->Start(
                  ShellTask(30,
                            "while [ ! -e \"$1/go\" ]; do sleep 0.01; done; "
                            "exit 9"));
    if (!started.ok()) _exit(1);
    raise(SIGKILL);
    _exit(2);
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(agent, &wait_status, 0), agent);
  ASSERT_TRUE(WIFSIGNALED(wait_status)) << "the agent failed to start the task";

  std::unique_ptr<ProcessRuntime> again = MakeRuntime();
  StatusOr<std::vector<AdoptedTask>> adopted = again->Adopt();
  ASSERT_TRUE(adopted.ok());
  ASSERT_EQ(adopted->size(), 1u);
  EXPECT_EQ(adopted->front().status.state, TaskState::kRunning);
  std::ofstream(Scratch("go")).put('\n');
  const TaskStatus status = WaitFinished(*again, 30);
  EXPECT_EQ(status.state, TaskState::kExited);
  EXPECT_EQ(status.exit_code, 9);
}

TEST_F(ProcessRuntimeTest, ARecycledPidIsNeverTakenForTheTask) {
  // A task directory whose recorded command and shim carry this test's own
  // pid but another start time: the pid was recycled, the task is gone.
  const fs::path task = runtime_->TaskDir(40);
  fs::create_directories(task);
  tf::ProcessIdentity recycled = *tf::IdentityOf(getpid());
  recycled.start_time += 1;
  ASSERT_TRUE(
      tf::WriteFileAtomic(task / tf::kPidFile, tf::FormatIdentity(recycled))
          .ok());
  ASSERT_TRUE(
      tf::WriteFileAtomic(task / tf::kShimPidFile, tf::FormatIdentity(recycled))
          .ok());
  StatusOr<TaskStatus> status = runtime_->Poll(40);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, TaskState::kLost);
  EXPECT_FALSE(status->message.empty());
  // Kill must not signal the stranger's group (this very process).
  EXPECT_TRUE(runtime_->Kill(40, milliseconds(10)).ok());
  EXPECT_TRUE(runtime_->Remove(40).ok());
}

TEST_F(ProcessRuntimeTest, AStartThatDiedHalfWayIsStartingThenLost) {
  // An agent killed between creating the task directory and the shim
  // reporting leaves a directory with no pid files.
  fs::create_directories(runtime_->TaskDir(50));
  StatusOr<TaskStatus> status = runtime_->Poll(50);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, TaskState::kRunning);
  EXPECT_EQ(status->message, "starting");

  std::unique_ptr<ProcessRuntime> impatient = MakeRuntime(milliseconds(20));
  EXPECT_TRUE(Eventually(
      [&] { return impatient->Poll(50)->state == TaskState::kLost; }));
  EXPECT_TRUE(impatient->Remove(50).ok());
}

TEST_F(ProcessRuntimeTest, FindTaskShimLooksBesideTheProgramThenOnPath) {
  // The shim is built beside hf-agent, not beside this test: found on PATH.
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path != nullptr ? old_path : "";
  setenv("PATH", "/nonexistent-dir", 1);
  const bool beside = fs::exists(
      fs::read_symlink("/proc/self/exe").parent_path() / "hf-task-shim");
  EXPECT_EQ(FindTaskShim().ok(), beside);
  setenv("PATH",
         (fs::path(HF_TASK_SHIM_PATH).parent_path().string() + ":" + saved)
             .c_str(),
         1);
  StatusOr<fs::path> shim = FindTaskShim();
  setenv("PATH", saved.c_str(), 1);
  ASSERT_TRUE(shim.ok()) << shim.status().ToString();
  EXPECT_EQ(shim->filename(), "hf-task-shim");
  ProcessRuntimeOptions options;
  options.state_dir = dir_.path() / "other";
  options.shim_path = "/nonexistent/hf-task-shim";
  EXPECT_EQ(ProcessRuntime::Create(options).status().code(),
            StatusCode::kNotFound);
}

// Labelled tsan: tasks started, polled and raced from several threads.
TEST_F(ProcessRuntimeTest, ConcurrentStartsPollsAndADuplicateRace) {
  constexpr int kThreads = 6;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      const std::int64_t id = 100 + i;
      if (!runtime_->Start(ShellTask(id, "exit " + std::to_string(i))).ok()) {
        ++wrong;
        return;
      }
      const TaskStatus status = WaitFinished(*runtime_, id);
      if (status.exit_code != i) ++wrong;
    });
  }
  std::atomic<int> started{0};
  std::atomic<int> duplicates{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      const Status status = runtime_->Start(ShellTask(200, "exit 0"));
      if (status.ok()) ++started;
      if (status.code() == StatusCode::kAlreadyExists) ++duplicates;
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(started.load(), 1);
  EXPECT_EQ(duplicates.load(), 3);
  StatusOr<std::vector<AdoptedTask>> adopted = runtime_->Adopt();
  ASSERT_TRUE(adopted.ok());
  EXPECT_EQ(adopted->size(), static_cast<std::size_t>(kThreads + 1));
}

}  // namespace
}  // namespace hf::runtime
