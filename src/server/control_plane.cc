// ControlPlane: construction, restart recovery, the inventory mirror and
// the admin objects (tenants, groups; tokens and names forward to the
// Identity and Names units, identity.cc and names.cc). Tasks, slices, nodes
// and the scheduler live in the sibling files tasks.cc, slices.cc, nodes.cc
// and scheduler.cc.
#include "server/control_plane.h"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "scheduler/policy/registry.h"
#include "server/internal.h"

namespace hf::server {

using store::Millis;

using store::GroupRow;
using store::Role;
using store::TaskRow;
using store::TenantRow;
using store::TokenRow;
using store::Txn;

// ------------------------------------------------------------- helpers

std::string Sha256Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest.data(), &len, EVP_sha256(),
             nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(static_cast<std::size_t>(len) * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

Status ValidateName(std::string_view name, std::string_view field) {
  if (name.empty())
    return Status::InvalidArgument("is required", std::string(field));
  if (name.size() > 63) {
    return Status::InvalidArgument("must be at most 63 characters",
                                   std::string(field));
  }
  auto ok_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  };
  const bool first_ok =
      (name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9');
  if (!first_ok || !std::all_of(name.begin(), name.end(), ok_char)) {
    return Status::InvalidArgument(
        "must be lower-case letters, digits, '.', '_' or '-', starting with a "
        "letter or digit (got '" +
            std::string(name) + "')",
        std::string(field));
  }
  return Status::Ok();
}

Status RequireAdmin(const Caller& caller) {
  if (caller.admin()) return Status::Ok();
  return Status::PermissionDenied("this needs a platform admin token");
}

// ------------------------------------------------------------- lifetime

ControlPlane::ControlPlane(store::Store* store, const Clock* clock,
                           ControlPlaneOptions options,
                           std::unique_ptr<ledger::Ledger> ledger,
                           scheduler::MadePolicy policy,
                           const WriteFence* fence)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      monotonic_(options_.monotonic_clock != nullptr ? options_.monotonic_clock
                                                     : &steady_),
      fence_(fence),
      beats_(options_.heartbeat_write_every_ms),
      mig_channel_(store, clock, monotonic_, options_.mig_command_deadline_ms,
                   telemetry_.get(), this),
      releases_(clock, &mig_channel_, telemetry_.get()),
      gc_(store, clock, monotonic_,
          GcOptions{options_.gc_min_age_ms, options_.node_lost_ms}, &beats_,
          &mig_channel_, &releases_, this),
      names_(store),
      identity_(store, clock, &names_),
      tenancy_(
          store, clock,
          [this](const std::function<Status(Txn&)>& fn) {
            return LeaderWrite(fn);
          },
          this),
      tasks_(store, clock, &tenancy_, this),
      queue_(options_.resync_interval_ms),
      core_(std::move(ledger), names_, queue_, mig_channel_.book(), *clock,
            *monotonic_, std::move(policy), options_.policy_for_testing),
      scheduler_(
          store, clock,
          SchedulerOptions{options_.bind_batch, options_.retry_interval_ms},
          &core_, &queue_, &mig_channel_, telemetry_.get(), fence, this) {}

ControlPlane::~ControlPlane() { Stop(); }

StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Create(
    store::Store* store, const Clock* clock, ControlPlaneOptions options,
    const WriteFence* fence) {
  if (options.default_compute_percent < 1 ||
      options.default_compute_percent > kFullComputePercent) {
    return Status::InvalidArgument("must be 1..100", "default_compute_percent");
  }
  if (options.gc_interval_ms <= 0) {
    return Status::InvalidArgument("must be positive", "gc_interval");
  }
  if (options.gc_min_age_ms < 0) {
    return Status::InvalidArgument("must not be negative", "gc_min_age");
  }
  if (options.bind_batch <= 0) options.bind_batch = 1;
  auto policy = scheduler::MakePolicy(options.policy, options.learned);
  if (!policy.ok()) {
    return Status::InvalidArgument(policy.status().message(), "policy");
  }
  ledger::LedgerOptions ledger_options;
  ledger_options.default_compute_percent = options.default_compute_percent;
  ledger_options.tie_break_seed = options.tie_break_seed;
  auto ledger = ledger::Ledger::Create(ledger_options);
  if (!ledger.ok()) return ledger.status();
  std::unique_ptr<ControlPlane> cp(
      new ControlPlane(store, clock, std::move(options), std::move(*ledger),
                       std::move(*policy), fence));
  HF_RETURN_IF_ERROR(cp->EnsureDefaultTenant());
  if (!cp->options_.defer_recovery) HF_RETURN_IF_ERROR(cp->Recover());
  return cp;
}

Status ControlPlane::Promote() {
  HF_RETURN_IF_ERROR(Recover().WithContext("rebuilding the ledger"));
  Start();
  return Status::Ok();
}

Status ControlPlane::LeaderWrite(const std::function<Status(Txn&)>& fn) {
  const auto started = std::chrono::steady_clock::now();
  const auto timed = [&](Status s) {
    telemetry_->StoreCommit(std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - started)
                                .count());
    return s;
  };
  if (fence_ == nullptr) return timed(store_->Write(fn));
  if (!fence_->MayAct()) {
    return Status::Unavailable(
        "this hf-server instance is not the leader; retry on the leader");
  }
  return timed(store_->Write([&](Txn& txn) -> Status {
    HF_RETURN_IF_ERROR(fence_->CheckInTxn(txn));
    return fn(txn);
  }));
}

// A release reaches the ledger only after its write committed
// (Releases::ReleaseInTxn lists what is free), so the ledger never holds
// less than the store.
void ControlPlane::ApplyReleasesLocked(const std::vector<RowId>& released) {
  if (released.empty()) return;
  for (RowId id : released) {
    Status s = core_.ledger().Release(SliceId(static_cast<std::uint64_t>(id)));
    if (!s.ok() && s.code() != StatusCode::kNotFound) {
      spdlog::error("ledger release of slice {} failed: {}", id, s.ToString());
    }
  }
  usage_.Forget(released);
  for (RowId id : released) telemetry_->SliceReleased(id);
  queue_.CapacityFreed();
}

Status ControlPlane::WriteReleasing(
    const std::function<Status(Txn&, std::vector<RowId>&)>& fn) {
  return WriteReleases(fn).status();
}

StatusOr<int> ControlPlane::WriteReleases(
    const std::function<Status(Txn&, std::vector<RowId>&)>& fn,
    const std::function<void()>& committed) {
  std::vector<RowId> released;
  // Written without mu_; the releases reach the ledger after the commit.
  ReaderLock gate(core_.write_gate());
  HF_RETURN_IF_ERROR(LeaderWrite([&](Txn& txn) -> Status {
    released.clear();
    return fn(txn, released);
  }));
  if (committed) committed();
  MutexLock lock(core_.mu());
  ApplyReleasesLocked(released);
  return static_cast<int>(released.size());
}

void ControlPlane::Start() {
  MutexLock lock(run_mu_);
  if (started_) return;
  started_ = true;
  queue_.Resume();
  scheduler_thread_ = std::thread([this] { scheduler_.Run(); });
  gc_thread_ = std::thread([this] { GcLoop(); });
  defrag_thread_ = std::thread([this] { DefragLoop(); });
}

void ControlPlane::Stop() {
  MutexLock lock(run_mu_);
  if (!started_) return;
  queue_.Stop();
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (gc_thread_.joinable()) gc_thread_.join();
  if (defrag_thread_.joinable()) defrag_thread_.join();
  started_ = false;
}

SliceEnvInput ControlPlane::SliceEnvFor(const store::SliceRow& slice,
                                        const TaskRow& task) {
  SliceEnvInput in;
  in.slice_id = slice.id;
  in.gpu_index = slice.gpu_indices.empty() ? 0 : slice.gpu_indices[0];
  std::string uuids;
  std::string vendor = "nvidia";
  for (const GpuIdentity& gpu : names_.Gpus(slice.node_id, slice.gpu_indices)) {
    if (!uuids.empty()) uuids += ",";
    uuids += gpu.uuid;
    vendor = gpu.vendor;
  }
  in.gpu_uuids = uuids;
  in.vendor = vendor;
  in.qos_level = slice.qos_level;
  in.whole = slice.whole;
  in.memory_mib = slice.memory_mib;
  in.compute_percent = slice.compute_defaulted ? 0 : slice.compute_percent;
  in.compute_mode = task.gpu_compute_mode;
  in.mig_device_id = slice.mig_device_id;
  return in;
}

StatusOr<int> ControlPlane::RunGcOnce() { return gc_.RunOnce(); }

void ControlPlane::GcLoop() {
  for (;;) {
    if (!queue_.Sleep(std::chrono::milliseconds(options_.gc_interval_ms)))
      return;
    auto released = gc_.RunOnce();
    if (!released.ok()) {
      spdlog::error("gc: {}", released.status().ToString());
    } else if (*released > 0) {
      spdlog::info("gc: released {} orphaned slices", *released);
    }
  }
}

Status ControlPlane::EnsureDefaultTenant() {
  return store_->Write([&](Txn& txn) -> Status {
    auto found = txn.FindTenant(kDefaultTenant);
    if (found.ok()) return Status::Ok();
    if (found.status().code() != StatusCode::kNotFound) return found.status();
    TenantRow row;
    row.name = std::string(kDefaultTenant);
    row.created_at = clock_->NowMillis();
    return txn.InsertTenant(row).status();
  });
}

// Restart recovery (docs/CONTRACT.md section 5): the inventory, the tenancy and
// every live slice go back into the ledger; tenants are normalised (a slice
// whose tenant is gone belongs to its task's tenant, else `default`); the
// slice-id counter moves past the highest id ever stored.
Status ControlPlane::LearnHistoryLocked() {
  if (core_.placement().learner() == nullptr) return Status::Ok();
  core_.placement().ForgetLearned();
  // Older tasks weigh under 2^-8 of the newest: not worth reading.
  const auto window = static_cast<RowId>(
      std::ceil(8 * std::max(1.0, options_.learned.half_life_tasks)));
  RowId newest = 0;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto m = txn.MaxTaskId();
    if (!m.ok()) return m.status();
    newest = *m;
    return Status::Ok();
  }));
  std::int64_t read = 0;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    store::TaskFilter f;
    f.after_id = newest > window ? newest - window : 0;
    f.limit = 1000;
    return ForEachTask(txn, f, [&](TaskRow& task) -> Status {
      core_.mu().AssertHeld();  // the caller holds it while the store runs this
      core_.placement().Learn(task, core_.placement().RequestFor(task));
      ++read;
      return Status::Ok();
    });
  }));
  core_.placement().LearnedThrough(newest);
  spdlog::info("placement: {} learned its target workload from {} tasks",
               core_.placement().policy().name(), read);
  return Status::Ok();
}

