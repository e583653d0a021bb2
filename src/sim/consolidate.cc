// The consolidating defragmenter of the time replay (replay.h): plans per
// waiting task and node, valued by the waiting GPU that starts per
// eviction, and applied only where every evicted task lands at once.
#include <algorithm>
#include <map>
#include <tuple>

#include "sim/node_room.h"
#include "sim/replay.h"

namespace hf::sim {
namespace {

using ledger::PlacementRequest;
using ledger::RequestKind;

// A task the planner may move now: preemptible and running, and not
// started at this instant (a task just placed, or just moved, stays).
bool Movable(const ReplayControl& c, std::size_t id) {
  const ReplayTask& t = c.task(id);
  return t.preemptible && t.slice.has_value() && t.started != c.now();
}

// One plan: evict `evict` from `node` and start `want` on `gpus` there.
struct Candidate {
  std::size_t want = 0;
  std::size_t position = 0;  // of `want` among the planned waiting tasks
  NodeId node;
  std::uint64_t rank = 0;
  std::vector<GpuId> gpus;
  std::vector<std::size_t> evict;
  std::int64_t evicted_milli = 0;
  // GPU of the waiting tasks (`want` and later ones) that fit on the node
  // once the evicted tasks are gone: what the plan is worth.
  std::int64_t started_milli = 0;

