// The Store contract: one GoogleTest suite that every backend must pass
// (SQLite now, PostgreSQL later), so the server can rely on the same
// behaviour from each.
//
// The tests are in store_contract_test.cc (the object library
// hf_store_contract_tests, compiled once). Use: link it into a backend's
// test binary, include this header in one of its files and instantiate the
// suite with a factory that opens a new, empty store for each test:
//
//   INSTANTIATE_TEST_SUITE_P(
//       Sqlite, StoreContractTest,
//       ::testing::Values(contract::StoreBackend{"Sqlite", &OpenEmpty}),
//       contract::BackendName);
//
// What it pins down beyond store.h's comments (each backend must agree):
// Insert* stores the row as given and sets only the id; UpsertNode keeps the
// first registered_at; RevokeToken keeps the first revocation time; a row
// that refers to a missing tenant, node, group or task is refused with
// NotFound; every list is in ascending id order; a Write whose function
// fails leaves nothing behind and returns the function's Status unchanged,
// while concurrent writes proceed.
//
// Thread-safety: the tests themselves start threads against the store under
// test; the fixture is used by one test at a time.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace hf::store::contract {

// A backend under test.
struct StoreBackend {
  std::string name;  // test name suffix: letters and digits only
  // Opens a new, empty store; called once per test. The store must clean up
  // whatever it created (files, schemas) when destroyed.
  std::function<StatusOr<std::unique_ptr<Store>>()> open_empty;
};

inline void PrintTo(const StoreBackend& backend, std::ostream* os) {
  *os << backend.name;
}

inline std::string BackendName(
    const ::testing::TestParamInfo<StoreBackend>& info) {
  return info.param.name;
}

// ---------------------------------------------------------------- helpers

template <typename>
struct StatusOrValue;
template <typename T>
struct StatusOrValue<StatusOr<T>> {
  using type = T;
};
// T for a transaction function returning StatusOr<T>.
template <typename Fn>
using TxnValue = typename StatusOrValue<std::invoke_result_t<Fn&, Txn&>>::type;

// Runs `fn` (returning StatusOr<T>) in a Write or a Read and hands back its
// value or the transaction's error.
template <typename Fn>
StatusOr<TxnValue<Fn>> RunTxn(Store& store, bool write, Fn fn) {
  std::optional<TxnValue<Fn>> out;
  const std::function<Status(Txn&)> body = [&](Txn& txn) -> Status {
    auto result = fn(txn);
    if (!result.ok()) return result.status();
    out = std::move(result).value();
    return Status::Ok();
  };
  const Status status = write ? store.Write(body) : store.Read(body);
  if (!status.ok()) return status;
  return std::move(*out);
}

// Every field of a row, for comparisons with readable failure output.
inline auto Fields(const GroupRow& r) {
  return std::tie(r.id, r.name, r.created_at);
}
inline auto Fields(const TenantRow& r) {
  return std::tie(r.id, r.name, r.group_id, r.created_at);
}
inline auto Fields(const TokenRow& r) {
  return std::tie(r.id, r.hash, r.role, r.tenant_id, r.node, r.description,
                  r.created_at, r.revoked_at);
}
inline auto Fields(const ApprovalRow& r) {
  return std::tie(r.id, r.tenant_a, r.tenant_b, r.reason, r.created_by,
                  r.created_at, r.expires_at, r.revoked_at);
}
inline auto Fields(const NodeRow& r) {
  return std::tie(r.id, r.name, r.containerized, r.cpu_milli, r.host_memory_mib,
                  r.agent_version, r.registered_at, r.last_heartbeat_at,
                  r.report_epoch, r.report_seq, r.runtime);
}
inline auto Fields(const GpuRow& r) {
  return std::tie(r.id, r.node_id, r.index, r.uuid, r.vendor, r.model,
                  r.memory_mib, r.cc_major, r.cc_minor, r.mig_capable,
                  r.mps_capable, r.lost, r.updated_at);
}
inline auto Fields(const TaskRow& r) {
  return std::tie(r.id, r.tenant_id, r.name, r.image, r.command,
                  r.command_is_shell, r.gpu_type, r.gpu_required, r.memory_mib,
                  r.compute_percent, r.preemptible, r.user_env, r.env, r.labels,
                  r.state, r.pending_reason, r.slice_id, r.node_id,
                  r.gpu_indices, r.exit_code, r.message, r.cancel_requested,
                  r.gpu_compute_mode, r.version, r.created_at, r.updated_at);
}
inline auto Fields(const SliceRow& r) {
  return std::tie(r.id, r.task_id, r.tenant_id, r.node_id, r.whole,
                  r.gpu_indices, r.memory_mib, r.compute_percent,
                  r.compute_defaulted, r.qos_level, r.enforcement, r.state,
                  r.origin, r.mig_device_id, r.created_at, r.released_at,
                  r.mig_profile, r.mig_start);
}
inline auto Fields(const HistoryRow& r) {
  return std::tie(r.id, r.at, r.op, r.slice_id, r.task_id, r.tenant_id,
                  r.node_id, r.gpu_indices, r.memory_mib, r.compute_percent,
                  r.actor, r.reason);
}
inline auto Fields(const SliceRequestRow& r) {
  return std::tie(r.id, r.node_id, r.slice_id, r.task_id, r.action, r.gpu_index,
                  r.gpu_uuid, r.profile, r.state, r.device_id, r.error,
                  r.created_at, r.deadline_at, r.claimed_at, r.finished_at,
                  r.mig_start);
}

