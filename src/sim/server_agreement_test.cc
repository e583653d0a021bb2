// The simulator and the server agree: the same task sequence goes through
// the real control plane (tasks created, bound by the scheduler, on SQLite)
// and through hf-sim's path (its ledger built from a node list, its
// requests from trace tasks, the registry's policy told of each task as the
// server tells it), and every decision must be the same node and GPUs.
// Covered: hf-frag's cold start on Best-Fit, the learned target and its
// rebuilds, the bounded scan (more nodes than it scores), slices and whole
// GPUs, and tasks that fit nowhere.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "scheduler/policy/registry.h"
#include "server/control_plane.h"
#include "sim/sim_cluster.h"
#include "sim/trace.h"
#include "store/store.h"
#include "store/testing/temp_store.h"

namespace hf::sim {
namespace {

using server::Caller;
using server::ControlPlane;
using server::ControlPlaneOptions;
using server::TaskCreate;
using store::TaskState;

constexpr std::uint64_t kSeed = 42;

// What one decision was: placed where, or not at all.
struct Decision {
  bool placed = false;
  std::string node;
  std::vector<int> gpus;
  friend bool operator==(const Decision&, const Decision&) = default;
};

std::string Describe(const Decision& d) {
  if (!d.placed) return "not placed";
  std::string s = d.node + " GPUs";
  for (int g : d.gpus) s += " " + std::to_string(g);
  return s;
}

std::vector<TraceNode> Nodes() {
  // 48 nodes (more than the 32 hf-frag scores), of three shapes.
  std::vector<TraceNode> nodes;
  for (int i = 0; i < 48; ++i) {
    TraceNode n;
    char name[32];
    std::snprintf(name, sizeof name, "node-%02d", i);
    n.name = name;
    n.gpu_count = i % 3 == 0 ? 8 : (i % 3 == 1 ? 4 : 2);
    n.cpu_milli = 96000;
    n.memory_mib = 1 << 19;
    n.model = i % 2 == 0 ? "G2" : "T4";
    nodes.push_back(n);
  }
  return nodes;
}

std::vector<TracePod> Pods(int count) {
  std::mt19937_64 rng(7);
  const std::vector<int> shares = {100, 200, 250, 300, 500, 500, 700, 1000};
  const std::vector<int> whole = {1, 1, 2, 4, 8};
  std::vector<TracePod> pods;
  for (int i = 0; i < count; ++i) {
    TracePod p;
    p.name = "task-" + std::to_string(i);
    if (rng() % 4 == 0) {
      p.num_gpu = whole[rng() % whole.size()];
      p.gpu_milli = 1000;
    } else {
      p.num_gpu = 1;
      p.gpu_milli = shares[rng() % shares.size()];
    }
    pods.push_back(p);
  }
  return pods;
}

TEST(ServerAgreementTest, TheServerDecidesAsTheSimulatorDoes) {
  const std::vector<TraceNode> nodes = Nodes();
  // Enough to fill the cluster (about 220 GPUs) and go on failing.
  const std::vector<TracePod> pods = Pods(520);
  scheduler::LearnedOptions learned;
  learned.cold_start_tasks = 60;
  learned.rebuild_every = 50;
  learned.max_scored_nodes = 32;  // fewer than the 48 nodes

  // --- the simulator's path
  auto built = BuildSimLedger(nodes, kSeed);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  std::unique_ptr<ledger::Ledger> sim = std::move(built).value();
  auto made = scheduler::MakePolicy(scheduler::kDefaultPolicyName, learned);
  ASSERT_TRUE(made.ok());
  ASSERT_NE(made->observer, nullptr);
  std::map<NodeId, std::string> sim_names;
  sim->Read([&](const ledger::ClusterView& view) {
    for (std::size_t n = 0; n < view.node_slot_count(); ++n) {
      sim_names[NodeId(n)] = view.node(NodeId(n)).spec.name;
    }
  });
  std::vector<Decision> simulated;
  for (const TracePod& pod : pods) {
    const ledger::PlacementRequest request = ToRequest(pod);
    made->observer->Observe(request);
    const ledger::PlacementResult r = sim->Place(request, *made->policy);
    ASSERT_NE(r.outcome, ledger::PlacementOutcome::kInvalid) << r.message;
    Decision d;
    d.placed = r.placed();
    if (d.placed) {
      d.node = sim_names.at(r.allocation.node);
      sim->Read([&](const ledger::ClusterView& view) {
        for (GpuId g : r.allocation.gpus) {
          d.gpus.push_back(view.gpu(g).spec.index);
        }
      });
    }
    simulated.push_back(d);
  }

  // --- the server's path
  const store::sqlite_testing::TempDir dir("hf-agree");
  auto store = store::sqlite_testing::OpenSqliteStore(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  FakeClock clock(1'700'000'000'000);
  ControlPlaneOptions options;
  options.learned = learned;
  options.tie_break_seed = kSeed;
  auto created = ControlPlane::Create(store->get(), &clock, options);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<ControlPlane> cp = std::move(created).value();
  Caller admin;
  admin.role = store::Role::kAdmin;
  admin.token_id = 1;
  // Registered in name order, as the simulator adds them, so node ids and
  // with them the tie-break ranks match.
  for (const TraceNode& n : nodes) {
    wire::NodeReport report;
    report.name = n.name;
    report.cpu_milli = n.cpu_milli;
    report.host_memory_mib = n.memory_mib;
    for (int i = 0; i < n.gpu_count; ++i) {
      wire::GpuReport g;
      g.index = i;
      g.uuid = "GPU-" + n.name + "-" + std::to_string(i);
      g.model = n.model;
      g.memory_mib = kSimGpuMemoryMib;
      g.cc_major = 7;
      report.gpus.push_back(g);
    }
    ASSERT_TRUE(cp->RegisterNode(admin, report).ok()) << n.name;
  }
  auto tenant = cp->CreateTenant(admin, "sim", std::nullopt);
  ASSERT_TRUE(tenant.ok()) << tenant.status().ToString();
  Caller user;
  user.role = store::Role::kUser;
  user.token_id = 2;
  user.tenant_id = tenant->id;
  user.tenant = "sim";

  int placed = 0;
  int failed = 0;
  for (std::size_t i = 0; i < pods.size(); ++i) {
    const TracePod& pod = pods[i];
    TaskCreate t;
    t.name = pod.name;
    if (pod.is_share()) {
      t.memory_mib = pod.gpu_milli * kSimMibPerMilli;
      t.compute_percent = std::max(1, pod.gpu_milli / 10);
    } else {
      t.gpu_required = pod.num_gpu;
    }
    auto task = cp->CreateTask(user, t);
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    ASSERT_TRUE(cp->BindPendingOnce().ok());
    auto row = cp->GetTask(admin, task->id);
    ASSERT_TRUE(row.ok());
    Decision d;
    d.placed = row->state == TaskState::kScheduled;
    if (d.placed) {
      auto slice = cp->GetSlice(admin, *row->slice_id);
      ASSERT_TRUE(slice.ok());
      d.node = cp->NodeName(slice->node_id);
      d.gpus = slice->gpu_indices;
      ++placed;
    } else {
      // Nothing fits: the simulator moves on; so does the server.
      ASSERT_EQ(row->state, TaskState::kPending);
      ASSERT_TRUE(cp->CancelTask(user, task->id).ok());
      ++failed;
    }
    ASSERT_EQ(d, simulated[i])
        << "task " << i << " (" << pod.num_gpu << " x " << pod.gpu_milli
        << " milli): server " << Describe(d) << ", simulator "
        << Describe(simulated[i]);
  }
  EXPECT_GT(placed, 150);
  EXPECT_GT(failed, 20);
  cp.reset();
}

}  // namespace
}  // namespace hf::sim
