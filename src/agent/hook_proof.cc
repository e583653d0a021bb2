#include "agent/hook_proof.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

namespace hf::agent {

namespace {

constexpr std::uint64_t kMib = std::uint64_t{1} << 20;
constexpr std::string_view kRegionVariable = "HETEROFLOW_HOOK_REGION=";
// How far up the process tree a process's slice is looked for.
constexpr int kMaxAncestors = 32;
// Pids named in one reason.
constexpr std::size_t kPidsNamed = 8;

// The whole of a /proc file (they report a size of 0), or nullopt.
std::optional<std::string> ReadProcFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return text;
}

struct StatFields {
  std::int64_t ppid = 0;
  std::uint64_t start_ticks = 0;
};

// Fields 4 (ppid) and 22 (start time) of /proc/PID/stat. The command name
// (field 2) may hold spaces and parentheses: fields are counted from the
// last ')'.
std::optional<StatFields> ReadStat(const std::filesystem::path& dir) {
  const auto text = ReadProcFile(dir / "stat");
  if (!text) return std::nullopt;
  const auto close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(text->substr(close + 1));
  StatFields f;
  std::string field;
  for (int n = 3; n <= 22 && in >> field; ++n) {
    try {
      if (n == 4) f.ppid = std::stoll(field);
      if (n == 22) f.start_ticks = std::stoull(field);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return f;
}

// The pid in the innermost pid namespace (the last NSpid entry); the
// agent's pid when the kernel shows no NSpid.
std::uint32_t ReadNamespacePid(const std::filesystem::path& dir,
                               std::int64_t pid) {
  const auto text = ReadProcFile(dir / "status");
  if (text) {
    std::istringstream in(*text);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.starts_with("NSpid:")) continue;
      std::istringstream fields(line.substr(6));
      std::string last;
      for (std::string f; fields >> f;) last = f;
      try {
        return static_cast<std::uint32_t>(std::stoul(last));
      } catch (const std::exception&) {
        break;
      }
    }
  }
  return static_cast<std::uint32_t>(pid);
}

// HETEROFLOW_HOOK_REGION from /proc/PID/environ; nullopt when the process
// has none (or its environment cannot be read).
std::optional<std::string> ReadRegionVariable(
    const std::filesystem::path& dir) {
  const auto text = ReadProcFile(dir / "environ");
  if (!text) return std::nullopt;
  std::size_t at = 0;
  while (at < text->size()) {
    std::size_t end = text->find('\0', at);
    if (end == std::string::npos) end = text->size();
    const std::string_view entry(text->data() + at, end - at);
    if (entry.starts_with(kRegionVariable)) {
      return std::string(entry.substr(kRegionVariable.size()));
    }
    at = end + 1;
  }
  return std::nullopt;
}

// Whether a file named `name` is mapped in the process.
bool MapsLibrary(const std::filesystem::path& dir, const std::string& name) {
  std::ifstream in(dir / "maps");
  std::string line;
  while (std::getline(in, line)) {
    const auto slash = line.rfind('/');
    if (slash == std::string::npos) continue;
    std::string_view file(line.data() + slash + 1, line.size() - slash - 1);
    constexpr std::string_view kDeleted = " (deleted)";
    if (file.ends_with(kDeleted)) file.remove_suffix(kDeleted.size());
    if (file == name) return true;
  }
  return false;
}

std::string JoinPids(const std::vector<std::int64_t>& pids, std::size_t from) {
  std::string out;
  for (std::size_t i = from; i < pids.size() && i < from + kPidsNamed; ++i) {
    out += (out.empty() ? "" : ", ") + std::to_string(pids[i]);
  }
  if (pids.size() > from + kPidsNamed) out += ", ...";
  return out;
}

}  // namespace

std::optional<ProcessFacts> ReadProcessFacts(
    const std::filesystem::path& proc_root, std::int64_t pid,
    const std::string& hook_file_name) {
  if (pid <= 0) return std::nullopt;
  const std::filesystem::path dir = proc_root / std::to_string(pid);
  const auto stat = ReadStat(dir);
  if (!stat) return std::nullopt;
  ProcessFacts f;
  f.pid = pid;
  f.start_ticks = stat->start_ticks;
  f.ns_pid = ReadNamespacePid(dir, pid);
  if (auto region = ReadRegionVariable(dir)) {
    f.hook_region = std::move(*region);
  } else {
    // A launcher may have cleared the environment: the nearest ancestor
    // that names a region is the one the process belongs to.
    std::int64_t parent = stat->ppid;
    for (int depth = 0; depth < kMaxAncestors && parent > 1; ++depth) {
      const std::filesystem::path up = proc_root / std::to_string(parent);
      if (auto region = ReadRegionVariable(up)) {
        f.hook_region = std::move(*region);
        break;
      }
      const auto up_stat = ReadStat(up);
      if (!up_stat) break;
      parent = up_stat->ppid;
    }
  }
  if (!hook_file_name.empty()) f.hook_loaded = MapsLibrary(dir, hook_file_name);
  return f;
}

HookProof::HookProof(Options options)
    : options_(std::move(options)),
      hook_file_name_(
          std::filesystem::path(options_.hook_library).filename().string()) {}

