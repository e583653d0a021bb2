// Tests of src/mps: the pure client-side functions, one contract suite run
// against both MpsControl implementations (ProcessMpsControl driving the fake
// control binary in testing/, and SimMpsControl), and the process-level
// guarantees: the daemon outlives the process that started it, a hung
// control binary times out, the systemd command line, the restart backoff.
//
// Every wait polls with a short interval up to a deadline; every daemon a
// test starts is killed at its end.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "mps/mps_control.h"
#include "mps/process_mps_control.h"
#include "mps/sim_mps_control.h"
#include "mps/subprocess.h"

namespace hf::mps {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

bool WaitFor(const std::function<bool()>& done, milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A short directory (the daemon's socket path is limited), removed at the
// end together with any daemon started in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/hfmps.XXXXXX";
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    KillDaemonIn(path_ + "/pipe");
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

  static pid_t DaemonPid(const std::string& pipe_dir) {
    const std::string text =
        ReadFile(pipe_dir + "/nvidia-cuda-mps-control.pid");
    return text.empty() ? 0 : static_cast<pid_t>(std::stol(text));
  }
  // SIGKILLs the daemon of `pipe_dir` and waits until it is gone.
  static void KillDaemonIn(const std::string& pipe_dir) {
    const pid_t pid = DaemonPid(pipe_dir);
    if (pid <= 0 || !ProcessRunning(pid)) return;
    ::kill(pid, SIGKILL);
    EXPECT_TRUE(
        WaitFor([&] { return !ProcessRunning(pid); }, milliseconds(5000)));
  }

 private:
  std::string path_;
};

ProcessMpsOptions FakeOptions(const std::string& base_dir) {
  ProcessMpsOptions options;
  options.control_binary = HF_FAKE_MPS_CONTROL;
  options.base_dir = base_dir;
  options.command_timeout = milliseconds(5000);
  options.start_timeout = milliseconds(5000);
  return options;
}

// Counts launches; can make the fake's `-d` fail (no usable GPU).
class CountingLauncher final : public DaemonLauncher {
 public:
  explicit CountingLauncher(std::unique_ptr<DaemonLauncher> inner)
      : inner_(std::move(inner)) {}
  std::string Name() const override { return "counting " + inner_->Name(); }
  Status Launch(const LaunchSpec& spec) override {
    ++launches;
    LaunchSpec changed = spec;
    if (fail_start) changed.env["HF_FAKE_MPS_FAIL_START"] = "1";
    return inner_->Launch(changed);
  }
  int launches = 0;
  bool fail_start = false;

 private:
  std::unique_ptr<DaemonLauncher> inner_;
};

// ---------------------------------------------------------------------------
// Pure functions.

TEST(MpsCapableTest, NeedsALiveDaemonAndVoltaOrNewer) {
  EXPECT_TRUE(MpsCapable(true, 7));
  EXPECT_TRUE(MpsCapable(true, 9));
  EXPECT_FALSE(MpsCapable(true, 6));
  EXPECT_FALSE(MpsCapable(false, 8));
  EXPECT_FALSE(MpsCapable(false, 0));
}

TEST(MpsClientEnvTest, LiveDaemonGetsDirectoriesAndLimitsUnchanged) {
  const MpsDaemonState daemon{true, "/run/hf/pipe", "/run/hf/log"};
  const MpsSliceLimits limits =
      SliceLimitsFromEnv({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4096M"},
                          {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25"},
                          {"HETEROFLOW_SLICE_QOS", "silver"}});
  const std::map<std::string, std::string> expected = {
      {"CUDA_MPS_PIPE_DIRECTORY", "/run/hf/pipe"},
      {"CUDA_MPS_LOG_DIRECTORY", "/run/hf/log"},
      {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4096M"},
      {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25"}};
  EXPECT_EQ(MpsClientEnv(daemon, limits), expected);
}

TEST(MpsClientEnvTest, SliceWithoutLimitsGetsOnlyTheDirectories) {
  const MpsDaemonState daemon{true, "/p", "/l"};
  const std::map<std::string, std::string> expected = {
      {"CUDA_MPS_PIPE_DIRECTORY", "/p"}, {"CUDA_MPS_LOG_DIRECTORY", "/l"}};
  EXPECT_EQ(MpsClientEnv(daemon, SliceLimitsFromEnv({})), expected);
}

TEST(MpsClientEnvTest, DownDaemonInjectsNothing) {
  const MpsSliceLimits limits{"0=4096M", "25"};
  EXPECT_TRUE(MpsClientEnv({false, "/p", "/l"}, limits).empty());
  EXPECT_TRUE(MpsClientEnv({true, "", "/l"}, limits).empty());
}

TEST(MpsGrammarTest, DeviceKeys) {
  for (const char* good : {"0", "7", "GPU-8c1d2e3f-aaaa-bbbb-cccc-0123456789ab",
                           "MIG-GPU-8c1d/1/0", "MIG-1f2e3d4c-0000"}) {
    EXPECT_TRUE(ValidateDeviceKey(good).ok()) << good;
  }
  for (const char* bad :
       {"", "GPU-", "abc", "0 1", "0\nquit", "-1", "GPU-x;rm", "12345"}) {
    EXPECT_EQ(ValidateDeviceKey(bad).code(), StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(MpsGrammarTest, PinnedLimitFormatAndReadback) {
  EXPECT_EQ(FormatPinnedLimit(4096), "4096M");
  EXPECT_TRUE(PinnedLimitReplyMatches("4096M\n", 4096));
  EXPECT_TRUE(PinnedLimitReplyMatches("512M", 512));
  // Shown in whole GiB, rounded down.
  EXPECT_TRUE(PinnedLimitReplyMatches("4G\n", 4096));
  EXPECT_TRUE(PinnedLimitReplyMatches("4G", 4500));
  EXPECT_FALSE(PinnedLimitReplyMatches("3G", 4096));
  EXPECT_FALSE(PinnedLimitReplyMatches("0G", 512));
  EXPECT_FALSE(PinnedLimitReplyMatches("4095M", 4096));
  for (const char* junk : {"", "0", "4096", "4096 M", "4096MB", "4.0G",
                           "Unrecognized command", "4096M\n4096M"}) {
    EXPECT_FALSE(PinnedLimitReplyMatches(junk, 4096)) << junk;
  }
}

// ---------------------------------------------------------------------------
// The contract, against both implementations.

class ProcessHarness {
 public:
  ProcessHarness()
      : control_(FakeOptions(dir_.path()), std::make_unique<DetachedLauncher>(),
                 clock_) {}
  MpsControl& control() { return control_; }
  void KillDaemon() { TempDir::KillDaemonIn(control_.PipeDirectory()); }
  // The cap the running daemon holds (the fake keeps it in a file, which a
  // killed daemon leaves behind).
  std::optional<MemoryMib> DaemonCap(const std::string& device) {
    if (!ProcessRunning(TempDir::DaemonPid(control_.PipeDirectory()))) {
      return std::nullopt;
    }
    const std::string text = ReadFile(control_.PipeDirectory() +
                                      "/fake-state/pinned_mem_limit." + device);
    if (text.empty() || text.find('M') == std::string::npos) {
      return std::nullopt;
    }
    return std::stoll(text.substr(0, text.find('M')));
  }
  std::unique_ptr<MpsControl> MakeCannotStart() {
    ProcessMpsOptions options = FakeOptions(dir_.path() + "/nostart");
    options.extra_env["HF_FAKE_MPS_FAIL_START"] = "1";
    return std::make_unique<ProcessMpsControl>(
        options, std::make_unique<DetachedLauncher>(), clock_);
  }

 private:
  TempDir dir_;
  FakeClock clock_{1'000'000};
  ProcessMpsControl control_;
};

class SimHarness {
 public:
  SimHarness() : control_(SimMpsOptions{}) {}
  MpsControl& control() { return control_; }
  void KillDaemon() { control_.KillDaemon(); }
  std::optional<MemoryMib> DaemonCap(const std::string& device) {
    return control_.DaemonPinnedLimit(device);
  }
  std::unique_ptr<MpsControl> MakeCannotStart() {
    SimMpsOptions options;
    options.daemon_can_start = false;
    return std::make_unique<SimMpsControl>(options);
  }

 private:
  SimMpsControl control_;
};

template <typename Harness>
class MpsContractTest : public ::testing::Test {
 protected:
  Harness harness_;
};

using Harnesses = ::testing::Types<ProcessHarness, SimHarness>;
TYPED_TEST_SUITE(MpsContractTest, Harnesses);

TYPED_TEST(MpsContractTest, EnsureStartsTheDaemonAndIsIdempotent) {
  MpsControl& control = this->harness_.control();
  EXPECT_FALSE(control.Alive());
  ASSERT_TRUE(control.Ensure().ok());
  EXPECT_TRUE(control.Alive());
  ASSERT_TRUE(control.Ensure().ok());
  EXPECT_TRUE(control.Alive());
  const MpsDaemonState state = ProbeDaemon(control);
  EXPECT_TRUE(state.alive);
  EXPECT_EQ(MpsClientEnv(state, {}).at("CUDA_MPS_PIPE_DIRECTORY"),
            control.PipeDirectory());
}

TYPED_TEST(MpsContractTest, DeadDaemonReportsNothingAndEnsureRestartsItCapped) {
  MpsControl& control = this->harness_.control();
  ASSERT_TRUE(control.Ensure().ok());
  ASSERT_TRUE(control.SetWholeCardPinnedLimit("0", 4096).ok());
  EXPECT_EQ(this->harness_.DaemonCap("0"), 4096);

  this->harness_.KillDaemon();
  EXPECT_FALSE(control.Alive());
  const MpsDaemonState down = ProbeDaemon(control);
  EXPECT_FALSE(MpsCapable(down.alive, 8));
  EXPECT_TRUE(MpsClientEnv(down, {"0=1024M", "50"}).empty());
  EXPECT_EQ(this->harness_.DaemonCap("0"), std::nullopt);

  ASSERT_TRUE(control.Ensure().ok());
  EXPECT_TRUE(control.Alive());
  EXPECT_TRUE(MpsCapable(control.Alive(), 8));
  // The restarted daemon got its cap again.
  EXPECT_EQ(this->harness_.DaemonCap("0"), 4096);
}

TYPED_TEST(MpsContractTest, CapSetWhileDownIsKeptForTheNextStart) {
  MpsControl& control = this->harness_.control();
  EXPECT_EQ(control.SetWholeCardPinnedLimit("1", 2048).code(),
            StatusCode::kUnavailable);
  ASSERT_TRUE(control.Ensure().ok());
  EXPECT_EQ(this->harness_.DaemonCap("1"), 2048);
}

TYPED_TEST(MpsContractTest, MalformedCapsAreRefused) {
  MpsControl& control = this->harness_.control();
  ASSERT_TRUE(control.Ensure().ok());
  EXPECT_EQ(control.SetWholeCardPinnedLimit("0\nquit", 1024).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(control.SetWholeCardPinnedLimit("0", 0).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(control.Alive());  // nothing smuggled through
}

TYPED_TEST(MpsContractTest, DaemonThatCannotStartReportsNoCapability) {
  std::unique_ptr<MpsControl> control = this->harness_.MakeCannotStart();
  const Status ensured = control->Ensure();
  EXPECT_EQ(ensured.code(), StatusCode::kUnavailable) << ensured.ToString();
  EXPECT_FALSE(control->Alive());
  const MpsDaemonState state = ProbeDaemon(*control);
  EXPECT_FALSE(MpsCapable(state.alive, 9));
  EXPECT_TRUE(MpsClientEnv(state, {"0=1024M", "50"}).empty());
}

TYPED_TEST(MpsContractTest, StopQuitsAndIsIdempotent) {
  MpsControl& control = this->harness_.control();
  ASSERT_TRUE(control.Ensure().ok());
  ASSERT_TRUE(control.Stop().ok());
  EXPECT_FALSE(control.Alive());
  EXPECT_TRUE(control.Stop().ok());
  ASSERT_TRUE(control.Ensure().ok());
  EXPECT_TRUE(control.Alive());
}

// ---------------------------------------------------------------------------
// ProcessMpsControl only.

TEST(ProcessMpsControlTest, SpeaksTheControlBinaryProtocol) {
  TempDir dir;
  FakeClock clock;
  ProcessMpsControl control(FakeOptions(dir.path()),
                            std::make_unique<DetachedLauncher>(), clock);
  // No daemon: the binary says so and the command is Unavailable.
  EXPECT_EQ(control.Command("get_server_list").status().code(),
            StatusCode::kUnavailable);
  ASSERT_TRUE(control.Ensure().ok());
  StatusOr<std::string> servers = control.Command("get_server_list");
  ASSERT_TRUE(servers.ok());
  EXPECT_EQ(*servers, "");
  // A cap of 1 GiB and more reads back in whole GiB and still matches.
  ASSERT_TRUE(control.SetWholeCardPinnedLimit("0", 40960).ok());
  EXPECT_EQ(*control.Command("get_default_device_pinned_mem_limit 0"), "40G\n");
  EXPECT_EQ(
      ReadFile(control.PipeDirectory() + "/fake-state/pinned_mem_limit.0"),
      "40960M\n");
  // Refused and unknown commands answer with text and exit 0, as an
  // interactive shell would: only the readback proves a cap.
  StatusOr<std::string> bad =
      control.Command("set_default_device_pinned_mem_limit 0 lots");
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->find("Invalid"), std::string::npos);
  EXPECT_TRUE(control.Command("no_such_command").ok());
  // The log directory is where the daemon was told to log.
  EXPECT_TRUE(fs::exists(control.LogDirectory() + "/control.log"));
}

// The daemon must outlive the process that started it, however that
// process ends: it is in its own session, not the starter's child.
void ExpectDaemonOutlivesStarter(bool starter_is_killed) {
  TempDir dir;
  const pid_t starter = ::fork();
  ASSERT_GE(starter, 0);
  if (starter == 0) {
    FakeClock clock;
    ProcessMpsControl control(FakeOptions(dir.path()),
                              std::make_unique<DetachedLauncher>(), clock);
    const bool ok = control.Ensure().ok();
    if (starter_is_killed) ::raise(SIGKILL);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(starter, &status, 0), starter);
  if (starter_is_killed) {
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
  } else {
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);
  }

  FakeClock clock;
  ProcessMpsControl control(FakeOptions(dir.path()),
                            std::make_unique<DetachedLauncher>(), clock);
  EXPECT_TRUE(control.Alive());
  const pid_t daemon = TempDir::DaemonPid(control.PipeDirectory());
  ASSERT_GT(daemon, 0);
  EXPECT_TRUE(ProcessRunning(daemon));
  EXPECT_NE(::getsid(daemon), ::getsid(0));
  EXPECT_NE(::getpgid(daemon), ::getpgid(0));
  EXPECT_NE(::getpgid(daemon), starter);
}

TEST(ProcessMpsControlTest, DaemonSurvivesSigkillOfTheProcessThatStartedIt) {
  ExpectDaemonOutlivesStarter(/*starter_is_killed=*/true);
}

TEST(ProcessMpsControlTest, DaemonSurvivesExitOfTheProcessThatStartedIt) {
  ExpectDaemonOutlivesStarter(/*starter_is_killed=*/false);
}

TEST(ProcessMpsControlTest, HungControlBinaryTimesOut) {
  TempDir dir;
  FakeClock clock;
  ProcessMpsOptions options = FakeOptions(dir.path());
  options.extra_env["HF_FAKE_MPS_HANG"] = "1";
  options.command_timeout = milliseconds(300);
  options.start_timeout = milliseconds(600);
  ProcessMpsControl control(options, std::make_unique<DetachedLauncher>(),
                            clock);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(control.Alive());
  const Status command = control.Command("get_server_list").status();
  EXPECT_EQ(command.code(), StatusCode::kUnavailable);
  EXPECT_NE(command.message().find("timed out"), std::string::npos)
      << command.ToString();
  // Ensure starts a daemon that never answers: bounded by start_timeout.
  EXPECT_EQ(control.Ensure().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(ProcessMpsControlTest, FailedStartsBackOffExponentially) {
  TempDir dir;
  FakeClock clock(1'000'000);
  auto launcher =
      std::make_unique<CountingLauncher>(std::make_unique<DetachedLauncher>());
  CountingLauncher* counting = launcher.get();
  counting->fail_start = true;
  ProcessMpsOptions options = FakeOptions(dir.path());
  options.restart_backoff_initial_ms = 1000;
  options.restart_backoff_max_ms = 4000;
  ProcessMpsControl control(options, std::move(launcher), clock);

  const Status first = control.Ensure();
  EXPECT_EQ(first.code(), StatusCode::kUnavailable);
  EXPECT_NE(first.message().find("no usable GPU"), std::string::npos)
      << first.ToString();  // the launch log tail says why
  EXPECT_EQ(counting->launches, 1);
  const Status waiting = control.Ensure();
  EXPECT_NE(waiting.message().find("next start attempt in 1000 ms"),
            std::string::npos)
      << waiting.ToString();
  EXPECT_EQ(counting->launches, 1);
  clock.Advance(1000);
  EXPECT_FALSE(control.Ensure().ok());
  EXPECT_EQ(counting->launches, 2);
  clock.Advance(1000);  // the backoff is 2000 now
  EXPECT_FALSE(control.Ensure().ok());
  EXPECT_EQ(counting->launches, 2);
  clock.Advance(1000);
  EXPECT_FALSE(control.Ensure().ok());
  EXPECT_EQ(counting->launches, 3);
  clock.Advance(4000);
  EXPECT_FALSE(control.Ensure().ok());
  EXPECT_EQ(counting->launches, 4);
  clock.Advance(4000);  // capped at 4000
  counting->fail_start = false;
  ASSERT_TRUE(control.Ensure().ok());
  EXPECT_EQ(counting->launches, 5);

  // A new outage starts again from the initial backoff.
  TempDir::KillDaemonIn(control.PipeDirectory());
  counting->fail_start = true;
  EXPECT_FALSE(control.Ensure().ok());
  EXPECT_NE(control.Ensure().message().find("next start attempt in 1000 ms"),
            std::string::npos);
}

TEST(ProcessMpsControlTest, MissingControlBinaryIsAFailedPrecondition) {
  TempDir dir;
  FakeClock clock;
  ProcessMpsOptions options = FakeOptions(dir.path());
  options.control_binary = "hf-no-such-nvidia-cuda-mps-control";
  ProcessMpsControl control(options, std::make_unique<DetachedLauncher>(),
                            clock);
  EXPECT_FALSE(control.Alive());
  EXPECT_EQ(control.Ensure().code(), StatusCode::kFailedPrecondition);
}

TEST(ProcessMpsControlTest, OverlongPipeDirectoryIsRefused) {
  FakeClock clock;
  ProcessMpsOptions options = FakeOptions("/tmp/" + std::string(110, 'x'));
  ProcessMpsControl control(options, std::make_unique<DetachedLauncher>(),
                            clock);
  EXPECT_EQ(control.Ensure().code(), StatusCode::kFailedPrecondition);
}

TEST(SystemdLauncherTest, CommandLineIsATransientUnitOfItsOwn) {
  SystemdRunLauncher launcher;
  LaunchSpec spec;
  spec.argv = {"/usr/bin/nvidia-cuda-mps-control", "-d"};
  spec.env = {{"CUDA_MPS_PIPE_DIRECTORY", "/run/heteroflow/mps/pipe"},
              {"CUDA_MPS_LOG_DIRECTORY", "/run/heteroflow/mps/log"}};
  const std::vector<std::string> expected = {
      "systemd-run",
      "--unit=heteroflow-mps",
      "--collect",
      "--property=Type=forking",
      "--setenv=CUDA_MPS_LOG_DIRECTORY=/run/heteroflow/mps/log",
      "--setenv=CUDA_MPS_PIPE_DIRECTORY=/run/heteroflow/mps/pipe",
      "/usr/bin/nvidia-cuda-mps-control",
      "-d"};
  EXPECT_EQ(launcher.CommandLine(spec), expected);
}

TEST(SystemdLauncherTest, EnsureStartsTheDaemonThroughSystemdRun) {
  TempDir dir;
  const std::string record = dir.path() + "/systemd-run.args";
  ::setenv("HF_FAKE_SYSTEMD_RUN_RECORD", record.c_str(), 1);
  FakeClock clock;
  ProcessMpsControl control(
      FakeOptions(dir.path()),
      std::make_unique<SystemdRunLauncher>(HF_FAKE_SYSTEMD_RUN), clock);
  const Status ensured = control.Ensure();
  ::unsetenv("HF_FAKE_SYSTEMD_RUN_RECORD");
  ASSERT_TRUE(ensured.ok()) << ensured.ToString();
  EXPECT_TRUE(control.Alive());
  const std::string expected =
      std::string(HF_FAKE_SYSTEMD_RUN) +
      "\n--unit=heteroflow-mps\n--collect\n--property=Type=forking\n"
      "--setenv=CUDA_MPS_LOG_DIRECTORY=" +
      control.LogDirectory() +
      "\n--setenv=CUDA_MPS_PIPE_DIRECTORY=" + control.PipeDirectory() + "\n" +
      HF_FAKE_MPS_CONTROL + "\n-d\n\n";
  EXPECT_EQ(ReadFile(record), expected);
}

TEST(SystemdLauncherTest, SystemdIsInitNeedsTheMarkerAndSystemdRun) {
  TempDir dir;
  const std::string marker = dir.path() + "/run-systemd-system";
  const std::string bin = dir.path() + "/bin";
  fs::create_directories(bin);
  {
    std::ofstream script(bin + "/systemd-run");
    script << "#!/bin/sh\n";
  }
  fs::permissions(bin + "/systemd-run", fs::perms::owner_all);
  EXPECT_FALSE(SystemdIsInit(marker, bin));  // no marker: not the init
  fs::create_directories(marker);
  EXPECT_TRUE(SystemdIsInit(marker, "/nonexistent:" + bin));
  EXPECT_FALSE(SystemdIsInit(marker, dir.path()));  // no systemd-run
}

// ---------------------------------------------------------------------------
// The bounded runner.

TEST(RunCommandTest, PassesStdinAndEnvAndCollectsOutput) {
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c", "cat; echo \"$HF_X\" >&2; exit 3"};
  spec.env = {{"HF_X", "from-env"}};
  spec.stdin_text = "hello\n";
  StatusOr<CommandResult> result = RunCommand(spec);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->exit_code, 3);
  EXPECT_EQ(result->out, "hello\n");
  EXPECT_EQ(result->err, "from-env\n");
}

TEST(RunCommandTest, TimeoutKillsTheWholeProcessGroup) {
  TempDir dir;
  const std::string pid_file = dir.path() + "/grandchild.pid";
  CommandSpec spec;
  spec.argv = {"/bin/sh", "-c", "sleep 30 & echo $! > " + pid_file + "; wait"};
  spec.timeout = milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<CommandResult> result = RunCommand(spec);
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  const std::string text = ReadFile(pid_file);
  ASSERT_FALSE(text.empty());
  const pid_t grandchild = static_cast<pid_t>(std::stol(text));
  EXPECT_TRUE(
      WaitFor([&] { return !ProcessRunning(grandchild); }, milliseconds(5000)));
}

TEST(RunCommandTest, MissingProgramIsNotFound) {
  CommandSpec spec;
  spec.argv = {"hf-no-such-program"};
  EXPECT_EQ(RunCommand(spec).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace hf::mps
