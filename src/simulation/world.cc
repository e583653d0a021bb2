#include "simulation/world.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "gpu/inventory.h"
#include "store/sqlite_store.h"

namespace hf::simulation {

using nlohmann::json;

namespace {

constexpr char kAdminSecret[] = "hf_simulation_admin_token_0001";
constexpr std::int64_t kForever = std::numeric_limits<std::int64_t>::max();

std::string InventoryJson(NodeKind kind, const std::string& name) {
  std::string gpus;
  bool mps = true;
  switch (kind) {
    case NodeKind::kMig:
      gpus = R"([{"model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559,
                  "compute_capability": "9.0", "mig_enabled": true},
                 {"model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920,
                  "compute_capability": "8.0"}])";
      break;
    case NodeKind::kMps:
      gpus = R"([{"model": "NVIDIA A100-SXM4-40GB", "memory_mb": 40960,
                  "compute_capability": "8.0"},
                 {"model": "NVIDIA A100-SXM4-40GB", "memory_mb": 40960,
                  "compute_capability": "8.0"}])";
      break;
    case NodeKind::kBronze:
      mps = false;
      gpus = R"([{"model": "Tesla T4", "memory_mb": 15360,
                  "compute_capability": "7.5"},
                 {"model": "Tesla T4", "memory_mb": 15360,
                  "compute_capability": "7.5"}])";
      break;
    case NodeKind::kMixed:
      gpus = R"([{"model": "Tesla V100-SXM2-32GB", "memory_mb": 32768,
                  "compute_capability": "7.0"},
                 {"model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559,
                  "compute_capability": "9.0", "mig_enabled": true}])";
      break;
  }
  return R"({"node_id": ")" + name + R"(", "cpu_milli": 64000,
             "host_memory_mb": 524288,
             "mps": {"daemon_can_start": )" +
         (mps ? "true" : "false") + R"(}, "gpus": )" + gpus + "}";
}

std::string Label(const runtime::TaskSpec& spec, const std::string& key) {
  auto it = spec.labels.find(key);
  return it == spec.labels.end() ? std::string() : it->second;
}

std::int64_t ToInt(const std::string& text, std::int64_t fallback) {
  try {
    return text.empty() ? fallback : std::stoll(text);
  } catch (const std::exception&) {
    return fallback;
  }
}

std::pair<std::string, std::string> Pair(const std::string& a,
                                         const std::string& b) {
  return a < b ? std::make_pair(a, b) : std::make_pair(b, a);
}

}  // namespace

// ------------------------------------------------------------------ nodes

struct World::Node {
  std::string name;
  NodeKind kind = NodeKind::kMps;
  std::filesystem::path state_dir;
  std::unique_ptr<gpu::SimGpuDriver> driver;
  std::unique_ptr<runtime::SimHost> host;
  std::unique_ptr<mps::SimMpsControl> mps;
  std::string token;
  bool containerized = false;
  // The agent process.
  std::unique_ptr<runtime::SimRuntime> runtime;
  std::unique_ptr<agent::ServerClient> client;
  std::unique_ptr<agent::Agent> agent;
  int generation = 0;  // bumped at every agent start: old cycles stop
  bool powered = true;
  bool restart_pending = false;
  std::int64_t partitioned_until = 0;
  std::int64_t reports_stalled_until = 0;
  NetworkFaults net;
  int slow_creates = 0;
  std::int64_t slow_create_ms = 0;
  std::unique_ptr<gpu::GpuDriver> agent_driver;  // what the agent calls
};

// The driver as the agent sees it: the node's SimGpuDriver, where a slow
// create keeps the agent from the network for as long as it takes.
class World::AgentDriver final : public gpu::GpuDriver {
 public:
  AgentDriver(World* world, int node) : world_(world), node_(node) {}
  gpu::SimGpuDriver& sim() const { return *world_->nodes_[node_]->driver; }
  std::string Name() const override { return sim().Name(); }
  StatusOr<std::vector<gpu::GpuInfo>> ListGpus() override {
    return sim().ListGpus();
  }
  StatusOr<std::vector<gpu::MigDevice>> ListMigDevices(int gpu) override {
    return sim().ListMigDevices(gpu);
  }
  StatusOr<gpu::MigDevice> CreateMigDevice(
      int gpu, const std::string& profile,
      std::optional<gpu::MigPlacement> placement) override {
    auto made = sim().CreateMigDevice(gpu, profile, placement);
    Node& n = *world_->nodes_[node_];
    if (made.ok() && n.slow_creates > 0) {
      --n.slow_creates;
      world_->Note("node " + n.name + ": the MIG create takes " +
                   std::to_string(n.slow_create_ms) + " ms");
      n.partitioned_until =
          std::max(n.partitioned_until, world_->sim_now_ + n.slow_create_ms);
    }
    return made;
  }
  Status DestroyMigDevice(int gpu, int gpu_instance_id) override {
    return sim().DestroyMigDevice(gpu, gpu_instance_id);
  }
  StatusOr<std::vector<gpu::GpuProcess>> ListProcesses(int gpu) override {
    return sim().ListProcesses(gpu);
  }

 private:
  World* const world_;
  const int node_;
};

// The network between one agent and the server.
class World::AgentTransport final : public agent::Transport {
 public:
  AgentTransport(World* world, int node) : world_(world), node_(node) {}

  StatusOr<agent::WireReply> RoundTrip(
      const agent::WireRequest& request) override {
    World& w = *world_;
    Node& n = *w.nodes_[node_];
    const std::string what = request.method + " " + request.path;
    if (w.sim_now_ < n.partitioned_until) {
      return Status::Unavailable(what + ": network partition");
    }
    if (w.server_ == nullptr) {
      return Status::Unavailable(what + ": connection refused");
    }
    if (w.sim_now_ < n.reports_stalled_until &&
        request.path.find("task-states") != std::string::npos) {
      ++w.counters_.dropped;
      return Status::Unavailable(what + ": timed out (reports stall)");
    }
    std::uniform_real_distribution<double> u(0, 1);
    // Every roll is made whether or not the faults apply, so a filter does
    // not change the random sequence of the rest.
    const bool applies =
        n.net.only_paths_containing.empty() ||
        request.path.find(n.net.only_paths_containing) != std::string::npos;
    const NetworkFaults net = applies ? n.net : NetworkFaults{};
    if (u(w.rng_) < net.drop_request) {
      ++w.counters_.dropped;
      w.Note(n.name + " -> server: " + what + " lost");
      return Status::Unavailable(what + ": timed out (request lost)");
    }
    if (u(w.rng_) < net.delay) {
      ++w.counters_.delayed;
      const int incarnation = w.server_->incarnation;
      const std::int64_t later =
          std::uniform_int_distribution<std::int64_t>(1'000, 20'000)(w.rng_);
      w.Note(n.name + " -> server: " + what + " delayed " +
             std::to_string(later) + " ms");
      w.Schedule(
          later, "delayed " + what + " from " + n.name,
          [&w, request, incarnation] {
            // A connection does not outlive the server process.
            if (w.server_ == nullptr || w.server_->incarnation != incarnation) {
              return;
            }
            (void)w.Call(request.token, request.method, request.path,
                         request.body);
          });
      return Status::Unavailable(what + ": timed out");
    }
    auto reply =
        w.Call(request.token, request.method, request.path, request.body);
    if (!reply) return Status::Unavailable(what + ": connection reset");
    if (u(w.rng_) < net.duplicate && w.server_ != nullptr) {
      ++w.counters_.duplicated;
      w.Note(n.name + " -> server: " + what + " duplicated");
      auto again =
          w.Call(request.token, request.method, request.path, request.body);
      if (!again) return Status::Unavailable(what + ": connection reset");
    }
    if (u(w.rng_) < net.drop_reply) {
      ++w.counters_.dropped;
      w.Note("server -> " + n.name + ": reply to " + what + " lost");
      return Status::Unavailable(what + ": timed out (reply lost)");
    }
    return agent::WireReply{reply->status, reply->body};
  }

