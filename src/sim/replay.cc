#include "sim/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <tuple>

#include "scheduler/policy/artifact.h"
#include "scheduler/policy/registry.h"
#include "sim/node_room.h"
#include "sim/sim_cluster.h"

namespace hf::sim {
namespace {

using ledger::PlacementRequest;
using ledger::RequestKind;

struct Event {
  std::int64_t time = 0;
  int kind = 0;  // 0: departure (first at one time), 1: arrival
  std::uint64_t seq = 0;
  std::size_t task = 0;
  std::int64_t stamp = 0;  // departure: the start it ends

  bool operator>(const Event& o) const {
    return std::tie(time, kind, seq) > std::tie(o.time, o.kind, o.seq);
  }
};

// The GPU side of a request: requests with the same key that failed in a
// pass fail again if they ask at least as much CPU and host memory (the
// cluster only fills up within a pass).
using GpuKey =
    std::tuple<int, int, MemoryMib, ComputePercent, std::vector<std::string>>;

GpuKey GpuKeyOf(const PlacementRequest& r) {
  return GpuKey{static_cast<int>(r.kind), r.gpu_count,
                r.memory_mib.value_or(-1), r.compute_percent.value_or(-1),
                r.allowed_models};
}

// Upper bounds, per GPU model, of what one GPU or node offers at the start
// of a pass: a request above them cannot fit anywhere during the pass, so
// it is skipped without asking the policy (whose answer would be the same).
class Bounds {
 public:
  explicit Bounds(const ledger::ClusterView& view) {
    for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
      const ledger::NodeRecord& node = view.node(NodeId(n));
      if (!node.live) continue;
      max_cpu_ = std::max(max_cpu_, node.free_cpu_milli());
      std::map<std::string, int> whole;
      for (const GpuId g : node.gpus) {
        const ledger::GpuRecord& gpu = view.gpu(g);
        if (!gpu.live || !gpu.healthy()) continue;
        Model& m = models_[gpu.spec.model];
        m.cpu = std::max(m.cpu, node.free_cpu_milli());
        m.free_milli = std::max(m.free_milli, scheduler::GpuFreeMilli(gpu));
        if (gpu.empty()) ++whole[gpu.spec.model];
      }
      for (const auto& [model, count] : whole) {
        Model& m = models_[model];
        m.whole = std::max(m.whole, count);
      }
    }
  }
  bool MayFit(const PlacementRequest& r) const {
    if (r.kind == RequestKind::kNodeOnly) return r.cpu_milli <= max_cpu_;
    const auto fits = [&](const Model& m) {
      if (r.cpu_milli > m.cpu) return false;
      if (r.kind == RequestKind::kWholeGpus) return m.whole >= r.gpu_count;
      return m.free_milli * kSimMibPerMilli >= r.memory_mib.value_or(0);
    };
    if (r.allowed_models.empty()) {
      for (const auto& [name, m] : models_) {
        if (fits(m)) return true;
      }
      return false;
    }
    for (const std::string& name : r.allowed_models) {
      const auto it = models_.find(name);
      if (it != models_.end() && fits(it->second)) return true;
    }
    return false;
  }

 private:
  struct Model {
    CpuMilli cpu = 0;
    int free_milli = 0;
    int whole = 0;
  };
  std::map<std::string, Model> models_;
  CpuMilli max_cpu_ = 0;
};

// The failures of one pass.
class Failures {
 public:
  bool Dominated(const PlacementRequest& r) const {
    const auto it = failed_.find(GpuKeyOf(r));
    if (it == failed_.end()) return false;
    for (const auto& [cpu, host] : it->second) {
      if (r.cpu_milli >= cpu && r.host_memory_mib >= host) return true;
    }
    return false;
  }
  void Add(const PlacementRequest& r) {
    failed_[GpuKeyOf(r)].push_back({r.cpu_milli, r.host_memory_mib});
  }

 private:
  std::map<GpuKey, std::vector<std::pair<CpuMilli, MemoryMib>>> failed_;
};

class Replayer final : public ReplayControl {
 public:
  Replayer(std::unique_ptr<ledger::Ledger> ledger,
           std::unique_ptr<ledger::PlacementPolicy> policy,
           std::vector<ReplayTask> tasks, DefragHook* hook,
           scheduler::HoldRules hold_rules)
      : ledger_(std::move(ledger)),
        policy_(std::move(policy)),
        tasks_(std::move(tasks)),
        hook_(hook),
        hold_rules_(hold_rules) {
    ledger_->Read([&](const ledger::ClusterView& view) {
      on_gpu_.resize(view.gpu_slot_count());
      on_node_.resize(view.node_slot_count());
    });
  }