Status ControlPlane::Recover() {
  // The ledger is rebuilt from the store: every node's next report is
  // applied in full.
  beats_.Forget();
  std::vector<GroupRow> groups;
  std::vector<TenantRow> tenants;
  std::vector<store::NodeRow> nodes;
  std::vector<store::GpuRow> gpus;
  std::vector<store::ApprovalRow> approvals;
  RowId max_slice_id = 0;
  std::string orphans_text;
  HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
    auto ap = txn.ListApprovals();
    if (!ap.ok()) return ap.status();
    approvals = std::move(*ap);
    auto g = txn.ListGroups();
    if (!g.ok()) return g.status();
    groups = std::move(*g);
    auto t = txn.ListTenants();
    if (!t.ok()) return t.status();
    tenants = std::move(*t);
    auto n = txn.ListNodes();
    if (!n.ok()) return n.status();
    nodes = std::move(*n);
    auto gp = txn.ListGpus(std::nullopt);
    if (!gp.ok()) return gp.status();
    gpus = std::move(*gp);
    auto m = txn.MaxSliceId();
    if (!m.ok()) return m.status();
    max_slice_id = *m;
    auto noted = txn.GetMeta(kMigOrphansNotedKey);
    if (!noted.ok()) return noted.status();
    orphans_text = noted->value_or("");
    return Status::Ok();
  }));

  mig_channel_.book().LoadNoted(orphans_text);
  MutexLock lock(core_.mu());
  names_.SetAll(groups, tenants, nodes);
  for (const GroupRow& g : groups) {
    HF_RETURN_IF_ERROR(core_.tenancy().DefineGroup(g.id));
  }
  for (const TenantRow& t : tenants) {
    HF_RETURN_IF_ERROR(core_.tenancy().SyncTenant(t));
  }
  std::map<RowId, const store::NodeRow*> node_by_id;
  for (const store::NodeRow& n : nodes) {
    node_by_id[n.id] = &n;
    beats_.Seen(n.id, monotonic_->NowMillis());  // silence counts from now
    auto id = core_.inventory().SyncNode(n);
    if (!id.ok()) return id.status();
  }
  for (const store::GpuRow& g : gpus) {
    auto it = node_by_id.find(g.node_id);
    if (it == node_by_id.end()) continue;
    HF_RETURN_IF_ERROR(core_.inventory().SyncGpu(*it->second, g));
  }
  core_.ledger().AdvanceSliceIdPast(
      SliceId(static_cast<std::uint64_t>(max_slice_id)));
  // Every approval counts while the slices are restored (slices placed
  // under one that has since expired or been revoked are still live); then
  // only those in force stay.
  HF_RETURN_IF_ERROR(core_.tenancy().BeginRestore(approvals));

  // Live slices, page by page.
  int restored = 0;
  int failed = 0;
  RowId after = 0;
  const RowId default_tenant = [&] {
    for (const TenantRow& t : tenants) {
      if (t.name == kDefaultTenant) return t.id;
    }
    return RowId{0};
  }();
  for (;;) {
    std::vector<store::SliceRow> page;
    HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
      store::SliceFilter f;
      f.live_only = true;
      f.after_id = after;
      f.limit = 1000;
      auto rows = txn.ListSlices(f);
      if (!rows.ok()) return rows.status();
      page = std::move(*rows);
      return Status::Ok();
    }));
    if (page.empty()) break;
    after = page.back().id;
    for (store::SliceRow& slice : page) {
      const bool tenant_known = std::any_of(
          tenants.begin(), tenants.end(),
          [&](const TenantRow& t) { return t.id == slice.tenant_id; });
      if (!tenant_known) {
        RowId owner = default_tenant;
        if (slice.task_id) {
          (void)store_->Read([&](Txn& txn) -> Status {
            auto task = txn.GetTask(*slice.task_id);
            if (task.ok()) owner = task->tenant_id;
            return Status::Ok();
          });
        }
        spdlog::warn("recovery: slice {} names unknown tenant {}; now {}",
                     slice.id, slice.tenant_id, owner);
        slice.tenant_id = owner;
        HF_RETURN_IF_ERROR(LeaderWrite([&](Txn& txn) -> Status {
          HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
          store::HistoryRow h = HistoryFor(slice, "normalise_tenant");
          h.at = clock_->NowMillis();
          h.actor = "recovery";
          h.reason = "slice named a tenant that no longer exists";
          return txn.AppendHistory(h).status();
        }));
      }
      // The slice exists: a tenancy that has changed since it was placed
      // does not unmake it (the GPU then takes no new slice of either).
      auto restored_alloc = core_.ledger().Restore(
          AllocationFromRow(slice),
          ledger::Ledger::RestoreOptions{.check_tenancy = false});
      if (restored_alloc.ok()) {
        ++restored;
        if (restored_alloc->mig_profile != slice.mig_profile ||
            restored_alloc->mig_start != slice.mig_start) {
          // Recorded without its partition (before the ledger charged
          // partitions): the store learns the one the ledger gave it.
          slice.mig_profile = restored_alloc->mig_profile;
          slice.mig_start = restored_alloc->mig_start;
          slice.memory_mib = restored_alloc->memory_mib;
          slice.compute_percent = restored_alloc->compute_percent;
          slice.compute_defaulted = restored_alloc->compute_defaulted;
          HF_RETURN_IF_ERROR(LeaderWrite([&](Txn& txn) -> Status {
            HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
            store::HistoryRow h = HistoryFor(slice, "charge_partition");
            h.at = clock_->NowMillis();
            h.actor = "recovery";
            h.reason = "charged as the MIG partition " + slice.mig_profile +
                       " at memory slot " + std::to_string(slice.mig_start);
            return txn.AppendHistory(h).status();
          }));
        }
        telemetry_->SliceLive(slice);
      } else {
        ++failed;
        HF_RETURN_IF_ERROR(
            FenceUnrestoredLocked(slice, restored_alloc.status().message()));
      }
    }
  }
  HF_RETURN_IF_ERROR(core_.tenancy().EndRestore(approvals));
  if (restored > 0 || failed > 0) {
    spdlog::info("recovery: {} live slices restored, {} refused", restored,
                 failed);
  }
  HF_RETURN_IF_ERROR(LearnHistoryLocked().WithContext("reading task history"));
  queue_.RequestResync();
  // Tasks created on other instances (followers answer POST /tasks from
  // the store alone) come in through the feed as they commit.
  std::unique_ptr<store::TaskFeed> feed =
      store_->WatchTasks([this](RowId id) { queue_.Committed(id); });
  queue_.SetFeedActive(feed != nullptr);
  task_feed_ = std::move(feed);
  recovered_.store(true);
  return Status::Ok();
}