 private:
  World* const world_;
  const int node_;
};

// --------------------------------------------------------------- lifetime

World::World(WorldOptions options)
    : options_(std::move(options)),
      clock_(options_.start_ms),
      monotonic_(options_.start_ms),
      rng_(options_.seed),
      sim_now_(options_.start_ms),
      offsets_{{options_.start_ms, 0}} {}

World::~World() {
  for (auto& n : nodes_) {
    n->agent.reset();
    n->client.reset();
    n->runtime.reset();
  }
  server_.reset();
  if (options_.keep_dir) return;
  std::error_code ec;
  std::filesystem::remove_all(options_.dir, ec);
}

StatusOr<std::unique_ptr<World>> World::Create(WorldOptions options) {
  if (options.dir.empty()) {
    return Status::InvalidArgument("is required", "dir");
  }
  std::error_code ec;
  std::filesystem::remove_all(options.dir, ec);
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return Status::FailedPrecondition("cannot create " + options.dir.string() +
                                      ": " + ec.message());
  }
  std::unique_ptr<World> world(new World(std::move(options)));
  HF_RETURN_IF_ERROR(world->Boot());
  return world;
}

Status World::Boot() {
  HF_RETURN_IF_ERROR(StartServer());
  auto secret = server_->cp->BootstrapAdmin(std::string(kAdminSecret));
  if (!secret.ok()) return secret.status();
  admin_token_ = kAdminSecret;
  for (int i = 0; i < options_.tenants; ++i) {
    const std::string name = "t" + std::to_string(i);
    json body = {{"name", name}};
    // t0 and t1 share a group from the start; the others share with nobody.
    if (i < 2) {
      body["shared_group"] = "g01";
      group_of_[name] = "g01";
    }
    auto r = Call(admin_token_, "POST", "/api/v1/tenants", body.dump());
    if (!r || r->status != 201) {
      return Status::Internal("creating tenant " + name + ": " +
                              (r ? r->body : std::string("no reply")));
    }
    tenant_names_.push_back(name);
    auto t = Call(admin_token_, "POST", "/api/v1/tokens",
                  json{{"role", "user"}, {"tenant", name}}.dump());
    if (!t || t->status != 201) {
      return Status::Internal("creating a token for " + name);
    }
    user_tokens_[name] = json::parse(t->body)["token"].get<std::string>();
  }
  for (std::size_t i = 0; i < tenant_names_.size(); ++i) {
    for (std::size_t j = i + 1; j < tenant_names_.size(); ++j) {
      RefreshPair(tenant_names_[i], tenant_names_[j]);
    }
  }
  return Status::Ok();
}

Status World::StartServer() {
  auto inner = store::SqliteStore::Open((options_.dir / "server.db").string());
  if (!inner.ok()) return inner.status().WithContext("opening the store");
  auto s = std::make_unique<Server>();
  s->store = std::make_unique<CrashingStore>(std::move(*inner));
  server::ControlPlaneOptions o;
  o.gc_interval_ms = options_.gc_ms;
  o.gc_min_age_ms = options_.gc_min_age_ms;
  o.mig_command_deadline_ms = options_.mig_deadline_ms;
  o.heartbeat_interval_s = static_cast<int>(options_.heartbeat_ms / 1000);
  o.node_lost_ms = options_.node_lost_ms;
  o.hold_after_ms = options_.hold_after_ms;
  o.max_holds = options_.max_holds;
  o.monotonic_clock = &monotonic_;
  auto cp = server::ControlPlane::Create(s->store.get(), &clock_, o);
  if (!cp.ok()) return cp.status().WithContext("starting the control plane");
  s->cp = std::move(*cp);
  const Status same = s->cp->CheckLedgerMatchesStore();
  if (!same.ok()) {
    violation_ =
        "after a restart the ledger differs from the store: " + same.ToString();
  }
  s->api = std::make_unique<api::LocalApi>(s->cp.get(), &clock_);
  s->incarnation = ++incarnations_;
  server_ = std::move(s);
  Note("server up (incarnation " + std::to_string(incarnations_) + ")");
  ScheduleServerWork(incarnations_);
  if (incarnations_ > 1) {
    check_durable_ = true;
    ResyncSharingFromStore();
  }
  return Status::Ok();
}

void World::TearDownServer() {
  if (server_ == nullptr) return;
  ++counters_.server_crashes;
  Note("server down (incarnation " + std::to_string(server_->incarnation) +
       ")");
  server_.reset();
}