  // --- ReplayControl ---
  std::int64_t now() const override { return now_; }
  const ledger::Ledger& ledger() const override { return *ledger_; }
  std::vector<std::size_t> waiting() const override {
    std::vector<std::size_t> ids;
    ids.reserve(queue_.size());
    for (const auto& [arrival, id] : queue_) ids.push_back(id);
    return ids;
  }
  const ReplayTask& task(std::size_t id) const override { return tasks_[id]; }
  const std::vector<std::size_t>& tasks_on_gpu(GpuId gpu) const override {
    return on_gpu_[gpu.value()];
  }
  const std::vector<std::size_t>& tasks_on_node(NodeId node) const override {
    return on_node_[node.value()];
  }
  std::int64_t arrived() const override { return arrived_; }
  std::int64_t evictions() const override { return evictions_; }
  bool Evict(std::size_t id) override {
    ReplayTask& t = tasks_[id];
    if (!t.slice.has_value() || !t.preemptible) return false;
    Stop(t, id);
    if (t.remaining >= 0)
      t.remaining = std::max<std::int64_t>(0, t.remaining - (now_ - t.started));
    ++t.evictions;
    ++evictions_;
    evicted_now_.push_back(id);
    Enqueue(id);
    freed_ = true;
    return true;
  }
  bool Start(std::size_t id, const ledger::PlacementPolicy& policy) override {
    ReplayTask& t = tasks_[id];
    if (t.slice.has_value() || t.done || t.queued_since < 0) return false;
    // Every path leaves the GPUs held for other tasks alone.
    PlacementRequest asked = t.request;
    holds_.ExcludeOthers(static_cast<std::int64_t>(id), asked);
    const auto begin = std::chrono::steady_clock::now();
    const ledger::PlacementResult r = ledger_->Place(asked, policy);
    placing_ += std::chrono::steady_clock::now() - begin;
    ++decisions_;
    if (!r.placed()) return false;
    if (holds_.End(static_cast<std::int64_t>(id))) ++holds_started_;
    queue_.erase({t.arrival, id});
    t.waited += now_ - t.queued_since;
    t.queued_since = -1;
    t.slice = r.allocation.id;
    t.started = now_;
    waiting_milli_ -= t.gpu_milli;
    waiting_by_[ShapeOf(t)] -= t.gpu_milli;
    running_milli_ += t.gpu_milli;
    for (const GpuId g : r.allocation.gpus) on_gpu_[g.value()].push_back(id);
    on_node_[r.allocation.node.value()].push_back(id);
    gpus_of_[id] = r.allocation.gpus;
    node_of_[id] = r.allocation.node;
    if (t.remaining >= 0) {
      events_.push({now_ + t.remaining, 0, seq_++, id, now_});
    }
    return true;
  }

  const ledger::PlacementPolicy& policy() const override { return *policy_; }

