// hook_shares: measures the compute shares libhfhook.so keeps when slices
// share one GPU. Each case starts GPU-bound share_worker processes under
// the hook on one shared fake GPU (HF_FAKE_CUDA_GPU_DIR), lets them run, and
// reads from the fake device what share of the GPU's time each slice got
// and how long the GPU stood idle (the same figures NVML's per-process and
// device utilisation report).
//
//   hook_shares --hook LIB --worker BIN --fake-cuda-dir DIR
//               [--out FILE] [--quick] [--check] [--only SUBSTRING]
//               [--no-feedback]
//
// As the agent does, it corrects the shares every second with the GPU's
// per-process utilisation (hook::ShareFeedback; the figures the fake NVML
// reports): a case may add a process to the first slice that runs without
// the hook, whose GPU time only the feedback sees. --no-feedback leaves
// the correction out (that case then misses its target).
//
// --out writes {"cases": [{"name", "mode", "kernel_us", "set_percent",
// "achieved_percent", "gpu_idle_percent", ...}]} (`make bench`:
// build/bench-results/hook_shares.json). --check exits 1 when a case misses
// its target (the targets are in Cases() below and docs/HOOK.md). --quick
// runs the subset `make test` runs.
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hook/gpu_region.h"
#include "hook/share_feedback.h"
#include "hook/testing/fake_gpu.h"

extern char** environ;