void World::ReapCrash() {
  if (server_ == nullptr || !server_->store->crashed()) return;
  TearDownServer();
  const std::int64_t down =
      std::uniform_int_distribution<std::int64_t>(500, 20'000)(rng_);
  if (!server_restart_pending_) {
    server_restart_pending_ = true;
    Schedule(down, "server restart", [this] {
      server_restart_pending_ = false;
      if (server_ != nullptr) return;
      const Status s = StartServer();
      if (!s.ok()) violation_ = "the server did not start: " + s.ToString();
    });
  }
}

void World::ScheduleServerWork(int incarnation) {
  Schedule(options_.scheduler_ms, "scheduler pass",
           [this, incarnation] { RunScheduler(incarnation); });
  Schedule(options_.gc_ms, "gc", [this, incarnation] { RunGc(incarnation); });
}

void World::RunScheduler(int incarnation) {
  if (server_ == nullptr || server_->incarnation != incarnation) return;
  (void)server_->cp->SchedulerPass();
  ReapCrash();
  if (server_ != nullptr && server_->incarnation == incarnation) {
    Schedule(options_.scheduler_ms, "scheduler pass",
             [this, incarnation] { RunScheduler(incarnation); });
  }
}

void World::RunGc(int incarnation) {
  if (server_ == nullptr || server_->incarnation != incarnation) return;
  (void)server_->cp->RunGcOnce();
  ReapCrash();
  if (server_ != nullptr && server_->incarnation == incarnation) {
    Schedule(options_.gc_ms, "gc", [this, incarnation] { RunGc(incarnation); });
  }
}

// ------------------------------------------------------------------ nodes

StatusOr<int> World::AddNode(NodeKind kind) {
  auto n = std::make_unique<Node>();
  const int index = static_cast<int>(nodes_.size());
  n->name = "n" + std::to_string(index);
  n->kind = kind;
  n->state_dir = options_.dir / n->name;
  std::error_code ec;
  std::filesystem::create_directories(n->state_dir, ec);
  auto inventory = gpu::ParseInventory(InventoryJson(kind, n->name));
  if (!inventory.ok()) return inventory.status();
  n->containerized = inventory->containerized;
  const bool mps_can_start = inventory->mps.daemon_can_start;
  gpu::SimDriverOptions driver_options;
  driver_options.state_file = (n->state_dir / "mig-state.json").string();
  auto driver =
      gpu::SimGpuDriver::Create(std::move(*inventory), clock_, driver_options);
  if (!driver.ok()) return driver.status();
  n->driver = std::move(*driver);
  // Processes run in real time: a wall-clock jump does not end them early.
  n->host = std::make_unique<runtime::SimHost>(
      n->driver.get(), &monotonic_, [](const runtime::TaskSpec& spec) {
        runtime::SimTaskBehaviour b;
        b.duration_ms = ToInt(Label(spec, "sim.duration_ms"), 60'000);
        b.memory_mib = ToInt(Label(spec, "sim.memory_mb"), 0);
        b.exit_code = static_cast<int>(ToInt(Label(spec, "sim.exit_code"), 0));
        return b;
      });
  // The hardware is checked the moment a process starts: an old process
  // stopped later in the same agent cycle must not hide an overlap.
  n->host->set_on_start([this](const runtime::SimTaskProcess&) {
    if (violation_ || !options_.check_every_step) return;
    if (auto v = CheckHardware()) violation_ = "at a process start: " + *v;
  });
  mps::SimMpsOptions mps_options;
  mps_options.daemon_can_start = mps_can_start;
  n->mps = std::make_unique<mps::SimMpsControl>(mps_options);
  // A node token bound to this node.
  auto t = Call(admin_token_, "POST", "/api/v1/tokens",
                json{{"role", "node"}, {"node", n->name}}.dump());
  if (!t) return Status::Unavailable("the server is down: no node token");
  if (t->status != 201) {
    return Status::Internal("creating the node token of " + n->name + ": " +
                            t->body);
  }
  n->token = json::parse(t->body)["token"].get<std::string>();
  nodes_.push_back(std::move(n));
  HF_RETURN_IF_ERROR(StartAgent(index));
  Note("node " + nodes_[index]->name + " added");
  return index;
}

std::string World::NodeName(int node) const { return nodes_[node]->name; }

Status World::StartAgent(int node) {
  Node& n = *nodes_[node];
  if (n.agent != nullptr) return Status::Ok();
  n.runtime = std::make_unique<runtime::SimRuntime>(n.host.get());
  n.client = std::make_unique<agent::ServerClient>(
      std::make_unique<AgentTransport>(this, node), n.token);
  agent::AgentOptions o;
  o.node_id = n.name;
  o.agent_version = "simulation";
  o.state_dir = n.state_dir / "agent";
  o.heartbeat_interval = std::chrono::milliseconds(options_.heartbeat_ms);
  o.log_chunk_bytes = 4096;
  agent::HostFacts facts;
  facts.containerized = n.containerized;
  facts.cpu_milli = 64000;
  facts.host_memory_mib = 524288;
  if (n.agent_driver == nullptr) {
    n.agent_driver = std::make_unique<AgentDriver>(this, node);
  }
  auto a = agent::Agent::Create(o, n.client.get(), n.agent_driver.get(),
                                n.runtime.get(), n.mps.get(), facts, &clock_);
  if (!a.ok()) return a.status();
  n.agent = std::move(*a);
  const int generation = ++n.generation;
  Note("agent " + n.name + " up");
  const std::int64_t first = std::uniform_int_distribution<std::int64_t>(
      0, options_.heartbeat_ms)(rng_);
  Schedule(first, "agent " + n.name + " cycle",
           [this, node, generation] { AgentCycle(node, generation); });
  return Status::Ok();
}

void World::AgentCycle(int node, int generation) {
  Node& n = *nodes_[node];
  if (n.agent == nullptr || n.generation != generation) return;
  (void)n.agent->RunOnce();
  ReapCrash();
  if (n.agent == nullptr || n.generation != generation) return;
  // A little jitter, as real timers have.
  const std::int64_t next =
      options_.heartbeat_ms +
      std::uniform_int_distribution<std::int64_t>(-250, 250)(rng_);
  Schedule(next, "agent " + n.name + " cycle",
           [this, node, generation] { AgentCycle(node, generation); });
}

void World::StopAgent(int node) {
  Node& n = *nodes_[node];
  if (n.agent == nullptr) return;
  n.agent.reset();
  n.client.reset();
  n.runtime.reset();
  ++n.generation;
  Note("agent " + n.name + " down");
}

// ----------------------------------------------------------------- events

void World::Schedule(std::int64_t delay_ms, std::string what,
                     std::function<void()> run) {
  events_.push(Event{sim_now_ + std::max<std::int64_t>(delay_ms, 0),
                     next_seq_++, std::move(what), std::move(run)});
}

void World::Note(const std::string& line) {
  std::ostringstream out;
  out << "#" << steps_ << " t+" << (sim_now_ - options_.start_ms) << "ms "
      << line;
  trace_.push_back(out.str());
  while (trace_.size() > options_.trace_events) trace_.pop_front();
}

void World::SetClocks() {
  clock_.Set(sim_now_ + clock_offset_);
  monotonic_.Set(sim_now_);
}

std::vector<std::string> World::Trace() const {
  return {trace_.begin(), trace_.end()};
}

std::optional<std::string> World::AfterStep() {
  ++steps_;
  for (auto& n : nodes_) n->host->Tick();
  if (violation_) return violation_;
  if (!options_.check_every_step) return std::nullopt;
  auto v = CheckInvariants();
  if (v) violation_ = v;
  return v;
}

std::optional<std::string> World::Step() {
  if (violation_) return violation_;
  if (events_.empty()) return std::nullopt;
  Event ev = events_.top();
  events_.pop();
  sim_now_ = std::max(sim_now_, ev.at);
  SetClocks();
  Note(ev.what);
  ev.run();
  return AfterStep();
}

std::optional<std::string> World::RunFor(std::int64_t ms) {
  const std::int64_t until = sim_now_ + ms;
  while (!events_.empty() && events_.top().at <= until) {
    if (auto v = Step()) return v;
  }
  sim_now_ = std::max(sim_now_, until);
  SetClocks();
  return violation_;
}

std::optional<std::string> World::Act(const std::string& what,
                                      const std::function<void()>& fn) {
  if (violation_) return violation_;
  SetClocks();
  Note(what);
  fn();
  return AfterStep();
}

// -------------------------------------------------------------- requests

std::optional<api::LocalResponse> World::Call(const std::string& token,
                                              const std::string& method,
                                              const std::string& target,
                                              const std::string& body) {
  if (server_ == nullptr) return std::nullopt;
  api::LocalRequest request;
  request.method = method;
  request.target = target;
  request.bearer = token;
  request.body = body;
  api::LocalResponse reply = server_->api->Handle(request);
  if (server_->store->crashed()) {
    ReapCrash();
    return std::nullopt;  // the process died serving it: no reply
  }
  if (reply.status >= 500) {
    Note(method + " " + target + " -> " + std::to_string(reply.status) + " " +
         reply.body.substr(0, 200));
  }
  return reply;
}

std::optional<std::int64_t> World::CreateTask(const TaskShape& shape) {
  const std::string name = "sim-" + std::to_string(++task_seq_);
  json body = {{"name", name}, {"image", "sim"}};
  if (shape.command) body["command"] = {"sim-task"};
  if (shape.whole_gpus > 0) {
    body["gpu_required"] = shape.whole_gpus;
  } else {
    body["gpu_memory_mb"] = shape.memory_mib;
    if (shape.compute_ratio) body["gpu_compute_ratio"] = *shape.compute_ratio;
  }
  body["labels"] = {
      {"sim.duration_ms", std::to_string(shape.duration_ms)},
      {"sim.exit_code", std::to_string(shape.exit_code)},
      {"sim.memory_mb",
       std::to_string(shape.whole_gpus > 0 ? 0 : shape.memory_mib)},
      {"sim.tenant", shape.tenant},
      {"sim.name", name}};
  created_at_[name] = sim_now_;
  auto token = user_tokens_.find(shape.tenant);
  if (token == user_tokens_.end()) return std::nullopt;
  auto r = Call(token->second, "POST", "/api/v1/tasks", body.dump());
  if (!r || r->status != 201) {
    if (r) Note("create " + name + " refused: " + r->body.substr(0, 200));
    return std::nullopt;
  }
  const std::int64_t id = json::parse(r->body)["id"].get<std::int64_t>();
  acked_tasks_[id] = AckedTask{shape.tenant, name, false};
  if (!shape.command) commandless_.insert(id);
  ++counters_.tasks_created;
  Note("created task " + std::to_string(id) + " (" + name + ", " +
       shape.tenant + ", " +
       (shape.whole_gpus > 0
            ? std::to_string(shape.whole_gpus) + " whole GPU(s)"
            : std::to_string(shape.memory_mib) + " MB") +
       (shape.command ? "" : ", no command") + ")");
  return id;
}

bool World::CancelTask(std::int64_t task_id, const std::string& tenant) {
  auto token = user_tokens_.find(tenant);
  if (token == user_tokens_.end()) return false;
  auto r = Call(token->second, "POST",
                "/api/v1/tasks/" + std::to_string(task_id) + "/cancel", "");
  if (!r || r->status != 200) return false;
  auto it = acked_tasks_.find(task_id);
  if (it != acked_tasks_.end()) it->second.cancel_acked = true;
  Note("cancelled task " + std::to_string(task_id));
  return true;
}

bool World::DeleteSlice(std::int64_t slice_id) {
  auto r = Call(
      admin_token_, "DELETE",
      "/api/v1/slices/" + std::to_string(slice_id) + "?reason=simulation", "");
  if (!r || r->status != 200) return false;
  acked_deletes_.insert(slice_id);
  Note("deleted slice " + std::to_string(slice_id));
  return true;
}

bool World::ResizeSlice(std::int64_t slice_id, std::int64_t memory_mib) {
  auto r =
      Call(admin_token_, "PATCH", "/api/v1/slices/" + std::to_string(slice_id),
           json{{"memory_mb", memory_mib}}.dump());
  return r && r->status == 200;
}

bool World::SetTenantGroup(const std::string& tenant,
                           const std::optional<std::string>& group) {
  const json body = {{"shared_group", group ? json(*group) : json(nullptr)}};
  // Joining may allow sharing: until the outcome is known, assume it did.
  uncertain_since_ = std::min(uncertain_since_, sim_now_);
  auto r =
      Call(admin_token_, "PATCH", "/api/v1/tenants/" + tenant, body.dump());
  if (!r) return false;  // outcome unknown until the next restart resyncs
  uncertain_since_ = kForever;
  if (r->status != 200) return false;
  if (group) {
    group_of_[tenant] = *group;
  } else {
    group_of_.erase(tenant);
  }
  for (const std::string& other : tenant_names_) {
    if (other != tenant) RefreshPair(tenant, other);
  }
  Note("tenant " + tenant + " now in group " + group.value_or("(none)"));
  return true;
}

bool World::Approve(const std::string& a, const std::string& b,
                    std::int64_t ttl_s) {
  uncertain_since_ = std::min(uncertain_since_, sim_now_);
  auto r = Call(admin_token_, "POST", "/api/v1/sharing-approvals",
                json{{"tenant_a", a},
                     {"tenant_b", b},
                     {"reason", "simulation"},
                     {"ttl_s", ttl_s}}
                    .dump());
  if (!r) return false;
  uncertain_since_ = kForever;
  if (r->status != 201) return false;
  const std::int64_t id = json::parse(r->body)["id"].get<std::int64_t>();
  // In sim time, but expiring by the server's (jumping) wall clock.
  approvals_[id] = Approval{a, b, sim_now_, now() + ttl_s * 1000, kForever};
  Note("approved " + a + "+" + b + " for " + std::to_string(ttl_s) + " s");
  return true;
}

bool World::RevokeApproval(std::int64_t id) {
  uncertain_since_ = std::min(uncertain_since_, sim_now_);
  auto r = Call(admin_token_, "DELETE",
                "/api/v1/sharing-approvals/" + std::to_string(id), "");
  if (!r) return false;
  uncertain_since_ = kForever;
  if (r->status != 200) return false;
  auto it = approvals_.find(id);
  if (it != approvals_.end()) it->second.revoked_at = sim_now_;
  Note("revoked approval " + std::to_string(id));
  return true;
}

std::vector<std::int64_t> World::ApprovalIds() const {
  std::vector<std::int64_t> out;
  for (const auto& [id, a] : approvals_) {
    if (a.revoked_at == kForever) out.push_back(id);
  }
  return out;
}

// -------------------------------------------------------- sharing oracle

void World::RefreshPair(const std::string& a, const std::string& b) {
  auto ga = group_of_.find(a);
  auto gb = group_of_.find(b);
  const bool same = ga != group_of_.end() && gb != group_of_.end() &&
                    ga->second == gb->second;
  auto& intervals = group_sharing_[Pair(a, b)];
  const bool open = !intervals.empty() && intervals.back().second == kForever;
  if (same && !open) intervals.emplace_back(sim_now_, kForever);
  if (!same && open) intervals.back().second = sim_now_;
}

bool World::MayShare(const std::string& a, const std::string& b,
                     std::int64_t from, std::int64_t to) const {
  if (a == b) return true;
  const auto overlaps = [&](std::int64_t s, std::int64_t e) {
    return s <= to && from < e;
  };
  auto it = group_sharing_.find(Pair(a, b));
  if (it != group_sharing_.end()) {
    for (const auto& [s, e] : it->second) {
      if (overlaps(s, e)) return true;
    }
  }
  for (const auto& [id, ap] : approvals_) {
    if (Pair(ap.a, ap.b) != Pair(a, b)) continue;
    // In force at sim instant t: created <= t < revoked, and the server's
    // clock at t (t + the offset then) before its expiry.
    const std::int64_t lo = std::max(from, ap.created_at);
    const std::int64_t hi = std::min(to, ap.revoked_at - 1);
    for (std::size_t i = 0; i < offsets_.size(); ++i) {
      const std::int64_t seg_start = offsets_[i].first;
      const std::int64_t seg_end =
          i + 1 < offsets_.size() ? offsets_[i + 1].first : kForever;
      const std::int64_t t = std::max(lo, seg_start);
      if (t > hi || t >= seg_end) continue;
      if (t + offsets_[i].second < ap.expires_at) return true;
    }
  }
  for (const auto& [s, e] : uncertain_) {
    if (overlaps(s, e)) return true;
  }
  return overlaps(uncertain_since_, kForever);
}

void World::ResyncSharingFromStore() {
  // What the calls whose replies were lost really did.
  if (uncertain_since_ != kForever) {
    uncertain_.emplace_back(uncertain_since_, sim_now_);
    uncertain_since_ = kForever;
  }
  std::vector<store::TenantRow> tenants;
  std::vector<store::GroupRow> groups;
  std::vector<store::ApprovalRow> approvals;
  (void)server_->store->inner()->Read([&](store::Txn& txn) -> Status {
    auto t = txn.ListTenants();
    if (t.ok()) tenants = *t;
    auto g = txn.ListGroups();
    if (g.ok()) groups = *g;
    auto a = txn.ListApprovals();
    if (a.ok()) approvals = *a;
    return Status::Ok();
  });
  std::map<std::int64_t, std::string> group_names;
  for (const auto& g : groups) group_names[g.id] = g.name;
  std::map<std::int64_t, std::string> tenant_names;
  group_of_.clear();
  for (const auto& t : tenants) {
    tenant_names[t.id] = t.name;
    if (t.group_id && group_names.contains(*t.group_id)) {
      group_of_[t.name] = group_names[*t.group_id];
    }
  }
  for (std::size_t i = 0; i < tenant_names_.size(); ++i) {
    for (std::size_t j = i + 1; j < tenant_names_.size(); ++j) {
      RefreshPair(tenant_names_[i], tenant_names_[j]);
    }
  }
  for (const auto& a : approvals) {
    if (approvals_.contains(a.id)) {
      if (a.revoked_at && approvals_[a.id].revoked_at == kForever) {
        approvals_[a.id].revoked_at = sim_now_;
      }
      continue;
    }
    // One the world never heard of (its reply was lost): from the start of
    // the window that left it unknown.
    const std::int64_t since =
        uncertain_.empty() ? sim_now_ : uncertain_.back().first;
    approvals_[a.id] =
        Approval{tenant_names[a.tenant_a], tenant_names[a.tenant_b], since,
                 a.expires_at, a.revoked_at ? sim_now_ : kForever};
  }
}

// ----------------------------------------------------------------- faults

void World::ArmServerCrash(CrashPoint point, int writes_from_now) {
  if (server_ == nullptr) return;
  server_->store->Arm(point, writes_from_now);
  Note("server crash armed at write +" + std::to_string(writes_from_now));
}

void World::CrashServer(std::int64_t down_ms) {
  if (server_ == nullptr) return;
  TearDownServer();
  if (!server_restart_pending_) {
    server_restart_pending_ = true;
    Schedule(down_ms, "server restart", [this] {
      server_restart_pending_ = false;
      if (server_ != nullptr) return;
      const Status s = StartServer();
      if (!s.ok()) violation_ = "the server did not start: " + s.ToString();
    });
  }
}

void World::CrashAgent(int node, std::int64_t down_ms) {
  Node& n = *nodes_[node];
  if (n.agent == nullptr) return;
  ++counters_.agent_crashes;
  StopAgent(node);
  if (!n.restart_pending) {
    n.restart_pending = true;
    Schedule(down_ms, "agent " + n.name + " restart", [this, node] {
      Node& m = *nodes_[node];
      m.restart_pending = false;
      if (!m.powered) return;
      const Status s = StartAgent(node);
      if (!s.ok()) violation_ = "agent did not start: " + s.ToString();
    });
  }
}

void World::PowerOff(int node) {
  Node& n = *nodes_[node];
  if (!n.powered) return;
  StopAgent(node);
  n.host->PowerOff();
  n.powered = false;
  Note("node " + n.name + " powered off");
}

void World::PowerOn(int node) {
  Node& n = *nodes_[node];
  if (n.powered) return;
  n.powered = true;
  Note("node " + n.name + " powered on");
  const Status s = StartAgent(node);
  if (!s.ok()) violation_ = "agent did not start: " + s.ToString();
}

void World::Partition(int node, std::int64_t ms) {
  nodes_[node]->partitioned_until = sim_now_ + ms;
  Note("node " + nodes_[node]->name + " partitioned for " + std::to_string(ms) +
       " ms");
}

void World::SetNetworkFaults(int node, const NetworkFaults& faults) {
  nodes_[node]->net = faults;
}

void World::StallReports(int node, std::int64_t ms) {
  Node& n = *nodes_[node];
  n.reports_stalled_until = std::max(n.reports_stalled_until, sim_now_ + ms);
  Note("node " + n.name + ": task-state reports stall for " +
       std::to_string(ms) + " ms");
}

void World::LoseGpu(int node, int gpu, std::int64_t for_ms) {
  Node& n = *nodes_[node];
  if (!n.driver->SetLost(gpu, true).ok()) return;
  n.host->FailGpu(gpu);
  Note("node " + n.name + " GPU " + std::to_string(gpu) + " lost");
  Schedule(for_ms, "GPU recovers", [this, node, gpu] {
    (void)nodes_[node]->driver->SetLost(gpu, false);
  });
}

void World::FailMigCreates(int node, int gpu, int count, StatusCode code) {
  (void)nodes_[node]->driver->FailNextMigCreates(gpu, count, code);
  Note("node " + nodes_[node]->name + " GPU " + std::to_string(gpu) +
       ": next " + std::to_string(count) + " MIG creates fail");
}

void World::SlowMigCreates(int node, int count, std::int64_t ms) {
  Node& n = *nodes_[node];
  n.slow_creates = count;
  n.slow_create_ms = ms;
  Note("node " + n.name + ": the next " + std::to_string(count) +
       " MIG creates take " + std::to_string(ms) + " ms");
}

void World::StopMpsDaemon(int node, std::int64_t for_ms) {
  Node& n = *nodes_[node];
  n.mps->SetDaemonCanStart(false);
  n.mps->KillDaemon();
  Note("node " + n.name + " MPS daemon down");
  Schedule(for_ms, "MPS can start", [this, node] {
    Node& m = *nodes_[node];
    m.mps->SetDaemonCanStart(m.kind != NodeKind::kBronze);
  });
}

void World::JumpClock(std::int64_t ms) {
  clock_offset_ += ms;
  offsets_.emplace_back(sim_now_, clock_offset_);
  SetClocks();
  Note("clock jumps " + std::to_string(ms) + " ms");
}

void World::HealAll() {
  Note("faults stop");
  if (server_ != nullptr) server_->store->Disarm();
  if (server_ == nullptr) {
    const Status s = StartServer();
    if (!s.ok()) violation_ = "the server did not start: " + s.ToString();
  }
  for (int i = 0; i < node_count(); ++i) {
    Node& n = *nodes_[i];
    n.partitioned_until = 0;
    n.reports_stalled_until = 0;
    n.slow_creates = 0;
    n.net = NetworkFaults{};
    for (std::size_t g = 0; g < n.driver->inventory().gpus.size(); ++g) {
      (void)n.driver->SetLost(static_cast<int>(g), false);
      (void)n.driver->FailNextMigCreates(static_cast<int>(g), 0,
                                         StatusCode::kInternal);
    }
    n.mps->SetDaemonCanStart(n.kind != NodeKind::kBronze);
    if (!n.powered) {
      PowerOn(i);
    } else if (n.agent == nullptr) {
      const Status s = StartAgent(i);
      if (!s.ok()) violation_ = "agent did not start: " + s.ToString();
    }
  }
}

// ------------------------------------------------------------------ views

store::Store* World::store() const {
  return server_ == nullptr ? nullptr : server_->store->inner();
}

const runtime::SimHost& World::host(int node) const {
  return *nodes_[node]->host;
}

gpu::SimGpuDriver& World::driver(int node) { return *nodes_[node]->driver; }

std::vector<store::TaskRow> World::Tasks() {
  std::vector<store::TaskRow> out;
  if (server_ == nullptr) return out;
  (void)server_->store->inner()->Read([&](store::Txn& txn) -> Status {
    out.clear();
    store::TaskFilter f;
    f.limit = 1000;
    for (;;) {
      auto rows = txn.ListTasks(f);
      if (!rows.ok()) return rows.status();
      out.insert(out.end(), rows->begin(), rows->end());
      if (static_cast<int>(rows->size()) < f.limit) return Status::Ok();
      f.after_id = rows->back().id;
    }
  });
  return out;
}

std::vector<store::SliceRow> World::LiveSlices() {
  std::vector<store::SliceRow> out;
  if (server_ == nullptr) return out;
  (void)server_->store->inner()->Read([&](store::Txn& txn) -> Status {
    out.clear();
    store::SliceFilter f;
    f.live_only = true;
    f.limit = 1000;
    for (;;) {
      auto rows = txn.ListSlices(f);
      if (!rows.ok()) return rows.status();
      out.insert(out.end(), rows->begin(), rows->end());
      if (static_cast<int>(rows->size()) < f.limit) return Status::Ok();
      f.after_id = rows->back().id;
    }
  });
  return out;
}

// ----------------------------------------------------------------- checks

std::optional<std::string> World::CheckInvariants() {
  if (auto v = CheckHardware()) return v;
  if (server_ == nullptr) return std::nullopt;
  if (auto v = CheckDurable()) return v;
  if (auto v = CheckCoverage()) return v;
  if (auto v = CheckMig()) return v;
  if (auto v = CheckUnstartable()) return v;
  return std::nullopt;
}

namespace {

// Every agent of the world runs tasks as processes (runtime "sim"), which
// need a command: a task without one can be started by no node.
bool NoNodeCanStart(const store::TaskRow& t) { return t.command.empty(); }

}  // namespace

// A task no node can start is never bound to one: no slice, never
// scheduled or running (it waits, or is cancelled). After every step, of
// the acknowledged ones (one whose create reply was lost is in
// CheckSettled's pass over every task).
std::optional<std::string> World::CheckUnstartable() {
  std::optional<std::string> out;
  (void)server_->store->inner()->Read([&](store::Txn& txn) -> Status {
    for (const std::int64_t id : commandless_) {
      auto t = txn.GetTask(id);
      if (!t.ok() || !NoNodeCanStart(*t)) continue;  // CheckDurable's
      if (t->slice_id || (t->state != store::TaskState::kPending &&
                          t->state != store::TaskState::kCancelled)) {
        out =
            "UNSTARTABLE BOUND: task " + std::to_string(id) +
            " has no command, which no node can start, yet it is " +
            std::string(store::TaskStateName(t->state)) +
            (t->slice_id ? " with slice " + std::to_string(*t->slice_id) : "") +
            (t->pending_reason.empty() ? "" : " (" + t->pending_reason + ")");
        return Status::Ok();
      }
    }
    return Status::Ok();
  });
  return out;
}

// Per physical GPU: the memory running processes hold fits the card, and
// tenants that may not share never run on it together.
std::optional<std::string> World::CheckHardware() {
  for (const auto& n : nodes_) {
    const gpu::Inventory& inventory = n->driver->inventory();
    std::map<int, std::int64_t> used;
    std::map<int, std::vector<const runtime::SimTaskProcess*>> on_gpu;
    for (const auto& [id, p] : n->host->tasks()) {
      if (!p.running()) continue;
      for (int g : p.gpu_indices) {
        used[g] += p.memory_mib;
        on_gpu[g].push_back(&p);
      }
    }
    for (const auto& [g, mib] : used) {
      const std::int64_t capacity = inventory.gpus[g].memory_mib;
      if (mib > capacity) {
        std::string who;
        for (const auto* p : on_gpu[g]) {
          who += " task " + std::to_string(p->task_id) + " (" +
                 std::to_string(p->memory_mib) + " MB)";
        }
        return "OVERSOLD: node " + n->name + " GPU " + std::to_string(g) +
               " runs " + std::to_string(mib) + " MB of processes on a " +
               std::to_string(capacity) + " MB card:" + who;
      }
    }
    for (const auto& [g, procs] : on_gpu) {
      for (std::size_t i = 0; i < procs.size(); ++i) {
        for (std::size_t j = i + 1; j < procs.size(); ++j) {
          const auto* p = procs[i];
          const auto* q = procs[j];
          const std::string tp = Label(p->spec, "sim.tenant");
          const std::string tq = Label(q->spec, "sim.tenant");
          if (tp == tq) continue;
          // Checked from the later one's creation to its start.
          const auto* later = p->started_at >= q->started_at ? p : q;
          auto created =
              created_at_.find(later->spec.labels.count("sim.name")
                                   ? later->spec.labels.at("sim.name")
                                   : std::string());
          std::int64_t from = later->started_at;
          if (created != created_at_.end()) from = created->second;
          if (!MayShare(tp, tq, from, later->started_at)) {
            std::string why = "TENANCY: node " + n->name + " GPU ";
            why += std::to_string(g) + " runs task ";
            why += std::to_string(p->task_id) + " of " + tp + " and task ";
            why += std::to_string(q->task_id) + " of " + tq;
            why += ", who were not allowed to share from ";
            why += std::to_string(from - options_.start_ms) + " to ";
            why += std::to_string(later->started_at - options_.start_ms);
            return why + " ms";
          }
        }
      }
    }
  }
  return std::nullopt;
}

// Every running process is covered by a live slice of its tenant on the
// GPU it really runs on.
std::optional<std::string> World::CheckCoverage() {
  std::vector<store::SliceRow> live;
  std::map<std::string, std::int64_t> node_ids;
  std::map<std::string, std::int64_t> tenant_ids;
  (void)server_->store->inner()->Read([&](store::Txn& txn) -> Status {
    live.clear();
    store::SliceFilter f;
    f.live_only = true;
    f.limit = 1000;
    for (;;) {
      auto rows = txn.ListSlices(f);
      if (!rows.ok()) return rows.status();
      live.insert(live.end(), rows->begin(), rows->end());
      if (static_cast<int>(rows->size()) < f.limit) break;
      f.after_id = rows->back().id;
    }
    auto nodes = txn.ListNodes();
    if (nodes.ok()) {
      for (const auto& n : *nodes) node_ids[n.name] = n.id;
    }
    auto tenants = txn.ListTenants();
    if (tenants.ok()) {
      for (const auto& t : *tenants) tenant_ids[t.name] = t.id;
    }
    return Status::Ok();
  });
  std::multimap<std::int64_t, const store::SliceRow*> by_task;
  for (const store::SliceRow& s : live) {
    if (s.task_id) by_task.emplace(*s.task_id, &s);
  }
  std::map<std::int64_t, std::int64_t> covering;  // slice -> task
  const auto list = [](const std::vector<int>& v) {
    std::string x;
    for (int g : v) x += " " + std::to_string(g);
    return x;
  };
  for (const auto& n : nodes_) {
    auto node_id = node_ids.find(n->name);
    for (const auto& [id, p] : n->host->tasks()) {
      if (!p.running()) continue;
      const std::string where = "task " + std::to_string(id) + " running on " +
                                n->name + " GPU(s)" + list(p.gpu_indices);
      auto [first, last] = by_task.equal_range(id);
      if (first == last) return "UNTRACKED: " + where + " has no live slice";
      std::vector<int> want = p.gpu_indices;
      std::sort(want.begin(), want.end());
      const std::string tenant = Label(p.spec, "sim.tenant");
      auto tid = tenant_ids.find(tenant);
      // The live slice of this task that covers this process.
      const store::SliceRow* cover = nullptr;
      std::string why;
      for (auto it = first; it != last; ++it) {
        const store::SliceRow& s = *it->second;
        std::vector<int> have = s.gpu_indices;
        std::sort(have.begin(), have.end());
        if (node_id == node_ids.end() || s.node_id != node_id->second ||
            want != have) {
          why = "MISPLACED: " + where + " but its slice ";
          why += std::to_string(s.id) + " is on node id ";
          why += std::to_string(s.node_id) + " GPU(s)" + list(have);
          continue;
        }
        if (tid == tenant_ids.end() || s.tenant_id != tid->second) {
          why = "WRONG TENANT: " + where;
          why += " belongs to " + tenant;
          why += " but slice " + std::to_string(s.id) + " to tenant id ";
          why += std::to_string(s.tenant_id);
          continue;
        }
        if (!p.mig_device.empty() && s.mig_device_id != p.mig_device) {
          why = "MISPLACED: " + where + " in MIG device " + p.mig_device +
                " but slice " + std::to_string(s.id) + " owns '" +
                s.mig_device_id + "'";
          continue;
        }
        if (!s.whole && s.memory_mib < p.memory_mib) {
          why = "UNDERCHARGED: " + where + " holds " +
                std::to_string(p.memory_mib) + " MB but slice " +
                std::to_string(s.id) + " accounts " +
                std::to_string(s.memory_mib) + " MB";
          continue;
        }
        cover = &s;
        break;
      }
      if (cover == nullptr) return why;
      auto [c, fresh] = covering.emplace(cover->id, id);
      if (!fresh) {
        return "DOUBLE: slice " + std::to_string(cover->id) + " covers tasks " +
               std::to_string(c->second) + " and " + std::to_string(id);
      }
    }
  }
  return std::nullopt;
}

// Every MIG instance is owned by a live slice, or noted as orphaned within
// the bound once its node and the server can talk.
std::optional<std::string> World::CheckMig() {
  std::set<std::string> owned;
  for (const store::SliceRow& s : LiveSlices()) {
    if (!s.mig_device_id.empty()) owned.insert(s.mig_device_id);
  }
  // A create in flight on a GPU may have made a partition whose report has
  // not arrived: the server cannot judge that GPU yet, and neither can we.
  std::set<std::pair<std::int64_t, int>> creating;  // (node id, GPU index)
  std::map<std::string, std::int64_t> node_ids;
  (void)server_->store->inner()->Read([&](store::Txn& txn) -> Status {
    for (auto state : {store::SliceRequestState::kPending,
                       store::SliceRequestState::kClaimed}) {
      store::SliceRequestFilter f;
      f.state = state;
      f.limit = 1000;
      auto rows = txn.ListSliceRequests(f);
      if (!rows.ok()) return rows.status();
      for (const auto& r : *rows) {
        if (r.action == "create") creating.emplace(r.node_id, r.gpu_index);
      }
    }
    auto nodes = txn.ListNodes();
    if (nodes.ok()) {
      for (const auto& n : *nodes) node_ids[n.name] = n.id;
    }
    return Status::Ok();
  });
  std::set<std::string> present;
  for (const auto& n : nodes_) {
    const bool reachable =
        n->agent != nullptr && n->powered && sim_now_ >= n->partitioned_until;
    const std::int64_t node_id =
        node_ids.contains(n->name) ? node_ids[n->name] : -1;
    for (const auto& [g, devices] : n->driver->AllMigDevices()) {
      const bool judged = !creating.contains({node_id, g});
      for (const gpu::MigDevice& d : devices) {
        present.insert(d.device_uuid);
        if (owned.contains(d.device_uuid) ||
            orphans_seen_in_history_.contains(d.device_uuid)) {
          unowned_since_.erase(d.device_uuid);
          continue;
        }
        auto [it, fresh] = unowned_since_.emplace(d.device_uuid, sim_now_);
        // The clock runs while the node and the server can talk and no
        // create in flight could own the partition.
        if (!reachable || !judged) it->second = sim_now_;
        if (sim_now_ - it->second <= options_.orphan_report_bound_ms) continue;
        // Past the bound: it must be in the history.
        bool noted = false;
        (void)server_->store->inner()->Read([&](store::Txn& txn) -> Status {
          store::HistoryFilter f;
          f.limit = 1000;
          for (;;) {
            auto rows = txn.ListHistory(f);
            if (!rows.ok()) return rows.status();
            for (const auto& h : *rows) {
              if (h.op == "mig_orphaned" &&
                  h.reason.find(d.device_uuid) != std::string::npos) {
                noted = true;
              }
            }
            if (static_cast<int>(rows->size()) < f.limit) return Status::Ok();
            f.after_id = rows->back().id;
          }
        });
        if (noted) {
          orphans_seen_in_history_.insert(d.device_uuid);
          unowned_since_.erase(d.device_uuid);
          continue;
        }
        return "ORPHAN: MIG device " + d.device_uuid + " on " + n->name +
               " GPU " + std::to_string(g) +
               " is owned by no live slice and not reported "
               "MIG_PARTITION_ORPHANED after " +
               std::to_string(sim_now_ - it->second) + " ms";
      }
    }
  }
  std::erase_if(unowned_since_,
                [&](const auto& kv) { return !present.contains(kv.first); });
  return std::nullopt;
}

// After a restart: everything the API acknowledged is still there.
std::optional<std::string> World::CheckDurable() {
  if (!check_durable_) return std::nullopt;
  check_durable_ = false;
  std::optional<std::string> out;
  (void)server_->store->inner()->Read([&](store::Txn& txn) -> Status {
    for (const auto& [id, acked] : acked_tasks_) {
      auto t = txn.GetTask(id);
      if (!t.ok()) {
        out = "LOST WRITE: acknowledged task " + std::to_string(id) +
              " is gone after a restart";
        return Status::Ok();
      }
      if (t->name != acked.name) {
        out = "LOST WRITE: task " + std::to_string(id) + " is " + t->name +
              ", acknowledged as " + acked.name;
        return Status::Ok();
      }
      if (acked.cancel_acked && !t->cancel_requested &&
          !store::IsTerminal(t->state)) {
        out = "LOST WRITE: the acknowledged cancel of task " +
              std::to_string(id) + " is gone after a restart";
        return Status::Ok();
      }
    }
    for (std::int64_t id : acked_deletes_) {
      auto s = txn.GetSlice(id);
      if (s.ok() && s->state == store::SliceState::kAllocated) {
        out = "LOST WRITE: the acknowledged delete of slice " +
              std::to_string(id) + " is gone after a restart";
        return Status::Ok();
      }
    }
    return Status::Ok();
  });
  return out;
}

std::optional<std::string> World::CheckSettled() {
  if (server_ == nullptr) return "the server is down";
  std::set<std::int64_t> running_here;
  for (const auto& n : nodes_) {
    for (const auto& [id, p] : n->host->tasks()) {
      if (p.running()) running_here.insert(id);
    }
  }
  std::map<std::int64_t, store::TaskRow> tasks;
  for (store::TaskRow& t : Tasks()) tasks[t.id] = std::move(t);
  for (const auto& [id, t] : tasks) {
    if (store::IsTerminal(t.state)) continue;
    if (t.state == store::TaskState::kRunning && running_here.contains(id)) {
      continue;
    }
    // Settled where no node can start it: waiting, and saying why.
    if (NoNodeCanStart(t) && t.state == store::TaskState::kPending &&
        t.pending_reason.find("need a command it does not have") !=
            std::string::npos) {
      continue;
    }
    std::string where = " (no node holds it)";
    for (const auto& n : nodes_) {
      auto it = n->host->tasks().find(id);
      if (it == n->host->tasks().end()) continue;
      where = " (" + n->name +
              " holds it: " + runtime::DescribeTaskStatus(it->second.status) +
              "; its agent " + (n->agent ? "is up" : "is down") + ")";
    }
    return "NOT SETTLED: task " + std::to_string(id) + where + " is " +
           std::string(store::TaskStateName(t.state)) +
           (t.pending_reason.empty() ? "" : " (" + t.pending_reason + ")") +
           (t.cancel_requested ? " with a cancel requested" : "") +
           (running_here.contains(id) ? ", running" : ", not running");
  }
  const std::vector<store::SliceRow> live = LiveSlices();
  // Every partition on the cards belongs to a live slice: once the faults
  // stop, nothing a command made (twice, late, or for a slice long gone) is
  // left behind.
  std::set<std::string> owned;
  for (const store::SliceRow& s : live) {
    if (!s.mig_device_id.empty()) owned.insert(s.mig_device_id);
  }
  for (const auto& n : nodes_) {
    for (const auto& [g, devices] : n->driver->AllMigDevices()) {
      for (const gpu::MigDevice& d : devices) {
        if (!owned.contains(d.device_uuid)) {
          return "LEAKED PARTITION: MIG device " + d.device_uuid + " (" +
                 d.profile + ") on " + n->name + " GPU " + std::to_string(g) +
                 " belongs to no live slice";
        }
      }
    }
  }
  // And each orphan was recorded once, not again after every restart.
  std::map<std::string, int> noted;
  std::optional<std::string> twice;
  (void)server_->store->inner()->Read([&](store::Txn& txn) -> Status {
    store::HistoryFilter f;
    f.limit = 1000;
    for (;;) {
      auto rows = txn.ListHistory(f);
      if (!rows.ok()) return rows.status();
      for (const auto& h : *rows) {
        if (h.op != "mig_orphaned") continue;
        const auto at = h.reason.find("MIG-");
        if (at == std::string::npos) continue;
        const std::string uuid =
            h.reason.substr(at, h.reason.find(' ', at) - at);
        if (++noted[uuid] == 2) {
          twice = "ORPHAN NOTED TWICE: " + uuid + " is in the history twice";
        }
      }
      if (static_cast<int>(rows->size()) < f.limit) return Status::Ok();
      f.after_id = rows->back().id;
    }
  });
  if (twice) return twice;
  for (const store::SliceRow& s : live) {
    if (!s.task_id) continue;
    auto t = tasks.find(*s.task_id);
    if (t == tasks.end() || store::IsTerminal(t->second.state) ||
        t->second.slice_id != s.id) {
      return "LEAKED SLICE: slice " + std::to_string(s.id) + " (" +
             std::string(store::SliceStateName(s.state)) + ") of task " +
             std::to_string(*s.task_id) + " outlives it";
    }
  }
  return std::nullopt;
}

}  // namespace hf::simulation
