#include "sim/trace_variant.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <tuple>

namespace hf::sim {
namespace {

// A draw in [0, n) from the raw generator output (portable; the modulo bias
// is below 2^-40 for any trace size).
std::uint64_t Below(std::mt19937_64& rng, std::uint64_t n) {
  return n == 0 ? 0 : rng() % n;
}

// Fisher-Yates with Below, so the order is the same on every library.
template <typename T>
void Shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (std::size_t i = v.size(); i > 1; --i) {
    std::swap(v[i - 1], v[Below(rng, i)]);
  }
}

std::vector<std::size_t> ByName(const std::vector<TracePod>& pods) {
  std::vector<std::size_t> order(pods.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return pods[a].name < pods[b].name;
  });
  return order;
}

// One model drawn in proportion to `weights` (GPU counts), skipping `not`.
std::string DrawModel(const std::map<std::string, std::int64_t>& weights,
                      const std::string& skip, std::mt19937_64& rng) {
  std::int64_t total = 0;
  for (const auto& [model, w] : weights) {
    if (model != skip) total += w;
  }
  if (total <= 0) return "";
  auto at =
      static_cast<std::int64_t>(Below(rng, static_cast<std::uint64_t>(total)));
  for (const auto& [model, w] : weights) {
    if (model == skip) continue;
    if (at < w) return model;
    at -= w;
  }
  return "";
}

void ConstrainModels(const std::vector<TraceNode>& nodes,
                     std::vector<TracePod>& pods, double share,
                     std::mt19937_64& rng) {
  std::size_t gpu_tasks = 0, constrained = 0;
  std::vector<std::size_t> free;  // GPU tasks without a constraint, by name
  for (std::size_t i : ByName(pods)) {
    if (pods[i].num_gpu == 0) continue;
    ++gpu_tasks;
    if (pods[i].gpu_spec.empty()) {
      free.push_back(i);
    } else {
      ++constrained;
    }
  }
  const auto want = static_cast<std::size_t>(
      std::llround(share * static_cast<double>(gpu_tasks)));
  if (want <= constrained) return;
  // The spec sets of the tasks constrained already, by name: the empirical
  // distribution to draw from.
  std::vector<std::vector<std::string>> specs;
  for (std::size_t i : ByName(pods)) {
    if (pods[i].num_gpu > 0 && !pods[i].gpu_spec.empty()) {
      specs.push_back(pods[i].gpu_spec);
    }
  }
  Shuffle(free, rng);
  std::size_t added = 0;
  for (std::size_t i : free) {
    if (constrained + added >= want) break;
    TracePod& pod = pods[i];
    std::map<std::string, std::int64_t> weights;  // models that can hold it
    for (const TraceNode& n : nodes) {
      if (n.gpu_count > 0 && n.gpu_count >= pod.num_gpu &&
          n.cpu_milli >= pod.cpu_milli && n.memory_mib >= pod.memory_mib) {
        weights[n.model] = 0;
      }
    }
    if (weights.empty()) continue;
    const auto holds = [&](const std::vector<std::string>& spec) {
      for (const std::string& m : spec) {
        if (weights.count(m) > 0) return true;
      }
      return false;
    };
    if (!specs.empty()) {
      // Draw a set from the trace's own constrained tasks; a few tries for
      // one that can hold this task, else fall through to the capacity draw.
      bool done = false;
      for (int tries = 0; tries < 32 && !done; ++tries) {
        const std::vector<std::string>& spec = specs[Below(rng, specs.size())];
        if (holds(spec)) {
          pod.gpu_spec = spec;
          done = true;
        }
      }
      if (done) {
        ++added;
        continue;
      }
    }
    // Weigh each model that can hold the task by all its GPUs.
    for (auto& [model, w] : weights) {
      for (const TraceNode& n : nodes) {
        if (n.model == model) w += n.gpu_count;
      }
    }
    const bool two = Below(rng, 10) < 3 && weights.size() > 1;
    const std::string first = DrawModel(weights, "", rng);
    pod.gpu_spec = {first};
    if (two) pod.gpu_spec.push_back(DrawModel(weights, first, rng));
    std::sort(pod.gpu_spec.begin(), pod.gpu_spec.end());
    ++added;
  }
}