  // More waiting GPU started per eviction first (a plan that evicts
  // nothing before any), then the older waiting task, less GPU moved, the
  // node's rank.
  bool Better(const Candidate& o) const {
    if (evict.empty() != o.evict.empty()) return evict.empty();
    const auto mine =
        started_milli *
        static_cast<std::int64_t>(std::max<std::size_t>(1, o.evict.size()));
    const auto theirs =
        o.started_milli *
        static_cast<std::int64_t>(std::max<std::size_t>(1, evict.size()));
    if (mine != theirs) return mine > theirs;
    return std::tie(position, evicted_milli, rank) <
           std::tie(o.position, o.evicted_milli, o.rank);
  }
};

bool Contains(const std::vector<std::size_t>& ids, std::size_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// The fewest movable tasks on `node` whose departure lets `r` fit there:
// those on the GPUs it would take, then, where the node's CPU or host
// memory still lacks, other movable tasks of the node.
std::optional<std::vector<std::size_t>> EvictionsFor(
    const ReplayControl& c, const ledger::ClusterView& view,
    const ledger::NodeRecord& node, const NodeRoom& room,
    const PlacementRequest& r) {
  struct Option {
    GpuId gpu;
    std::vector<std::size_t> evict;
    std::int64_t milli = 0;
  };
  std::vector<Option> options;
  for (const NodeRoom::Gpu& g : room.gpus) {
    if (!g.usable || !view.ModelAllowed(r, view.gpu(g.id))) continue;
    Option o{g.id, {}, 0};
    const std::vector<std::size_t>& on = c.tasks_on_gpu(g.id);
    if (r.kind == RequestKind::kWholeGpus) {
      if (!std::all_of(on.begin(), on.end(),
                       [&](std::size_t id) { return Movable(c, id); })) {
        continue;
      }
      o.evict = on;
      for (const std::size_t id : on) o.milli += c.task(id).gpu_milli;
    } else {
      // Slices leave until memory and compute suffice: the smallest one
      // that is enough alone (a small slice lands again more easily than a
      // large one), else the largest first, so that few leave.
      std::vector<std::size_t> movable;
      for (const std::size_t id : on) {
        if (Movable(c, id) && c.task(id).request.kind == RequestKind::kSlice) {
          movable.push_back(id);
        }
      }
      const auto memory_of = [&](std::size_t id) {
        return c.task(id).request.memory_mib.value_or(0);
      };
      std::sort(movable.begin(), movable.end(),
                [&](std::size_t a, std::size_t b) {
                  return memory_of(a) < memory_of(b);
                });
      const MemoryMib want_memory = r.memory_mib.value_or(0);
      const ComputePercent want_compute = view.AccountedCompute(r);
      const auto enough = [&](MemoryMib memory, ComputePercent compute) {
        return memory >= want_memory && compute >= want_compute;
      };
      if (!enough(g.memory, g.compute)) {
        const auto alone =
            std::find_if(movable.begin(), movable.end(), [&](std::size_t id) {
              return enough(
                  g.memory + memory_of(id),
                  g.compute + view.AccountedCompute(c.task(id).request));
            });
        if (alone != movable.end()) {
          movable = {*alone};
        } else {
          std::reverse(movable.begin(), movable.end());
        }
      }
      MemoryMib memory = g.memory;
      ComputePercent compute = g.compute;
      for (const std::size_t id : movable) {
        if (enough(memory, compute)) break;
        o.evict.push_back(id);
        o.milli += c.task(id).gpu_milli;
        memory += memory_of(id);
        compute += view.AccountedCompute(c.task(id).request);
      }
      if (!enough(memory, compute)) continue;
    }
    options.push_back(std::move(o));
  }
  const std::size_t need =
      r.kind == RequestKind::kSlice ? 1 : static_cast<std::size_t>(r.gpu_count);
  if (r.kind != RequestKind::kNodeOnly && options.size() < need) {
    return std::nullopt;
  }
  std::sort(options.begin(), options.end(),
            [](const Option& a, const Option& b) {
              return std::make_tuple(a.evict.size(), a.milli, a.gpu.value()) <
                     std::make_tuple(b.evict.size(), b.milli, b.gpu.value());
            });
  std::vector<std::size_t> evict;
  for (std::size_t i = 0; i < need && i < options.size(); ++i) {
    for (const std::size_t id : options[i].evict) {
      if (!Contains(evict, id)) evict.push_back(id);
    }
  }
  CpuMilli cpu = room.cpu;
  MemoryMib host = room.host;
  for (const std::size_t id : evict) {
    cpu += c.task(id).request.cpu_milli;
    host += c.task(id).request.host_memory_mib;
  }
  if (cpu >= r.cpu_milli && host >= r.host_memory_mib) return evict;
  // CPU-only tasks first, then slices, smallest first (they land more
  // easily), then whole GPUs; each by CPU, most first, so that few leave.
  std::vector<std::size_t> others;
  for (const std::size_t id : c.tasks_on_node(node.id)) {
    if (Movable(c, id) && !Contains(evict, id)) others.push_back(id);
  }
  const auto order = [&](std::size_t id) {
    const ReplayTask& t = c.task(id);
    return std::make_tuple(t.request.kind == RequestKind::kWholeGpus,
                           t.gpu_milli, -t.request.cpu_milli,
                           -t.request.host_memory_mib, id);
  };
  std::sort(others.begin(), others.end(),
            [&](std::size_t a, std::size_t b) { return order(a) < order(b); });
  for (const std::size_t id : others) {
    if (cpu >= r.cpu_milli && host >= r.host_memory_mib) break;
    evict.push_back(id);
    cpu += c.task(id).request.cpu_milli;
    host += c.task(id).request.host_memory_mib;
  }
  if (cpu < r.cpu_milli || host < r.host_memory_mib) return std::nullopt;
  return evict;
}

// Waiting GPU tasks that plan (the first `tasks` distinct requests) and
// those a plan is valued by (the first 4 x `tasks`), in queue order.
struct Queue {
  std::vector<std::size_t> planned;
  std::vector<std::size_t> valued;
};

Queue QueueOf(const ReplayControl& c, int tasks) {
  using Key = std::tuple<int, int, MemoryMib, ComputePercent,
                         std::vector<std::string>, CpuMilli, MemoryMib>;
  Queue q;
  std::map<Key, bool> seen;
  const auto most = static_cast<std::size_t>(std::max(0, tasks));
  for (const std::size_t id : c.waiting()) {
    const PlacementRequest& r = c.task(id).request;
    if (r.kind == RequestKind::kNodeOnly) continue;
    if (q.valued.size() >= 4 * most) break;
    q.valued.push_back(id);
    if (q.planned.size() >= most) continue;
    const Key key{static_cast<int>(r.kind),  r.gpu_count,
                  r.memory_mib.value_or(-1), r.compute_percent.value_or(-1),
                  r.allowed_models,          r.cpu_milli,
                  r.host_memory_mib};
    if (seen.emplace(key, true).second) q.planned.push_back(id);
  }
  return q;
}

// Every node's plan for every planned task within `budget` evictions.
std::vector<Candidate> Candidates(const ReplayControl& c, const Queue& q,
                                  std::int64_t budget) {
  std::vector<Candidate> out;
  c.ledger().Read([&](const ledger::ClusterView& view) {
    for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
      const ledger::NodeRecord& node = view.node(NodeId(n));
      if (!node.live) continue;
      std::optional<NodeRoom> now;
      for (std::size_t p = 0; p < q.planned.size(); ++p) {
        const ReplayTask& want = c.task(q.planned[p]);
        const PlacementRequest& r = want.request;
        if (node.spec.cpu_milli < r.cpu_milli ||
            node.gpus.size() < static_cast<std::size_t>(r.gpu_count)) {
          continue;
        }
        if (!now.has_value()) now = NodeRoom::After(c, view, node, {});
        std::optional<std::vector<std::size_t>> evict =
            EvictionsFor(c, view, node, *now, r);
        if (!evict.has_value() ||
            static_cast<std::int64_t>(evict->size()) > budget) {
          continue;
        }
        NodeRoom room = NodeRoom::After(c, view, node, *evict);
        std::optional<std::vector<GpuId>> gpus = room.Take(view, r);
        if (!gpus.has_value()) continue;
        Candidate cand;
        cand.want = q.planned[p];
        cand.position = p;
        cand.node = node.id;
        cand.rank = node.tie_rank;
        cand.gpus = std::move(*gpus);
        cand.evict = std::move(*evict);
        for (const std::size_t id : cand.evict) {
          cand.evicted_milli += c.task(id).gpu_milli;
        }
        cand.started_milli = want.gpu_milli;
        for (const std::size_t other : q.valued) {
          if (other == cand.want) continue;
          if (room.Take(view, c.task(other).request).has_value()) {
            cand.started_milli += c.task(other).gpu_milli;
          }
        }
        out.push_back(std::move(cand));
      }
    }
  });
  return out;
}

// Tries `cand` on a snapshot and, if the waiting task starts and every
// evicted task lands again, applies it.
bool Apply(ReplayControl& c, const Candidate& cand) {
  const ReplayTask& want = c.task(cand.want);
  if (cand.evict.empty()) return c.Start(cand.want, PinnedPolicy(cand.gpus));
  std::unique_ptr<ledger::Ledger> trial = c.ledger().Snapshot();
  for (const std::size_t id : cand.evict) {
    (void)trial->Release(*c.task(id).slice);
  }
  if (!trial->Place(want.request, PinnedPolicy(cand.gpus)).placed()) {
    return false;
  }
  // The hardest to place first, while the most room is left.
  std::vector<std::size_t> order = cand.evict;
  const auto size = [&](std::size_t id) {
    const ReplayTask& t = c.task(id);
    return std::make_tuple(t.gpu_milli, t.request.cpu_milli, id);
  };
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return size(a) > size(b); });
  std::vector<PinnedPolicy> targets;
  for (const std::size_t id : order) {
    const ledger::PlacementResult r =
        trial->Place(c.task(id).request, c.policy());
    if (!r.placed()) return false;
    targets.emplace_back(r.allocation.gpus, r.allocation.node);
  }
  // The real ledger holds the state the snapshot started from, so the same
  // steps land the same way.
  for (const std::size_t id : order) (void)c.Evict(id);
  (void)c.Start(cand.want, PinnedPolicy(cand.gpus));
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (!c.Start(order[i], targets[i])) (void)c.Start(order[i], c.policy());
  }
  return true;
}

}  // namespace

void ConsolidatingDefragmenter::OnWaiting(ReplayControl& c) {
  for (int round = 0; round < rounds_; ++round) {
    const std::int64_t budget = EvictionBudget(c, evictions_per_100_);
    std::vector<Candidate> candidates =
        Candidates(c, QueueOf(c, tasks_), std::max<std::int64_t>(0, budget));
    std::sort(
        candidates.begin(), candidates.end(),
        [](const Candidate& a, const Candidate& b) { return a.Better(b); });
    bool applied = false;
    int trials = 0;
    for (const Candidate& cand : candidates) {
      if (trials >= trials_) break;
      // A plan that failed on a node that has not changed since fails
      // again (where its evictees could go may have, but rarely does).
      std::uint64_t generation = 0;
      c.ledger().Read([&](const ledger::ClusterView& view) {
        generation = view.node(cand.node).generation;
      });
      const auto key =
          std::make_tuple(cand.want, cand.node.value(), generation);
      if (failed_.count(key) != 0) continue;
      ++trials;
      if (Apply(c, cand)) {
        applied = true;
        break;
      }
      failed_.insert(key);
    }
    if (!applied) return;
  }
}

}  // namespace hf::sim