// ------------------------------------------------------ inventory mirror

Status ControlPlane::FenceUnrestoredLocked(const store::SliceRow& slice,
                                           const std::string& why) {
  std::vector<GpuKey> keys;
  std::string gpus;
  for (int index : slice.gpu_indices) {
    const GpuKey key{slice.node_id, index};
    keys.push_back(key);
    gpus += (gpus.empty() ? "" : ", ") + std::to_string(index);
  }
  HF_RETURN_IF_ERROR(core_.inventory().FenceUnrestored(slice.id, keys));
  const std::string reason =
      "recovery could not restore slice " + std::to_string(slice.id) + " (" +
      why + "): GPU(s) " + gpus + " of node " + std::to_string(slice.node_id) +
      " take nothing new until the slice is deleted (DELETE "
      "/api/v1/slices/" +
      std::to_string(slice.id) + ")";
  spdlog::error("{}", reason);
  return LeaderWrite([&](Txn& txn) -> Status {
    store::HistoryRow h = HistoryFor(slice, "recovery_refused");
    h.at = clock_->NowMillis();
    h.actor = "recovery";
    h.reason = reason;
    return txn.AppendHistory(h).status();
  });
}

ledger::Allocation ControlPlane::AllocationFromRow(const store::SliceRow& row) {
  ledger::Allocation a;
  a.id = SliceId(static_cast<std::uint64_t>(row.id));
  a.tenant = TenantId(row.tenant_id);
  a.kind =
      row.whole ? ledger::RequestKind::kWholeGpus : ledger::RequestKind::kSlice;
  for (int index : row.gpu_indices) {
    auto gpu = core_.inventory().Gpu(row.node_id, index);
    a.gpus.push_back(gpu.ok() ? *gpu : GpuId());
  }
  a.memory_mib = row.memory_mib;
  a.compute_percent = row.compute_percent;
  a.compute_defaulted = row.compute_defaulted;
  a.mig_profile = row.mig_profile;
  a.mig_start = row.mig_start;
  return a;
}