inline auto Fields(const IdempotencyRow& r) {
  return std::tie(r.token_id, r.key, r.fingerprint, r.status, r.body, r.task_id,
                  r.created_at, r.expires_at);
}

template <typename Row>
std::vector<RowId> IdsOf(const std::vector<Row>& rows) {
  std::vector<RowId> ids;
  ids.reserve(rows.size());
  for (const Row& row : rows) ids.push_back(row.id);
  return ids;
}

inline ::testing::AssertionResult HasCode(const Status& status,
                                          StatusCode code) {
  if (status.code() == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected " << StatusCodeName(code)
                                       << ", got " << status.ToString();
}

// Strings that break naive encoders: quotes, backslashes, control
// characters, a NUL byte, non-ASCII text and an astral-plane code point.
inline const std::string& Awkward() {
  static const std::string s =
      std::string("say \"hi\" \\ 'there'\n\ttab é 日本語 🚀 nul:") +
      std::string(1, '\0') + "end";
  return s;
}

// A task with every field set to something other than its default.
inline TaskRow FullTask(RowId tenant_id, RowId node_id) {
  TaskRow t;
  t.tenant_id = tenant_id;
  t.name = "train \"resnet\" 🚀";
  t.image = "nvcr.io/nvidia/pytorch:24.01-py3";
  t.command = {"/bin/sh", "-c", "echo \"$X\"\nprintf 'é\\n'", Awkward()};
  t.command_is_shell = true;
  t.gpu_type = "nvidia-a100";
  t.gpu_required = 0;
  t.memory_mib = 10240;
  t.compute_percent = 30;
  t.preemptible = true;
  t.gpu_compute_mode = GpuComputeMode::kStrict;
  t.user_env = {{"QUOTE", "a \"b\" c"},
                {"UNICODE", "日本語\nline2"},
                {"AWKWARD", Awkward()},
                {"EMPTY", ""}};
  t.env = t.user_env;
  t.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "30";
  t.labels = {{"team", "ml"}, {"emoji", "🚀"}, {"k=v", "x,y"}};
  t.state = TaskState::kRunning;
  t.pending_reason = "was: no GPU with 10 GiB free";
  t.slice_id = 77;
  t.node_id = node_id;
  t.gpu_indices = {3};
  t.exit_code = 137;
  t.message = "killed\nby \"OOM\"";
  t.cancel_requested = true;
  t.version = 5;
  t.created_at = 1'700'000'000'000;
  t.updated_at = 1'700'000'000'123;
  return t;
}

// A minimal pending task.
inline TaskRow PendingTask(RowId tenant_id, std::string name) {
  TaskRow t;
  t.tenant_id = tenant_id;
  t.name = std::move(name);
  t.image = "busybox";
  t.command = {"true"};
  t.memory_mib = 1024;
  t.created_at = 1000;
  t.updated_at = 1000;
  return t;
}

inline SliceRow MakeSlice(RowId id, RowId tenant_id, RowId node_id,
                          std::vector<int> gpus,
                          SliceState state = SliceState::kAllocated) {
  SliceRow s;
  s.id = id;
  s.tenant_id = tenant_id;
  s.node_id = node_id;
  s.whole = gpus.size() > 1;
  s.gpu_indices = std::move(gpus);
  s.memory_mib = 4096;
  s.compute_percent = 25;
  s.qos_level = "silver";
  s.enforcement = {"mps", "hook"};
  s.state = state;
  s.origin = "scheduler";
  s.created_at = 2000;
  return s;
}

// --------------------------------------------------------------- fixture

class StoreContractTest : public ::testing::TestWithParam<StoreBackend> {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Store>> store = GetParam().open_empty();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }

  template <typename Fn>
  StatusOr<TxnValue<Fn>> TryWrite(Fn fn) {
    return RunTxn(*store_, /*write=*/true, std::move(fn));
  }
  template <typename Fn>
  StatusOr<TxnValue<Fn>> TryRead(Fn fn) {
    return RunTxn(*store_, /*write=*/false, std::move(fn));
  }
  // The value of a transaction expected to succeed (a default value, and a
  // recorded failure, when it does not).
  template <typename Fn>
  TxnValue<Fn> MustWrite(Fn fn) {
    return Must(TryWrite(std::move(fn)));
  }
  template <typename Fn>
  TxnValue<Fn> MustRead(Fn fn) {
    return Must(TryRead(std::move(fn)));
  }
  template <typename T>
  static T Must(StatusOr<T> result) {
    if (!result.ok()) {
      ADD_FAILURE() << result.status().ToString();
      return T{};
    }
    return std::move(result).value();
  }
  Status WriteStatus(const std::function<Status(Txn&)>& fn) {
    return store_->Write(fn);
  }

  // Fixture rows most tests need.
  RowId AddTenant(const std::string& name) {
    TenantRow row;
    row.name = name;
    row.created_at = 10;
    return MustWrite([&](Txn& t) { return t.InsertTenant(row); }).id;
  }
  RowId AddNode(const std::string& name) {
    NodeRow row;
    row.name = name;
    row.cpu_milli = 64000;
    row.host_memory_mib = std::int64_t{512} * 1024;
    row.agent_version = "0.1.0";
    row.registered_at = 20;
    row.last_heartbeat_at = 20;
    return MustWrite([&](Txn& t) { return t.UpsertNode(row); }).id;
  }
  RowId AddTask(RowId tenant_id, const std::string& name) {
    return MustWrite([&](Txn& t) {
             return t.InsertTask(PendingTask(tenant_id, name));
           })
        .id;
  }

  std::unique_ptr<Store> store_;
};

