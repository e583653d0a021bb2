// Tests of the shared simulated device (fake_gpu.h): one card's memory for
// every process, one timeline that time-slices between contexts, and the
// utilisation NVML reports from it. Processes are real (fork).
#include "hook/testing/fake_gpu.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace hf::fake_gpu {
namespace {

constexpr uint64_t kMiB = 1024ULL * 1024ULL;
constexpr int64_t kMs = 1'000'000;

class FakeGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hf-fake-gpu-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  DeviceOptions Options(uint64_t memory_mb = 1024) const {
    DeviceOptions o;
    o.memory_bytes = memory_mb * kMiB;
    return o;
  }

  // Runs `body` in a child process; returns its exit status (0: passed).
  template <typename Body>
  static pid_t Spawn(Body body) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body() ? 0 : 1);
    return pid;
  }
  static int Join(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }

  std::string dir_;
};

TEST_F(FakeGpuTest, MemoryIsOneCardForEveryProcess) {
  SharedDevice gpu;
  std::string error;
  ASSERT_TRUE(gpu.Open(dir_, 0, Options(1024), &error)) << error;
  ASSERT_TRUE(gpu.Charge(600 * kMiB));
  const std::string dir = dir_;
  const pid_t child = Spawn([&] {
    SharedDevice other;
    std::string e;
    // A different size asked for: the existing card keeps its own.
    DeviceOptions bigger;
    bigger.memory_bytes = 4096 * kMiB;
    if (!other.Open(dir, 0, bigger, &e)) return false;
    if (other.memory_bytes() != 1024 * kMiB) return false;
    if (other.used_bytes() != 600 * kMiB) return false;
    if (other.Charge(500 * kMiB)) return false;  // the card is full
    return other.Charge(400 * kMiB) && other.used_bytes() == 1000 * kMiB;
  });
  ASSERT_EQ(Join(child), 0);
  // The child is gone: its 400 MiB is the driver's to take back, which it
  // does when someone needs the memory.
  EXPECT_TRUE(gpu.Charge(424 * kMiB));
  EXPECT_EQ(gpu.used_bytes(), 1024 * kMiB);
  gpu.Uncharge(1024 * kMiB);
  EXPECT_EQ(gpu.used_bytes(), 0u);
}

TEST_F(FakeGpuTest, NoChargeWhenEveryByteIsHeldByLiveProcesses) {
  SharedDevice gpu;
  std::string error;
  ASSERT_TRUE(gpu.Open(dir_, 0, Options(100), &error)) << error;
  int ready[2];
  int release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  const std::string dir = dir_;
  const pid_t child = Spawn([&] {
    SharedDevice other;
    std::string e;
    if (!other.Open(dir, 0, DeviceOptions{}, &e)) return false;
    const bool ok = other.Charge(100 * kMiB);
    char c = ok ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) return false;
    if (read(release[0], &c, 1) != 1) return false;
    return ok;
  });
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  EXPECT_FALSE(gpu.Charge(1));  // a live process holds the whole card
  ASSERT_EQ(write(release[1], "x", 1), 1);
  ASSERT_EQ(Join(child), 0);
  EXPECT_TRUE(gpu.Charge(100 * kMiB));
}

TEST_F(FakeGpuTest, BusyContextsShareTheDeviceInTimeSlices) {
  SharedDevice gpu;
  std::string error;
  ASSERT_TRUE(gpu.Open(dir_, 0, Options(), &error)) << error;
  const int a = gpu.OpenChannel(1, 0);
  const int b = gpu.OpenChannel(2, 0);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_NE(a, b);
  const uint64_t busy0 = gpu.busy_ns();
  const int64_t start = SharedDevice::NowNs();
  const uint64_t mark_a = gpu.Enqueue(a, 100 * kMs);
  const uint64_t mark_b = gpu.Enqueue(b, 100 * kMs);
  gpu.WaitFor(a, mark_a);
  const int64_t a_done = SharedDevice::NowNs() - start;
  gpu.WaitFor(b, mark_b);
  const int64_t b_done = SharedDevice::NowNs() - start;
  // Interleaved in 2 ms slices, each finishes near the end of the 200 ms
  // both need, not after its own 100 ms.
  EXPECT_GE(a_done, 190 * kMs);
  EXPECT_GE(b_done, 200 * kMs);
  EXPECT_LT(b_done, 400 * kMs);
  EXPECT_EQ(gpu.busy_ns() - busy0, 200u * kMs);
}

