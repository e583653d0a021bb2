#include "agent/agent.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>
#include <utility>

#include "gpu/mig_profiles.h"
#include "hook/config.h"
#include "runtime/task_files.h"

namespace hf::agent {

namespace {

constexpr std::string_view kGpuIndicesLabel = "heteroflow.gpu_indices";
constexpr std::string_view kMigDeviceLabel = "heteroflow.mig_device_id";
// The task's hook region file, so that a restarted agent finds it again.
constexpr std::string_view kHookRegionLabel = "heteroflow.hook_region";
constexpr int kMaxLogChunksPerCycle = 8;

std::string JoinInts(const std::vector<int>& values) {
  std::string out;
  for (int v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

std::vector<int> SplitInts(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    try {
      out.push_back(std::stoi(part));
    } catch (const std::exception&) {
      return {};
    }
  }
  return out;
}

bool FileContains(const std::string& path, std::string_view needle) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string StringOr(const json& j, const char* key, std::string fallback) {
  if (j.is_object() && j.contains(key) && j[key].is_string()) {
    return j[key].get<std::string>();
  }
  return fallback;
}

std::int64_t IntOr(const json& j, const char* key, std::int64_t fallback) {
  if (j.is_object() && j.contains(key) && j[key].is_number_integer()) {
    return j[key].get<std::int64_t>();
  }
  return fallback;
}

// A non-negative integer, or nullopt.
std::optional<std::uint64_t> ParseUnsigned(std::string_view text) {
  std::uint64_t value = 0;
  auto [ptr, ec] =
      std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty()) {
    return std::nullopt;
  }
  return value;
}

constexpr std::uint64_t kMib = std::uint64_t{1} << 20;

// The hook region's quota and compute share for a slice env, read exactly
// as the hook reads them (hook::ReadConfig): a memory value that cannot be
// read fails closed (quota 0), a compute share that cannot be read or is
// 100 means no throttle.
hook::HookConfig SliceHookConfig(const runtime::StringMap& env) {
  hook::HookConfig config = hook::ReadConfig(
      [](const char* name, void* ctx) -> const char* {
        const auto& vars = *static_cast<const runtime::StringMap*>(ctx);
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      const_cast<runtime::StringMap*>(&env));
  if (config.bad_variable != nullptr) {
    spdlog::error("{}='{}' {}: the hook region's {}", config.bad_variable,
                  env.at(config.bad_variable), config.bad_reason,
                  config.quota_bytes == 0
                      ? "quota is 0 (every allocation is refused)"
                      : "value is ignored");
  }
  return config;
}

std::string DescribeQuota(std::uint64_t bytes) {
  if (bytes == hook::kUnlimited) return "no cap";
  return std::to_string(bytes / kMib) + " MiB";
}

// Writes `dir`/ld.so.preload naming `library` (mode 0644 whatever the
// umask: every container user's loader reads it) and returns its path, or
// "" with a warning when it cannot be written.
std::string WritePreloadFile(const std::filesystem::path& dir,
                             const std::string& library) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::filesystem::path path = dir / "ld.so.preload";
  Status written =
      ec ? Status::Internal(ec.message())
         : runtime::task_files::WriteFileAtomic(path, library + "\n", 0644);
  if (written.ok() && ::chmod(path.c_str(), 0644) != 0) {
    written = Status::Internal(std::string("chmod: ") + std::strerror(errno));
  }
  if (!written.ok()) {
    spdlog::warn(
        "cannot write {} ({}): the hook reaches containers through "
        "LD_PRELOAD only",
        path.string(), written.ToString());
    return "";
  }
  return path.string();
}

// The terminal state the server gets for a runtime status.
struct Outcome {
  TaskState state = TaskState::kRunning;
  std::optional<int> exit_code;
  std::string message;
};

Outcome OutcomeOf(const runtime::TaskStatus& s, bool cancelled) {
  Outcome o;
  o.message = runtime::DescribeTaskStatus(s);
  switch (s.state) {
    case runtime::TaskState::kExited:
      o.exit_code = s.exit_code;
      o.state =
          s.exit_code == 0 ? hf::TaskState::kSucceeded : hf::TaskState::kFailed;
      break;
    case runtime::TaskState::kSignaled:
      o.exit_code = 128 + s.signal;
      o.state = hf::TaskState::kFailed;
      break;
    case runtime::TaskState::kFailed:
      o.exit_code = s.exit_code;
      o.state = hf::TaskState::kFailed;
      break;
    case runtime::TaskState::kLost:
    case runtime::TaskState::kRunning:
      o.state = hf::TaskState::kFailed;
      break;
  }
  // Stopped because the server said so: cancelled, however it ended.
  if (cancelled) o.state = hf::TaskState::kCancelled;
  return o;
}

}  // namespace

HostFacts ProbeHost() {
  HostFacts h;
  h.containerized = access("/.dockerenv", F_OK) == 0 ||
                    access("/run/.containerenv", F_OK) == 0 ||
                    FileContains("/proc/1/cgroup", "docker") ||
                    FileContains("/proc/1/cgroup", "kubepods") ||
                    FileContains("/proc/1/cgroup", "containerd") ||
                    FileContains("/proc/1/cgroup", "lxc");
  h.cpu_milli = static_cast<std::int64_t>(
                    std::max(1U, std::thread::hardware_concurrency())) *
                1000;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    h.host_memory_mib = static_cast<std::int64_t>(pages) *
                        static_cast<std::int64_t>(page_size) /
                        (std::int64_t{1024} * 1024);
  }
  return h;
}

StatusOr<std::unique_ptr<Agent>> Agent::Create(
    AgentOptions options, ServerClient* server, gpu::GpuDriver* driver,
    runtime::Runtime* runtime, mps::MpsControl* mps, HostFacts host,
    const Clock* clock) {
  if (options.node_id.empty()) {
    return Status::InvalidArgument("is required", "node_id");
  }
  if (options.state_dir.empty()) {
    return Status::InvalidArgument("is required", "state_dir");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.state_dir, ec);
  if (ec) {
    return Status::FailedPrecondition("cannot create the state directory " +
                                      options.state_dir.string() + ": " +
                                      ec.message());
  }
  auto agent = std::unique_ptr<Agent>(
      new Agent(std::move(options), server, driver, runtime, mps, host, clock));
  agent->LoadPendingMig();
  agent->LoadGaveUp();
  agent->StartReportEpoch();
  return agent;
}

Agent::Agent(AgentOptions options, ServerClient* server, gpu::GpuDriver* driver,
             runtime::Runtime* runtime, mps::MpsControl* mps, HostFacts host,
             const Clock* clock)
    : options_(std::move(options)),
      server_(server),
      driver_(driver),
      runtime_(runtime),
      mps_(mps),
      host_(host),
      clock_(clock),
      hook_proof_(HookProof::Options{options_.proc_root,
                                     options_.hook_attach_grace,
                                     options_.hook_library}) {}

void Agent::Stop() {
  {
    MutexLock lock(stop_mu_);
    stop_ = true;
    stop_cv_.NotifyAll();
  }
  // A wait for work in flight ends now, not when the server answers.
  if (work_waiter_ != nullptr) work_waiter_->Interrupt();
}