// ------------------------------------------------------------------ names

std::string ControlPlane::TenantName(RowId id) { return names_.Tenant(id); }

std::string ControlPlane::NodeName(RowId id) { return names_.Node(id); }

std::string ControlPlane::GroupName(RowId id) { return names_.Group(id); }

std::string ControlPlane::GpuUuid(RowId node_id, int index) {
  // A follower's ledger is empty: the store's inventory says which card it
  // is (see Names::GpuUuid).
  return names_.GpuUuid(GpuKey{node_id, index},
                        /*read_store=*/!recovered_.load());
}

StatusOr<std::vector<store::SliceRequestRow>> ControlPlane::ClaimSliceRequests(
    const Caller& caller, const std::string& node) {
  return mig_channel_.Claim(caller, node);
}

StatusOr<store::SliceRequestRow> ControlPlane::ReportSliceRequest(
    const Caller& caller, RowId id, const MigResult& result) {
  return mig_channel_.Report(caller, id, result);
}

// --------------------------------------------------------------- identity

StatusOr<Caller> ControlPlane::Authenticate(std::string_view secret) {
  return identity_.Authenticate(secret);
}

StatusOr<std::optional<std::string>> ControlPlane::BootstrapAdmin(
    const std::optional<std::string>& secret) {
  return identity_.BootstrapAdmin(secret);
}

