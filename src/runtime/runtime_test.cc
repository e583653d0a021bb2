// Tests of the pieces every runtime shares: spec validation, the task
// environment and labels, the state-file formats, and RunCommand.
#include "runtime/runtime.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

#include "runtime/subprocess.h"
#include "runtime/task_files.h"

namespace hf::runtime {
namespace {

namespace tf = task_files;

TaskSpec ValidSpec() {
  TaskSpec spec;
  spec.task_id = 7;
  spec.tenant = "acme";
  spec.image = "repo/train:1";
  spec.command = {"python", "train.py"};
  return spec;
}

TEST(ValidateTaskSpecTest, AcceptsAPlainSpec) {
  EXPECT_TRUE(ValidateTaskSpec(ValidSpec(), EnvTarget::kHostProcess).ok());
  EXPECT_TRUE(ValidateTaskSpec(ValidSpec(), EnvTarget::kContainer).ok());
}

TEST(ValidateTaskSpecTest, NamesTheFieldItRefuses) {
  struct Case {
    const char* field;
    void (*mutate)(TaskSpec&);
    EnvTarget target = EnvTarget::kHostProcess;
  };
  const Case cases[] = {
      {"task_id", [](TaskSpec& s) { s.task_id = 0; }},
      {"command", [](TaskSpec& s) { s.command.clear(); }},
      {"image", [](TaskSpec& s) { s.image.clear(); }, EnvTarget::kContainer},
      {"image", [](TaskSpec& s) { s.image = "--privileged"; },
       EnvTarget::kContainer},
      {"gpu_indices",
       [](TaskSpec& s) {
         s.gpu_indices = {0};
         s.mig_device = "MIG-1";
       }},
      {"gpu_indices",
       [](TaskSpec& s) {
         s.gpu_indices = {1, 1};
       }},
      {"gpu_indices", [](TaskSpec& s) { s.gpu_indices = {-1}; }},
      {"mig_device", [](TaskSpec& s) { s.mig_device = "GPU-abc"; }},
      {"mps_pipe_dir", [](TaskSpec& s) { s.mps_pipe_dir = "relative/dir"; }},
      {"preload_library",
       [](TaskSpec& s) { s.preload_library = "/a b/libhook.so"; }},
      {"hook_region",
       [](TaskSpec& s) { s.hook_region = "state/hook/slice-1.region"; }},
      {"hook_region",
       [](TaskSpec& s) { s.hook_region = "/state/a:b/slice-1.region"; }},
      {"env", [](TaskSpec& s) { s.env["A=B"] = "x"; }},
      {"env", [](TaskSpec& s) { s.env[""] = "x"; }},
      {"labels", [](TaskSpec& s) { s.labels["k"] = std::string("a\0b", 3); }},
      {"command",
       [](TaskSpec& s) { s.command.push_back(std::string("a\0b", 3)); }},
  };
  for (const Case& c : cases) {
    TaskSpec spec = ValidSpec();
    c.mutate(spec);
    const Status status = ValidateTaskSpec(spec, c.target);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(status.field(), c.field) << status.ToString();
  }
}

TEST(ComposeTaskEnvTest, LayersBaseSpecPinningMpsAndPreload) {
  TaskSpec spec = ValidSpec();
  spec.env = {{"HETEROFLOW_SLICE_ID", "3"},
              {"PATH", "/opt/bin"},
              {"LD_PRELOAD", "/usr/lib/libuser.so"},
              {"CUDA_VISIBLE_DEVICES", "GPU-stale"}};
  spec.gpu_indices = {2, 0};
  spec.mps_pipe_dir = "/run/mps";
  spec.preload_library = "/opt/hf/libhook.so";
  spec.hook_region = "/var/lib/hf/hook/slice-3.region";
  const StringMap base = {{"PATH", "/bin"}, {"HOME", "/"}};

  const StringMap host = ComposeTaskEnv(spec, base, EnvTarget::kHostProcess);
  EXPECT_EQ(host,
            (StringMap{
                {"CUDA_MPS_PIPE_DIRECTORY", "/run/mps"},
                {"CUDA_VISIBLE_DEVICES", "2,0"},
                {"HETEROFLOW_HOOK_REGION", "/var/lib/hf/hook/slice-3.region"},
                {"HETEROFLOW_SLICE_ID", "3"},
                {"HOME", "/"},
                {"LD_PRELOAD", "/opt/hf/libhook.so:/usr/lib/libuser.so"},
                {"NVIDIA_VISIBLE_DEVICES", "2,0"},
                {"PATH", "/opt/bin"},
            }));

  // A container sees only its devices, renumbered: no host index leaks.
  const StringMap container = ComposeTaskEnv(spec, {}, EnvTarget::kContainer);
  EXPECT_EQ(container.count("CUDA_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(container.at("NVIDIA_VISIBLE_DEVICES"), "2,0");
  EXPECT_EQ(container.count("HOME"), 0u);
}

// The /etc/ld.so.preload route: a container whose route is that file alone
// gets no LD_PRELOAD; a host process always does (the host's file is the
// machine's); "both" keeps the variable.
TEST(ComposeTaskEnvTest, ThePreloadRouteDecidesLdPreloadInContainers) {
  TaskSpec spec = ValidSpec();
  spec.preload_library = "/opt/hf/libhook.so";
  spec.preload_file = "/var/lib/hf/hook/ld.so.preload";
  spec.preload_route = PreloadRoute::kLdSoPreload;
  EXPECT_EQ(ComposeTaskEnv(spec, {}, EnvTarget::kContainer).count("LD_PRELOAD"),
            0u);
  EXPECT_EQ(ComposeTaskEnv(spec, {}, EnvTarget::kHostProcess).at("LD_PRELOAD"),
            "/opt/hf/libhook.so");
  spec.preload_route = PreloadRoute::kBoth;
  EXPECT_EQ(ComposeTaskEnv(spec, {}, EnvTarget::kContainer).at("LD_PRELOAD"),
            "/opt/hf/libhook.so");
}

TEST(PreloadRouteTest, NamesRoundTripAndAFileIsRequired) {
  for (PreloadRoute route :
       {PreloadRoute::kEnv, PreloadRoute::kLdSoPreload, PreloadRoute::kBoth}) {
    EXPECT_EQ(ParsePreloadRoute(PreloadRouteName(route)), route);
  }
  EXPECT_EQ(ParsePreloadRoute("ld.so.preload"), std::nullopt);
  TaskSpec spec = ValidSpec();
  spec.preload_library = "/opt/hf/libhook.so";
  spec.preload_route = PreloadRoute::kBoth;
  EXPECT_EQ(ValidateTaskSpec(spec, EnvTarget::kContainer).field(),
            "preload_file");
  EXPECT_TRUE(ValidateTaskSpec(spec, EnvTarget::kHostProcess).ok());
  spec.preload_file = "relative/ld.so.preload";
  EXPECT_EQ(ValidateTaskSpec(spec, EnvTarget::kContainer).field(),
            "preload_file");
  spec.preload_file = "/var/lib/hf/hook/ld.so.preload";
  EXPECT_TRUE(ValidateTaskSpec(spec, EnvTarget::kContainer).ok());
}

TEST(ComposeTaskEnvTest, MigDevicePinsBothNames) {
  TaskSpec spec = ValidSpec();
  spec.mig_device = "MIG-4f1c2a7e-0000-5b6c-9d8e-123456789abc";
  const StringMap env = ComposeTaskEnv(spec, {}, EnvTarget::kHostProcess);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), spec.mig_device);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), spec.mig_device);
}

