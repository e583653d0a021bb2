// libhfhook.so end to end, without a GPU: the hook_probe program (a CUDA
// driver-API program) runs under LD_PRELOAD=libhfhook.so against the fake
// driver (testing/, a libcuda.so.1 backed by host memory), finding the
// driver every way real programs do (linked, dlsym, cuGetProcAddress).
// Checked: OOM exactly at the quota, total = quota, every allocation path
// charged and refunded, two and eight processes hammering one slice never
// holding more than the quota, SIGKILL in the middle of a storm, live quota
// changes, fork, threads, the compute throttle on every launch path, and
// what the library links against.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "hook/cuda_sizes.h"
#include "hook/region.h"

namespace hf::hook {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Env = std::map<std::string, std::string>;

constexpr uint64_t kMiB = 1 << 20;

// A probe process: stdin and stdout are pipes.
class Probe {
 public:
  Probe(const std::vector<std::string>& args, const Env& env) {
    int in[2];
    int out[2];
    int err[2];
    if (pipe(in) != 0 || pipe(out) != 0 || pipe(err) != 0) std::abort();
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) close(fd);
      std::vector<std::string> envs;
      for (auto& [k, v] : env) envs.push_back(k + "=" + v);
      std::vector<char*> envp;
      for (auto& e : envs) envp.push_back(e.data());
      envp.push_back(nullptr);
      std::vector<std::string> argv_s = args;
      std::vector<char*> argv;
      for (auto& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    in_ = in[1];
    out_ = out[0];
    err_ = err[0];
  }
  ~Probe() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int fd : {in_, out_, err_}) {
      if (fd >= 0) close(fd);
    }
  }

  // The next line of stdout, or "" after `timeout`.
  std::string ReadLine(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(120000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  json ReadJson() {
    std::string line = ReadLine();
    if (line.empty()) return json();
    return json::parse(line, nullptr, false);
  }
  void Send(const std::string& line) {
    std::string l = line + "\n";
    if (write(in_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) {
      ADD_FAILURE() << "probe stdin closed";
    }
  }
  // Waits for exit; returns the exit code (-signal when killed), or -1000
  // on timeout.
  int Wait(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(120000)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
      usleep(2000);
    }
    return -1000;
  }
  std::string Stderr() {
    std::string all;
    char chunk[4096];
    int flags = fcntl(err_, F_GETFL);
    fcntl(err_, F_SETFL, flags | O_NONBLOCK);
    for (ssize_t n; (n = read(err_, chunk, sizeof(chunk))) > 0;) {
      all.append(chunk, static_cast<size_t>(n));
    }
    return all;
  }
  void Kill() { kill(pid_, SIGKILL); }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  int err_ = -1;
  std::string buf_;
};

class HookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A parameterised test's name holds a '/' ("Name/0"): one directory.
    std::string name =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() /
           ("hf-hook-" + std::to_string(getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    region_ = (dir_ / "region").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The environment of a slice task: the fake driver, the hook, the slice
  // variables.
  Env SliceEnv(uint64_t quota_mb, bool hook = true) const {
    Env env{
        {"LD_LIBRARY_PATH", HF_FAKE_CUDA_DIR},
        {"HF_FAKE_CUDA_MEMORY_MB", "1024"},
        {"HETEROFLOW_SLICE_MEMORY_MB", std::to_string(quota_mb)},
        {"HETEROFLOW_HOOK_REGION", region_},
        // The probe may be built with a sanitizer; the hook then is not
        // the first library, which ASan would otherwise refuse.
        {"ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0"},
        {"PATH", "/usr/bin:/bin"},
    };
    if (hook) env["LD_PRELOAD"] = HF_HOOK_PATH;
    return env;
  }

  static std::vector<std::string> Args(const std::string& resolve,
                                       std::vector<std::string> rest) {
    std::vector<std::string> a{
        resolve == "link" ? HF_PROBE_LINKED_PATH : HF_PROBE_PATH, "--resolve",
        resolve};
    a.insert(a.end(), rest.begin(), rest.end());
    return a;
  }

  // Runs a probe to completion; returns its last JSON line.
  json Run(const std::string& resolve, std::vector<std::string> rest,
           const Env& env, int* exit_code = nullptr,
           std::string* err = nullptr) {
    Probe p(Args(resolve, std::move(rest)), env);
    json last;
    for (std::string line; !(line = p.ReadLine()).empty();) {
      last = json::parse(line, nullptr, false);
    }
    int code = p.Wait();
    if (exit_code != nullptr) *exit_code = code;
    std::string e = p.Stderr();
    if (err != nullptr) *err = e;
    EXPECT_EQ(code, 0) << e;
    return last;
  }

  // The region as the agent sees it.
  Region& OpenRegion(uint64_t quota_mb) {
    const char* error = nullptr;
    EXPECT_TRUE(agent_view_.Open(region_.c_str(), quota_mb * kMiB, 0, &error))
        << (error ? error : "");
    return agent_view_;
  }

  fs::path dir_;
  std::string region_;
  Region agent_view_;
};

class HookResolveTest : public HookTest,
                        public ::testing::WithParamInterface<std::string> {};

INSTANTIATE_TEST_SUITE_P(EveryWayToFindTheDriver, HookResolveTest,
                         ::testing::Values("link", "dlsym", "procaddr"));

TEST_P(HookResolveTest, ReportsTheQuotaAsTheTotal) {
  json info = Run(GetParam(), {"info"}, SliceEnv(256));
  ASSERT_TRUE(info.is_object());
  EXPECT_EQ(info["total"], 256 * kMiB);
  EXPECT_EQ(info["free"], 256 * kMiB);
  EXPECT_EQ(info["device_total"], 256 * kMiB);
}

TEST_P(HookResolveTest, RefusesAllocationsExactlyAtTheQuota) {
  json fill = Run(GetParam(), {"fill", "1"}, SliceEnv(64));
  ASSERT_TRUE(fill.is_object());
  EXPECT_EQ(fill["allocated_mb"], 64);
  EXPECT_EQ(fill["error"], "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(fill["free_when_full"], 0);
  EXPECT_EQ(fill["free_after_free"], 64 * kMiB);
  EXPECT_EQ(fill["bad_frees"], 0);
  Region& r = OpenRegion(0);
  EXPECT_EQ(r.Stats().quota_ooms, 1u);
  EXPECT_EQ(r.used(), 0u);
}

TEST_P(HookResolveTest, CountsEveryAllocationPath) {
  Probe p(Args(GetParam(), {"paths"}), SliceEnv(512));
  std::map<std::string, json> by_path;
  json bad_free;
  uint64_t pitch = 0;
  for (std::string line; !(line = p.ReadLine()).empty();) {
    json j = json::parse(line);
    if (j.contains("path")) by_path[j["path"]] = j;
    if (j.contains("pitch")) pitch = j["pitch"];
    if (j.contains("bad_free")) bad_free = j;
  }
  ASSERT_EQ(p.Wait(), 0) << p.Stderr();
  const uint64_t gran = 2 * kMiB;  // the fake's granularity
  const std::map<std::string, uint64_t> expected{
      {"alloc", 3 * kMiB},
      {"managed", 2 * kMiB},
      {"pitch", pitch * 1024},
      {"async", 4 * kMiB},
      {"pool", 5 * kMiB},
      {"vmm_device", 3 * gran},
      {"vmm_host", 0},
      {"vmm_host_numa", 0},
      {"array2d", ArrayBytes(1024, 512, 0, CU_AD_FORMAT_FLOAT, 4)},
      {"array3d", ArrayBytes(256, 256, 16, CU_AD_FORMAT_UNSIGNED_INT8, 2)},
      {"mipmapped", MipmappedArrayBytes(512, 512, 0, CU_AD_FORMAT_HALF, 1, 4)},
      {"host", 0},
  };
  EXPECT_GE(pitch, 1000u);
  for (auto& [path, bytes] : expected) {
    ASSERT_TRUE(by_path.count(path)) << path;
    EXPECT_EQ(by_path[path]["result"], "CUDA_SUCCESS") << path;
    EXPECT_EQ(by_path[path]["charged"], bytes) << path;
    EXPECT_EQ(by_path[path]["left_after_free"], 0) << path;
  }
  EXPECT_EQ(bad_free["bad_free"], "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(bad_free["left"], 0);
}

TEST_F(HookTest, WithoutTheHookTheWholeDeviceIsThere) {
  json fill = Run("dlsym", {"fill", "16"}, SliceEnv(64, /*hook=*/false));
  EXPECT_EQ(fill["allocated_mb"], 1024);
}

TEST_F(HookTest, WithoutSliceVariablesTheHookStaysOutOfTheWay) {
  Env env = SliceEnv(64);
  env.erase("HETEROFLOW_SLICE_MEMORY_MB");
  env.erase("HETEROFLOW_HOOK_REGION");
  json fill = Run("procaddr", {"fill", "16"}, env);
  EXPECT_EQ(fill["allocated_mb"], 1024);
  EXPECT_FALSE(fs::exists(region_));
}

TEST_F(HookTest, AnUnreadableQuotaFailsClosedAndSaysWhy) {
  Env env = SliceEnv(64);
  env["HETEROFLOW_SLICE_MEMORY_MB"] = "64GB";
  std::string err;
  json fill = Run("dlsym", {"fill", "1"}, env, nullptr, &err);
  EXPECT_EQ(fill["allocated_mb"], 0);
  EXPECT_NE(err.find("HETEROFLOW_SLICE_MEMORY_MB"), std::string::npos) << err;
}

// A region this process cannot open (here: its directory does not exist;
// in production, a container user the file does not admit) never means no
// enforcement: the process keeps the slice's quota on its own.
TEST_F(HookTest, AnUnopenableRegionStillLeavesTheQuotaInForce) {
  Env env = SliceEnv(16);
  env["HETEROFLOW_HOOK_REGION"] = (dir_ / "missing" / "x.region").string();
  std::string err;
  json fill = Run("dlsym", {"fill", "1"}, env, nullptr, &err);
  EXPECT_EQ(fill["allocated_mb"], 16);
  EXPECT_NE(err.find("on its own"), std::string::npos) << err;
}

// The heart of it: processes of one slice allocating at once never hold
// more than the quota together (the probes add what they hold to a shared
// counter after each successful allocation and take it off before each
// free, so the counter can only under-state what the hook allowed).
void StormTest(HookTest* t, int processes, const Env& env,
               const std::string& counter, Region& region) {
  std::vector<std::unique_ptr<Probe>> probes;
  for (int i = 0; i < processes; ++i) {
    probes.push_back(std::make_unique<Probe>(
        std::vector<std::string>{HF_PROBE_PATH, "--resolve",
                                 i % 2 ? "procaddr" : "dlsym", "storm", "256",
                                 "4000", counter},
        env));
  }
  uint64_t ooms = 0;
  for (auto& p : probes) {
    json j = p->ReadJson();
    ASSERT_EQ(p->Wait(), 0) << p->Stderr();
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["other_errors"], 0);
    ooms += j["ooms"].get<uint64_t>();
  }
  (void)t;
  int fd = open(counter.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  int64_t shared[2] = {0, 0};
  ASSERT_EQ(read(fd, shared, sizeof(shared)),
            static_cast<ssize_t>(sizeof(shared)));
  close(fd);
  EXPECT_EQ(shared[0], 0);
  EXPECT_GT(shared[1], 0);
  EXPECT_LE(static_cast<uint64_t>(shared[1]), region.quota());
  EXPECT_GT(ooms, 0u) << "the storm never reached the quota";
  EXPECT_LE(region.Stats().peak_bytes, region.quota());
  EXPECT_EQ(region.used(), 0u);
}

TEST_F(HookTest, TwoProcessesNeverExceedTheQuotaTogether) {
  Region& r = OpenRegion(8);
  StormTest(this, 2, SliceEnv(8), (dir_ / "counter").string(), r);
}

TEST_F(HookTest, EightProcessesNeverExceedTheQuotaTogether) {
  Region& r = OpenRegion(16);
  StormTest(this, 8, SliceEnv(16), (dir_ / "counter").string(), r);
}

TEST_F(HookTest, ASigkilledProcessIsReclaimedAndTheOthersGoOn) {
  Region& r = OpenRegion(16);
  const std::string counter = (dir_ / "counter").string();
  std::vector<std::unique_ptr<Probe>> probes;
  for (int i = 0; i < 4; ++i) {
    probes.push_back(std::make_unique<Probe>(
        std::vector<std::string>{HF_PROBE_PATH, "--resolve", "dlsym", "storm",
                                 "256", i < 2 ? "200000000" : "20000", counter},
        SliceEnv(16)));
  }
  // Let them all get going, then kill the two long ones mid-storm.
  usleep(300'000);
  probes[0]->Kill();
  probes[1]->Kill();
  EXPECT_EQ(probes[0]->Wait(), -SIGKILL);
  EXPECT_EQ(probes[1]->Wait(), -SIGKILL);
  for (int i = 2; i < 4; ++i) {
    json j = probes[i]->ReadJson();
    ASSERT_EQ(probes[i]->Wait(), 0) << "survivor hung or failed";
    EXPECT_EQ(j["other_errors"], 0);
  }
  // What the dead held comes back to whoever needs it.
  json fill = Run("dlsym", {"fill", "1"}, SliceEnv(16));
  EXPECT_EQ(fill["allocated_mb"], 16);
  EXPECT_EQ(r.used(), 0u);
}

// Hundreds of processes of one slice starting together: each claims its
// slot without a lock, none waits on another, all are counted.
TEST_F(HookTest, TwoHundredProcessesStartTogether) {
  Region& r = OpenRegion(4096);
  std::vector<std::unique_ptr<Probe>> probes;
  for (int i = 0; i < 200; ++i) {
    probes.push_back(
        std::make_unique<Probe>(Args("dlsym", {"fill", "16"}), SliceEnv(4096)));
  }
  uint64_t allocated = 0;
  for (auto& p : probes) {
    json j = p->ReadJson();
    ASSERT_EQ(p->Wait(), 0) << p->Stderr();
    allocated += j["allocated_mb"].get<uint64_t>();
  }
  // Each filled what the others left; whatever the interleaving, nobody
  // got more than the quota and every process attached.
  EXPECT_GE(allocated, 4096u);
  EXPECT_EQ(r.Stats().attaches, 200u);
  EXPECT_LE(r.Stats().peak_bytes, 4096 * kMiB);
  EXPECT_EQ(r.used(), 0u);
}

TEST_F(HookTest, QuotaRaisedAndLoweredWhileTheTaskRuns) {
  Region& r = OpenRegion(32);
  Probe p(Args("procaddr", {"repl"}), SliceEnv(32));
  ASSERT_EQ(p.ReadJson()["ready"], true) << p.Stderr();
  p.Send("alloc 30");
  EXPECT_EQ(p.ReadJson()["alloc"], "CUDA_SUCCESS");
  p.Send("alloc 4");
  EXPECT_EQ(p.ReadJson()["alloc"], "CUDA_ERROR_OUT_OF_MEMORY");
  r.SetQuota(64 * kMiB);  // what the agent does on a raise
  p.Send("alloc 4");
  EXPECT_EQ(p.ReadJson()["alloc"], "CUDA_SUCCESS");
  p.Send("info");
  json info = p.ReadJson();
  EXPECT_EQ(info["total"], 64 * kMiB);
  EXPECT_EQ(info["free"], 30 * kMiB);
  r.SetQuota(16 * kMiB);  // lowered below what the task holds
  p.Send("alloc 1");
  EXPECT_EQ(p.ReadJson()["alloc"], "CUDA_ERROR_OUT_OF_MEMORY");
  p.Send("info");
  info = p.ReadJson();
  EXPECT_EQ(info["total"], 16 * kMiB);
  EXPECT_EQ(info["free"], 0);
  p.Send("free 0");
  EXPECT_EQ(p.ReadJson()["free"], "CUDA_SUCCESS");
  p.Send("alloc 8");
  EXPECT_EQ(p.ReadJson()["alloc"], "CUDA_SUCCESS");
  p.Send("quit");
  EXPECT_EQ(p.Wait(), 0);
}

// What the agent measured beyond the hook's count (NVML's usage of the
// process: its context, its modules) is part of the footprint the quota
// and cuMemGetInfo see.
TEST_F(HookTest, TheDriversOwnMemoryCountsAgainstTheQuota) {
  Region& r = OpenRegion(64);
  Probe p(Args("procaddr", {"repl"}), SliceEnv(64));
  ASSERT_EQ(p.ReadJson()["ready"], true) << p.Stderr();
  p.Send("alloc 30");
  EXPECT_EQ(p.ReadJson()["alloc"], "CUDA_SUCCESS");
  Region::SlotView v;
  const int slot = r.FindSlot(static_cast<uint32_t>(p.pid()), 0, &v);
  ASSERT_GT(slot, 0);
  const Region::DriverBytes measured{slot, v.owner, 20 * kMiB};
  r.SetDriverBytes(&measured, 1, 0);  // what the agent does
  p.Send("info");
  json info = p.ReadJson();
  EXPECT_EQ(info["total"], 64 * kMiB);
  EXPECT_EQ(info["free"], 14 * kMiB);
  // 30 + 16 fits 64; with the driver's 20 it does not.
  p.Send("alloc 16");
  EXPECT_EQ(p.ReadJson()["alloc"], "CUDA_ERROR_OUT_OF_MEMORY");
  p.Send("alloc 14");
  EXPECT_EQ(p.ReadJson()["alloc"], "CUDA_SUCCESS");
  p.Send("info");
  EXPECT_EQ(p.ReadJson()["free"], 0);
  EXPECT_EQ(r.Stats().peak_bytes, 64 * kMiB);
  // A later measurement that finds less gives it back.
  r.SetDriverBytes(nullptr, 0, 0);
  p.Send("info");
  EXPECT_EQ(p.ReadJson()["free"], 20 * kMiB);
  p.Send("quit");
  EXPECT_EQ(p.Wait(), 0);
}

TEST_F(HookTest, AForkedChildSharesTheQuotaAndIsReclaimedWhenGone) {
  OpenRegion(64);
  Probe p(Args("dlsym", {"fork", "16"}), SliceEnv(64));
  json child = p.ReadJson();
  json parent = p.ReadJson();
  ASSERT_EQ(p.Wait(), 0) << p.Stderr();
  EXPECT_EQ(child["child_allocated_mb"], 48);
  EXPECT_EQ(parent["parent_refilled_mb"], 48);
}

TEST_F(HookTest, ThreadsOfOneProcessNeverExceedTheQuota) {
  Region& r = OpenRegion(16);
  json j = Run("link", {"threads", "8", "3000", "512"}, SliceEnv(16));
  EXPECT_LE(j["peak"].get<uint64_t>(), 16 * kMiB);
  EXPECT_GT(j["peak"].get<uint64_t>(), 8 * kMiB);
  EXPECT_EQ(j["left"], 0);
  EXPECT_EQ(j["other_errors"], 0);
  EXPECT_GT(r.Stats().quota_ooms, 0u);
}

// The compute share: with 2 ms kernels launched back to back (launch,
// synchronize), a strict slice at 25% gets about a quarter of the launches
// it gets unlimited, on every launch path; a work-conserving one alone on
// its GPU gets them all. (Shares between slices on one GPU:
// hook_shares_test.) Launch rates, not busy time over wall
// time, so the probe's own CPU time (the same in both runs) cancels out.
double LaunchRate(const json& j) {
  return static_cast<double>(j["launches"].get<uint64_t>()) /
         static_cast<double>(j["wall_ns"].get<uint64_t>());
}

TEST_F(HookTest, ComputeShareHoldsOnEveryLaunchPath) {
  Env env = SliceEnv(64);
  env["HF_FAKE_CUDA_KERNEL_US"] = "2000";
  json full = Run("procaddr", {"launch", "1000", "kernel"}, env);
  ASSERT_EQ(full["result"], "CUDA_SUCCESS") << full.dump();
  // Unlimited, the fake GPU is busy nearly all the time.
  EXPECT_GT(static_cast<double>(full["busy_ns"].get<uint64_t>()) /
                static_cast<double>(full["wall_ns"].get<uint64_t>()),
            0.8)
      << full.dump();
  env["HETEROFLOW_SLICE_COMPUTE_PERCENT"] = "25";
  // Work-conserving (the default), a slice alone on its GPU may use it all.
  fs::remove(region_);
  json alone = Run("procaddr", {"launch", "600", "kernel"}, env);
  EXPECT_GT(LaunchRate(alone) / LaunchRate(full), 0.9) << alone.dump();
  // Strict, it never gets more than its share.
  env["HETEROFLOW_SLICE_COMPUTE_MODE"] = "strict";
  fs::remove(region_);
  json quarter = Run("procaddr", {"launch", "2000", "kernel"}, env);
  EXPECT_NEAR(LaunchRate(quarter) / LaunchRate(full), 0.25, 0.05)
      << quarter.dump() << " vs " << full.dump();
  for (const char* path : {"ptsz", "ex", "coop", "graph"}) {
    json j = Run("procaddr", {"launch", "600", path}, env);
    EXPECT_EQ(j["result"], "CUDA_SUCCESS") << path;
    EXPECT_LT(LaunchRate(j) / LaunchRate(full), 0.4)
        << path << " bypasses the throttle: " << j.dump();
  }
}

// Interference sampling: a sample of the launches is timed with events on
// the (fake) GPU, and the times land in the slice's region by kernel class.
TEST_F(HookTest, ASampleOfLaunchesIsTimedIntoTheSlicesRegion) {
  Env env = SliceEnv(64);
  env["HF_FAKE_CUDA_KERNEL_US"] = "500";
  for (const char* path : {"kernel", "ex", "ptsz"}) {
    fs::remove(region_);
    json j = Run("procaddr", {"launch", "2000", path}, env);
    ASSERT_EQ(j["result"], "CUDA_SUCCESS") << j.dump();
    Region r;  // as the agent sees it
    const char* error = nullptr;
    ASSERT_TRUE(r.Open(region_.c_str(), 64 * kMiB, 0, &error)) << error;
    Region::KernelView views[kKernelClasses];
    const int n = r.ReadKernels(views, kKernelClasses);
    ASSERT_EQ(n, 1) << path << ": one kernel, one shape, one class";
    // Two thousand launches, each waiting for the GPU: even at the
    // starting period (128; the period falls from there while sampling is
    // cheap, less quickly on a loaded machine or under a sanitizer) they
    // give at least ten samples.
    EXPECT_GE(views[0].samples, 10u) << path;
    const double mean_us = static_cast<double>(views[0].total_ns) /
                           static_cast<double>(views[0].samples) / 1000.0;
    // The kernel's time alone: never less; more only by what the CPU
    // took between the start event and the launch (a loaded machine).
    EXPECT_GE(mean_us, 490) << path;
    EXPECT_LT(mean_us, 1500) << path;
    EXPECT_EQ(r.Stats().kernel_samples, views[0].samples);
    EXPECT_GT(r.sample_period(), 0u);
  }
  // Turned off: nothing is timed.
  env["HETEROFLOW_HOOK_SAMPLING"] = "off";
  fs::remove(region_);
  ASSERT_EQ(Run("procaddr", {"launch", "200", "kernel"}, env)["result"],
            "CUDA_SUCCESS");
  EXPECT_EQ(OpenRegion(64).Stats().kernel_samples, 0u);
}

// NVML (nvidia-smi, monitoring agents in the task) sees the quota on the
// slice's GPU and the truth on the others.
TEST_F(HookTest, NvmlShowsTheQuotaOnTheSlicesGpuOnly) {
  const std::string config = (dir_ / "nvml.json").string();
  std::ofstream(config) << R"({"devices": [
      {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-aaaa",
       "memory_total_mib": 40960, "memory_used_mib": 100, "cc": [8, 0]},
      {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-bbbb",
       "memory_total_mib": 40960, "memory_used_mib": 200, "cc": [8, 0]}]})";
  OpenRegion(1024);
  {
    Region& r = agent_view_;
    r.Attach(getpid(), Region::ProcessStartTicks(getpid()));
    ASSERT_EQ(r.Reserve(300 * kMiB), ReserveResult::kOk);  // in use already
  }
  Env env = SliceEnv(1024);
  env["LD_LIBRARY_PATH"] =
      std::string(HF_FAKE_CUDA_DIR) + ":" + HF_FAKE_NVML_DIR;
  env["HF_FAKE_NVML_CONFIG"] = config;
  env["HETEROFLOW_GPU_UUID"] = "GPU-bbbb";
  Probe p(Args("dlsym", {"nvml"}), env);
  json gpu0 = p.ReadJson();
  json gpu1 = p.ReadJson();
  ASSERT_EQ(p.Wait(), 0) << p.Stderr();
  EXPECT_EQ(gpu0["total"], 40960 * kMiB);
  EXPECT_EQ(gpu0["used"], 100 * kMiB);
  EXPECT_EQ(gpu1["total"], 1024 * kMiB);
  EXPECT_EQ(gpu1["used"], 300 * kMiB);
  EXPECT_EQ(gpu1["free"], 724 * kMiB);
  EXPECT_EQ(gpu1["v2_total"], 1024 * kMiB);
  EXPECT_EQ(gpu1["v2_used"], 300 * kMiB);
  EXPECT_EQ(gpu1["v2_free"], 724 * kMiB);
}

TEST_F(HookTest, TheLibraryNeedsOnlyLibcLibdlAndLibpthread) {
  if (HF_HOOK_SANITIZED) {
    GTEST_SKIP() << "a sanitizer build links its runtime (and libstdc++) in";
  }
  FILE* f = popen("readelf -d " HF_HOOK_PATH, "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), f) != nullptr) out += buf;
  ASSERT_EQ(pclose(f), 0);
  std::istringstream lines(out);
  int needed = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("(NEEDED)") == std::string::npos) continue;
    ++needed;
    const bool allowed = line.find("[libc.so") != std::string::npos ||
                         line.find("[libdl.so") != std::string::npos ||
                         line.find("[libpthread.so") != std::string::npos ||
                         line.find("[ld-linux") != std::string::npos;
    EXPECT_TRUE(allowed) << line;
  }
  EXPECT_GT(needed, 0);
}

// No syscall on the hot paths: twice the alloc/free/getinfo calls cost the
// same number of syscalls (strace -c counts them; skipped where strace
// cannot trace, e.g. without ptrace rights).
int SyscallCount(const std::string& strace, long pairs, const Env& env,
                 const std::string& dir) {
  const std::string out = dir + "/strace-" + std::to_string(pairs);
  std::string cmd;
  for (auto& [k, v] : env) cmd += k + "='" + v + "' ";
  cmd = "env -i " + cmd + strace + " -f -c -o " + out + " " + HF_PROBE_PATH +
        " --resolve dlsym loop " + std::to_string(pairs) + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return -1;
  std::ifstream in(out);
  std::string line;
  int total = -1;
  while (std::getline(in, line)) {
    if (line.find("total") != std::string::npos) {
      std::istringstream s(line);
      std::string pct;
      double secs = 0;
      double usecs = 0;
      s >> pct >> secs >> usecs >> total;
    }
  }
  return total;
}

TEST_F(HookTest, HotPathsMakeNoSyscalls) {
  const char* candidates[] = {"/usr/bin/strace", "/bin/strace"};
  std::string strace;
  for (const char* c : candidates) {
    if (fs::exists(c)) strace = c;
  }
  if (strace.empty()) GTEST_SKIP() << "strace is not installed";
  // The fake driver itself maps and unmaps memory per allocation, so
  // compare with the same loops without the hook.
  Env hooked = SliceEnv(64);
  Env plain = SliceEnv(64, /*hook=*/false);
  const int hooked_small = SyscallCount(strace, 1000, hooked, dir_.string());
  if (hooked_small < 0) GTEST_SKIP() << "strace cannot trace here";
  const int hooked_large = SyscallCount(strace, 21000, hooked, dir_.string());
  const int plain_small = SyscallCount(strace, 1000, plain, dir_.string());
  const int plain_large = SyscallCount(strace, 21000, plain, dir_.string());
  ASSERT_GT(hooked_large, 0);
  ASSERT_GT(plain_large, 0);
  // 20,000 more alloc+getinfo+free triples: at most a handful more
  // syscalls with the hook than without (its table growing with mmap).
  EXPECT_LT((hooked_large - hooked_small) - (plain_large - plain_small), 50)
      << "hooked " << hooked_small << " -> " << hooked_large << ", plain "
      << plain_small << " -> " << plain_large;
}

}  // namespace
}  // namespace hf::hook