  ReplayResult Run(const scheduler::TargetWorkload& workload,
                   std::int64_t capacity, std::int64_t sample_every) {
    for (std::size_t i = 0; i < tasks_.size(); ++i) {
      events_.push({tasks_[i].arrival, 1, seq_++, i, 0});
    }
    ReplayResult out;
    std::int64_t last = events_.empty() ? 0 : events_.top().time;
    std::int64_t next_sample = last;
    double waiting_ms = 0, running_ms = 0;  // milli-GPU seconds
    double covered_ms = 0;                  // waiting while idle GPU covered it
    std::int64_t covered_milli = 0;         // for the state since `last`
    double evictable_ms = 0;  // of that, while evictions could have helped
    std::int64_t evictable_milli = 0;
    std::map<std::string, double> waiting_by_ms;
    while (!events_.empty()) {
      const std::int64_t t = events_.top().time;
      // The state holds on [last, t): integrate and sample it.
      waiting_ms +=
          static_cast<double>(waiting_milli_) * static_cast<double>(t - last);
      covered_ms +=
          static_cast<double>(covered_milli) * static_cast<double>(t - last);
      evictable_ms +=
          static_cast<double>(evictable_milli) * static_cast<double>(t - last);
      for (const auto& [shape, milli] : waiting_by_) {
        waiting_by_ms[shape] +=
            static_cast<double>(milli) * static_cast<double>(t - last);
      }
      running_ms +=
          static_cast<double>(running_milli_) * static_cast<double>(t - last);
      while (next_sample < t) {
        out.samples.push_back(Sample(next_sample, workload, capacity));
        next_sample += sample_every;
      }
      last = t;
      now_ = t;
      std::vector<std::size_t> arrivals;
      while (!events_.empty() && events_.top().time == t) {
        const Event e = events_.top();
        events_.pop();
        ReplayTask& task = tasks_[e.task];
        if (e.kind == 1) {
          ++arrived_;
          Enqueue(e.task);
          arrivals.push_back(e.task);
        } else if (task.slice.has_value() && task.started == e.stamp) {
          Stop(task, e.task);
          task.done = true;
          freed_ = true;
        }
      }
      Pass(arrivals);
      if (hook_ != nullptr && !queue_.empty()) {
        const std::int64_t before = evictions_;
        const std::size_t waiting_before = queue_.size();
        hook_->OnWaiting(*this);
        if (evictions_ != before || queue_.size() != waiting_before) {
          freed_ = true;
          Pass({});
        }
        for (const std::size_t id : evicted_now_) {
          if (tasks_[id].queued_since >= 0) ++requeued_;
        }
        evicted_now_.clear();
      }
      std::tie(covered_milli, evictable_milli) = CoveredWaitingMilli(capacity);
    }
    out.samples.push_back(Sample(now_, workload, capacity));
    // Tasks still waiting at the end: their wait so far.
    std::vector<double> waits;
    waits.reserve(tasks_.size());
    for (ReplayTask& t : tasks_) {
      if (t.queued_since >= 0) {
        t.waited += now_ - t.queued_since;
        if (t.started < 0) ++out.never_started;
      }
      if (t.started >= 0) ++out.started;
      waits.push_back(static_cast<double>(t.waited));
    }
    std::sort(waits.begin(), waits.end());
    const auto rank = [&](double q) {
      if (waits.empty()) return 0.0;
      const auto i = static_cast<std::size_t>(
          std::ceil(q * static_cast<double>(waits.size())));
      return waits[std::min(waits.size() - 1, i == 0 ? 0 : i - 1)];
    };
    out.tasks = static_cast<std::int64_t>(tasks_.size());
    out.evictions = evictions_;
    out.evictions_per_100 =
        tasks_.empty()
            ? 0
            : 100.0 * evictions_ / static_cast<double>(tasks_.size());
    out.waiting_gpu_hours = waiting_ms / 1000 / 3600;
    out.waiting_with_idle_gpu_hours = covered_ms / 1000 / 3600;
    out.waiting_evictable_gpu_hours = evictable_ms / 1000 / 3600;
    out.evictions_requeued = requeued_;
    for (const auto& [shape, ms] : waiting_by_ms) {
      out.waiting_gpu_hours_by_shape[shape] = ms / 1000 / 3600;
    }
    out.running_gpu_hours = running_ms / 1000 / 3600;
    out.waiting_share_pct = waiting_ms + running_ms > 0
                                ? 100 * waiting_ms / (waiting_ms + running_ms)
                                : 0;
    out.wait_median_s = rank(0.5);
    out.wait_p99_s = rank(0.99);
    out.wait_max_s = waits.empty() ? 0 : waits.back();
    out.holds = holds_begun_;
    out.holds_started = holds_started_;
    const double seconds = std::chrono::duration<double>(placing_).count();
    out.decisions_per_second =
        seconds > 0 ? static_cast<double>(decisions_) / seconds : 0;
    out.capacity_milli = capacity;
    return out;
  }

 private:
  // "share" for a slice, "N gpus" for whole GPUs, "cpu" for node-only.
  static std::string ShapeOf(const ReplayTask& t) {
    switch (t.request.kind) {
      case RequestKind::kSlice:
        return "share";
      case RequestKind::kWholeGpus:
        return std::to_string(t.request.gpu_count) + " gpus";
      case RequestKind::kNodeOnly:
        break;
    }
    return "cpu";
  }

  // The GPU of waiting tasks that the cluster's idle GPU covers, in queue
  // order, each using up what it is counted against; and the part of it
  // that some node could take were its preemptible tasks gone.
  std::pair<std::int64_t, std::int64_t> CoveredWaitingMilli(
      std::int64_t capacity) const {
    std::int64_t idle = capacity - running_milli_;
    std::int64_t covered = 0, evictable = 0;
    std::optional<std::vector<NodeRoom>> rooms;
    // Many waiting tasks ask the same: one answer per request.
    std::map<std::tuple<GpuKey, CpuMilli, MemoryMib>, bool> answers;
    for (const auto& [arrival, id] : queue_) {
      const ReplayTask& t = tasks_[id];
      const std::int64_t need = t.gpu_milli;
      if (need <= 0 || need > idle) continue;
      covered += need;
      idle -= need;
      const PlacementRequest& r = t.request;
      const auto key =
          std::make_tuple(GpuKeyOf(r), r.cpu_milli, r.host_memory_mib);
      auto it = answers.find(key);
      if (it == answers.end()) {
        ledger_->Read([&](const ledger::ClusterView& view) {
          if (!rooms.has_value()) rooms = RoomsWithoutPreemptible(view);
          bool fits = false;
          for (const NodeRoom& room : *rooms) {
            if (room.Fits(view, r)) {
              fits = true;
              break;
            }
          }
          it = answers.emplace(key, fits).first;
        });
      }
      if (it->second) evictable += need;
    }
    return {covered, evictable};
  }