TEST(ComposeTaskEnvTest, WithoutPinningTheSpecEnvPassesThrough) {
  TaskSpec spec = ValidSpec();
  spec.env = {{"CUDA_VISIBLE_DEVICES", "GPU-1"}};
  EXPECT_EQ(ComposeTaskEnv(spec, {}, EnvTarget::kContainer), spec.env);
}

TEST(TaskLabelsTest, RuntimeLabelsWinOverTheSpecs) {
  TaskSpec spec = ValidSpec();
  spec.slice_id = 12;
  spec.labels = {{"team", "vision"}, {"heteroflow.task", "99"}};
  EXPECT_EQ(TaskLabels(spec), (StringMap{{"heteroflow.slice", "12"},
                                         {"heteroflow.task", "7"},
                                         {"heteroflow.tenant", "acme"},
                                         {"team", "vision"}}));
  spec.slice_id = 0;
  EXPECT_EQ(TaskLabels(spec).count("heteroflow.slice"), 0u);
}

TEST(DescribeTaskStatusTest, ReadsWell) {
  TaskStatus status;
  status.state = TaskState::kSignaled;
  status.signal = 9;
  status.oom_killed = true;
  EXPECT_EQ(DescribeTaskStatus(status), "killed by signal 9 (OOM)");
  status = TaskStatus{};
  status.state = TaskState::kFailed;
  status.exit_code = 127;
  status.message = "cannot execute 'x'";
  EXPECT_EQ(DescribeTaskStatus(status), "failed 127: cannot execute 'x'");
}