TEST_F(FakeGpuTest, ProcessesShareOneTimelineAndNvmlSeesEach) {
  SharedDevice gpu;
  std::string error;
  ASSERT_TRUE(gpu.Open(dir_, 0, Options(), &error)) << error;
  const int64_t start = SharedDevice::NowNs();
  const std::string dir = dir_;
  const pid_t child = Spawn([&] {
    SharedDevice other;
    std::string e;
    if (!other.Open(dir, 0, DeviceOptions{}, &e)) return false;
    other.ContextOpened();
    const int ch = other.OpenChannel(7, 0);
    other.WaitFor(ch, other.Enqueue(ch, 200 * kMs));
    return true;
  });
  gpu.ContextOpened();
  const int mine = gpu.OpenChannel(7, 0);
  gpu.WaitFor(mine, gpu.Enqueue(mine, 200 * kMs));
  ASSERT_EQ(Join(child), 0);
  // Two processes' 200 ms each on one device: about 400 ms in all.
  EXPECT_GE(SharedDevice::NowNs() - start, 350 * kMs);
  const Utilization u = gpu.UtilizationSince(start);
  ASSERT_EQ(u.processes.size(), 2u);
  for (const ProcessUtilization& p : u.processes) {
    EXPECT_NEAR(static_cast<double>(p.executed_ns), 200.0 * kMs, 2.0 * kMs)
        << p.pid;
    EXPECT_NEAR(p.sm_percent, 50, 8) << p.pid;
  }
  EXPECT_GE(u.gpu_percent, 90u);
}