Status Agent::Run() {
  std::thread waiter;
  std::atomic<bool> waiter_exited{false};
  if (work_waiter_ != nullptr) {
    waiter = std::thread([this, &waiter_exited] {
      WaitForWorkLoop();
      waiter_exited = true;
    });
  }
  const auto done = [&](Status s) {
    if (waiter.joinable()) {
      {
        MutexLock lock(stop_mu_);
        waiter_done_ = true;
        stop_cv_.NotifyAll();
      }
      // An interrupt only ends a request in flight: until the waiter is
      // out, one may just be starting.
      while (!waiter_exited) {
        work_waiter_->Interrupt();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      waiter.join();
    }
    return s;
  };
  for (;;) {
    const auto start = std::chrono::steady_clock::now();
    Status s = RunOnce();
    if (!s.ok()) {
      // A revoked token or a node another token owns will not heal by
      // itself; everything else is retried next cycle.
      if (s.code() == StatusCode::kUnauthenticated ||
          s.code() == StatusCode::kPermissionDenied) {
        spdlog::error("giving up: {}", s.ToString());
        return done(s);
      }
      spdlog::warn("cycle: {}", s.ToString());
    }
    if (WaitForNextCycle(start)) return done(Status::Ok());
  }
}

void Agent::WaitForWorkLoop() {
  constexpr std::chrono::milliseconds kFirstBackoff(250);
  std::chrono::milliseconds backoff = kFirstBackoff;
  std::uint64_t seen = 0;
  // Waits on stop_cv_ for `wait` or until the loop must end; false then.
  const auto pause = [&](std::chrono::milliseconds wait) {
    MutexLock lock(stop_mu_);
    stop_cv_.WaitFor(stop_mu_, wait, [&] {
      stop_mu_.AssertHeld();  // a predicate runs with the lock held
      return stop_ || waiter_done_;
    });
    return !stop_ && !waiter_done_;
  };
  for (;;) {
    {
      // One wake at a time: wait until the cycle took the last one.
      MutexLock lock(stop_mu_);
      stop_cv_.Wait(stop_mu_, [&] {
        stop_mu_.AssertHeld();
        return stop_ || waiter_done_ || !work_ready_;
      });
      if (stop_ || waiter_done_) return;
    }
    auto reply = work_waiter_->WaitForWork(options_.node_id, seen, kWorkWaitS);
    if (!reply.ok()) {
      // Not registered yet, the server away, an older server without the
      // route: the cycles on the interval go on; try again later, backing
      // off up to the interval.
      if (!pause(backoff)) return;
      backoff = std::min(backoff * 2, std::max(options_.heartbeat_interval,
                                               std::chrono::milliseconds(1)));
      continue;
    }
    backoff = kFirstBackoff;
    const std::uint64_t generation =
        reply->value("generation", std::uint64_t{0});
    const bool waited = reply->value("waited", false);
    // The first reply wakes too: work may have come between the cycle's
    // look at its assignments and this first wait.
    const bool moved = generation != seen;
    if (moved) {
      MutexLock lock(stop_mu_);
      work_ready_ = true;
      stop_cv_.NotifyAll();
    }
    seen = generation;
    // The server could not hold the wait (too many agents wait): back to
    // the interval for a while.
    if (!moved && !waited && !pause(options_.heartbeat_interval)) return;
  }
}

bool Agent::WaitForNextCycle(std::chrono::steady_clock::time_point start) {
  using std::chrono::milliseconds;
  const auto due = start + options_.heartbeat_interval;
  const bool poll =
      options_.exit_poll_interval > milliseconds(0) && runtime_->PollIsCheap();
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= due) return false;
    milliseconds wait = std::chrono::ceil<milliseconds>(due - now);
    if (poll) wait = std::min(wait, options_.exit_poll_interval);
    {
      MutexLock lock(stop_mu_);
      if (stop_cv_.WaitFor(stop_mu_, wait, [&] {
            stop_mu_.AssertHeld();  // a predicate runs with the lock held
            return stop_ || work_ready_;
          })) {
        if (stop_) return true;
        // The server has work for this node: the next cycle, now.
        work_ready_ = false;
        stop_cv_.NotifyAll();
        return false;
      }
    }
    if (poll && NoteEndedTasks()) return false;
  }
}

bool Agent::NoteEndedTasks() {
  bool ended = false;
  for (auto& [id, task] : tasks_) {
    if (task.finished) continue;  // known; reported by a cycle
    // Noted once, so a cycle that cannot report it (the server away) is
    // not run again and again for it.
    auto noted = NoteIfEnded(id, task);
    if (noted.ok() && *noted) ended = true;
  }
  return ended;
}

StatusOr<bool> Agent::NoteIfEnded(std::int64_t task_id, LocalTask& task) {
  auto polled = runtime_->Poll(task_id);
  if (!polled.ok()) {
    if (polled.status().code() != StatusCode::kNotFound) {
      return polled.status();
    }
    task.finished = runtime::TaskStatus{runtime::TaskState::kLost, 0, 0, false,
                                        "the runtime lost the task"};
  } else if (polled->finished()) {
    task.finished = *polled;
  }
  return task.finished.has_value();
}

Status Agent::RunOnce() {
  Status s = Cycle();
  SnapshotMetrics();  // whatever the cycle got to, scrapes see it
  return s;
}

Status Agent::Cycle() {
  if (!adopted_) HF_RETURN_IF_ERROR(Adopt());
  Probe();
  CheckHookProof();
  SampleProcesses();
  FeedShares();
  MeasureInterference();
  HF_RETURN_IF_ERROR(RegisterOrHeartbeat());
  Status first = HandleMigCommands();
  const Status assignments = HandleAssignments();
  if (first.ok()) first = assignments;
  const Status finished = ReportFinished();
  if (first.ok()) first = finished;
  return first;
}

// ------------------------------------------------------------------ probe

Status Agent::Adopt() {
  auto adopted = runtime_->Adopt();
  if (!adopted.ok()) return adopted.status();
  for (const runtime::AdoptedTask& t : *adopted) {
    LocalTask local;
    auto it = t.labels.find(std::string(kGpuIndicesLabel));
    if (it != t.labels.end()) local.gpu_indices = SplitInts(it->second);
    auto slice = t.labels.find(std::string(runtime::kSliceLabel));
    if (slice != t.labels.end()) {
      local.slice_id =
          static_cast<std::int64_t>(ParseUnsigned(slice->second).value_or(0));
    }
    auto region = t.labels.find(std::string(kHookRegionLabel));
    if (region != t.labels.end()) local.region_path = region->second;
    // Reported running before the restart (or it will be now).
    local.reported_running = true;
    tasks_[t.task_id] = local;
    spdlog::info("adopted task {} ({})", t.task_id,
                 runtime::DescribeTaskStatus(t.status));
  }
  AdoptRegions();
  adopted_ = true;
  return Status::Ok();
}

// ------------------------------------------------------------ hook regions

std::filesystem::path Agent::RegionPath(std::int64_t slice_id) const {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(options_.state_dir, ec);
  if (ec) dir = options_.state_dir;
  return dir / "hook" / ("slice-" + std::to_string(slice_id) + ".region");
}

StatusOr<std::shared_ptr<hook::Region>> Agent::OpenRegionForStart(
    const std::filesystem::path& path, const runtime::StringMap& env) {
  const std::string text = path.string();
  if (text.find_first_of(": ") != std::string::npos) {
    // It goes into a docker -v argument and the task's environment.
    return Status::FailedPrecondition(
        "the state directory's path contains ':' or a space");
  }
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    return Status::Internal("cannot create " + path.parent_path().string() +
                            ": " + ec.message());
  }
  const hook::HookConfig config = SliceHookConfig(env);
  const std::uint64_t quota = config.quota_bytes;
  const std::uint32_t compute = config.compute_percent;
  auto region = std::make_shared<hook::Region>();
  const char* error = "";
  if (!region->Open(text.c_str(), quota, compute, &error)) {
    return Status::Internal(text + ": " + error);
  }
  // A container may run as any user (the image's USER): every process of
  // the slice must be able to map the region, or its hook falls back to a
  // quota of its own. The file is bind-mounted into that one container
  // only, and the state directory above it is the agent's.
  if (::chmod(text.c_str(), 0666) != 0) {
    spdlog::warn("{}: chmod 0666: {}", text, std::strerror(errno));
  }
  // A file that already existed (the runtime still held the task) keeps
  // its usage; the quota is the slice's as the server says now.
  if (region->quota() != quota) region->SetQuota(quota);
  if (region->compute_percent() != compute) region->SetComputePercent(compute);
  // No ReclaimDead here: the slots hold pids of the task's pid namespace (a
  // container's), which mean nothing in the agent's; the hook reclaims dead
  // processes itself, from inside the namespace.
  return region;
}

