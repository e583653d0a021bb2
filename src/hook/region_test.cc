// The slice region on its own (no CUDA): quota reserved atomically across
// processes, dead processes' usage reclaimed, a lock held by a killed
// process repaired, live quota changes, pid reuse not mistaken for the
// owner, and the driver's own memory (the agent's measurement) charged
// against the quota.
#include "hook/region.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace hf::hook {
namespace {

namespace fs = std::filesystem;

class RegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() /
             ("hf-region-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove(path_);
  }
  void TearDown() override { fs::remove(path_); }

  bool Open(Region& r, uint64_t quota) {
    const char* error = nullptr;
    bool ok = r.Open(path_.c_str(), quota, 0, &error);
    EXPECT_TRUE(ok) << (error ? error : "");
    if (ok) r.Attach(getpid(), Region::ProcessStartTicks(getpid()));
    return ok;
  }

  std::string path_;
};

TEST_F(RegionTest, ReservesUpToTheQuotaExactly) {
  Region r;
  ASSERT_TRUE(Open(r, 10 << 20));
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(r.Reserve(1 << 20), ReserveResult::kOk) << i;
  }
  EXPECT_EQ(r.Reserve(1), ReserveResult::kOverQuota);
  EXPECT_EQ(r.used(), uint64_t{10} << 20);
  r.Release(1 << 20);
  EXPECT_EQ(r.Reserve(1 << 20), ReserveResult::kOk);
  EXPECT_EQ(r.Stats().quota_ooms, 1u);
}

TEST_F(RegionTest, KernelSamplesAddUpPerClassAcrossThreadsAndMappings) {
  Region a;
  Region b;  // a second mapping of the same file: another process's view
  ASSERT_TRUE(Open(a, kUnlimited));
  ASSERT_TRUE(Open(b, kUnlimited));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Region& r = t % 2 == 0 ? a : b;
      for (int i = 0; i < 1000; ++i) r.RecordKernel(7 + (i % 3), 100 + t);
    });
  }
  for (std::thread& t : threads) t.join();
  Region::KernelView views[kKernelClasses];
  const int n = a.ReadKernels(views, kKernelClasses);
  ASSERT_EQ(n, 3);
  uint64_t samples = 0;
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_GE(views[i].key, 7u);
    EXPECT_LE(views[i].key, 9u);
    samples += views[i].samples;
    total += views[i].total_ns;
  }
  EXPECT_EQ(samples, 4000u);
  EXPECT_EQ(total, 1000u * (100 + 101 + 102 + 103));
  EXPECT_EQ(a.Stats().live_processes >= 1, true);
}

TEST_F(RegionTest, KernelClassesBeyondTheTableAreCountedAsDropped) {
  Region r;
  ASSERT_TRUE(Open(r, kUnlimited));
  for (uint64_t key = 1; key <= kKernelClasses + 5; ++key) {
    r.RecordKernel(key, 10);
  }
  r.RecordKernel(0, 10);  // no class: ignored
  Region::KernelView views[kKernelClasses + 8];
  EXPECT_EQ(r.ReadKernels(views, kKernelClasses + 8), kKernelClasses);
  // A class already in the table still counts.
  r.RecordKernel(1, 10);
  r.ReadKernels(views, kKernelClasses);
  uint64_t samples = 0;
  for (const auto& v : views) samples += v.samples;
  EXPECT_EQ(samples, kKernelClasses + 1u);
}

TEST_F(RegionTest, ReleaseNeverUnderflows) {
  Region r;
  ASSERT_TRUE(Open(r, 1 << 20));
  ASSERT_EQ(r.Reserve(4096), ReserveResult::kOk);
  r.Release(1 << 30);
  EXPECT_EQ(r.used(), 0u);
  r.Release(1);
  EXPECT_EQ(r.used(), 0u);
}

TEST_F(RegionTest, AnExistingRegionKeepsItsQuota) {
  Region first;
  ASSERT_TRUE(Open(first, 8 << 20));
  Region second;
  const char* error = nullptr;
  ASSERT_TRUE(second.Open(path_.c_str(), 1 << 20, 50, &error));
  EXPECT_EQ(second.quota(), uint64_t{8} << 20);
  EXPECT_EQ(second.compute_percent(), 0u);
}