// ------------------------------------------------------ tenants and groups

StatusOr<TenantRow> ControlPlane::CreateTenant(
    const Caller& caller, const std::string& name,
    const std::optional<std::string>& group) {
  return tenancy_.CreateTenant(caller, name, group);
}

StatusOr<std::vector<TenantRow>> ControlPlane::ListTenants(
    const Caller& caller) {
  return tenancy_.ListTenants(caller);
}

StatusOr<TenantRow> ControlPlane::GetTenant(const Caller& caller,
                                            const std::string& name) {
  return tenancy_.GetTenant(caller, name);
}

StatusOr<TenantRow> ControlPlane::SetTenantGroup(
    const Caller& caller, const std::string& name,
    const std::optional<std::string>& group) {
  return tenancy_.SetTenantGroup(caller, name, group);
}

StatusOr<GroupRow> ControlPlane::CreateGroup(const Caller& caller,
                                             const std::string& name) {
  return tenancy_.CreateGroup(caller, name);
}

StatusOr<std::vector<GroupRow>> ControlPlane::ListGroups(const Caller& caller) {
  return tenancy_.ListGroups(caller);
}

StatusOr<GroupRow> ControlPlane::DeleteGroup(const Caller& caller,
                                             const std::string& name) {
  return tenancy_.DeleteGroup(caller, name);
}