void Agent::AdoptRegions() {
  std::set<std::string> in_use;
  for (auto& [id, t] : tasks_) {
    if (t.region_path.empty()) continue;
    in_use.insert(t.region_path.filename().string());
    std::error_code ec;
    if (!std::filesystem::exists(t.region_path, ec)) {
      // Never recreated: the task's processes map the old file, and a new
      // one would start from zero usage.
      spdlog::warn(
          "task {}: its hook region {} is gone; its usage is not reported "
          "and its quota cannot change until it ends",
          id, t.region_path.string());
      t.region_path.clear();
      continue;
    }
    auto region = std::make_shared<hook::Region>();
    const char* error = "";
    // An existing region keeps its own quota; the values are not used.
    if (!region->Open(t.region_path.c_str(), hook::kUnlimited, 0, &error)) {
      spdlog::warn("task {}: cannot reopen its hook region {}: {}", id,
                   t.region_path.string(), error);
      continue;
    }
    spdlog::info(
        "task {}: reopened its hook region {} (quota {}, {} bytes used)", id,
        t.region_path.string(), DescribeQuota(region->quota()), region->used());
    t.region = std::move(region);
  }
  // Regions of tasks that ended while no agent ran: nobody uses them.
  const std::filesystem::path dir = RegionPath(0).parent_path();
  std::error_code ec;
  std::vector<std::filesystem::path> unused;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("slice-") && name.ends_with(".region") &&
        !in_use.contains(name)) {
      unused.push_back(it->path());
    }
  }
  for (const std::filesystem::path& path : unused) {
    std::error_code removed;
    std::filesystem::remove(path, removed);
    spdlog::info("removed the hook region {} (no task uses it)", path.string());
  }
}

void Agent::RemoveRegion(LocalTask& task) {
  if (task.region_path.empty()) return;
  task.region.reset();
  std::error_code ec;
  std::filesystem::remove(task.region_path, ec);
  if (ec) {
    spdlog::warn("removing the hook region {}: {}", task.region_path.string(),
                 ec.message());
  }
  task.region_path.clear();
}

wire::HookReport Agent::ReadHookReport(const hook::Region& region) {
  const hook::RegionStats s = region.Stats();
  // The region's counters are unsigned; the report's are int64 (what the
  // server takes), which they never come near.
  const auto count = [](auto v) {
    return static_cast<std::int64_t>(
        std::min<std::uint64_t>(v, static_cast<std::uint64_t>(INT64_MAX)));
  };
  wire::HookReport r;
  r.attached = s.attaches > 0;
  r.attaches = count(s.attaches);
  r.processes = static_cast<int>(s.live_processes);
  r.used_bytes = count(s.used_bytes);
  r.peak_bytes = count(s.peak_bytes);
  if (s.quota_bytes != hook::kUnlimited) r.quota_bytes = count(s.quota_bytes);
  r.quota_ooms = count(s.quota_ooms);
  r.physical_ooms = count(s.physical_ooms);
  r.driver_bytes = count(s.driver_bytes);
  return r;
}

void Agent::CheckHookProof() {
  std::vector<HookProof::Slice> slices;
  for (const auto& [id, t] : tasks_) {
    if (!t.region || t.finished) continue;
    slices.push_back({id, t.region_path, t.region.get(), t.gpu_indices});
  }
  hook_proof_.Check(slices, *driver_, clock_->NowMillis());
}

void Agent::SampleProcesses() {
  std::set<int> hooked;  // GPUs with a running hooked single-GPU task
  for (const auto& [id, t] : tasks_) {
    if (t.region && !t.finished && t.gpu_indices.size() == 1) {
      hooked.insert(t.gpu_indices[0]);
    }
  }
  std::erase_if(process_samples_,
                [&](const auto& e) { return !hooked.contains(e.first); });
  const auto now_us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  for (int index : hooked) {
    ProcessSample& sample = process_samples_[index];
    const std::uint64_t since = sample.now_us;
    auto processes = driver_->SampleProcessUtilization(index, since);
    sample.since_us = since;
    sample.now_us = now_us;
    sample.window = processes.ok() && since != 0 && now_us > since;
    sample.processes.clear();
    if (processes.ok()) {
      sample.processes = std::move(*processes);
    } else {
      sample.now_us = 0;  // start afresh once the driver answers again
    }
  }
}

void Agent::FeedShares() {
  // The GPUs whose slices take turns: a running hooked task on one GPU.
  std::map<int, std::map<std::int64_t, std::int64_t>> slice_of_task;
  for (const auto& [id, t] : tasks_) {
    if (!t.region || t.finished || t.gpu_indices.size() != 1) continue;
    slice_of_task[t.gpu_indices[0]][id] = t.slice_id;
  }
  std::erase_if(gpu_shares_, [&](const auto& g) {
    return !slice_of_task.contains(g.first);
  });
  for (const auto& [index, slices] : slice_of_task) {
    GpuShares& g = gpu_shares_[index];
    if (!g.region) {
      const std::filesystem::path path =
          RegionPath(0).parent_path() /
          ("gpu-" + std::to_string(index) + ".region");
      if (!std::filesystem::exists(path)) continue;
      auto region = std::make_unique<hook::GpuRegion>();
      const char* error = "";
      if (!region->Open(path.c_str(), &error)) {
        spdlog::warn("{}: {}; its shares get no NVML feedback", path.string(),
                     error);
        continue;
      }
      g.region = std::move(region);
    }
    auto sampled = process_samples_.find(index);
    if (sampled == process_samples_.end() || sampled->second.now_us == 0) {
      g.started = false;  // the driver did not answer: start afresh
      continue;
    }
    const ProcessSample& sample = sampled->second;
    if (!g.started || !sample.window) {
      // The first sample only starts the window (and the baseline).
      g.feedback.Apply(*g.region, 1, {});
      g.started = true;
      continue;
    }
    const auto window_ns =
        static_cast<std::int64_t>(sample.now_us - sample.since_us) * 1000;
    const std::map<std::int64_t, std::int64_t> task_of =
        hook_proof_.TasksOfProcesses(index);
    std::map<std::int64_t, hook::SliceObservation> by_slice;
    for (const gpu::ProcessUtilization& p : sample.processes) {
      auto task = task_of.find(p.pid);
      if (task == task_of.end()) continue;  // not a slice's process
      auto slice = slices.find(task->second);
      if (slice == slices.end() || slice->second <= 0) continue;
      hook::SliceObservation& o = by_slice[slice->second];
      if (o.key == 0) o.processes = 0;
      o.key = static_cast<std::uint64_t>(slice->second);
      o.busy_ns += static_cast<std::int64_t>(p.sm_percent / 100.0 *
                                             static_cast<double>(window_ns));
      o.processes += 1;
    }
    std::vector<hook::SliceObservation> seen;
    seen.reserve(by_slice.size());
    for (const auto& [key, o] : by_slice) seen.push_back(o);
    g.last = g.feedback.Apply(*g.region, window_ns, seen);
    for (const hook::SliceFeedback& f : g.last) {
      if (f.escaped_ns <= 0) continue;
      spdlog::info(
          "GPU {}: slice {} used {:.1f}% of the GPU's time in the last "
          "{:.1f} s, {:.1f} ms of it outside its turns: charged to its "
          "share of {}%",
          index, f.key, f.achieved_percent,
          static_cast<double>(f.window_ns) / 1e9,
          static_cast<double>(f.escaped_ns) / 1e6, f.percent);
    }
  }
}