  // Every node's room were its preemptible tasks gone.
  std::vector<NodeRoom> RoomsWithoutPreemptible(
      const ledger::ClusterView& view) const {
    std::vector<NodeRoom> rooms;
    for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
      const ledger::NodeRecord& node = view.node(NodeId(n));
      if (!node.live) continue;
      std::vector<std::size_t> leave;
      for (const std::size_t id : on_node_[n]) {
        if (tasks_[id].preemptible) leave.push_back(id);
      }
      rooms.push_back(NodeRoom::After(*this, view, node, leave));
    }
    return rooms;
  }

  void Enqueue(std::size_t id) {
    ReplayTask& t = tasks_[id];
    t.queued_since = now_;
    queue_.insert({t.arrival, id});
    waiting_milli_ += t.gpu_milli;
    waiting_by_[ShapeOf(t)] += t.gpu_milli;
  }

  void Stop(ReplayTask& t, std::size_t id) {
    (void)ledger_->Release(*t.slice);
    t.slice.reset();
    running_milli_ -= t.gpu_milli;
    for (const GpuId g : gpus_of_[id]) {
      auto& list = on_gpu_[g.value()];
      list.erase(std::find(list.begin(), list.end(), id));
    }
    gpus_of_.erase(id);
    auto& here = on_node_[node_of_[id].value()];
    here.erase(std::find(here.begin(), here.end(), id));
    node_of_.erase(id);
  }

  // FIFO with backfill: after a departure or eviction every waiting task is
  // tried in queue order; otherwise only the new arrivals can fit. With
  // holds, each task that stays waiting is then shown to the HoldBook (a
  // task passed over because a smaller request failed, or because nothing
  // has room for it, waits for room all the same); a holder is always
  // tried (it alone may use its GPUs). A hold that ended makes room: the
  // queue is tried once more.
  void Pass(const std::vector<std::size_t>& arrivals) {
    Failures failed;
    std::optional<Bounds> bounds;
    ledger_->Read(
        [&](const ledger::ClusterView& view) { bounds.emplace(view); });
    bool hold_ended = false;
    const auto attempt = [&](std::size_t id) {
      const PlacementRequest& r = tasks_[id].request;
      const auto task = static_cast<std::int64_t>(id);
      const bool holder = holds_.HoldOf(task) != nullptr;
      if (holder || (bounds->MayFit(r) && !failed.Dominated(r))) {
        if (Start(id, *policy_)) return;
        if (!holder) failed.Add(r);
      }
      hold_ended = Waited(id) || hold_ended;
    };
    const bool all = freed_;
    freed_ = false;
    for (const std::size_t id : all ? waiting() : arrivals) attempt(id);
    if (hold_ended) {
      failed = Failures{};
      for (const std::size_t id : waiting()) attempt(id);
    }
  }

  // Task `id` failed to start (or was passed over): HoldBook::AfterWaiting.
  // Whether a hold ended.
  bool Waited(std::size_t id) {
    if (hold_rules_.hold_after_ms <= 0) return false;
    const ReplayTask& t = tasks_[id];
    scheduler::HoldChange change = scheduler::HoldChange::kNone;
    ledger_->Read([&](const ledger::ClusterView& view) {
      change = holds_.AfterWaiting(
          view, hold_rules_, static_cast<std::int64_t>(id), t.request,
          /*for_room=*/true, (now_ - t.queued_since) * 1000, now_ * 1000,
          /*excluded=*/{});
    });
    if (change == scheduler::HoldChange::kBegan) ++holds_begun_;
    return change == scheduler::HoldChange::kEndedDrained ||
           change == scheduler::HoldChange::kEndedChanged;
  }