void ScaleCpuOnly(std::vector<TracePod>& pods, double scale,
                  std::mt19937_64& rng) {
  std::vector<std::size_t> cpu_only;
  std::int64_t total = 0;
  for (std::size_t i : ByName(pods)) {
    if (pods[i].num_gpu != 0) continue;
    cpu_only.push_back(i);
    total += pods[i].cpu_milli;
  }
  if (cpu_only.empty() || scale == 1) return;
  const auto target =
      static_cast<std::int64_t>(scale * static_cast<double>(total));
  if (scale < 1) {
    std::vector<std::size_t> order = cpu_only;
    Shuffle(order, rng);
    std::vector<bool> drop(pods.size(), false);
    std::int64_t kept = 0;
    for (std::size_t i : order) {
      if (kept + pods[i].cpu_milli <= target) {
        kept += pods[i].cpu_milli;
      } else {
        drop[i] = true;
      }
    }
    std::vector<TracePod> out;
    out.reserve(pods.size());
    for (std::size_t i = 0; i < pods.size(); ++i) {
      if (!drop[i]) out.push_back(std::move(pods[i]));
    }
    pods = std::move(out);
    return;
  }
  std::map<std::string, int> clones;
  std::int64_t sum = total;
  // Bounded: a trace whose CPU-only tasks ask for no CPU would never reach
  // the target.
  for (std::size_t draws = 0; draws < 100 * cpu_only.size() + 1000000;
       ++draws) {
    const TracePod& original = pods[cpu_only[Below(rng, cpu_only.size())]];
    if (sum + original.cpu_milli > target) break;
    sum += original.cpu_milli;
    TracePod clone = original;
    clone.name = original.name + "-c" + std::to_string(++clones[original.name]);
    pods.push_back(std::move(clone));
  }
}

}  // namespace

StatusOr<std::vector<TracePod>> MakeVariant(const std::vector<TraceNode>& nodes,
                                            const std::vector<TracePod>& pods,
                                            const VariantOptions& options) {
  if (!(options.gpuspec_share >= 0 && options.gpuspec_share <= 1)) {
    return Status::InvalidArgument("must be within 0..1", "gpuspec_share");
  }
  if (!(options.cpu_only_scale >= 0 && options.cpu_only_scale <= 100)) {
    return Status::InvalidArgument("must be within 0..100", "cpu_only_scale");
  }
  std::vector<TracePod> out = pods;
  std::mt19937_64 rng(options.seed);
  if (options.gpuspec_share > 0) {
    ConstrainModels(nodes, out, options.gpuspec_share, rng);
  }
  ScaleCpuOnly(out, options.cpu_only_scale, rng);
  return out;
}

std::vector<TraceNode> SubsetNodes(const std::vector<TraceNode>& nodes,
                                   double share, std::uint64_t seed) {
  using Type = std::tuple<std::string, int, CpuMilli, MemoryMib>;
  std::map<Type, std::vector<std::size_t>> by_type;  // name order inside
  std::vector<std::size_t> order(nodes.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return nodes[a].name < nodes[b].name;
  });
  for (std::size_t i : order) {
    const TraceNode& n = nodes[i];
    by_type[{n.model, n.gpu_count, n.cpu_milli, n.memory_mib}].push_back(i);
  }
  std::mt19937_64 rng(seed);
  std::vector<bool> keep(nodes.size(), false);
  for (auto& [type, members] : by_type) {
    Shuffle(members, rng);
    auto count = static_cast<std::size_t>(
        std::llround(share * static_cast<double>(members.size())));
    if (share > 0 && count == 0) count = 1;
    for (std::size_t k = 0; k < std::min(count, members.size()); ++k) {
      keep[members[k]] = true;
    }
  }
  std::vector<TraceNode> out;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (keep[i]) out.push_back(nodes[i]);
  }
  return out;
}

std::string PodCsv(const std::vector<TracePod>& pods) {
  std::ostringstream out;
  out << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,"
         "creation_time,deletion_time\n";
  for (const TracePod& p : pods) {
    std::string spec;
    for (const std::string& m : p.gpu_spec) {
      spec += (spec.empty() ? "" : "|") + m;
    }
    out << p.name << ',' << p.cpu_milli << ',' << p.memory_mib << ','
        << p.num_gpu << ',' << p.gpu_milli << ',' << spec << ',' << p.qos << ','
        << p.creation_time << ',';
    if (p.deletion_time >= 0) out << p.deletion_time;
    out << '\n';
  }
  return out.str();
}

}  // namespace hf::sim