// Each line glibc's loader prints when a program cannot start (or runs
// without a library it was to preload), as it prints it.
TEST(FindLoaderErrorTest, FindsEachKindOfLoaderLine) {
  const std::string lines[] = {
      "/bin/sh: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not "
      "found (required by /opt/hf/libhfhook.so)",
      "python3: error while loading shared libraries: libhfhook.so: cannot "
      "open shared object file: No such file or directory",
      "python3: symbol lookup error: /opt/hf/libhfhook.so: undefined symbol: "
      "pthread_mutex_clocklock",
      "ERROR: ld.so: object '/opt/hf/libhfhook.so' from LD_PRELOAD cannot be "
      "preloaded (wrong ELF class: ELFCLASS64): ignored.",
      "Error loading shared library libdl.so.2: No such file or directory "
      "(needed by /opt/hf/libhfhook.so)",
      "Error relocating /opt/hf/libhfhook.so: __register_atfork: symbol not "
      "found",
  };
  for (const std::string& line : lines) {
    EXPECT_EQ(FindLoaderError("epoch 1\n" + line + "\nTraceback\n"), line);
  }
}

TEST(FindLoaderErrorTest, TheLastLineWinsAndNothingIsInvented) {
  EXPECT_EQ(FindLoaderError(""), "");
  EXPECT_EQ(FindLoaderError("epoch 1\nloss 0.3\nversion 2 not found\n"), "");
  EXPECT_EQ(FindLoaderError("a: version `V1' not found (required by x)\n"
                            "b: version `V2' not found (required by y)\n"),
            "b: version `V2' not found (required by y)");
  // No trailing newline, a carriage return, bytes that are not ASCII, and a
  // line too long for a reason.
  EXPECT_EQ(FindLoaderError("p: version `V' not found (required by /t\xc3\xa9)"
                            "\r"),
            "p: version `V' not found (required by /t?"
            "?)?");
  const std::string long_line =
      "p: version `V' not found (required by /" + std::string(1000, 'x') + ")";
  EXPECT_EQ(FindLoaderError(long_line).size(), 500u);
}

TEST(TaskFilesTest, RecordsRoundTrip) {
  const tf::ProcessIdentity identity{1234, 987654321, "boot-1"};
  EXPECT_EQ(tf::ParseIdentity(tf::FormatIdentity(identity)), identity);
  EXPECT_FALSE(tf::ParseIdentity("12 x boot").has_value());
  EXPECT_FALSE(tf::ParseIdentity("-3 5 boot").has_value());

  for (const tf::ExitRecord& record :
       {tf::ExitRecord{tf::ExitRecord::Kind::kExited, 3, ""},
        tf::ExitRecord{tf::ExitRecord::Kind::kSignaled, 9, ""},
        tf::ExitRecord{tf::ExitRecord::Kind::kExecFailed, 127,
                       "cannot execute 'x': No such file\nor directory"}}) {
    EXPECT_EQ(tf::ParseExitRecord(tf::FormatExitRecord(record)), record);
  }
  EXPECT_FALSE(tf::ParseExitRecord("exited 3").has_value());  // torn
  EXPECT_FALSE(tf::ParseExitRecord("bogus 3\n").has_value());

  const std::vector<std::string> items = {"a=1", "", "b c"};
  EXPECT_EQ(tf::SplitNul(tf::JoinNul(items)), items);
}

TEST(TaskFilesTest, IdentityOfThisProcessIsAliveAndAWrongStartTimeIsNot) {
  const std::optional<tf::ProcessIdentity> self = tf::IdentityOf(getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_TRUE(tf::IsAlive(*self));
  tf::ProcessIdentity recycled = *self;
  recycled.start_time += 1;
  EXPECT_FALSE(tf::IsAlive(recycled));
  tf::ProcessIdentity other_boot = *self;
  other_boot.boot_id = "another-boot";
  EXPECT_FALSE(tf::IsAlive(other_boot));
}

TEST(RunCommandTest, CollectsOutputAndExitCode) {
  StatusOr<CommandResult> result =
      RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->exit_code, 3);
  EXPECT_EQ(result->out, "out\n");
  EXPECT_EQ(result->err, "err\n");
}

TEST(RunCommandTest, MergesStderrWhenAsked) {
  CommandOptions options;
  options.merge_stderr = true;
  StatusOr<CommandResult> result =
      RunCommand({"sh", "-c", "echo a; echo b >&2; echo c"}, options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->out, "a\nb\nc\n");
  EXPECT_EQ(result->err, "");
}

TEST(RunCommandTest, MissingProgramIsUnavailable) {
  StatusOr<CommandResult> result = RunCommand({"/nonexistent/docker", "ps"});
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
}

TEST(RunCommandTest, TimeoutKillsTheChild) {
  CommandOptions options;
  options.timeout = std::chrono::milliseconds(100);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<CommandResult> result = RunCommand({"sleep", "30"}, options);
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(RunCommandTest, CapsOutput) {
  CommandOptions options;
  options.max_output = 10;
  StatusOr<CommandResult> result = RunCommand({"yes"}, options);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->capped);
  EXPECT_EQ(result->out, "y\ny\ny\ny\ny\n");
}

}  // namespace
}  // namespace hf::runtime