namespace {

struct Target {
  double lo = 0;
  double hi = 100;
};

struct Case {
  std::string name;
  std::string mode;  // "strict" | "work-conserving"
  int kernel_us = 1000;
  std::string launch = "kernel";  // kernel | coop | graph
  std::vector<int> percents;      // one per slice
  int processes = 1;              // per slice
  std::vector<Target> targets;    // one per slice
  double idle_max = -1;           // < 0: no idle target
  // > 0: the first slice also has a process without the hook, GPU-bound
  // this percent of each 100 ms.
  int unhooked_duty = 0;
};

struct Result {
  std::vector<double> achieved;
  std::vector<double> escaped_ms;  // charged by the feedback, per slice
  double idle = 0;
  std::vector<std::string> misses;
};

Target Around(double share) { return Target{share - 5, share + 5}; }

std::vector<Case> Cases(bool quick) {
  std::vector<Case> out;
  const std::vector<int> all_lengths = {10, 100, 1000, 10000, 50000};
  const std::vector<int> lengths =
      quick ? std::vector<int>{10, 1000, 50000} : all_lengths;
  for (int k : lengths) {
    const bool every = !quick || k == 1000;
    char suffix[32];
    snprintf(suffix, sizeof(suffix), "-%dus", k);
    const std::string us = suffix;
    out.push_back({"strict-25-75" + us,
                   "strict",
                   k,
                   "kernel",
                   {25, 75},
                   1,
                   {Around(25), Around(75)},
                   5});
    if (every) {
      out.push_back({"strict-33-33-33" + us,
                     "strict",
                     k,
                     "kernel",
                     {33, 33, 33},
                     1,
                     {Around(33), Around(33), Around(33)},
                     -1});
      out.push_back({"strict-25-alone" + us,
                     "strict",
                     k,
                     "kernel",
                     {25},
                     1,
                     {Around(25)},
                     -1});
    }
    out.push_back({"work-conserving-25-alone" + us,
                   "work-conserving",
                   k,
                   "kernel",
                   {25},
                   1,
                   {Target{90, 100}},
                   -1});
    if (every) {
      out.push_back({"work-conserving-25-75" + us,
                     "work-conserving",
                     k,
                     "kernel",
                     {25, 75},
                     1,
                     {Around(25), Around(75)},
                     5});
      out.push_back({"strict-25-four-processes" + us,
                     "strict",
                     k,
                     "kernel",
                     {25},
                     4,
                     {Around(25)},
                     -1});
      out.push_back({"work-conserving-50-50" + us,
                     "work-conserving",
                     k,
                     "kernel",
                     {50, 50},
                     1,
                     {Around(50), Around(50)},
                     5});
    }
  }
  // A process of the 25% slice runs without the hook, GPU-bound a fifth
  // of the time: only the NVML feedback keeps the slice as a whole to its
  // share. The 75% slice has no target: the process without the hook takes
  // GPU time inside its turns too, which no turn can prevent.
  out.push_back({"strict-25-75-unhooked-20",
                 "strict",
                 1000,
                 "kernel",
                 {25, 75},
                 1,
                 {Around(25), Target{0, 100}},
                 -1,
                 20});
  for (const char* launch : {"graph", "coop"}) {
    const std::string l = launch;
    out.push_back({"strict-25-75-" + l,
                   "strict",
                   1000,
                   l,
                   {25, 75},
                   1,
                   {Around(25), Around(75)},
                   5});
    out.push_back({"work-conserving-25-alone-" + l,
                   "work-conserving",
                   1000,
                   l,
                   {25},
                   1,
                   {Target{90, 100}},
                   -1});
  }
  return out;
}

pid_t Spawn(const std::string& worker, const std::vector<std::string>& args,
            const std::map<std::string, std::string>& env) {
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    const std::string name = var.substr(0, var.find('='));
    if (env.count(name) == 0) vars.push_back(var);
  }
  for (const auto& [k, v] : env) {
    std::string var = k;
    var += '=';
    var += v;
    vars.push_back(std::move(var));
  }
  std::vector<char*> envp;
  envp.reserve(vars.size() + 1);
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_s = {worker};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argv_s.size() + 1);
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDOUT_FILENO);
    execve(worker.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

// The agent's NVML feedback, standing in for it: every second, each
// slice's GPU time since the last round as the fake NVML reports it
// (whole percents of the window), through hook::ShareFeedback.
class Feedback {
 public:
  Feedback(const std::string& dir, const std::map<pid_t, size_t>& slice_of,
           size_t slices)
      : dir_(dir), slice_of_(slice_of), escaped_ns_(slices, 0) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Feedback() { Stop(); }
  Feedback(const Feedback&) = delete;
  Feedback& operator=(const Feedback&) = delete;

  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::vector<int64_t> escaped_ns() const { return escaped_ns_; }

 private:
  void Loop() {
    hf::fake_gpu::SharedDevice gpu;
    hf::hook::GpuRegion region;
    hf::hook::ShareFeedback feedback;
    std::string error;
    const char* region_error = "";
    bool gpu_open = false;
    int64_t last = 0;
    while (!stop_.load()) {
      for (int i = 0; i < 10 && !stop_.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (stop_.load()) break;
      if (!region.is_open() &&
          !region.Open((dir_ + "/gpu.region").c_str(), &region_error)) {
        continue;
      }
      if (!gpu_open) {
        gpu_open = gpu.Open(dir_, 0, hf::fake_gpu::DeviceOptions{}, &error);
        if (!gpu_open) continue;
      }
      const int64_t now = hf::fake_gpu::SharedDevice::NowNs();
      if (last == 0) {
        feedback.Apply(region, 1, {});
        last = now;
        continue;
      }
      const hf::fake_gpu::Utilization u = gpu.UtilizationSince(last);
      const int64_t window = now - last;
      last = now;
      std::map<uint64_t, hf::hook::SliceObservation> by_slice;
      for (const auto& p : u.processes) {
        auto it = slice_of_.find(p.pid);
        if (it == slice_of_.end()) continue;
        hf::hook::SliceObservation& o = by_slice[it->second + 1];
        if (o.key == 0) o.processes = 0;
        o.key = it->second + 1;
        o.busy_ns += static_cast<int64_t>(p.sm_percent) * window / 100;
        o.processes += 1;
      }
      std::vector<hf::hook::SliceObservation> seen;
      seen.reserve(by_slice.size());
      for (const auto& [key, o] : by_slice) seen.push_back(o);
      for (const auto& f : feedback.Apply(region, window, seen)) {
        if (f.key >= 1 && f.key <= escaped_ns_.size()) {
          escaped_ns_[f.key - 1] += f.escaped_ns;
        }
      }
    }
  }

  const std::string dir_;
  const std::map<pid_t, size_t> slice_of_;
  std::vector<int64_t> escaped_ns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Result Run(const Case& c, const std::string& hook, const std::string& worker,
           const std::string& fake_dir, bool feedback) {
  Result r;
  char tmpl[] = "/tmp/hf-shares-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  int duration_ms = c.kernel_us >= 10000 ? 5000 : 3000;
  int warm_ms = c.kernel_us >= 10000 ? 1000 : 500;
  if (c.unhooked_duty > 0) {
    // The feedback corrects once a second: give it rounds to settle.
    duration_ms = 8000;
    warm_ms = 3500;
  }
  std::map<pid_t, size_t> slice_of;
  auto env_of = [&](size_t s) {
    return std::map<std::string, std::string>{
        {"LD_PRELOAD", hook},
        {"LD_LIBRARY_PATH", fake_dir},
        {"HF_FAKE_CUDA_GPU_DIR", dir},
        {"HF_FAKE_CUDA_KERNEL_US", std::to_string(c.kernel_us)},
        {"HETEROFLOW_SLICE_ID", std::to_string(s + 1)},
        {"HETEROFLOW_SLICE_COMPUTE_PERCENT", std::to_string(c.percents[s])},
        {"HETEROFLOW_SLICE_COMPUTE_MODE", c.mode},
        {"HETEROFLOW_HOOK_REGION",
         dir + "/slice-" + std::to_string(s + 1) + ".region"},
        {"HETEROFLOW_HOOK_GPU_REGION", dir + "/gpu.region"},
    };
  };
  for (size_t s = 0; s < c.percents.size(); ++s) {
    for (int p = 0; p < c.processes; ++p) {
      const pid_t pid = Spawn(
          worker,
          {c.launch, std::to_string(duration_ms), std::to_string(c.kernel_us)},
          env_of(s));
      slice_of[pid] = s;
    }
  }
  if (c.unhooked_duty > 0) {
    // The slice's environment, but the loader never loaded the hook.
    std::map<std::string, std::string> env = env_of(0);
    env["LD_PRELOAD"] = "";
    const pid_t pid =
        Spawn(worker,
              {"kernel", std::to_string(duration_ms),
               std::to_string(c.kernel_us), std::to_string(c.unhooked_duty)},
              env);
    slice_of[pid] = 0;
  }
  std::unique_ptr<Feedback> loop;
  if (feedback) {
    loop = std::make_unique<Feedback>(dir, slice_of, c.percents.size());
  }
  hf::fake_gpu::SharedDevice gpu;
  std::string error;
  std::this_thread::sleep_for(std::chrono::milliseconds(warm_ms));
  const bool opened = gpu.Open(dir, 0, hf::fake_gpu::DeviceOptions{}, &error);
  if (!opened) {
    r.misses.push_back("cannot open the fake GPU: " + error);
    for (const auto& [pid, s] : slice_of) waitpid(pid, nullptr, 0);
    if (loop) loop->Stop();
    std::filesystem::remove_all(dir);
    r.achieved.assign(c.percents.size(), 0);
    r.escaped_ms.assign(c.percents.size(), 0);
    return r;
  }
  auto sample = [&](std::vector<uint64_t>* per_slice, uint64_t* busy) {
    per_slice->assign(c.percents.size(), 0);
    for (const auto& p : gpu.Processes()) {
      auto it = slice_of.find(p.pid);
      if (it != slice_of.end()) (*per_slice)[it->second] += p.executed_ns;
    }
    *busy = gpu.busy_ns();
  };
  std::vector<uint64_t> before;
  std::vector<uint64_t> after;
  uint64_t busy0 = 0;
  uint64_t busy1 = 0;
  sample(&before, &busy0);
  const int64_t t0 = hf::fake_gpu::SharedDevice::NowNs();
  std::this_thread::sleep_for(
      std::chrono::milliseconds(duration_ms - warm_ms - 300));
  sample(&after, &busy1);
  const int64_t t1 = hf::fake_gpu::SharedDevice::NowNs();
  for (const auto& [pid, s] : slice_of) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      r.misses.push_back("worker " + std::to_string(pid) + " failed");
    }
  }
  std::vector<int64_t> escaped(c.percents.size(), 0);
  if (loop) {
    loop->Stop();
    escaped = loop->escaped_ns();
  }
  for (int64_t e : escaped) {
    r.escaped_ms.push_back(std::round(static_cast<double>(e) / 1e5) / 10);
  }
  const double span = static_cast<double>(t1 - t0);
  for (size_t s = 0; s < c.percents.size(); ++s) {
    const double got = 100.0 * static_cast<double>(after[s] - before[s]) / span;
    r.achieved.push_back(std::round(got * 10) / 10);
    if (got < c.targets[s].lo || got > c.targets[s].hi) {
      char line[160];
      snprintf(line, sizeof(line), "slice %zu: %.1f%% (target %.0f-%.0f%%)",
               s + 1, got, c.targets[s].lo, c.targets[s].hi);
      r.misses.push_back(line);
    }
  }
  r.idle = 100.0 - 100.0 * static_cast<double>(busy1 - busy0) / span;
  r.idle = std::round(std::max(0.0, r.idle) * 10) / 10;
  if (c.idle_max >= 0 && r.idle > c.idle_max) {
    r.misses.push_back("GPU idle " + std::to_string(r.idle) + "% (at most " +
                       std::to_string(c.idle_max) + "%)");
  }
  std::filesystem::remove_all(dir);
  return r;
}

int Main(int argc, char** argv) {
  std::string hook;
  std::string worker;
  std::string fake_dir;
  std::string out;
  std::string only;
  bool quick = false;
  bool check = false;
  bool feedback = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "hook_shares: %s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--hook") {
      hook = value();
    } else if (a == "--worker") {
      worker = value();
    } else if (a == "--fake-cuda-dir") {
      fake_dir = value();
    } else if (a == "--out") {
      out = value();
    } else if (a == "--only") {
      only = value();
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--check") {
      check = true;
    } else if (a == "--no-feedback") {
      feedback = false;
    } else {
      fprintf(stderr, "hook_shares: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (hook.empty() || worker.empty() || fake_dir.empty()) {
    fprintf(stderr,
            "usage: hook_shares --hook LIB --worker BIN --fake-cuda-dir DIR "
            "[--out FILE] [--quick] [--check] [--only SUBSTRING] "
            "[--no-feedback]\n");
    return 2;
  }
  nlohmann::json cases = nlohmann::json::array();
  int missed = 0;
  for (const Case& c : Cases(quick)) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    const Result r = Run(c, hook, worker, fake_dir, feedback);
    nlohmann::json achieved = nlohmann::json::array();
    for (double a : r.achieved) achieved.push_back(a);
    nlohmann::json escaped = nlohmann::json::array();
    for (double e : r.escaped_ms) escaped.push_back(e);
    cases.push_back({{"name", c.name},
                     {"mode", c.mode},
                     {"kernel_us", c.kernel_us},
                     {"launch", c.launch},
                     {"processes_per_slice", c.processes},
                     {"set_percent", c.percents},
                     {"achieved_percent", achieved},
                     {"gpu_idle_percent", r.idle},
                     {"unhooked_duty_percent", c.unhooked_duty},
                     {"nvml_feedback", feedback},
                     {"escaped_ms", escaped},
                     {"target_met", r.misses.empty()}});
    printf("%-40s", c.name.c_str());
    for (double a : r.achieved) printf(" %5.1f", a);
    printf("  idle %4.1f%%%s\n", r.idle, r.misses.empty() ? "" : "  MISSED");
    for (const std::string& m : r.misses) printf("    %s\n", m.c_str());
    fflush(stdout);
    if (!r.misses.empty()) ++missed;
  }
  const nlohmann::json doc = {{"cases", cases}};
  if (!out.empty()) {
    std::ofstream f(out);
    f << doc.dump(2) << "\n";
  }
  printf("hook shares: %d of %zu cases missed their targets\n", missed,
         cases.size());
  return check && missed > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    fprintf(stderr, "hook_shares: %s\n", e.what());
    return 2;
  }
}