  ReplaySample Sample(std::int64_t time,
                      const scheduler::TargetWorkload& workload,
                      std::int64_t capacity) const {
    ReplaySample s;
    s.time = time;
    s.running_milli = running_milli_;
    s.waiting_milli = waiting_milli_;
    s.waiting_tasks = static_cast<int>(queue_.size());
    double frag = 0;
    ledger_->Read([&](const ledger::ClusterView& view) {
      for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
        const ledger::NodeRecord& node = view.node(NodeId(n));
        if (!node.live) continue;
        frag += scheduler::NodeFragMilli(scheduler::NodeStateOf(view, node),
                                         workload);
      }
    });
    const double cap = static_cast<double>(capacity);
    s.allocation_pct = 100.0 * static_cast<double>(running_milli_) / cap;
    s.frag_pct = 100.0 * frag / cap;
    const double all = static_cast<double>(running_milli_ + waiting_milli_);
    s.waiting_share_pct =
        all > 0 ? 100.0 * static_cast<double>(waiting_milli_) / all : 0;
    return s;
  }

  std::unique_ptr<ledger::Ledger> ledger_;
  std::unique_ptr<ledger::PlacementPolicy> policy_;
  std::vector<ReplayTask> tasks_;
  DefragHook* hook_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::set<std::pair<std::int64_t, std::size_t>> queue_;  // (arrival, id)
  std::vector<std::vector<std::size_t>> on_gpu_;
  std::vector<std::vector<std::size_t>> on_node_;
  std::map<std::size_t, std::vector<GpuId>> gpus_of_;
  std::map<std::size_t, NodeId> node_of_;
  std::int64_t now_ = 0;
  std::uint64_t seq_ = 0;
  std::int64_t arrived_ = 0;
  std::int64_t evictions_ = 0;
  std::vector<std::size_t> evicted_now_;  // by the hook's current call
  std::int64_t requeued_ = 0;
  std::int64_t waiting_milli_ = 0;
  std::map<std::string, std::int64_t> waiting_by_;  // by ShapeOf
  std::int64_t running_milli_ = 0;
  bool freed_ = false;
  scheduler::HoldBook holds_;
  const scheduler::HoldRules hold_rules_;
  std::int64_t holds_begun_ = 0;
  std::int64_t holds_started_ = 0;
  std::int64_t decisions_ = 0;
  std::chrono::steady_clock::duration placing_{};
};

// The defragmenter's plan for one waiting task on one node.
struct Plan {
  std::vector<std::size_t> evict;
  std::int64_t evicted_milli = 0;
  std::vector<GpuId> gpus;
  std::uint64_t rank = 0;
  bool Better(const Plan& o) const {
    return std::make_tuple(evict.size(), evicted_milli, rank) <
           std::make_tuple(o.evict.size(), o.evicted_milli, o.rank);
  }
};

int MilliOf(const ReplayTask& t) {
  return static_cast<int>(t.request.kind == RequestKind::kSlice ? t.gpu_milli
                                                                : kMilliPerGpu);
}

std::optional<Plan> PlanOn(const ReplayControl& c,
                           const ledger::ClusterView& view,
                           const ledger::NodeRecord& node,
                           const ReplayTask& want, std::int64_t budget) {
  const PlacementRequest& r = want.request;
  // GPU -> (evictions, freed milli) to make it usable, for each usable GPU.
  struct Option {
    GpuId gpu;
    std::vector<std::size_t> evict;
    std::int64_t milli = 0;
  };
  std::vector<Option> options;
  for (const GpuId g : node.gpus) {
    const ledger::GpuRecord& gpu = view.gpu(g);
    if (!gpu.live || !gpu.healthy() || !view.ModelAllowed(r, gpu) ||
        gpu.spec.mig_capable) {
      continue;
    }
    const std::vector<std::size_t>& on = c.tasks_on_gpu(g);
    Option o{g, {}, 0};
    if (r.kind == RequestKind::kSlice) {
      if (!view.CheckSlice(gpu, r).has_value()) {
        options.push_back(o);  // fits as is (CPU may be what lacks)
        continue;
      }
      // Evict preemptible slices, largest first, until memory and compute
      // suffice.
      std::vector<std::size_t> movable;
      for (const std::size_t id : on) {
        const ReplayTask& t = c.task(id);
        if (!t.preemptible || t.request.kind != RequestKind::kSlice) continue;
        movable.push_back(id);
      }
      std::sort(movable.begin(), movable.end(),
                [&](std::size_t a, std::size_t b) {
                  return c.task(a).request.memory_mib.value_or(0) >
                         c.task(b).request.memory_mib.value_or(0);
                });
      MemoryMib mem = gpu.free_memory_mib();
      ComputePercent comp = gpu.free_compute_percent();
      const ComputePercent need_comp = view.AccountedCompute(r);
      const MemoryMib want_mem = r.memory_mib.value_or(0);
      for (const std::size_t id : movable) {
        if (mem >= want_mem && comp >= need_comp) break;
        o.evict.push_back(id);
        o.milli += MilliOf(c.task(id));
        mem += c.task(id).request.memory_mib.value_or(0);
        comp += view.AccountedCompute(c.task(id).request);
      }
      if (mem < want_mem || comp < need_comp) continue;
    } else {
      for (const std::size_t id : on) {
        if (!c.task(id).preemptible) {
          o.evict.clear();
          o.milli = -1;
          break;
        }
        o.evict.push_back(id);
        o.milli += MilliOf(c.task(id));
      }
      if (o.milli < 0) continue;
    }
    options.push_back(std::move(o));
  }
  const int need = r.kind == RequestKind::kSlice ? 1 : r.gpu_count;
  if (static_cast<int>(options.size()) < need) return std::nullopt;
  std::sort(options.begin(), options.end(),
            [](const Option& a, const Option& b) {
              return std::make_tuple(a.evict.size(), a.milli, a.gpu.value()) <
                     std::make_tuple(b.evict.size(), b.milli, b.gpu.value());
            });
  Plan plan;
  std::set<std::size_t> evict;
  for (int i = 0; i < need; ++i) {
    plan.gpus.push_back(options[i].gpu);
    evict.insert(options[i].evict.begin(), options[i].evict.end());
  }
  if (evict.empty() || static_cast<std::int64_t>(evict.size()) > budget) {
    return std::nullopt;
  }
  CpuMilli cpu = node.free_cpu_milli();
  MemoryMib host = node.free_host_memory_mib();
  for (const std::size_t id : evict) {
    const ReplayTask& t = c.task(id);
    plan.evict.push_back(id);
    plan.evicted_milli += t.gpu_milli;
    cpu += t.request.cpu_milli;
    host += t.request.host_memory_mib;
  }
  if (cpu < r.cpu_milli || host < r.host_memory_mib) return std::nullopt;
  std::sort(plan.gpus.begin(), plan.gpus.end());
  plan.rank = node.tie_rank;
  return plan;
}