TEST_F(FakeGpuTest, ReachedAtTellsWhenAChannelCrossedAMark) {
  SharedDevice gpu;
  std::string error;
  ASSERT_TRUE(gpu.Open(dir_, 0, Options(), &error)) << error;
  const int ch = gpu.OpenChannel(1, 0);
  ASSERT_GE(ch, 0);
  int64_t at = -1;
  EXPECT_TRUE(gpu.ReachedAt(ch, 0, &at));  // nothing ever ran
  EXPECT_EQ(at, 0);
  const int64_t start = SharedDevice::NowNs();
  const uint64_t first = gpu.Enqueue(ch, 30 * kMs);
  const uint64_t second = gpu.Enqueue(ch, 30 * kMs);
  EXPECT_FALSE(gpu.ReachedAt(ch, first, &at));  // 30 ms ahead
  gpu.WaitFor(ch, second);
  const int64_t woke = SharedDevice::NowNs();
  int64_t at_first = 0, at_second = 0, at_half = 0;
  ASSERT_TRUE(gpu.ReachedAt(ch, first, &at_first));
  ASSERT_TRUE(gpu.ReachedAt(ch, second, &at_second));
  ASSERT_TRUE(gpu.ReachedAt(ch, first / 2, &at_half));
  // Alone on the device, its work runs without a break from the first
  // launch: the marks are crossed 15, 30 and 60 ms in, whenever asked.
  EXPECT_GE(at_first, start + 30 * kMs);
  EXPECT_LT(at_first, start + 35 * kMs);
  EXPECT_EQ(at_second - at_first, 30 * kMs);
  EXPECT_EQ(at_first - at_half, 15 * kMs);
  EXPECT_LE(at_second, woke);
  ::usleep(20'000);
  int64_t later = 0;
  ASSERT_TRUE(gpu.ReachedAt(ch, second, &later));
  EXPECT_EQ(later, at_second);

  // Idle time between two bursts is not the channel's: after a 20 ms pause
  // the next 10 ms of work ends 10 ms after it was queued, not 30.
  const int64_t resumed = SharedDevice::NowNs();
  const uint64_t third = gpu.Enqueue(ch, 10 * kMs);
  gpu.WaitFor(ch, third);
  ASSERT_TRUE(gpu.ReachedAt(ch, third, &at));
  EXPECT_GE(at, resumed + 10 * kMs);
  EXPECT_LT(at, resumed + 15 * kMs);
}

TEST_F(FakeGpuTest, ReachedAtCountsTheTimeOtherChannelsRan) {
  SharedDevice gpu;
  std::string error;
  ASSERT_TRUE(gpu.Open(dir_, 0, Options(), &error)) << error;
  const int a = gpu.OpenChannel(1, 0);
  const int b = gpu.OpenChannel(2, 0);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  const int64_t start = SharedDevice::NowNs();
  const uint64_t half = gpu.Enqueue(a, 10 * kMs);
  const uint64_t all = gpu.Enqueue(a, 10 * kMs);
  gpu.WaitFor(b, gpu.Enqueue(b, 20 * kMs));
  gpu.WaitFor(a, all);
  int64_t at_half = 0, at_all = 0;
  ASSERT_TRUE(gpu.ReachedAt(a, half, &at_half));
  ASSERT_TRUE(gpu.ReachedAt(a, all, &at_all));
  // In 2 ms slices against b, a's second 10 ms of work takes 20 ms of the
  // device (10 of its own, 10 of b's), and all of it about 40 ms.
  EXPECT_NEAR(static_cast<double>(at_all - at_half), 20.0 * kMs, 0.1 * kMs);
  EXPECT_GE(at_all - start, 37 * kMs);
  EXPECT_LT(at_all - start, 45 * kMs);
}

TEST_F(FakeGpuTest, ReachedAtAnswersOldMarksWithTheOldestSegmentKept) {
  DeviceOptions o = Options();
  o.timeslice_ns = 100'000;  // 100 µs slices: many segments quickly
  SharedDevice gpu;
  std::string error;
  ASSERT_TRUE(gpu.Open(dir_, 0, o, &error)) << error;
  const int a = gpu.OpenChannel(1, 0);
  const int b = gpu.OpenChannel(2, 0);
  const int64_t start = SharedDevice::NowNs();
  // a runs in 100 µs slices alternating with b: about 300 segments, more
  // than the kRunSegments kept.
  const uint64_t early = gpu.Enqueue(a, 100'000);
  const uint64_t all = gpu.Enqueue(a, 30 * kMs - 100'000);
  gpu.Enqueue(b, 30 * kMs);
  gpu.WaitFor(a, all);
  int64_t at_early = 0, at_zero = 0, at_all = 0;
  ASSERT_TRUE(gpu.ReachedAt(a, early, &at_early));
  ASSERT_TRUE(gpu.ReachedAt(a, 0, &at_zero));
  ASSERT_TRUE(gpu.ReachedAt(a, all, &at_all));
  // Truly crossed about 0.1 ms in; answered with the oldest kept segment's
  // start, about (300 - kRunSegments) x 200 µs in.
  EXPECT_EQ(at_early, at_zero);
  EXPECT_GT(at_early - start, 20 * kMs);
  EXPECT_LT(at_early, at_all - (kRunSegments - 2) * 200'000);
  EXPECT_GE(at_all - start, 59 * kMs);
}

TEST_F(FakeGpuTest, ALaunchWaitsWhileItsQueueIsFull) {
  SharedDevice gpu;
  std::string error;
  ASSERT_TRUE(gpu.Open(dir_, 0, Options(), &error)) << error;
  const int ch = gpu.OpenChannel(1, 100'000);  // 100 µs launches
  const int64_t start = SharedDevice::NowNs();
  for (uint64_t i = 0; i < kMaxQueuedLaunches + 200; ++i) {
    gpu.Enqueue(ch, 100'000);
  }
  // The last 200 launches each waited for one to finish: about 20 ms.
  EXPECT_GE(SharedDevice::NowNs() - start, 19 * kMs);
}

TEST_F(FakeGpuTest, ClosingAChannelDropsItsWork) {
  SharedDevice gpu;
  std::string error;
  ASSERT_TRUE(gpu.Open(dir_, 0, Options(), &error)) << error;
  const int ch = gpu.OpenChannel(1, 0);
  const uint64_t mark = gpu.Enqueue(ch, 10'000 * kMs);
  EXPECT_FALSE(gpu.Reached(ch, mark));
  gpu.CloseChannel(ch);
  const int64_t start = SharedDevice::NowNs();
  gpu.WaitFor(ch, mark);  // returns: the work is gone
  EXPECT_LT(SharedDevice::NowNs() - start, 100 * kMs);
  int64_t at = 0;
  EXPECT_TRUE(gpu.ReachedAt(ch, mark, &at));  // as of now
  EXPECT_GE(at, start);
}

TEST_F(FakeGpuTest, ADeadProcessStopsUsingTheDevice) {
  SharedDevice gpu;
  std::string error;
  ASSERT_TRUE(gpu.Open(dir_, 0, Options(), &error)) << error;
  const std::string dir = dir_;
  const pid_t child = Spawn([&] {
    SharedDevice other;
    std::string e;
    if (!other.Open(dir, 0, DeviceOptions{}, &e)) return false;
    other.ContextOpened();
    other.Enqueue(other.OpenChannel(1, 0), 60'000 * kMs);
    return other.Charge(10 * kMiB);
  });
  ASSERT_EQ(Join(child), 0);
  EXPECT_TRUE(gpu.Processes().empty());  // reclaimed: memory and work
  EXPECT_EQ(gpu.used_bytes(), 0u);
  const int mine = gpu.OpenChannel(1, 0);
  const int64_t start = SharedDevice::NowNs();
  gpu.WaitFor(mine, gpu.Enqueue(mine, 10 * kMs));
  EXPECT_LT(SharedDevice::NowNs() - start, 200 * kMs);
}

TEST_F(FakeGpuTest, AFileOfAnotherKindIsRefused) {
  const std::string path = SharedDevice::PathFor(dir_, 0);
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("not a gpu", f);
  fclose(f);
  SharedDevice gpu;
  std::string error;
  EXPECT_FALSE(gpu.Open(dir_, 0, Options(), &error));
  EXPECT_NE(error.find("not a fake GPU"), std::string::npos) << error;
}

}  // namespace
}  // namespace hf::fake_gpu