void Agent::MeasureInterference() {
  // The hooked single-GPU slices, by GPU.
  std::map<int, std::vector<std::int64_t>> tasks_on;
  std::set<std::int64_t> live;
  for (const auto& [id, t] : tasks_) {
    if (!t.region || t.finished || t.gpu_indices.size() != 1 ||
        t.slice_id <= 0) {
      continue;
    }
    tasks_on[t.gpu_indices[0]].push_back(id);
    live.insert(t.slice_id);
  }
  interference_.Retain(live);
  std::erase_if(interference_seen_,
                [&](const auto& e) { return !live.contains(e.first); });
  for (const auto& [index, ids] : tasks_on) {
    // Each slice's classes, and whether its timed launches grew.
    std::map<std::int64_t, std::vector<KernelCounts>> counts;
    std::set<std::int64_t> launched;  // tasks
    for (std::int64_t id : ids) {
      const LocalTask& t = tasks_.at(id);
      hook::Region::KernelView views[hook::kKernelClasses];
      const int n = t.region->ReadKernels(views, hook::kKernelClasses);
      std::vector<KernelCounts>& c = counts[id];
      std::uint64_t total = 0;
      for (int i = 0; i < n; ++i) {
        c.push_back({views[i].key, views[i].samples, views[i].total_ns});
        total += views[i].samples;
      }
      std::uint64_t& seen = interference_seen_[t.slice_id];
      if (total != seen) launched.insert(id);
      seen = total;
    }
    // What else used the GPU since the last round, by the driver: any busy
    // process of another task, or of no task of this node.
    std::set<std::int64_t> busy;
    bool busy_stranger = false;
    auto sampled = process_samples_.find(index);
    if (sampled != process_samples_.end() && sampled->second.window) {
      const std::map<std::int64_t, std::int64_t> task_of =
          hook_proof_.TasksOfProcesses(index);
      for (const gpu::ProcessUtilization& p : sampled->second.processes) {
        if (p.sm_percent == 0) continue;
        auto it = task_of.find(p.pid);
        if (it == task_of.end()) {
          busy_stranger = true;
        } else {
          busy.insert(it->second);
        }
      }
    }
    for (std::int64_t id : ids) {
      bool shared = busy_stranger;
      for (std::int64_t other : launched) shared = shared || other != id;
      for (std::int64_t other : busy) shared = shared || other != id;
      interference_.Observe(tasks_.at(id).slice_id, counts[id], shared);
    }
  }
}

void Agent::ApplyQuotas(const wire::HeartbeatReply& reply) {
  for (const wire::QuotaDirective& q : reply.quotas) {
    auto it = tasks_.find(q.task_id);
    if (it == tasks_.end() || !it->second.region || it->second.finished) {
      continue;
    }
    LocalTask& t = it->second;
    if (q.slice_id != t.slice_id) continue;
    std::uint64_t want = hook::kUnlimited;
    if (q.memory_mib) {
      if (*q.memory_mib < 0 ||
          static_cast<std::uint64_t>(*q.memory_mib) > UINT64_MAX / kMib) {
        continue;
      }
      want = static_cast<std::uint64_t>(*q.memory_mib) * kMib;
    }
    const std::uint64_t have = t.region->quota();
    if (have == want) continue;
    t.region->SetQuota(want);
    spdlog::info("task {}: hook quota {} -> {} (slice {}, {} MiB in use)",
                 it->first, DescribeQuota(have), DescribeQuota(want),
                 t.slice_id, t.region->used() / kMib);
  }
}

const gpu::GpuInfo* Agent::GpuAt(int index) const {
  for (const gpu::GpuInfo& g : gpus_) {
    if (g.index == index) return &g;
  }
  return nullptr;
}

void Agent::Probe() {
  auto listed = driver_->ListGpus();
  if (listed.ok()) {
    gpus_ = std::move(*listed);
    last_probe_error_.clear();
  } else {
    // The driver cannot be reached: every GPU it named is reported lost
    // (never silently forgotten).
    if (listed.status().message() != last_probe_error_) {
      spdlog::error("GPU probe: {}", listed.status().ToString());
      last_probe_error_ = listed.status().message();
    }
    for (gpu::GpuInfo& g : gpus_) {
      g.healthy = false;
      g.health_detail = listed.status().message();
    }
  }
  for (gpu::GpuInfo& g : gpus_) {
    if (g.healthy && !g.uuid.empty()) {
      known_gpus_[g.index] = g;
      continue;
    }
    // A lost GPU may not tell its name: report what it was.
    auto known = known_gpus_.find(g.index);
    if (known == known_gpus_.end()) continue;
    if (g.uuid.empty()) g.uuid = known->second.uuid;
    if (g.model.empty()) g.model = known->second.model;
    if (g.memory_mib == 0) g.memory_mib = known->second.memory_mib;
    if (g.cc_major == 0) {
      g.cc_major = known->second.cc_major;
      g.cc_minor = known->second.cc_minor;
    }
  }

  // MPS: supervised on every cycle where a GPU could use it.
  mps_alive_ = false;
  if (mps_ != nullptr) {
    std::vector<const gpu::GpuInfo*> eligible;
    for (const gpu::GpuInfo& g : gpus_) {
      if (g.healthy && !g.mig_enabled && g.vendor == "nvidia" &&
          mps::MpsCapable(true, g.cc_major)) {
        eligible.push_back(&g);
      }
    }
    if (!eligible.empty()) {
      for (const gpu::GpuInfo* g : eligible) {
        if (mps_caps_.contains(g->uuid)) continue;
        // Remembered by the control even while the daemon is down.
        const Status cap =
            mps_->SetWholeCardPinnedLimit(g->uuid, g->memory_mib);
        if (cap.ok() || cap.code() == StatusCode::kUnavailable) {
          mps_caps_.insert(g->uuid);
        } else {
          spdlog::warn("MPS cap for {}: {}", g->uuid, cap.ToString());
        }
      }
      const Status ensured = mps_->Ensure();
      if (!ensured.ok()) spdlog::debug("MPS: {}", ensured.ToString());
      mps_alive_ = mps_->Alive();
    }
  }

  std::vector<wire::GpuReport> gpus;
  for (const gpu::GpuInfo& g : gpus_) {
    const bool mig_capable =
        g.healthy && g.mig_enabled &&
        gpu::FindMigTable(g.model, g.memory_mib) != nullptr;
    const bool mps_capable = g.healthy && !g.mig_enabled &&
                             g.vendor == "nvidia" &&
                             mps::MpsCapable(mps_alive_, g.cc_major);
    wire::GpuReport& r = gpus.emplace_back();
    r.index = g.index;
    r.uuid = g.uuid;
    r.vendor = g.vendor;
    r.model = g.model;
    r.memory_mib = g.memory_mib;
    r.cc_major = g.cc_major;
    r.cc_minor = g.cc_minor;
    r.mig_capable = mig_capable;
    r.mps_capable = mps_capable;
    r.lost = !g.healthy;
    if (g.healthy && g.mig_enabled) {
      // What is really on the card: the server flags partitions no slice
      // owns (MIG_PARTITION_ORPHANED).
      auto devices = driver_->ListMigDevices(g.index);
      if (devices.ok()) {
        r.mig_devices.emplace();
        for (const gpu::MigDevice& d : *devices) {
          r.mig_devices->push_back(d.device_uuid);
        }
      }
    }
  }
  report_ = wire::NodeReport{};
  report_.name = options_.node_id;
  report_.containerized = host_.containerized;
  report_.hook_available = !options_.hook_library.empty();
  report_.runtime = std::string(runtime_->Name());
  report_.cpu_milli = host_.cpu_milli;
  report_.host_memory_mib = host_.host_memory_mib;
  report_.agent_version = options_.agent_version;
  report_.gpus = std::move(gpus);
}

void Agent::StartReportEpoch() {
  std::ifstream in(options_.state_dir / "report-epoch.json");
  if (in) {
    const json saved = json::parse(in, nullptr, /*allow_exceptions=*/false);
    const std::int64_t last = IntOr(saved, "epoch", 0);
    if (last > 0 && last < wire::kMaxReportNumber) report_epoch_ = last + 1;
  }
  report_seq_ = 0;
  SaveStateFile("report-epoch.json", {{"epoch", report_epoch_}});
}

wire::ReportNumber Agent::NextReportNumber() {
  return {report_epoch_, ++report_seq_};
}

void Agent::NoteReportReply(const wire::HeartbeatReply& reply) {
  if (!reply.newer_applied) return;
  const std::int64_t newer = reply.newer_applied->epoch;
  spdlog::warn("the server applied a newer report of node '{}' (epoch {})",
               options_.node_id, newer);
  if (newer < report_epoch_ || newer >= wire::kMaxReportNumber) return;
  report_epoch_ = newer + 1;
  report_seq_ = 0;
  SaveStateFile("report-epoch.json", {{"epoch", report_epoch_}});
}