void HookProof::Check(const std::vector<Slice>& slices, gpu::GpuDriver& driver,
                      std::int64_t now_ms) {
  std::set<std::int64_t> listed;
  for (const Slice& s : slices) listed.insert(s.task_id);
  std::erase_if(tasks_,
                [&](const auto& t) { return !listed.contains(t.first); });

  // What each slot held before NVML is asked: a process that frees memory
  // between the two readings must not have the freed bytes taken for the
  // driver's (the larger of the two counts is used; either error is on the
  // side of charging less).
  std::vector<std::map<std::uint64_t, std::uint64_t>> before(slices.size());
  for (std::size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].region == nullptr) continue;
    for (int slot = 1; slot < hook::kRegionSlots; ++slot) {
      hook::Region::SlotView v;
      if (slices[i].region->ReadSlot(slot, &v)) before[i][v.owner] = v.used;
    }
  }
  std::map<int, std::optional<std::vector<gpu::GpuProcess>>> by_gpu;
  std::map<std::int64_t, std::optional<ProcessFacts>> facts;
  for (const Slice& s : slices) {
    for (int g : s.gpu_indices) {
      if (by_gpu.contains(g)) continue;
      auto listed_here = driver.ListProcesses(g);
      if (listed_here.ok()) {
        by_gpu[g] = std::move(*listed_here);
      } else {
        by_gpu[g] = std::nullopt;
      }
    }
  }

  attributed_.clear();
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    if (s.region == nullptr) continue;
    // The slice's processes: device memory summed over its GPUs (the hook
    // counts every device of a process in its one slot), unknown when NVML
    // does not say on one of them.
    struct Usage {
      std::uint64_t bytes = 0;
      bool known = true;
    };
    std::map<std::int64_t, Usage> usage;
    bool complete = true;
    for (int g : s.gpu_indices) {
      const auto& processes = by_gpu[g];
      if (!processes) {
        complete = false;
        break;
      }
      for (const gpu::GpuProcess& p : *processes) {
        auto [it, fresh] = facts.try_emplace(p.pid);
        if (fresh) {
          it->second =
              ReadProcessFacts(options_.proc_root, p.pid, hook_file_name_);
        }
        if (!it->second || it->second->hook_region != s.region_path.string()) {
          continue;  // gone, unreadable, or not this slice's
        }
        attributed_[g][p.pid] = s.task_id;
        Usage& u = usage[p.pid];
        if (!p.used_memory_mib || *p.used_memory_mib < 0) {
          u.known = false;
        } else {
          u.bytes += static_cast<std::uint64_t>(*p.used_memory_mib) * kMib;
        }
      }
    }
    if (!complete) continue;  // neither proven nor disproven

    TaskState& state = tasks_[s.task_id];
    std::vector<hook::Region::DriverBytes> measured;
    std::uint64_t unattached_bytes = 0;
    std::set<std::pair<std::int64_t, std::uint64_t>> still_unattached;
    for (const auto& [pid, u] : usage) {
      const ProcessFacts& f = *facts[pid];
      hook::Region::SlotView v;
      const int slot = s.region->FindSlot(f.ns_pid, f.start_ticks, &v);
      if (slot > 0) {
        auto was = before[i].find(v.owner);
        const std::uint64_t counted =
            std::max(v.used, was == before[i].end() ? 0 : was->second);
        if (u.known && u.bytes > counted) {
          measured.push_back({slot, v.owner, u.bytes - counted});
        }
        continue;
      }
      if (u.known) unattached_bytes += u.bytes;
      const std::pair key{pid, f.start_ticks};
      still_unattached.insert(key);
      auto [it, fresh] = state.unattached.try_emplace(key);
      if (fresh) it->second.first_seen_ms = now_ms;
      it->second.hook_loaded = f.hook_loaded;
    }
    // Attached since, or gone: proven (or nothing left to prove).
    std::erase_if(state.unattached, [&](const auto& u) {
      return !still_unattached.contains(u.first);
    });
    s.region->SetDriverBytes(measured.data(), static_cast<int>(measured.size()),
                             unattached_bytes);

    Verdict verdict;
    bool first_loaded = false;
    for (const auto& [key, u] : state.unattached) {
      if (now_ms - u.first_seen_ms < options_.grace.count()) continue;
      if (verdict.unhooked_pids.empty()) first_loaded = u.hook_loaded;
      verdict.unhooked_pids.push_back(key.first);
    }
    if (!verdict.unhooked_pids.empty()) {
      const std::string pid = std::to_string(verdict.unhooked_pids.front());
      const std::string name =
          hook_file_name_.empty() ? std::string("the hook") : hook_file_name_;
      std::string& r = verdict.reason;
      r = "process ";
      r += pid;
      if (!first_loaded) {
        r += " runs without the hook: ";
        r += name;
        r += " is not loaded in it (glibc too old, a static binary, or "
             "LD_PRELOAD cleared?)";
      } else {
        r += " loaded ";
        r += name;
        r += " but has not attached to the slice's region "
             "(HETEROFLOW_HOOK_DISABLE set, or the region could not be "
             "opened?)";
      }
      if (verdict.unhooked_pids.size() > 1) {
        r += "; ";
        r += std::to_string(verdict.unhooked_pids.size() - 1);
        r += " more process(es) without the hook: ";
        r += JoinPids(verdict.unhooked_pids, 1);
      }
    }
    state.verdict = std::move(verdict);
  }
}

std::map<std::int64_t, std::int64_t> HookProof::TasksOfProcesses(
    int gpu_index) const {
  auto it = attributed_.find(gpu_index);
  return it == attributed_.end() ? std::map<std::int64_t, std::int64_t>{}
                                 : it->second;
}

HookProof::Verdict HookProof::VerdictOf(std::int64_t task_id) const {
  auto it = tasks_.find(task_id);
  return it == tasks_.end() ? Verdict{} : it->second.verdict;
}

}  // namespace hf::agent