// ------------------------------------------------------------------- tasks

StatusOr<TaskRow> ControlPlane::CreateTask(const Caller& caller,
                                           TaskCreate task) {
  return tasks_.CreateTask(caller, std::move(task));
}

StatusOr<TaskRow> ControlPlane::GetTask(const Caller& caller, RowId id) {
  return tasks_.GetTask(caller, id);
}

StatusOr<Page<TaskRow>> ControlPlane::ListTasks(const Caller& caller,
                                                const TaskQuery& query) {
  return tasks_.ListTasks(caller, query);
}

StatusOr<TaskRow> ControlPlane::CancelTask(const Caller& caller, RowId id) {
  return tasks_.CancelTask(caller, id);
}

StatusOr<TaskLog> ControlPlane::ReadTaskLog(const Caller& caller, RowId id,
                                            std::int64_t offset,
                                            std::int64_t limit) {
  return tasks_.ReadTaskLog(caller, id, offset, limit);
}

// ------------------------------------------------------------------ tokens

StatusOr<std::pair<TokenRow, std::string>> ControlPlane::CreateToken(
    const Caller& caller, Role role, const std::optional<std::string>& tenant,
    const std::string& description, const std::optional<std::string>& node) {
  return identity_.CreateToken(caller, role, tenant, description, node);
}

StatusOr<std::vector<TokenRow>> ControlPlane::ListTokens(const Caller& caller) {
  return identity_.ListTokens(caller);
}

StatusOr<TokenRow> ControlPlane::RevokeToken(const Caller& caller, RowId id) {
  return identity_.RevokeToken(caller, id);
}

}  // namespace hf::server
