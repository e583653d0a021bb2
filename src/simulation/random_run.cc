#include "simulation/random_run.h"

#include <array>
#include <random>
#include <set>

namespace hf::simulation {

namespace {

constexpr std::array<NodeKind, 4> kKinds = {
    NodeKind::kMig, NodeKind::kMps, NodeKind::kBronze, NodeKind::kMixed};

template <typename T>
T Pick(std::mt19937_64& rng, const std::vector<T>& from) {
  return from[std::uniform_int_distribution<std::size_t>(0,
                                                         from.size() - 1)(rng)];
}

std::int64_t Between(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

bool Chance(std::mt19937_64& rng, double p) {
  return std::uniform_real_distribution<double>(0, 1)(rng) < p;
}

TaskShape RandomShape(World& w) {
  std::mt19937_64& rng = w.rng();
  TaskShape shape;
  shape.tenant = Pick(rng, w.tenants());
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (r < 0.09) {
    shape.whole_gpus = 1;
  } else if (r < 0.12) {
    shape.whole_gpus = 2;
  } else {
    shape.memory_mib = Pick<std::int64_t>(
        rng,
        {1024, 2048, 4096, 8192, 12288, 16384, 20480, 24576, 32768, 40960});
    if (Chance(rng, 0.5)) {
      shape.compute_ratio = Pick<double>(rng, {0.1, 0.25, 0.5});
    }
  }
  shape.duration_ms = Between(rng, 10'000, std::int64_t{4} * 60'000);
  shape.exit_code = Chance(rng, 0.1) ? 1 : 0;
  return shape;
}

// One workload action, or (with faults on) now and then a fault. `side`
// draws what the world's own generator did not always draw (so adding a
// draw there would change every seed's run): whether a task has a command.
void RandomAction(World& w, bool faults, std::vector<std::int64_t>& created,
                  std::mt19937_64& side) {
  std::mt19937_64& rng = w.rng();
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  const int node = static_cast<int>(Between(rng, 0, w.node_count() - 1));
  if (r < 0.45 || created.empty()) {
    TaskShape shape = RandomShape(w);
    // Now and then a task no node can start (an image, no command).
    shape.command = !Chance(side, 0.04);
    (void)w.Act("workload: create a task for " + shape.tenant, [&] {
      if (auto id = w.CreateTask(shape)) created.push_back(*id);
    });
    return;
  }
  if (r < 0.57) {
    // Half the time a task bound to a node whose start may still be on its
    // way: where a cancel is hardest to get right.
    std::int64_t id = Pick(rng, created);
    if (Chance(rng, 0.5)) {
      std::vector<std::int64_t> scheduled;
      for (const store::TaskRow& t : w.Tasks()) {
        if (t.state == store::TaskState::kScheduled) scheduled.push_back(t.id);
      }
      if (!scheduled.empty()) id = Pick(rng, scheduled);
    }
    (void)w.Act("workload: cancel task " + std::to_string(id), [&] {
      for (const std::string& t : w.tenants()) {
        if (w.CancelTask(id, t)) break;
      }
    });
    return;
  }
  if (r < 0.62) {
    (void)w.Act("workload: an admin deletes a slice", [&] {
      auto live = w.LiveSlices();
      if (live.empty()) return;
      std::int64_t id = Pick(rng, live).id;
      if (Chance(rng, 0.5)) {
        // The slice of a task bound to a node (it may be running there).
        std::set<std::int64_t> scheduled;
        for (const store::TaskRow& t : w.Tasks()) {
          if (t.state == store::TaskState::kScheduled && t.slice_id) {
            scheduled.insert(*t.slice_id);
          }
        }
        std::vector<std::int64_t> ids;
        for (const store::SliceRow& s : live) {
          if (scheduled.contains(s.id)) ids.push_back(s.id);
        }
        if (!ids.empty()) id = Pick(rng, ids);
      }
      (void)w.DeleteSlice(id);
    });
    return;
  }
  if (r < 0.65) {
    (void)w.Act("workload: an admin resizes a slice", [&] {
      auto live = w.LiveSlices();
      if (live.empty()) return;
      const store::SliceRow s = Pick(rng, live);
      // Never below what the task asked for: the processes hold that much.
      (void)w.ResizeSlice(s.id, s.memory_mib + 32 * Between(rng, 0, 64));
    });
    return;
  }
  if (r < 0.67) {
    const std::string tenant = Pick(rng, w.tenants());
    std::optional<std::string> group;
    if (Chance(rng, 0.6)) group = Pick<std::string>(rng, {"g01", "g23"});
    (void)w.Act("workload: " + tenant + " changes group",
                [&] { (void)w.SetTenantGroup(tenant, group); });
    return;
  }
  if (r < 0.70) {
    const std::string a = Pick(rng, w.tenants());
    const std::string b = Pick(rng, w.tenants());
    if (a == b) return;
    const std::int64_t ttl = Between(rng, 30, 900);
    (void)w.Act("workload: approve " + a + "+" + b,
                [&] { (void)w.Approve(a, b, ttl); });
    return;
  }
  if (r < 0.71) {
    auto ids = w.ApprovalIds();
    if (ids.empty()) return;
    const std::int64_t id = Pick(rng, ids);
    (void)w.Act("workload: revoke approval " + std::to_string(id),
                [&] { (void)w.RevokeApproval(id); });
    return;
  }
  if (!faults) return;
  const double f = std::uniform_real_distribution<double>(0, 1)(rng);
  if (f < 0.10) {
    const auto point = Pick<CrashPoint>(
        rng, {CrashPoint::kBeforeWrite, CrashPoint::kInsideWrite,
              CrashPoint::kAfterCommit});
    const int writes = static_cast<int>(Between(rng, 1, 40));
    (void)w.Act("fault: arm a server crash",
                [&] { w.ArmServerCrash(point, writes); });
  } else if (f < 0.15) {
    const std::int64_t down = Between(rng, 500, 30'000);
    (void)w.Act("fault: crash the server", [&] { w.CrashServer(down); });
  } else if (f < 0.22) {
    const std::int64_t ms = Between(rng, 5'000, 60'000);
    (void)w.Act("fault: reports from " + w.NodeName(node) + " stall",
                [&] { w.StallReports(node, ms); });
  } else if (f < 0.38) {
    const std::int64_t down = Between(rng, 1'000, 60'000);
    (void)w.Act("fault: crash agent " + w.NodeName(node),
                [&] { w.CrashAgent(node, down); });
  } else if (f < 0.40) {
    (void)w.Act("fault: power off " + w.NodeName(node),
                [&] { w.PowerOff(node); });
  } else if (f < 0.50) {
    (void)w.Act("fault: power on " + w.NodeName(node),
                [&] { w.PowerOn(node); });
  } else if (f < 0.65) {
    const std::int64_t ms = Between(rng, 5'000, 180'000);
    (void)w.Act("fault: partition " + w.NodeName(node),
                [&] { w.Partition(node, ms); });
  } else if (f < 0.72) {
    const int gpu = static_cast<int>(Between(rng, 0, 1));
    const std::int64_t ms = Between(rng, 5'000, 120'000);
    (void)w.Act("fault: lose a GPU of " + w.NodeName(node),
                [&] { w.LoseGpu(node, gpu, ms); });
  } else if (f < 0.77) {
    const int count = static_cast<int>(Between(rng, 1, 3));
    const std::int64_t ms = Between(rng, 5'000, 150'000);
    (void)w.Act("fault: slow MIG creates on " + w.NodeName(node),
                [&] { w.SlowMigCreates(node, count, ms); });
  } else if (f < 0.82) {
    const int gpu = static_cast<int>(Between(rng, 0, 1));
    const int count = static_cast<int>(Between(rng, 1, 4));
    const StatusCode code = Pick<StatusCode>(
        rng, {StatusCode::kInternal, StatusCode::kResourceExhausted});
    (void)w.Act("fault: MIG creates fail on " + w.NodeName(node),
                [&] { w.FailMigCreates(node, gpu, count, code); });
  } else if (f < 0.90) {
    const std::int64_t ms = Between(rng, 5'000, 120'000);
    (void)w.Act("fault: MPS daemon down on " + w.NodeName(node),
                [&] { w.StopMpsDaemon(node, ms); });
  } else if (f < 0.95) {
    NetworkFaults net;
    net.drop_request = Pick<double>(rng, {0, 0.02, 0.1});
    net.drop_reply = Pick<double>(rng, {0, 0.02, 0.1});
    net.duplicate = Pick<double>(rng, {0, 0.02, 0.1});
    net.delay = Pick<double>(rng, {0, 0.02, 0.1});
    (void)w.Act("fault: flaky network for " + w.NodeName(node),
                [&] { w.SetNetworkFaults(node, net); });
  } else {
    const std::int64_t jump =
        Chance(rng, 0.8) ? Between(rng, 1'000, std::int64_t{10} * 60'000)
                         : -Between(rng, 1'000, 30'000);
    (void)w.Act("fault: the clock jumps", [&] { w.JumpClock(jump); });
  }
}

}  // namespace

RandomRunResult RunRandom(const RandomRunOptions& options) {
  RandomRunResult result;
  WorldOptions wo;
  wo.seed = options.seed;
  wo.dir = options.dir;
  wo.keep_dir = options.keep_dir;
  auto created_world = World::Create(wo);
  if (!created_world.ok()) {
    result.ok = false;
    result.violation =
        "the world did not start: " + created_world.status().ToString();
    return result;
  }
  World& w = **created_world;
  const auto finish = [&](const std::optional<std::string>& v) {
    result.steps = w.steps();
    result.simulated_ms = w.now() - wo.start_ms;
    result.counters = w.counters();
    result.trace = w.Trace();
    if (v) {
      result.ok = false;
      result.violation = *v;
      result.violation_step = w.steps();
    }
    return result;
  };
  const int late = options.nodes > 1 ? 1 : 0;  // the last node joins later
  for (int i = 0; i < options.nodes - late; ++i) {
    auto n = w.AddNode(kKinds[i % kKinds.size()]);
    if (!n.ok()) return finish("adding a node: " + n.status().ToString());
  }
  if (options.faults) {
    for (int i = 0; i < w.node_count(); ++i) {
      w.SetNetworkFaults(i, NetworkFaults{0.01, 0.01, 0.01, 0.01});
    }
  }
  std::vector<std::int64_t> created;
  std::mt19937_64 side(options.seed ^ 0x5eed5eed5eed5eedULL);
  const auto stop_here = [&] {
    return options.until && w.steps() >= *options.until;
  };
  bool joined = late == 0;
  while (w.steps() < options.steps) {
    if (stop_here()) return finish(std::nullopt);
    const std::int64_t gap = static_cast<std::int64_t>(
        std::exponential_distribution<double>(1.0 / 1500)(w.rng()));
    if (auto v = w.RunFor(gap)) return finish(v);
    if (!joined && w.steps() >= options.steps / 10) {
      std::optional<std::string> v;
      (void)w.Act("workload: a node joins", [&] {
        auto n = w.AddNode(kKinds[(options.nodes - 1) % kKinds.size()]);
        joined = n.ok();
        // With the server down it joins later.
        if (!n.ok() && n.status().code() != StatusCode::kUnavailable) {
          v = "adding a node: " + n.status().ToString();
        }
      });
      if (v) return finish(v);
    }
    RandomAction(w, options.faults, created, side);
    if (auto v = w.CheckInvariants()) return finish(v);
  }
  // The faults stop; everything must settle.
  if (auto v = w.Act("faults stop", [&] { w.HealAll(); })) return finish(v);
  const std::int64_t deadline = w.now() + options.settle_bound_ms;
  std::optional<std::string> unsettled;
  for (;;) {
    if (stop_here()) return finish(std::nullopt);
    if (auto v = w.RunFor(30'000)) return finish(v);
    unsettled = w.CheckSettled();
    if (!unsettled) {
      // And it stays so through two more GC rounds.
      if (auto v = w.RunFor(2 * wo.gc_ms + wo.gc_min_age_ms)) return finish(v);
      unsettled = w.CheckSettled();
      if (!unsettled) break;
    }
    if (w.now() >= deadline) {
      return finish("LIVENESS: " + *unsettled + " " +
                    std::to_string(options.settle_bound_ms / 60'000) +
                    " minutes after the faults stopped");
    }
  }
  return finish(std::nullopt);
}

}  // namespace hf::simulation