TEST_F(RegionTest, AFileThatIsNotARegionIsRefused) {
  {
    FILE* f = std::fopen(path_.c_str(), "w");
    std::string junk(200000, 'x');
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
  }
  Region r;
  const char* error = nullptr;
  EXPECT_FALSE(r.Open(path_.c_str(), 1 << 20, 0, &error));
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("not a HeteroFlow region"),
            std::string::npos);
}

TEST_F(RegionTest, LoweredQuotaRefusesNewAllocationsKeepsOldOnes) {
  Region r;
  ASSERT_TRUE(Open(r, 8 << 20));
  ASSERT_EQ(r.Reserve(6 << 20), ReserveResult::kOk);
  r.SetQuota(4 << 20);
  EXPECT_EQ(r.used(), uint64_t{6} << 20);
  EXPECT_EQ(r.Reserve(1), ReserveResult::kOverQuota);
  r.Release(3 << 20);
  EXPECT_EQ(r.Reserve(1 << 20), ReserveResult::kOk);
  r.SetQuota(16 << 20);
  EXPECT_EQ(r.Reserve(12 << 20), ReserveResult::kOk);
}

// Children hammer the quota at once; the sum of what they hold, as each of
// them sees it after a successful reserve, never passes the quota.
TEST_F(RegionTest, ConcurrentProcessesNeverOvershoot) {
  // Small enough that even one child alone reaches it.
  constexpr uint64_t kQuota = 16 << 20;
  Region parent;
  ASSERT_TRUE(Open(parent, kQuota));
  std::vector<pid_t> kids;
  for (int k = 0; k < 8; ++k) {
    pid_t pid = fork();
    if (pid == 0) {
      Region r;
      const char* error = nullptr;
      if (!r.Open(path_.c_str(), 0, 0, &error)) _exit(3);
      r.Attach(getpid(), Region::ProcessStartTicks(getpid()));
      std::vector<uint64_t> held;
      unsigned seed = static_cast<unsigned>(getpid());
      for (int i = 0; i < 20000; ++i) {
        if (!held.empty() && (held.size() > 8 || rand_r(&seed) % 2 == 0)) {
          r.Release(held.back());
          held.pop_back();
          continue;
        }
        const uint64_t bytes = (1 + rand_r(&seed) % 8) << 20;
        if (r.Reserve(bytes) == ReserveResult::kOk) {
          held.push_back(bytes);
          if (r.used() > kQuota) _exit(4);
        }
      }
      for (uint64_t b : held) r.Release(b);
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  EXPECT_EQ(parent.used(), 0u);
  EXPECT_LE(parent.Stats().peak_bytes, kQuota);
  EXPECT_GT(parent.Stats().quota_ooms, 0u) << "the test never hit the quota";
}

TEST_F(RegionTest, ADeadProcessUsageIsReclaimedWhenNeeded) {
  Region r;
  ASSERT_TRUE(Open(r, 10 << 20));
  pid_t pid = fork();
  if (pid == 0) {
    Region child;
    const char* error = nullptr;
    if (!child.Open(path_.c_str(), 0, 0, &error)) _exit(3);
    child.Attach(getpid(), Region::ProcessStartTicks(getpid()));
    _exit(child.Reserve(8 << 20) == ReserveResult::kOk ? 0 : 4);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(r.used(), uint64_t{8} << 20);  // held by a dead process
  // Needing it gets it back.
  EXPECT_EQ(r.Reserve(6 << 20), ReserveResult::kOk);
  EXPECT_EQ(r.used(), uint64_t{6} << 20);
  EXPECT_EQ(r.Stats().reclaimed_bytes, uint64_t{8} << 20);
}

// A process SIGKILLed while it hammers the lock: whoever locks next finds
// the lock usable and the totals consistent with the slots.
TEST_F(RegionTest, KilledLockHoldersNeverWedgeTheRegion) {
  Region r;
  ASSERT_TRUE(Open(r, uint64_t{1} << 40));
  for (int round = 0; round < 20; ++round) {
    pid_t pid = fork();
    if (pid == 0) {
      Region child;
      const char* error = nullptr;
      if (!child.Open(path_.c_str(), 0, 0, &error)) _exit(3);
      child.Attach(getpid(), Region::ProcessStartTicks(getpid()));
      for (;;) {
        if (child.Reserve(4096) == ReserveResult::kOk) child.Release(4096);
        child.Reserve(1);  // leaves a byte per loop held
      }
    }
    usleep(2000 + round * 300);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    // Must not hang; dead holders' bytes come back.
    r.ReclaimDead();
    EXPECT_EQ(r.Reserve(1 << 20), ReserveResult::kOk);
    r.Release(1 << 20);
    EXPECT_EQ(r.used(), 0u) << "round " << round;
  }
  // Not an assertion (timing decides), but worth seeing in the log.
  std::printf("lock repairs after kills: %llu\n",
              static_cast<unsigned long long>(r.Stats().recoveries));
}

// The hole a robust mutex leaves: an owner killed inside unlock, after the
// lock word was cleared and before it woke the waiters, while a third
// process took the free lock (dropping the "waiters" bit). The waiter
// sleeps on a free lock and nobody will wake it. Here a child plays that
// owner: it clears the word and never wakes anyone. The waiter must still
// get the lock, and the stall is counted.
TEST_F(RegionTest, AWaiterWhoseWakeUpIsLostStillGetsTheLock) {
  Region r;
  ASSERT_TRUE(Open(r, 1 << 20));
  int fd = open(path_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* mapped = mmap(nullptr, sizeof(RegionLayout), PROT_READ | PROT_WRITE,
                      MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* layout = static_cast<RegionLayout*>(mapped);
  // glibc keeps the futex word first in pthread_mutex_t.
  auto* word = reinterpret_cast<std::atomic<int>*>(&layout->lock);
  int to_child[2];
  int from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  pid_t pid = fork();
  if (pid == 0) {
    char c = 0;
    pthread_mutex_lock(&layout->lock);
    if (write(from_child[1], "l", 1) != 1) _exit(3);
    if (read(to_child[0], &c, 1) != 1) _exit(4);
    word->store(0);  // "unlocked", and the wake never comes
    if (write(from_child[1], "u", 1) != 1) _exit(5);
    pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(from_child[0], &c, 1), 1);
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    EXPECT_EQ(r.Reserve(1), ReserveResult::kOk);
    done = true;
  });
  // Wait until the waiter is asleep on the lock (it sets the waiters bit).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((word->load() & FUTEX_WAITERS) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    usleep(1000);
  }
  usleep(20'000);
  ASSERT_EQ(write(to_child[1], "d", 1), 1);
  ASSERT_EQ(read(from_child[0], &c, 1), 1);
  while (!done && std::chrono::steady_clock::now() < deadline) usleep(1000);
  const bool got_it = done;
  if (!got_it) {
    // Unstick it so that the test can report instead of hanging.
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
  waiter.join();
  EXPECT_TRUE(got_it) << "the waiter slept on a free lock";
  EXPECT_GE(r.Stats().lock_stalls, 1u);
  EXPECT_EQ(r.used(), 1u);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  munmap(mapped, sizeof(RegionLayout));
  for (int f : {to_child[0], to_child[1], from_child[0], from_child[1]}) {
    close(f);
  }
}

TEST_F(RegionTest, APidThatStartedLaterIsNotTheOwner) {
  const int me = getpid();
  const uint64_t ticks = Region::ProcessStartTicks(me);
  ASSERT_GT(ticks, 0u);
  EXPECT_TRUE(Region::ProcessAlive(me, ticks));
  EXPECT_FALSE(Region::ProcessAlive(me, ticks + 1));
  EXPECT_FALSE(Region::ProcessAlive(0, ticks));
}

TEST_F(RegionTest, DetachGivesTheSlotAndItsMemoryBack) {
  Region r;
  ASSERT_TRUE(Open(r, 4 << 20));
  ASSERT_EQ(r.Reserve(3 << 20), ReserveResult::kOk);
  const int slot = r.slot();
  EXPECT_GT(slot, 0);
  r.Detach();
  Region again;
  ASSERT_TRUE(Open(again, 0));
  EXPECT_EQ(again.used(), 0u);
  EXPECT_EQ(again.slot(), slot);
}

TEST_F(RegionTest, ThreadsShareTheProcessSlot) {
  Region r;
  ASSERT_TRUE(Open(r, 32 << 20));
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) {
        if (r.Reserve(1 << 20) == ReserveResult::kOk) {
          if (r.used() > (32u << 20)) over = true;
          r.Release(1 << 20);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(over.load());
  EXPECT_EQ(r.used(), 0u);
}

// ------------------------------------------- what the driver holds beyond

// The agent's view of the region: mapped, never attached.
bool OpenAsAgent(Region& r, const std::string& path) {
  const char* error = nullptr;
  const bool ok = r.Open(path.c_str(), kUnlimited, 0, &error);
  EXPECT_TRUE(ok) << (error ? error : "");
  return ok;
}

TEST_F(RegionTest, DriverBytesCountAgainstTheQuota) {
  Region hook;
  ASSERT_TRUE(Open(hook, 10 << 20));
  ASSERT_EQ(hook.Reserve(4 << 20), ReserveResult::kOk);
  Region agent;
  ASSERT_TRUE(OpenAsAgent(agent, path_));
  Region::SlotView v;
  const int slot = agent.FindSlot(static_cast<uint32_t>(getpid()),
                                  Region::ProcessStartTicks(getpid()), &v);
  ASSERT_EQ(slot, hook.slot());
  EXPECT_EQ(v.used, uint64_t{4} << 20);
  // The context and modules: 3 MiB the hook never saw.
  const Region::DriverBytes measured{slot, v.owner, uint64_t{3} << 20};
  agent.SetDriverBytes(&measured, 1, 0);
  EXPECT_EQ(hook.counted(), uint64_t{4} << 20);
  EXPECT_EQ(hook.driver_bytes(), uint64_t{3} << 20);
  EXPECT_EQ(hook.used(), uint64_t{7} << 20);
  // 4 + 4 would fit a quota of 10; 4 + 3 + 4 does not.
  EXPECT_EQ(hook.Reserve(4 << 20), ReserveResult::kOverQuota);
  EXPECT_EQ(hook.Reserve(3 << 20), ReserveResult::kOk);
  EXPECT_EQ(hook.Reserve(1), ReserveResult::kOverQuota);
  const RegionStats s = agent.Stats();
  EXPECT_EQ(s.used_bytes, uint64_t{10} << 20);
  EXPECT_EQ(s.driver_bytes, uint64_t{3} << 20);
  EXPECT_EQ(s.peak_bytes, uint64_t{10} << 20);
  EXPECT_EQ(s.driver_updates, 1u);
  // A later measurement replaces the earlier one; a slot not listed is 0.
  agent.SetDriverBytes(nullptr, 0, 0);
  EXPECT_EQ(hook.used(), uint64_t{7} << 20);
  EXPECT_EQ(hook.Reserve(3 << 20), ReserveResult::kOk);
}

TEST_F(RegionTest, MemoryOfProcessesWithoutASlotCountsToo) {
  Region hook;
  ASSERT_TRUE(Open(hook, 10 << 20));
  Region agent;
  ASSERT_TRUE(OpenAsAgent(agent, path_));
  agent.SetDriverBytes(nullptr, 0, uint64_t{6} << 20);
  EXPECT_EQ(hook.used(), uint64_t{6} << 20);
  EXPECT_EQ(hook.Reserve(5 << 20), ReserveResult::kOverQuota);
  EXPECT_EQ(hook.Reserve(4 << 20), ReserveResult::kOk);
  agent.SetDriverBytes(nullptr, 0, 0);
  EXPECT_EQ(hook.used(), uint64_t{4} << 20);
}

TEST_F(RegionTest, AMeasurementOfAFormerOwnerIsNotChargedToTheNext) {
  Region hook;
  ASSERT_TRUE(Open(hook, 10 << 20));
  Region agent;
  ASSERT_TRUE(OpenAsAgent(agent, path_));
  Region::SlotView mine;
  ASSERT_GT(agent.FindSlot(static_cast<uint32_t>(getpid()), 0, &mine), 0);
  // A child attaches, is measured, and dies.
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork();
  if (pid == 0) {
    Region child;
    const char* error = nullptr;
    if (!child.Open(path_.c_str(), 0, 0, &error)) _exit(3);
    child.Attach(getpid(), Region::ProcessStartTicks(getpid()));
    if (write(pipefd[1], "a", 1) != 1) _exit(4);
    pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  Region::SlotView child;
  const int slot = agent.FindSlot(static_cast<uint32_t>(pid), 0, &child);
  ASSERT_GT(slot, 0);
  const Region::DriverBytes measured{slot, child.owner, uint64_t{5} << 20};
  agent.SetDriverBytes(&measured, 1, 0);
  EXPECT_EQ(hook.used(), uint64_t{5} << 20);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  // Needing the memory reclaims the dead process's slot, measurement and
  // all.
  EXPECT_EQ(hook.Reserve(8 << 20), ReserveResult::kOk);
  EXPECT_EQ(hook.used(), uint64_t{8} << 20);
  EXPECT_EQ(hook.driver_bytes(), 0u);
  // The same measurement delivered late names an owner that is gone: the
  // slot, free or claimed again, gets nothing.
  Region again;
  ASSERT_TRUE(Open(again, 0));
  agent.SetDriverBytes(&measured, 1, 0);
  EXPECT_EQ(hook.driver_bytes(), 0u);
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST_F(RegionTest, FindSlotTellsAPidsOwnerByItsStartTime) {
  Region hook;
  ASSERT_TRUE(Open(hook, 1 << 20));
  Region agent;
  ASSERT_TRUE(OpenAsAgent(agent, path_));
  const auto me = static_cast<uint32_t>(getpid());
  const uint64_t ticks = Region::ProcessStartTicks(getpid());
  Region::SlotView v;
  EXPECT_EQ(agent.FindSlot(me, ticks, &v), hook.slot());
  EXPECT_EQ(v.pid, me);
  EXPECT_EQ(v.start_ticks, ticks);
  EXPECT_EQ(agent.FindSlot(me, ticks + 1, &v), -1);  // a recycled pid
  EXPECT_EQ(agent.FindSlot(me + 1, ticks, &v), -1);
  hook.Detach();
  EXPECT_EQ(agent.FindSlot(me, ticks, &v), -1);
}

// A process killed in the middle of an update (here: the agent's, with the
// total half written) leaves the lock EOWNERDEAD; the next locker rebuilds
// the driver total from the slots and the unattached bytes.
TEST_F(RegionTest, ALockRepairRebuildsTheDriverTotal) {
  Region hook;
  ASSERT_TRUE(Open(hook, 100 << 20));
  Region agent;
  ASSERT_TRUE(OpenAsAgent(agent, path_));
  Region::SlotView v;
  const int slot = agent.FindSlot(static_cast<uint32_t>(getpid()), 0, &v);
  ASSERT_GT(slot, 0);
  const Region::DriverBytes measured{slot, v.owner, uint64_t{2} << 20};
  agent.SetDriverBytes(&measured, 1, uint64_t{1} << 20);
  ASSERT_EQ(hook.driver_bytes(), uint64_t{3} << 20);
  int fd = open(path_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* mapped = mmap(nullptr, sizeof(RegionLayout), PROT_READ | PROT_WRITE,
                      MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* layout = static_cast<RegionLayout*>(mapped);
  pid_t pid = fork();
  if (pid == 0) {
    pthread_mutex_lock(&layout->lock);
    layout->driver_bytes.store(uint64_t{90} << 20);  // and dies
    _exit(0);
  }
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(hook.used(), uint64_t{90} << 20);  // the torn total, for now
  EXPECT_EQ(hook.Reserve(1 << 20), ReserveResult::kOk);
  EXPECT_EQ(hook.driver_bytes(), uint64_t{3} << 20);
  EXPECT_EQ(hook.used(), uint64_t{4} << 20);
  EXPECT_EQ(hook.Stats().recoveries, 1u);
  munmap(mapped, sizeof(RegionLayout));
}

}  // namespace
}  // namespace hf::hook