Status Agent::RegisterOrHeartbeat() {
  if (!registered_) {
    report_.number = NextReportNumber();
    auto reply = server_->Register(wire::ToJson(report_, /*with_name=*/true));
    if (!reply.ok()) return reply.status();
    NoteReportReply(wire::ReadHeartbeatReply(*reply));
    registered_ = true;
    spdlog::info("registered as node '{}' with {} GPUs", options_.node_id,
                 report_.gpus.size());
  }
  report_.number = NextReportNumber();
  json body = wire::ToJson(report_, /*with_name=*/false);
  json tasks = json::array();
  for (const auto& [id, t] : tasks_) {
    if (t.finished || !t.reported_running) continue;
    wire::RunningTask running;
    running.task_id = id;
    running.state = "running";
    running.gpu_indices = t.gpu_indices;
    if (t.region) {
      running.hook = ReadHookReport(*t.region);
      // The GPU time share it achieved in the last feedback window.
      if (t.gpu_indices.size() == 1 && t.slice_id > 0) {
        auto g = gpu_shares_.find(t.gpu_indices[0]);
        if (g != gpu_shares_.end()) {
          const auto key = static_cast<std::uint64_t>(t.slice_id);
          for (const hook::SliceFeedback& f : g->second.last) {
            if (f.key == key) {
              running.hook->share_achieved_percent =
                  std::clamp(f.achieved_percent, 0.0, 100.0);
            }
          }
        }
      }
      if (t.slice_id > 0) {
        const InterferenceMeter::Reading r = interference_.Read(t.slice_id);
        if (r.ratio) {
          running.hook->interference =
              std::clamp(*r.ratio, 0.01, wire::kMaxInterference);
          running.hook->interference_samples = r.samples;
        }
      }
      HookProof::Verdict proof = hook_proof_.VerdictOf(id);
      if (!proof.unhooked_pids.empty()) {
        if (proof.unhooked_pids.size() > wire::kMaxUnhookedPids) {
          proof.unhooked_pids.resize(wire::kMaxUnhookedPids);
        }
        if (proof.reason.size() > wire::kMaxUnhookedReason) {
          proof.reason.resize(wire::kMaxUnhookedReason);
        }
        running.hook->unhooked_pids = std::move(proof.unhooked_pids);
        running.hook->unhooked_reason = std::move(proof.reason);
      }
    }
    tasks.push_back(wire::ToJson(running));
  }
  body["tasks"] = std::move(tasks);
  auto reply = server_->Heartbeat(options_.node_id, body);
  if (reply.ok()) {
    const wire::HeartbeatReply read = wire::ReadHeartbeatReply(*reply);
    NoteReportReply(read);
    // Quotas answer a report that was applied.
    if (!read.newer_applied) ApplyQuotas(read);
  }
  if (!reply.ok() && reply.status().code() == StatusCode::kNotFound) {
    registered_ = false;  // the server lost us: register again next cycle
  }
  return reply.status();
}

// ---------------------------------------------------------------- MIG

void Agent::LoadPendingMig() {
  const auto path = options_.state_dir / "mig-commands.json";
  std::ifstream in(path);
  if (!in) return;
  json saved = json::parse(in, nullptr, /*allow_exceptions=*/false);
  // An array: the commands only (an older agent's file).
  json commands = saved.is_array() ? saved : json::array();
  if (saved.is_object()) {
    if (saved.contains("commands") && saved["commands"].is_array()) {
      commands = saved["commands"];
    }
    if (saved.contains("partitions") && saved["partitions"].is_object()) {
      for (const auto& [slice, p] : saved["partitions"].items()) {
        const auto id = ParseUnsigned(slice);
        if (!id || !p.is_object()) continue;
        made_partitions_[static_cast<std::int64_t>(*id)] =
            MadePartition{static_cast<int>(IntOr(p, "gpu_index", 0)),
                          StringOr(p, "device_id", "")};
      }
    }
  } else if (!saved.is_array()) {
    spdlog::error("ignoring an unreadable {}", path.string());
    return;
  }
  for (const json& entry : commands) {
    if (!entry.is_object() || !entry.contains("command")) continue;
    const std::int64_t id = IntOr(entry["command"], "id", 0);
    if (id <= 0) continue;
    PendingMig p;
    p.command = entry["command"];
    p.first_seen_ms = IntOr(entry, "first_seen_ms", 0);
    p.executing = entry.contains("executing") &&
                  entry["executing"].is_boolean() &&
                  entry["executing"].get<bool>();
    if (entry.contains("before") && entry["before"].is_array()) {
      for (const json& u : entry["before"]) {
        if (u.is_string()) p.before.push_back(u.get<std::string>());
      }
    }
    if (entry.contains("outcome")) p.outcome = entry["outcome"];
    pending_mig_[id] = std::move(p);
  }
  if (saved.is_object() && saved.contains("done") &&
      saved["done"].is_object()) {
    for (const auto& [key, outcome] : saved["done"].items()) {
      const auto id = ParseUnsigned(key);
      if (id && *id > 0 && outcome.is_object()) {
        done_mig_[static_cast<std::int64_t>(*id)] = outcome;
      }
    }
  }
}

void Agent::SavePendingMig() {
  json commands = json::array();
  for (const auto& [id, p] : pending_mig_) {
    commands.push_back({{"command", p.command},
                        {"first_seen_ms", p.first_seen_ms},
                        {"executing", p.executing},
                        {"before", p.before},
                        {"outcome", p.outcome}});
  }
  json partitions = json::object();
  for (const auto& [slice, p] : made_partitions_) {
    partitions[std::to_string(slice)] = {{"gpu_index", p.gpu_index},
                                         {"device_id", p.device_uuid}};
  }
  json done = json::object();
  for (const auto& [id, outcome] : done_mig_)
    done[std::to_string(id)] = outcome;
  const json out = {{"commands", std::move(commands)},
                    {"partitions", std::move(partitions)},
                    {"done", std::move(done)}};
  SaveStateFile("mig-commands.json", out);
}

