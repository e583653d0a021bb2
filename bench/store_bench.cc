// Store benchmark: durable task inserts per second through the SQLite
// store's group commit, and snapshot reads per second.
//
// Setup (not timed): one SQLite store in a fresh directory under $TMPDIR (or
// /tmp), removed at exit, with the default StoreOptions (4 read connections,
// batches of up to 256 writes). One tenant and 10,000 tasks are loaded first
// so that reads hit a realistically sized table. The file system of that
// directory decides the cost of an fsync, and with it most of the write
// figures: run on the disk the server will use (TMPDIR=/var/lib/... ).
//
// Benchmarks (wall-clock time; items_per_second is the total over threads):
//   BM_InsertTask/threads:N  N threads (1, 4, 16) each loop on Store::Write
//                            of one InsertTask (a typical task row: argv,
//                            env and labels as JSON). Every acknowledged
//                            write is fsynced; concurrent writers share
//                            commits, so throughput should grow with N
//                            while one writer is bound by fsync latency.
//   BM_GetTask/threads:N     N threads (1, 4) each loop on Store::Read of one
//                            GetTask of a random preloaded task.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/main_guard.h"
#include "common/status.h"
#include "store/store.h"

namespace hf::store {
namespace {

constexpr int kPreloadedTasks = 10000;

// The store every benchmark shares; set up in main() before any runs.
Store* g_store = nullptr;
RowId g_tenant = 0;
RowId g_first_task = 0;

TaskRow TypicalTask(RowId tenant, std::int64_t n) {
  TaskRow t;
  t.tenant_id = tenant;
  t.name = "train-resnet50-" + std::to_string(n);
  t.image = "nvcr.io/nvidia/pytorch:24.01-py3";
  t.command = {"python", "train.py", "--epochs", "90", "--batch-size", "256"};
  t.memory_mib = 10240;
  t.compute_percent = 30;
  t.user_env = {{"WANDB_PROJECT", "vision"}, {"SEED", std::to_string(n)}};
  t.env = t.user_env;
  t.env["CUDA_VISIBLE_DEVICES"] = "0";
  t.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "30";
  t.labels = {{"team", "vision"}, {"priority", "normal"}};
  t.created_at = 1'700'000'000'000 + n;
  t.updated_at = t.created_at;
  return t;
}

void Check(const Status& status, const char* what) {
  if (!status.ok()) {
    throw std::runtime_error(std::string(what) + ": " + status.ToString());
  }
}

void BM_InsertTask(benchmark::State& state) {
  std::int64_t n = state.thread_index() * 1'000'000'000LL;
  for (auto _ : state) {
    const TaskRow row = TypicalTask(g_tenant, n++);
    const Status status =
        g_store->Write([&row](Txn& t) { return t.InsertTask(row).status(); });
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_InsertTask)
    ->Threads(1)
    ->Threads(4)
    ->Threads(16)
    ->UseRealTime()
    ->MinTime(2.0);

void BM_GetTask(benchmark::State& state) {
  std::mt19937_64 rng(42 + state.thread_index());
  std::uniform_int_distribution<RowId> pick(g_first_task,
                                            g_first_task + kPreloadedTasks - 1);
  for (auto _ : state) {
    const RowId id = pick(rng);
    const Status status = g_store->Read([id](Txn& t) {
      StatusOr<TaskRow> row = t.GetTask(id);
      if (row.ok()) benchmark::DoNotOptimize(row->name.data());
      return row.status();
    });
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GetTask)->Threads(1)->Threads(4)->UseRealTime()->MinTime(1.0);

std::filesystem::path MakeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
      "/hf-store-bench-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("mkdtemp failed for " + pattern);
  }
  return pattern;
}

// Opens the store in `dir` and loads the tenant and the tasks.
std::unique_ptr<Store> OpenAndLoad(const std::filesystem::path& dir) {
  StatusOr<std::unique_ptr<Store>> opened =
      OpenStore("sqlite:" + (dir / "bench.db").string());
  Check(opened.status(), "opening the store");
  std::unique_ptr<Store> store = std::move(opened).value();
  Check(store->Write([](Txn& t) -> Status {
    TenantRow tenant;
    tenant.name = "bench";
    StatusOr<TenantRow> stored = t.InsertTenant(tenant);
    HF_RETURN_IF_ERROR(stored.status());
    g_tenant = stored->id;
    for (int i = 0; i < kPreloadedTasks; ++i) {
      StatusOr<TaskRow> task = t.InsertTask(TypicalTask(g_tenant, i));
      HF_RETURN_IF_ERROR(task.status());
      if (i == 0) g_first_task = task->id;
    }
    return Status::Ok();
  }),
        "loading tasks");
  return store;
}

// Removes the directory however the run ends.
class DirRemover {
 public:
  explicit DirRemover(std::filesystem::path dir) : dir_(std::move(dir)) {}
  DirRemover(const DirRemover&) = delete;
  DirRemover& operator=(const DirRemover&) = delete;
  ~DirRemover() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace
}  // namespace hf::store

int main(int argc, char** argv) {
  return hf::RunMain("store_bench", [&] {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    const std::filesystem::path dir = hf::store::MakeTempDir();
    const hf::store::DirRemover remover(dir);
    std::fprintf(stderr, "store_bench: database in %s\n", dir.c_str());
    std::unique_ptr<hf::store::Store> store = hf::store::OpenAndLoad(dir);
    hf::store::g_store = store.get();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  });
}