// Every node's plan for `want` (PlanOn), best first.
std::vector<Plan> PlansFor(const ReplayControl& c, const ReplayTask& want,
                           std::int64_t budget) {
  std::vector<Plan> plans;
  c.ledger().Read([&](const ledger::ClusterView& view) {
    for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
      const ledger::NodeRecord& node = view.node(NodeId(n));
      if (!node.live) continue;
      std::optional<Plan> plan = PlanOn(c, view, node, want, budget);
      if (plan.has_value()) plans.push_back(std::move(*plan));
    }
  });
  std::stable_sort(plans.begin(), plans.end(),
                   [](const Plan& a, const Plan& b) { return a.Better(b); });
  return plans;
}

}  // namespace

std::int64_t EvictionBudget(const ReplayControl& c, double per_100) {
  return static_cast<std::int64_t>(
             std::floor(static_cast<double>(c.arrived()) * per_100 / 100.0)) -
         c.evictions();
}

void SimpleDefragmenter::OnWaiting(ReplayControl& c) {
  std::int64_t budget = EvictionBudget(c, evictions_per_100_);
  int tries = 0;
  for (const std::size_t id : c.waiting()) {
    if (budget <= 0 || tries >= tries_) return;
    const ReplayTask& want = c.task(id);
    if (want.request.kind == RequestKind::kNodeOnly) continue;
    ++tries;
    const std::vector<Plan> plans = PlansFor(c, want, budget);
    if (plans.empty()) continue;
    for (const std::size_t e : plans.front().evict) {
      if (c.Evict(e)) --budget;
    }
    c.Start(id, PinnedPolicy(plans.front().gpus));
  }
}

void MovingDefragmenter::OnWaiting(ReplayControl& c) {
  std::int64_t budget = EvictionBudget(c, evictions_per_100_);
  int tries = 0;
  for (const std::size_t id : c.waiting()) {
    if (budget <= 0 || tries >= tries_) return;
    const ReplayTask& want = c.task(id);
    if (want.request.kind == RequestKind::kNodeOnly) continue;
    ++tries;
    std::vector<Plan> plans = PlansFor(c, want, budget);
    if (static_cast<int>(plans.size()) > plans_) plans.resize(plans_);
    for (const Plan& plan : plans) {
      // Try it on a snapshot: every evictee must land again at once.
      std::unique_ptr<ledger::Ledger> trial = c.ledger().Snapshot();
      for (const std::size_t e : plan.evict) {
        (void)trial->Release(*c.task(e).slice);
      }
      if (!trial->Place(want.request, PinnedPolicy(plan.gpus)).placed()) {
        continue;
      }
      std::vector<std::vector<GpuId>> targets;
      bool all = true;
      for (const std::size_t e : plan.evict) {
        const ledger::PlacementResult r =
            trial->Place(c.task(e).request, c.policy());
        if (!r.placed()) {
          all = false;
          break;
        }
        targets.push_back(r.allocation.gpus);
      }
      if (!all) continue;
      // The same on the real ledger, which holds the same state.
      for (const std::size_t e : plan.evict) {
        if (c.Evict(e)) --budget;
      }
      c.Start(id, PinnedPolicy(plan.gpus));
      for (std::size_t i = 0; i < plan.evict.size(); ++i) {
        c.Start(plan.evict[i], PinnedPolicy(targets[i]));
      }
      break;
    }
  }
}