Status Agent::HandleMigCommands() {
  auto claimed = server_->ClaimSliceRequests(options_.node_id);
  if (!claimed.ok()) return claimed.status();
  bool changed = false;
  if (claimed->contains("items") && (*claimed)["items"].is_array()) {
    for (const json& cmd : (*claimed)["items"]) {
      const std::int64_t id = IntOr(cmd, "id", 0);
      if (id <= 0 || pending_mig_.contains(id)) continue;
      pending_mig_[id] = {cmd, clock_->NowMillis()};
      // Offered again after it was done (a server restored from a backup,
      // a replayed reply): its outcome is reported again, never redone.
      auto done = done_mig_.find(id);
      if (done != done_mig_.end()) pending_mig_[id].outcome = done->second;
      changed = true;
    }
  }
  if (changed) SavePendingMig();
  Status first = Status::Ok();
  // In id order: a create runs before the cleanup destroy written after it.
  for (auto it = pending_mig_.begin(); it != pending_mig_.end();) {
    auto done = HandleMigCommand(it->second);
    if (!done.ok()) {
      if (first.ok()) first = done.status();
      ++it;
      continue;
    }
    if (*done) {
      if (!it->second.outcome.is_null()) {
        done_mig_[it->first] = it->second.outcome;
        while (done_mig_.size() > kDoneMigKept)
          done_mig_.erase(done_mig_.begin());
      }
      it = pending_mig_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  if (changed) SavePendingMig();
  return first;
}

std::optional<gpu::MigPlacement> Agent::PlacementOf(
    const json& cmd, int index, const std::string& profile) const {
  // Where the server's ledger charged the partition; without it (an older
  // server), wherever the driver puts it.
  const std::int64_t start = IntOr(cmd, "placement_start", -1);
  if (start < 0 || start > 64) return std::nullopt;
  const gpu::GpuInfo* info = GpuAt(index);
  const gpu::MigModelTable* table =
      info != nullptr ? gpu::FindMigTable(info->model, info->memory_mib)
                      : nullptr;
  const gpu::MigProfile* p =
      table != nullptr ? gpu::FindProfile(*table, profile) : nullptr;
  if (p == nullptr) return std::nullopt;
  return gpu::MigPlacement{static_cast<int>(start), p->memory_slices};
}

json Agent::CreateMigOnce(PendingMig& pending, int index,
                          std::int64_t slice_id) {
  const json& cmd = pending.command;
  const std::int64_t id = IntOr(cmd, "id", 0);
  auto listed = driver_->ListMigDevices(index);
  std::vector<std::string> now;
  if (listed.ok()) {
    for (const gpu::MigDevice& d : *listed) now.push_back(d.device_uuid);
  }
  if (pending.executing && listed.ok()) {
    // The agent died during this create: a partition that was not there
    // before and that no other slice of ours holds is the one it made.
    for (const std::string& uuid : now) {
      const bool old = std::find(pending.before.begin(), pending.before.end(),
                                 uuid) != pending.before.end();
      const bool others = std::any_of(
          made_partitions_.begin(), made_partitions_.end(),
          [&](const auto& kv) { return kv.second.device_uuid == uuid; });
      if (old || others) continue;
      spdlog::info("MIG create {}: found {} made before a restart", id, uuid);
      made_partitions_[slice_id] = MadePartition{index, uuid};
      pending.executing = false;
      pending.outcome = wire::ToJson(wire::MigResult{true, uuid, "", false});
      SavePendingMig();
      return pending.outcome;
    }
  }
  pending.executing = true;
  pending.before = now;
  SavePendingMig();  // before the driver call: a crash in it is found again
  const std::string profile = StringOr(cmd, "profile", "");
  auto device = driver_->CreateMigDevice(index, profile,
                                         PlacementOf(cmd, index, profile));
  pending.executing = false;
  if (device.ok()) {
    spdlog::info("MIG create {}: {} on GPU {} as {}", id, device->profile,
                 index, device->device_uuid);
    made_partitions_[slice_id] = MadePartition{index, device->device_uuid};
    pending.outcome =
        wire::ToJson(wire::MigResult{true, device->device_uuid, "", false});
  } else {
    spdlog::warn("MIG create {} on GPU {}: {}", id, index,
                 device.status().ToString());
    pending.outcome = wire::ToJson(
        wire::MigResult{false, "", device.status().ToString(), false});
  }
  SavePendingMig();
  return pending.outcome;
}

StatusOr<bool> Agent::HandleMigCommand(PendingMig& pending) {
  const json& cmd = pending.command;
  const std::int64_t id = IntOr(cmd, "id", 0);
  const std::string action = StringOr(cmd, "action", "");
  const int index = static_cast<int>(IntOr(cmd, "gpu_index", -1));
  const std::string want_uuid = StringOr(cmd, "gpu_uuid", "");
  const auto report = [&](const json& result) -> StatusOr<bool> {
    // Carried out: from now on only this result is reported.
    if (pending.outcome.is_null()) pending.outcome = result;
    auto r = server_->ReportSliceRequest(id, result);
    if (!r.ok()) {
      // The command is gone or not ours any more: nothing to report to.
      if (r.status().code() == StatusCode::kNotFound ||
          r.status().code() == StatusCode::kInvalidArgument) {
        spdlog::warn("MIG command {}: {}", id, r.status().ToString());
        return true;
      }
      return r.status();
    }
    return true;
  };
  const auto fail = [&](const std::string& error, bool orphaned = false) {
    spdlog::warn("MIG {} command {} on GPU {}: {}", action, id, index, error);
    // The first outcome is the one reported, however often the report has
    // to be sent again: a create refused now is never carried out later.
    pending.outcome = wire::ToJson(wire::MigResult{false, "", error, orphaned});
    SavePendingMig();
    return report(pending.outcome);
  };

  // Carried out already: only the report is left.
  if (!pending.outcome.is_null()) return report(pending.outcome);
  const std::int64_t slice_id = IntOr(cmd, "slice_id", 0);
  std::string device_uuid = StringOr(cmd, "device_id", "");
  auto made = made_partitions_.find(slice_id);
  if (action == "destroy" && device_uuid.empty()) {
    // A cleanup (the create's deadline passed): whatever we made for it.
    if (made == made_partitions_.end()) {
      return report(wire::ToJson(
          wire::MigResult{true, "", "", false}));  // nothing of that slice here
    }
    device_uuid = made->second.device_uuid;
  }

  // Guard against index/UUID drift before touching anything.
  const gpu::GpuInfo* g = GpuAt(index);
  if (g == nullptr || !g->healthy) {
    const std::string why = g == nullptr
                                ? "no GPU at index " + std::to_string(index)
                                : "GPU is lost: " + g->health_detail;
    // A partition on a card that cannot be reached is still there: the
    // destroy waits for the card (its slice stays charged meanwhile).
    if (action == "destroy") return false;
    return fail(why);
  }
  if (want_uuid.empty() && action == "create") {
    return fail("the command names no GPU UUID for GPU " +
                std::to_string(index) + ": refusing to act");
  }
  if (!want_uuid.empty() && g->uuid != want_uuid) {
    return fail("GPU " + std::to_string(index) + " is " + g->uuid + ", not " +
                    want_uuid + " (index/UUID drift): refusing to act",
                action == "destroy");
  }

  if (action == "create")
    return report(CreateMigOnce(pending, index, slice_id));
  if (action != "destroy") return fail("unknown action '" + action + "'");

  // Destroy only once the task's processes are gone.
  const std::int64_t task_id = IntOr(cmd, "task_id", 0);
  auto local = tasks_.find(task_id);
  if (task_id > 0 && local != tasks_.end() && !local->second.finished &&
      local->second.slice_id == slice_id) {
    auto polled = runtime_->Poll(task_id);
    if (polled.ok() && !polled->finished()) {
      // The server is done with the task: stop it first.
      local->second.cancel_requested = true;
      const Status killed = runtime_->Kill(task_id, options_.kill_grace);
      if (!killed.ok())
        spdlog::warn("stopping task {}: {}", task_id, killed.ToString());
    }
  }
  const auto forget = [&] {
    if (made != made_partitions_.end() &&
        made->second.device_uuid == device_uuid) {
      made_partitions_.erase(made);
      SavePendingMig();
    }
  };
  auto devices = driver_->ListMigDevices(index);
  if (!devices.ok()) return fail(devices.status().ToString(), true);
  auto found = std::find_if(
      devices->begin(), devices->end(),
      [&](const gpu::MigDevice& d) { return d.device_uuid == device_uuid; });
  if (found == devices->end()) {
    forget();
    return report(wire::ToJson(
        wire::MigResult{true, "", "", false}));  // already gone: idempotent
  }
  auto processes = driver_->ListProcesses(index);
  bool busy = false;
  if (processes.ok()) {
    for (const gpu::GpuProcess& p : *processes) {
      busy |= p.gpu_instance_id == found->gpu_instance_id;
    }
  }
  const bool waited_enough = clock_->NowMillis() - pending.first_seen_ms >=
                             options_.mig_destroy_wait.count();
  if (busy && !waited_enough) return false;  // try again next cycle
  const Status destroyed =
      driver_->DestroyMigDevice(index, found->gpu_instance_id);
  if (destroyed.ok() || destroyed.code() == StatusCode::kNotFound) {
    spdlog::info("MIG destroy {}: {} on GPU {}", id, device_uuid, index);
    forget();
    return report(wire::ToJson(wire::MigResult{true, "", "", false}));
  }
  if (destroyed.code() == StatusCode::kFailedPrecondition && !waited_enough) {
    return false;  // still in use: try again next cycle
  }
  return fail(destroyed.ToString(), /*orphaned=*/true);
}

// ---------------------------------------------------------------- tasks

Status Agent::ReportState(std::int64_t task_id, std::int64_t slice_id,
                          TaskState state, std::optional<int> exit_code,
                          const std::string& message) {
  wire::TaskStateReport entry;
  entry.task_id = task_id;
  entry.state = state;
  entry.exit_code = exit_code;
  entry.message = message;
  // Which binding this is about: a delayed report of an earlier one is
  // then ignored by the server.
  if (slice_id > 0) entry.slice_id = slice_id;
  auto reply = server_->ReportTaskStates(options_.node_id,
                                         json::array({wire::ToJson(entry)}));
  return reply.status();
}

Status Agent::GiveUp(std::int64_t task_id, std::int64_t slice_id,
                     const std::string& message) {
  gave_up_[task_id] = GaveUp{slice_id, message};
  SaveGaveUp();  // before the report: a restart must not start it either
  return ReportState(task_id, slice_id, TaskState::kFailed, {}, message);
}

void Agent::LoadGaveUp() {
  std::ifstream in(options_.state_dir / "gave-up.json");
  if (!in) return;
  const json saved = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!saved.is_object()) return;
  for (const auto& [key, entry] : saved.items()) {
    const auto id = ParseUnsigned(key);
    if (!id || *id == 0 || !entry.is_object()) continue;
    gave_up_[static_cast<std::int64_t>(*id)] =
        GaveUp{IntOr(entry, "slice_id", 0), StringOr(entry, "message", "")};
  }
}

void Agent::SaveGaveUp() {
  json out = json::object();
  for (const auto& [id, g] : gave_up_) {
    out[std::to_string(id)] = {{"slice_id", g.slice_id},
                               {"message", g.message}};
  }
  SaveStateFile("gave-up.json", out);
}

void Agent::SaveStateFile(const std::string& name, const json& content) {
  const Status s = runtime::task_files::WriteFileAtomic(
      options_.state_dir / name,
      content.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!s.ok()) spdlog::error("cannot write {}: {}", name, s.ToString());
}

Status Agent::HandleAssignments() {
  auto reply = server_->Assignments(options_.node_id);
  if (!reply.ok()) return reply.status();
  Status first = Status::Ok();
  // Stops first, starts after: a GPU the server has given to new work is
  // free of the old before the new begins.
  const json& cancel = (*reply)["cancel"];
  if (cancel.is_array()) {
    for (const json& v : cancel) {
      if (!v.is_number_integer()) continue;
      const std::int64_t id = v.get<std::int64_t>();
      auto local = tasks_.find(id);
      if (local == tasks_.end()) {
        // Never started here: nothing to stop.
        waiting_for_mps_.erase(id);
        std::int64_t slice = 0;
        if (reply->contains("slices") && (*reply)["slices"].is_object()) {
          slice = IntOr((*reply)["slices"], std::to_string(id).c_str(), 0);
        }
        const Status s = ReportState(id, slice, TaskState::kCancelled, {},
                                     "cancelled before it started");
        if (!s.ok() && first.ok()) first = s;
        continue;
      }
      if (local->second.finished) continue;  // reported by ReportFinished
      local->second.cancel_requested = true;
      const Status killed = runtime_->Kill(id, options_.kill_grace);
      if (!killed.ok() && killed.code() != StatusCode::kNotFound) {
        spdlog::warn("cancelling task {}: {}", id, killed.ToString());
      }
    }
  }
  Reconcile(*reply);
  const json& run = (*reply)["run"];
  if (run.is_array()) {
    for (const json& task : run) {
      const std::int64_t id = IntOr(task, "id", 0);
      if (id <= 0) continue;
      auto local = tasks_.find(id);
      if (local != tasks_.end()) {
        // Still "scheduled" at the server although it runs here (a restart
        // between start and report): say so now.
        if (!local->second.finished) {
          const Status s = ReportState(id, local->second.slice_id,
                                       TaskState::kRunning, {}, "");
          if (s.ok()) local->second.reported_running = true;
        }
        continue;
      }
      auto gave = gave_up_.find(id);
      if (gave != gave_up_.end() &&
          gave->second.slice_id == IntOr(task, "slice_id", 0)) {
        // Reported failed already, and that report may still be on its
        // way: starting it now would run it under a slice the server is
        // about to release. The report is sent again instead.
        const Status s =
            ReportState(id, gave->second.slice_id, TaskState::kFailed, {},
                        gave->second.message);
        if (!s.ok() && first.ok()) first = s;
        continue;
      }
      const Status s = StartTask(task);
      if (!s.ok() && first.ok()) first = s;
    }
  }
  return first;
}

void Agent::Reconcile(const json& reply) {
  // `bound` and `cancel` come from one snapshot of the server: together
  // they are every task this node may hold. (A server that does not send
  // `bound` leaves the node's tasks alone.)
  if (!reply.contains("bound") || !reply["bound"].is_array()) return;
  std::set<std::int64_t> named;
  for (const char* key : {"bound", "cancel"}) {
    if (!reply[key].is_array()) continue;
    for (const json& v : reply[key]) {
      if (v.is_number_integer()) named.insert(v.get<std::int64_t>());
    }
  }
  if (reply.contains("run") && reply["run"].is_array()) {
    for (const json& t : reply["run"]) named.insert(IntOr(t, "id", 0));
  }
  std::erase_if(waiting_for_mps_,
                [&](const auto& kv) { return !named.contains(kv.first); });
  if (std::erase_if(gave_up_, [&](const auto& kv) {
        return !named.contains(kv.first);
      }) > 0) {
    SaveGaveUp();
  }
  for (auto& [id, local] : tasks_) {
    if (local.finished || named.contains(id)) continue;
    // Terminal at the server, unknown to it, or bound to another node:
    // it must not hold this GPU any longer.
    spdlog::warn(
        "task {} runs here but the server does not assign it to node {}: "
        "stopping it",
        id, options_.node_id);
    local.cancel_requested = true;
    const Status killed = runtime_->Kill(id, options_.kill_grace);
    if (!killed.ok() && killed.code() != StatusCode::kNotFound) {
      spdlog::warn("stopping task {}: {}", id, killed.ToString());
    }
  }
}

Status Agent::StartTask(const json& task) {
  const std::int64_t id = IntOr(task, "id", 0);
  runtime::TaskSpec spec;
  spec.task_id = id;
  spec.tenant = StringOr(task, "tenant", "");
  spec.slice_id = IntOr(task, "slice_id", 0);
  spec.image = StringOr(task, "image", "");
  if (task.contains("command")) {
    const json& c = task["command"];
    if (c.is_string()) {
      spec.command = {"/bin/sh", "-c", c.get<std::string>()};
    } else if (c.is_array()) {
      for (const json& a : c) {
        if (a.is_string()) spec.command.push_back(a.get<std::string>());
      }
    }
  }
  if (task.contains("env") && task["env"].is_object()) {
    for (const auto& [k, v] : task["env"].items()) {
      if (v.is_string()) spec.env[k] = v.get<std::string>();
    }
  }
  runtime::StringMap labels;
  if (task.contains("labels") && task["labels"].is_object()) {
    for (const auto& [k, v] : task["labels"].items()) {
      if (v.is_string()) labels[k] = v.get<std::string>();
    }
  }
  // The GPUs it is pinned to: every one must be a GPU of this node. A task
  // is never started with GPUs it cannot be pinned to (with none named, a
  // process would see every GPU of the machine).
  std::vector<int> indices;
  bool indices_ok = task.contains("gpu_indices") &&
                    task["gpu_indices"].is_array() &&
                    !task["gpu_indices"].empty();
  if (indices_ok) {
    for (const json& i : task["gpu_indices"]) {
      if (!i.is_number_integer() || i.get<std::int64_t>() < 0 ||
          i.get<std::int64_t>() > std::numeric_limits<int>::max() ||
          GpuAt(static_cast<int>(i.get<std::int64_t>())) == nullptr) {
        indices_ok = false;
        break;
      }
      indices.push_back(static_cast<int>(i.get<std::int64_t>()));
    }
  }
  if (!indices_ok) {
    std::string named =
        task.contains("gpu_indices")
            ? task["gpu_indices"].dump(-1, ' ', false,
                                       json::error_handler_t::replace)
            : std::string("nothing");
    if (named.size() > 200) named = named.substr(0, 200) + "...";
    return GiveUp(id, spec.slice_id,
                  "the assignment's gpu_indices (" + named +
                      ") are not GPUs of node '" + options_.node_id +
                      "': never started without its GPUs pinned");
  }
  const std::string qos = spec.env.count("HETEROFLOW_SLICE_QOS") != 0
                              ? spec.env["HETEROFLOW_SLICE_QOS"]
                              : "";
  auto mig = labels.find(std::string(kMigDeviceLabel));
  if (mig != labels.end() && !mig->second.empty()) {
    spec.mig_device = mig->second;  // gold: the partition, not the card
  } else {
    spec.gpu_indices = indices;
    if (!options_.hook_library.empty() && spec.slice_id > 0) {
      spec.preload_library = options_.hook_library;
      spec.preload_route = options_.hook_preload;
      if (spec.preload_route != runtime::PreloadRoute::kEnv) {
        // One for the node, beside (not among) the slices' regions.
        spec.preload_file = WritePreloadFile(
            RegionPath(0).parent_path().parent_path(), spec.preload_library);
        if (spec.preload_file.empty()) {
          spec.preload_route = runtime::PreloadRoute::kEnv;
        }
      }
    }
  }
  if (qos == "silver") {
    // Never run a silver slice without its MPS limits.
    const mps::MpsDaemonState daemon{mps_alive_,
                                     mps_ ? mps_->PipeDirectory() : "",
                                     mps_ ? mps_->LogDirectory() : ""};
    const auto mps_env =
        mps::MpsClientEnv(daemon, mps::SliceLimitsFromEnv(spec.env));
    if (mps_env.empty()) {
      const std::int64_t now = clock_->NowMillis();
      const std::int64_t since =
          waiting_for_mps_.emplace(id, now).first->second;
      if (now - since < options_.mps_wait.count()) return Status::Ok();
      waiting_for_mps_.erase(id);
      return GiveUp(id, spec.slice_id,
                    "the MPS control daemon on node '" + options_.node_id +
                        "' is down: a silver slice is never run without "
                        "its MPS limits");
    }
    waiting_for_mps_.erase(id);
    for (const auto& [k, v] : mps_env) spec.env[k] = v;
    spec.mps_pipe_dir = mps_->PipeDirectory();
  }
  labels[std::string(kGpuIndicesLabel)] = JoinInts(indices);

  LocalTask local;
  local.gpu_indices = indices;
  local.slice_id = spec.slice_id;
  if (!spec.preload_library.empty()) {
    // The slice's hook region: the hook in the task and this agent share
    // the quota, the usage and the counters through it.
    const std::filesystem::path path = RegionPath(spec.slice_id);
    auto region = OpenRegionForStart(path, spec.env);
    if (region.ok()) {
      local.region = std::move(*region);
      local.region_path = path;
      spec.hook_region = path.string();
      labels[std::string(kHookRegionLabel)] = spec.hook_region;
      // The GPU's region: the slices on one GPU share its time through it.
      if (indices.size() == 1) {
        const std::filesystem::path gpu_path =
            path.parent_path() /
            ("gpu-" + std::to_string(indices[0]) + ".region");
        hook::GpuRegion gpu;
        const char* gpu_error = "";
        if (gpu.Open(gpu_path.c_str(), &gpu_error)) {
          if (::chmod(gpu_path.c_str(), 0666) != 0) {
            spdlog::warn("{}: chmod 0666: {}", gpu_path.string(),
                         std::strerror(errno));
          }
          spec.hook_gpu_region = gpu_path.string();
        } else {
          spdlog::warn(
              "task {}: no GPU region {} ({}); its compute share is kept "
              "against its own time only",
              id, gpu_path.string(), gpu_error);
        }
      }
    } else {
      // The hook still enforces the quota from the slice env in a region of
      // its own; only the agent's view (usage, live quota changes) is lost.
      spdlog::warn(
          "task {}: no hook region ({}); the hook keeps its own, and the "
          "slice's usage and quota changes are not seen by the agent",
          id, region.status().ToString());
    }
  }
  spec.labels = std::move(labels);

  const Status started = runtime_->Start(spec);
  if (!started.ok() && started.code() != StatusCode::kAlreadyExists) {
    spdlog::warn("task {} could not start: {}", id, started.ToString());
    RemoveRegion(local);
    // Not held by the runtime: report it failed.
    return GiveUp(id, spec.slice_id,
                  "the node could not start it: " + started.message());
  }
  spdlog::info("task {} started ({} runtime)", id, runtime_->Name());
  tasks_[id] = local;
  Status reported = ReportState(id, spec.slice_id, TaskState::kRunning, {}, "");
  if (reported.ok()) tasks_[id].reported_running = true;
  return reported;
}

Status Agent::ShipLogs(std::int64_t task_id, LocalTask& task, bool drain) {
  if (task.log_done) return Status::Ok();
  if (task.log_offset < 0) {
    auto size = server_->ShipLog(options_.node_id, task_id, 0, "");
    if (!size.ok()) return size.status();
    task.log_offset = *size;
  }
  for (int i = 0; drain || i < kMaxLogChunksPerCycle; ++i) {
    auto chunk =
        runtime_->ReadLog(task_id, task.log_offset, options_.log_chunk_bytes);
    if (!chunk.ok()) return chunk.status();
    if (chunk->data.empty()) return Status::Ok();
    auto size = server_->ShipLog(options_.node_id, task_id, task.log_offset,
                                 chunk->data);
    if (!size.ok()) {
      // The server holds less than we thought (e.g. restored from a
      // backup): ask it where to go on next time.
      if (size.status().code() == StatusCode::kInvalidArgument) {
        task.log_offset = -1;
      }
      return size.status();
    }
    const std::int64_t expected =
        task.log_offset + static_cast<std::int64_t>(chunk->data.size());
    if (*size < expected) {
      task.log_done = true;  // the server's cap: stop shipping
      return Status::Ok();
    }
    task.log_offset = *size;
  }
  return Status::Ok();
}

Status Agent::ReportFinished() {
  Status first = Status::Ok();
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    const std::int64_t id = it->first;
    LocalTask& t = it->second;
    if (!t.finished) {
      if (auto noted = NoteIfEnded(id, t); !noted.ok()) {
        if (first.ok()) first = noted.status();
        ++it;
        continue;
      }
    }
    Status shipped = ShipLogs(id, t, /*drain=*/t.finished.has_value());
    if (!shipped.ok() && shipped.code() != StatusCode::kNotFound) {
      if (first.ok()) first = shipped;
      if (t.finished) {
        ++it;
        continue;  // keep it until its output is with the server
      }
    }
    if (!t.finished) {
      ++it;
      continue;
    }
    Outcome o = OutcomeOf(*t.finished, t.cancel_requested);
    if (o.state == TaskState::kFailed) {
      // A library the task's userland cannot load (the hook in an image
      // with an older glibc) stops its programs before main: the reason
      // names what the loader said, not only the exit code.
      const std::string loader =
          runtime::LoaderErrorOfTask(*runtime_, id, t.log_offset);
      if (!loader.empty()) o.message += "; the dynamic loader: " + loader;
    }
    const Status reported =
        ReportState(id, t.slice_id, o.state, o.exit_code, o.message);
    if (!reported.ok() && reported.code() != StatusCode::kInvalidArgument) {
      if (first.ok()) first = reported;
      ++it;
      continue;
    }
    if (!reported.ok()) {
      spdlog::warn("task {}: the server refused its end ({}); forgetting it",
                   id, reported.ToString());
    }
    spdlog::info("task {} {}", id, o.message);
    const Status removed = runtime_->Remove(id);
    if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
      spdlog::warn("removing task {}: {}", id, removed.ToString());
    }
    RemoveRegion(t);
    it = tasks_.erase(it);
  }
  return first;
}

}  // namespace hf::agent