// ------------------------------------------------ schema migration 5
// Grants of whole GPUs stored with a slice's tier become "exclusive". Each
// backend's test writes rows as an older HeteroFlow did, makes the
// database forget migration 5 and reopens it.

struct PreExclusiveRows {
  RowId whole_slice = 0;
  RowId other_slice = 0;
  RowId task = 0;
};

inline PreExclusiveRows SeedPreExclusiveRows(Store& store) {
  PreExclusiveRows out;
  const Status s = store.Write([&](Txn& t) -> Status {
    TenantRow tenant;
    tenant.name = "old";
    auto tenant_row = t.InsertTenant(tenant);
    if (!tenant_row.ok()) return tenant_row.status();
    NodeRow node;
    node.name = "old-node";
    auto node_row = t.UpsertNode(node);
    if (!node_row.ok()) return node_row.status();
    TaskRow task;
    task.tenant_id = tenant_row->id;
    task.name = "whole";
    task.gpu_required = 1;
    task.state = TaskState::kScheduled;
    task.slice_id = 1;
    task.env = {{"HETEROFLOW_SLICE_QOS", "silver"}, {"USER_VAR", "kept"}};
    auto task_row = t.InsertTask(task);
    if (!task_row.ok()) return task_row.status();
    out.task = task_row->id;
    SliceRow whole;
    whole.id = 1;
    whole.task_id = task_row->id;
    whole.tenant_id = tenant_row->id;
    whole.node_id = node_row->id;
    whole.whole = true;
    whole.gpu_indices = {0};
    whole.memory_mib = 81920;
    whole.compute_percent = 100;
    whole.qos_level = "silver";
    whole.enforcement = {"mps"};
    whole.origin = "scheduler";
    HF_RETURN_IF_ERROR(t.InsertSlice(whole));
    SliceRow slice = whole;
    slice.id = 2;
    slice.task_id.reset();
    slice.whole = false;
    slice.gpu_indices = {1};
    slice.memory_mib = 1024;
    HF_RETURN_IF_ERROR(t.InsertSlice(slice));
    out.whole_slice = 1;
    out.other_slice = 2;
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

inline void CheckRelabelledExclusive(Store& store,
                                     const PreExclusiveRows& rows) {
  const Status s = store.Read([&](Txn& t) -> Status {
    auto whole = t.GetSlice(rows.whole_slice);
    if (!whole.ok()) return whole.status();
    EXPECT_EQ(whole->qos_level, "exclusive");
    EXPECT_TRUE(whole->enforcement.empty());
    auto other = t.GetSlice(rows.other_slice);
    if (!other.ok()) return other.status();
    EXPECT_EQ(other->qos_level, "silver") << "a slice keeps its tier";
    EXPECT_EQ(other->enforcement, std::vector<std::string>{"mps"});
    auto task = t.GetTask(rows.task);
    if (!task.ok()) return task.status();
    EXPECT_EQ(task->env, (StringMap{{"HETEROFLOW_SLICE_QOS", "exclusive"},
                                    {"USER_VAR", "kept"}}));
    HistoryFilter f;
    f.slice_id = rows.whole_slice;
    auto history = t.ListHistory(f);
    if (!history.ok()) return history.status();
    EXPECT_EQ(history->size(), 1u);
    if (!history->empty()) {
      const HistoryRow& h = history->front();
      EXPECT_EQ(h.op, "qos_relabelled");
      EXPECT_EQ(h.actor, "migration");
      EXPECT_EQ(h.task_id, rows.task);
      EXPECT_EQ(h.gpu_indices, std::vector<int>{0});
      EXPECT_TRUE(h.reason.starts_with("qos_level silver -> exclusive"))
          << h.reason;
      EXPECT_GT(h.at, 1'600'000'000'000);
    }
    f.slice_id = rows.other_slice;
    history = t.ListHistory(f);
    if (!history.ok()) return history.status();
    EXPECT_TRUE(history->empty());
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// ------------------------------------------------ schema migration 7
// Tasks gain gpu_compute_mode. Each backend's test writes tasks, makes the
// database forget migration 7 (the column dropped, as it was before) and
// reopens it: every task reads back as it was, with the default mode, and
// a bound task's slice env names the mode beside its compute share.

struct PreComputeModeTasks {
  TaskRow running;  // bound, with a compute share in its slice env
  TaskRow done;     // terminal: its env is what it ran with, kept as is
  TaskRow whole;    // bound to whole GPUs: no compute share, no mode
};

inline PreComputeModeTasks SeedPreComputeModeTasks(Store& store) {
  PreComputeModeTasks out;
  const Status s = store.Write([&](Txn& t) -> Status {
    TenantRow tenant;
    tenant.name = "before-modes";
    auto tenant_row = t.InsertTenant(tenant);
    if (!tenant_row.ok()) return tenant_row.status();
    NodeRow node;
    node.name = "before-modes-node";
    auto node_row = t.UpsertNode(node);
    if (!node_row.ok()) return node_row.status();
    TaskRow running = FullTask(tenant_row->id, node_row->id);
    // PostgreSQL's jsonb, which its migration reads the env with, holds no
    // NUL; nor does any env the API takes.
    running.env.erase("AWKWARD");
    running.env["HETEROFLOW_SLICE_COMPUTE_PERCENT"] = "30";
    auto stored = t.InsertTask(running);
    if (!stored.ok()) return stored.status();
    out.running = *stored;
    TaskRow done = running;
    done.name = "done";
    done.state = TaskState::kSucceeded;
    stored = t.InsertTask(done);
    if (!stored.ok()) return stored.status();
    out.done = *stored;
    TaskRow whole = PendingTask(tenant_row->id, "whole");
    whole.memory_mib.reset();
    whole.gpu_required = 2;
    whole.state = TaskState::kScheduled;
    whole.env = {{"HETEROFLOW_SLICE_QOS", "exclusive"}, {"KEEP", "me"}};
    stored = t.InsertTask(whole);
    if (!stored.ok()) return stored.status();
    out.whole = *stored;
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

inline void CheckComputeModeMigrated(Store& store,
                                     const PreComputeModeTasks& before) {
  const Status s = store.Read([&](Txn& t) -> Status {
    TaskRow running = before.running;
    running.gpu_compute_mode = GpuComputeMode::kWorkConserving;
    running.env["HETEROFLOW_SLICE_COMPUTE_MODE"] = "work-conserving";
    TaskRow done = before.done;
    done.gpu_compute_mode = GpuComputeMode::kWorkConserving;
    TaskRow whole = before.whole;
    for (const TaskRow* expected : {&running, &done, &whole}) {
      auto got = t.GetTask(expected->id);
      if (!got.ok()) return got.status();
      EXPECT_EQ(got->gpu_compute_mode, GpuComputeMode::kWorkConserving)
          << expected->name;
      EXPECT_EQ(got->env, expected->env) << expected->name;
      EXPECT_TRUE(Fields(*got) == Fields(*expected))
          << expected->name << ": a field changed in the migration";
    }
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// ----------------------------------------------- slice usage history
// Stored usage over time (schema migration 10): kept across a restart, and
// started from the one stored row per slice when the table is new. Each
// backend's tests store rows, reopen the database (or make it forget
// migration 10 first) and check.

// Stores reports at 1000, 2000, 3000 for slice 7 and at 1500 for slice 8.
inline void SeedSliceUsage(Store& store) {
  const Status s = store.Write([](Txn& t) -> Status {
    for (const auto& [slice, at] : std::vector<std::pair<RowId, Millis>>{
             {7, 1000}, {8, 1500}, {7, 2000}, {7, 3000}}) {
      HF_RETURN_IF_ERROR(t.PutSliceUsage(
          {slice, at, R"({"used_bytes":)" + std::to_string(at) + "}"}));
    }
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// The history of slices 7 and 8 is `seven` and `eight` (reported_at each).
inline void CheckSliceUsageHistory(Store& store,
                                   const std::vector<Millis>& seven,
                                   const std::vector<Millis>& eight) {
  const Status s = store.Read([&](Txn& t) -> Status {
    for (const auto& [slice, expected] :
         {std::pair{RowId{7}, seven}, std::pair{RowId{8}, eight}}) {
      auto rows = t.ListSliceUsageHistory(slice, 0, kSliceUsageHistoryRows);
      if (!rows.ok()) return rows.status();
      std::vector<Millis> got;
      for (const SliceUsageRow& r : *rows) {
        got.push_back(r.reported_at);
        EXPECT_EQ(r.usage,
                  R"({"used_bytes":)" + std::to_string(r.reported_at) + "}");
      }
      EXPECT_EQ(got, expected) << "slice " << slice;
    }
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// Migration 12: the nodes' task runtime. Each backend's test stores a node
// with one, makes the database forget the migration (and the column), and
// reopens it: the node is kept, its runtime not said until it reports.
inline void SeedNodeWithARuntime(Store& store) {
  NodeRow node;
  node.name = "old-node";
  node.cpu_milli = 8000;
  node.runtime = "process";
  const Status s =
      store.Write([&](Txn& t) { return t.UpsertNode(node).status(); });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

inline void CheckNodeWithoutARuntime(Store& store) {
  const Status s = store.Read([&](Txn& t) -> Status {
    auto node = t.FindNode("old-node");
    if (!node.ok()) return node.status();
    EXPECT_EQ(node->cpu_milli, 8000);
    EXPECT_EQ(node->runtime, "");
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace hf::store::contract