StatusOr<ReplayResult> RunReplay(const std::vector<TraceNode>& nodes,
                                 const std::vector<TracePod>& pods,
                                 const std::string& policy_name,
                                 const ReplayOptions& options,
                                 DefragHook* hook) {
  bool timed = false;
  for (const TracePod& p : pods) {
    if (p.creation_time != 0 || p.deletion_time >= 0) timed = true;
  }
  if (!pods.empty() && !timed) {
    return Status::InvalidArgument(
        "the task list has no creation_time / deletion_time columns", "pods");
  }
  if (options.hold_after_s < 0) {
    return Status::InvalidArgument("must be 0 (no holds) or more seconds",
                                   "hold_after_s");
  }
  if (options.max_holds < 1) {
    return Status::InvalidArgument("must be at least 1", "max_holds");
  }
  if (options.hold_after_s > 0 && hook != nullptr) {
    // A planner plans on snapshots that know nothing of holds.
    return Status::InvalidArgument(
        "holds are not modelled together with a defragmenter", "hold_after_s");
  }
  auto built = BuildSimLedger(nodes, options.seed);
  if (!built.ok()) return built.status();
  const std::int64_t capacity = CapacityMilli(nodes);
  if (capacity <= 0)
    return Status::InvalidArgument("no node has a GPU", "nodes");
  std::vector<scheduler::TaskClass> classes;
  classes.reserve(pods.size());
  for (const TracePod& p : pods) classes.push_back(ToTaskClass(p));
  const scheduler::TargetWorkload workload =
      scheduler::TargetWorkload::FromTasks(classes, options.coverage);
  scheduler::SimPolicyContext context;
  context.seed = options.seed;
  context.workload = &workload;
  context.tasks = &classes;
  context.max_scored_nodes = options.max_scored_nodes;
  auto made = scheduler::MakeSimPolicy(policy_name, context);
  if (!made.ok()) return made.status();

  // Arrival scaling for the offered load: the scale at which the peak of
  // the demand (each task running from its arrival for its duration) is
  // `load` x capacity, by bisection (the peak falls as arrivals spread).
  std::int64_t first = 0, last = 0;
  for (std::size_t i = 0; i < pods.size(); ++i) {
    first =
        i == 0 ? pods[i].creation_time : std::min(first, pods[i].creation_time);
    last =
        i == 0 ? pods[i].creation_time : std::max(last, pods[i].creation_time);
  }
  const auto arrival_at = [&](const TracePod& p, double scale) {
    return first +
           std::llround(static_cast<double>(p.creation_time - first) * scale);
  };
  const auto peak_at = [&](double scale) {
    std::vector<std::pair<std::int64_t, std::int64_t>> steps;
    steps.reserve(2 * pods.size());
    for (const TracePod& p : pods) {
      const std::int64_t a = arrival_at(p, scale);
      steps.push_back({a, p.total_gpu_milli()});
      if (p.deletion_time >= 0) {
        steps.push_back(
            {a + p.deletion_time - p.creation_time, -p.total_gpu_milli()});
      }
    }
    std::sort(steps.begin(), steps.end());  // ends before starts at a time
    std::int64_t now = 0, peak = 0;
    for (const auto& [t, d] : steps) {
      now += d;
      peak = std::max(peak, now);
    }
    return static_cast<double>(peak);
  };
  double scale = 1;
  if (options.load > 0 && last > first) {
    const double target = options.load * static_cast<double>(capacity);
    double lo = 1e-9, hi = 1e3;  // peak_at(lo) >= peak_at(hi)
    if (peak_at(lo) <= target) {
      scale = lo;
    } else if (peak_at(hi) >= target) {
      scale = hi;
    } else {
      for (int i = 0; i < 60; ++i) {
        const double mid = std::sqrt(lo * hi);
        (peak_at(mid) > target ? lo : hi) = mid;
      }
      scale = hi;
    }
  }
  // Tasks that fit no node of the empty cluster would wait forever: left
  // out and counted.
  std::optional<Bounds> empty;
  (*built)->Read([&](const ledger::ClusterView& view) { empty.emplace(view); });
  std::int64_t never_fit = 0;
  std::vector<ReplayTask> tasks;
  tasks.reserve(pods.size());
  for (std::size_t i = 0; i < pods.size(); ++i) {
    const TracePod& p = pods[i];
    if (!empty->MayFit(ToRequest(p))) {
      ++never_fit;
      continue;
    }
    ReplayTask t;
    t.pod = i;
    t.request = ToRequest(p);
    t.gpu_milli = p.total_gpu_milli();
    t.preemptible = options.be_preemptible && p.qos == "BE";
    t.arrival = arrival_at(p, scale);
    t.remaining = p.deletion_time < 0 ? -1 : p.deletion_time - p.creation_time;
    tasks.push_back(std::move(t));
  }
  std::int64_t every = options.sample_every_s;
  if (every <= 0) {  // 200 samples from the first arrival to the last end
    std::int64_t end = first;
    for (const ReplayTask& t : tasks) {
      end = std::max(end, t.arrival + std::max<std::int64_t>(0, t.remaining));
    }
    every = std::max<std::int64_t>(1, (end - first) / 200);
  }
  Replayer replayer(
      std::move(built).value(), std::move(made).value(), std::move(tasks), hook,
      scheduler::HoldRules{options.hold_after_s * 1000, options.max_holds});
  ReplayResult result = replayer.Run(workload, capacity, every);
  result.policy = policy_name;
  result.defrag = hook == nullptr ? "" : std::string(hook->name());
  result.time_scale = scale;
  result.never_fit = never_fit;
  return result;
}

