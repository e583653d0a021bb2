// ControlPlane: construction, lifetime, the release path's ledger side,
// and the calls it forwards to its units (identity, tenancy, tasks, names,
// nodes, the MIG channel, GC, the scheduler, recovery: each in files of
// its own), for which it is the LeaderWriter.
// The slices API and the agent's side of its tasks live in slices.cc and
// agent_tasks.cc.
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
                   telemetry_.get(), &queue_, this, this),
      releases_(clock, &mig_channel_, telemetry_.get()),
      gc_(store, clock, monotonic_,
          GcOptions{options_.gc_min_age_ms, options_.node_lost_ms}, &beats_,
          &mig_channel_, &releases_, &queue_, this, this),
      names_(store),
      identity_(store, clock, &names_),
      tenancy_(store, clock, this, this),
      tasks_(store, clock, &tenancy_, this, this),
      queue_(options_.resync_interval_ms),
      core_(std::move(ledger), names_, queue_, mig_channel_.book(), *clock,
            *monotonic_, std::move(policy), options_.policy_for_testing),
      scheduler_(
          store, clock,
          SchedulerOptions{options_.bind_batch, options_.retry_interval_ms,
                           options_.hold_after_ms, options_.max_holds},
          &core_, &queue_, &mig_channel_, telemetry_.get(), fence, this, this),
      nodes_(store, clock, monotonic_,
             NodesOptions{options_.default_compute_percent}, &core_, &beats_,
             &usage_, &names_, &queue_, &mig_channel_, telemetry_.get(), fence,
             this),
      operator_slices_(store, clock, &core_, &tenancy_, &releases_, &queue_,
                       telemetry_.get(), this, this),
      defrag_(
          store, clock, monotonic_,
          DefragOptions{options_.defrag_tick_ms, options_.defrag_plan_ttl_ms,
                        options_.defrag_auto, options_.defrag_auto_threshold,
                        options_.defrag_auto_interval_ms},
          &core_, &queue_, &mig_channel_, &releases_, &names_, this, this),
      recovery_(store, clock, monotonic_, &core_, &names_, &beats_,
                &mig_channel_.book(), telemetry_.get(),
                options_.learned.half_life_tasks, this) {}

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
  if (options.hold_after_ms < 0) {
    return Status::InvalidArgument("must not be negative", "hold_after");
  }
  if (options.max_holds < 1) {
    return Status::InvalidArgument("must be at least 1", "max_holds");
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

Status ControlPlane::LeaderWrite(const WriteFn& fn) {
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

StatusOr<int> ControlPlane::WriteReleases(
    const ReleasingFn& fn, const std::function<void()>& committed) {
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
  defrag_thread_ = std::thread([this] { defrag_.Run(); });
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

Status ControlPlane::Recover() {
  HF_RETURN_IF_ERROR(recovery_.Run());
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

Status ControlPlane::CheckSliceRequestReporter(const Caller& caller, RowId id) {
  return mig_channel_.CheckReporter(caller, id);
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