std::string ReplayJson(const ReplayResult& r) {
  nlohmann::json j;
  j["policy"] = r.policy;
  j["defrag"] = r.defrag;
  j["capacity_gpus"] = static_cast<double>(r.capacity_milli) / kMilliPerGpu;
  j["time_scale"] = r.time_scale;
  j["tasks"] = r.tasks;
  j["started"] = r.started;
  j["never_started"] = r.never_started;
  j["never_fit"] = r.never_fit;
  j["evictions"] = r.evictions;
  j["evictions_per_100_tasks"] = r.evictions_per_100;
  j["waiting_gpu_hours"] = r.waiting_gpu_hours;
  j["waiting_with_idle_gpu_hours"] = r.waiting_with_idle_gpu_hours;
  j["waiting_evictable_gpu_hours"] = r.waiting_evictable_gpu_hours;
  j["evictions_requeued"] = r.evictions_requeued;
  j["waiting_gpu_hours_by_shape"] = r.waiting_gpu_hours_by_shape;
  j["running_gpu_hours"] = r.running_gpu_hours;
  j["waiting_share_pct"] = r.waiting_share_pct;
  j["wait_median_s"] = r.wait_median_s;
  j["wait_p99_s"] = r.wait_p99_s;
  j["wait_max_s"] = r.wait_max_s;
  j["holds"] = r.holds;
  j["holds_started"] = r.holds_started;
  j["decisions_per_second"] = r.decisions_per_second;
  nlohmann::json samples = nlohmann::json::array();
  for (const ReplaySample& s : r.samples) {
    samples.push_back(
        {{"time", s.time},
         {"running_gpus", static_cast<double>(s.running_milli) / kMilliPerGpu},
         {"waiting_gpus", static_cast<double>(s.waiting_milli) / kMilliPerGpu},
         {"waiting_tasks", s.waiting_tasks},
         {"waiting_share_pct", s.waiting_share_pct},
         {"allocation_pct", s.allocation_pct},
         {"frag_pct", s.frag_pct}});
  }
  j["samples"] = std::move(samples);
  return j.dump(2) + "\n";
}

std::string ReplayTable(const ReplayResult& r, std::size_t rows) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%12s %10s %8s %10s %9s %7s\n", "time_s",
                "waiting%", "waiting", "running", "alloc%", "frag%");
  out += line;
  const std::size_t n = r.samples.size();
  const std::size_t step =
      std::max<std::size_t>(1, n / std::max<std::size_t>(1, rows));
  for (std::size_t i = 0; i < n; i += step) {
    // Always end on the last sample.
    const ReplaySample& s = r.samples[i + step >= n ? n - 1 : i];
    std::snprintf(line, sizeof line, "%12lld %10.2f %8d %10.1f %9.2f %7.2f\n",
                  static_cast<long long>(s.time), s.waiting_share_pct,
                  s.waiting_tasks,
                  static_cast<double>(s.running_milli) / kMilliPerGpu,
                  s.allocation_pct, s.frag_pct);
    out += line;
    if (i + step >= n) break;
  }
  std::snprintf(
      line, sizeof line,
      "%s%s%s: %lld tasks, waiting GPU-time %.1f GPU-h (%.2f%% of "
      "requested; %.1f GPU-h while idle GPU covered it, %.1f of "
      "them evictable), wait median %.0f s, p99 %.0f s, max %.0f s, %lld "
      "never started, %lld evictions (%.2f per 100 tasks, %lld "
      "requeued), %lld holds (%lld started on them)\n",
      r.policy.c_str(), r.defrag.empty() ? "" : " + defrag ", r.defrag.c_str(),
      static_cast<long long>(r.tasks), r.waiting_gpu_hours, r.waiting_share_pct,
      r.waiting_with_idle_gpu_hours, r.waiting_evictable_gpu_hours,
      r.wait_median_s, r.wait_p99_s, r.wait_max_s,
      static_cast<long long>(r.never_started),
      static_cast<long long>(r.evictions), r.evictions_per_100,
      static_cast<long long>(r.evictions_requeued),
      static_cast<long long>(r.holds), static_cast<long long>(r.holds_started));
  out += line;
  return out;
}

}  // namespace hf::sim
