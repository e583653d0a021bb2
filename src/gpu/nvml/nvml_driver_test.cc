// NvmlGpuDriver against fake_nvml (a stand-in libnvidia-ml.so.1 whose state
// comes from a JSON file named by HF_FAKE_NVML_CONFIG; see fake_nvml.cc).
// Each test writes its own config into a temporary directory, so the driver
// is exercised through the real dlopen/dlsym path with real NVML error codes.
#include "gpu/nvml/nvml_driver.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace hf::gpu {
namespace {

using nlohmann::json;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

json H100(bool mig = true) {
  return {{"name", "NVIDIA H100 80GB HBM3"},
          {"uuid", "GPU-11111111-2222-3333-4444-555555555555"},
          {"memory_total_mib", 81559},
          {"memory_used_mib", 1024},
          {"memory_reserved_mib", 512},
          {"cc", {9, 0}},
          {"mig", mig}};
}

json A100NoMig() {
  return {{"name", "NVIDIA A100-SXM4-40GB"},
          {"uuid", "GPU-aaaaaaaa-0000-0000-0000-000000000000"},
          {"memory_total_mib", 40960},
          {"cc", {8, 0}},
          {"mig", false}};
}

json H200() {
  return {{"name", "NVIDIA H200"},
          {"uuid", "GPU-20020020-0000-0000-0000-000000000000"},
          {"memory_total_mib", 143771},
          {"cc", {9, 0}},
          {"mig", true}};
}

class NvmlDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "hf-nvml-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    log_ = (dir_ / "calls.log").string();
  }

  void TearDown() override {
    driver_.reset();
    unsetenv("HF_FAKE_NVML_CONFIG");
    std::filesystem::remove_all(dir_);
  }

  // A driver on the fake, configured with `config` (+ the call log).
  NvmlGpuDriver& Start(json config, const char* library = HF_FAKE_NVML_PATH) {
    driver_.reset();  // shut the previous one down first
    config["call_log"] = log_;
    const std::string path = (dir_ / "config.json").string();
    std::ofstream(path) << config.dump();
    setenv("HF_FAKE_NVML_CONFIG", path.c_str(), 1);
    driver_ = std::make_unique<NvmlGpuDriver>(
        NvmlGpuDriver::Options{.library_path = library});
    return *driver_;
  }

  // The MIG calls the fake saw, one per line, in order.
  std::vector<std::string> Calls() const {
    std::vector<std::string> lines;
    std::ifstream in(log_);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::filesystem::path dir_;
  std::string log_;
  std::unique_ptr<NvmlGpuDriver> driver_;
};

TEST_F(NvmlDriverTest, ListsGpusAsNvmlReportsThem) {
  NvmlGpuDriver& driver = Start({{"devices", {H100(), A100NoMig()}}});
  ASSERT_TRUE(driver.load_status().ok()) << driver.load_status().ToString();
  EXPECT_EQ(driver.Name(), "nvml");
  auto gpus = driver.ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2U);
  const GpuInfo& h100 = (*gpus)[0];
  EXPECT_EQ(h100.index, 0);
  EXPECT_EQ(h100.uuid, "GPU-11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(h100.model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.vendor, "nvidia");
  EXPECT_EQ(h100.memory_mib, 81559);
  // v2 memory info: used excludes the reserved memory.
  EXPECT_EQ(h100.used_memory_mib, 1024);
  EXPECT_EQ(h100.cc_major, 9);
  EXPECT_EQ(h100.cc_minor, 0);
  EXPECT_TRUE(h100.mig_enabled);
  EXPECT_TRUE(h100.healthy);
  EXPECT_EQ(h100.health_detail, "");
  const GpuInfo& a100 = (*gpus)[1];
  EXPECT_EQ(a100.index, 1);
  EXPECT_EQ(a100.model, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(a100.cc_major, 8);
  EXPECT_FALSE(a100.mig_enabled);
  EXPECT_TRUE(a100.healthy);
}

TEST_F(NvmlDriverTest, LostGpuIsListedUnhealthyWithWhatCanBeRead) {
  json lost = A100NoMig();
  lost["lost"] = true;  // NVML_ERROR_GPU_IS_LOST from every query
  NvmlGpuDriver& driver = Start({{"devices", {H100(), lost}}});
  auto gpus = driver.ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2U);
  EXPECT_TRUE((*gpus)[0].healthy);
  const GpuInfo& gpu = (*gpus)[1];
  EXPECT_FALSE(gpu.healthy);
  // Name and UUID still read (NVML caches them); memory does not.
  EXPECT_EQ(gpu.uuid, "GPU-aaaaaaaa-0000-0000-0000-000000000000");
  EXPECT_EQ(gpu.model, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(gpu.memory_mib, 0);
  EXPECT_TRUE(Contains(gpu.health_detail,
                       "nvmlDeviceGetMemoryInfo_v2(GPU 1): GPU is lost"))
      << gpu.health_detail;

  // The MIG calls on a lost card say Unavailable.
  auto migs = driver.ListMigDevices(1);
  EXPECT_EQ(migs.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(migs.status().message(), "GPU is lost"));
}

TEST_F(NvmlDriverTest, CardOffTheBusIsListedByIndexOnly) {
  json gone = H100();
  gone["handle_error"] = 999;  // NVML_ERROR_UNKNOWN
  NvmlGpuDriver& driver = Start({{"devices", {gone, A100NoMig()}}});
  auto gpus = driver.ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2U);
  EXPECT_EQ((*gpus)[0].index, 0);
  EXPECT_FALSE((*gpus)[0].healthy);
  EXPECT_EQ((*gpus)[0].uuid, "");
  EXPECT_EQ((*gpus)[0].health_detail,
            "nvmlDeviceGetHandleByIndex_v2(GPU 0): Unknown Error");
  EXPECT_TRUE((*gpus)[1].healthy);
}

TEST_F(NvmlDriverTest, UnknownErrorOnAQueryMarksTheGpuUnhealthy) {
  json flaky = H100();
  flaky["errors"] = {{"nvmlDeviceGetCudaComputeCapability", 999}};
  NvmlGpuDriver& driver = Start({{"devices", {flaky}}});
  auto gpus = driver.ListGpus();
  ASSERT_TRUE(gpus.ok());
  EXPECT_FALSE((*gpus)[0].healthy);
  EXPECT_EQ((*gpus)[0].health_detail,
            "nvmlDeviceGetCudaComputeCapability(GPU 0): Unknown Error");
  EXPECT_EQ((*gpus)[0].memory_mib, 81559);  // the rest was still read
}

TEST_F(NvmlDriverTest, MissingLibraryIsUnavailableEverywhere) {
  NvmlGpuDriver driver(
      {.library_path = (dir_ / "no-such-dir/libnvidia-ml.so.1").string()});
  EXPECT_EQ(driver.load_status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(driver.load_status().message(), "Failed to dlopen"));
  EXPECT_EQ(driver.ListGpus().status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(driver.ListMigDevices(0).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(driver.CreateMigDevice(0, "1g.10gb", std::nullopt).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(driver.DestroyMigDevice(0, 1).code(), StatusCode::kUnavailable);
  EXPECT_EQ(driver.ListProcesses(0).status().code(), StatusCode::kUnavailable);
}

TEST_F(NvmlDriverTest, InitFailureCarriesTheNvmlError) {
  NvmlGpuDriver& driver = Start({{"init_error", 9}, {"devices", {H100()}}});
  EXPECT_EQ(driver.load_status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(driver.load_status().message(),
            "Failed to nvmlInit_v2: Driver Not Loaded");
  auto gpus = driver.ListGpus();
  EXPECT_EQ(gpus.status(), driver.load_status());
  EXPECT_EQ(driver.DestroyMigDevice(0, 1), driver.load_status());
}

TEST_F(NvmlDriverTest, CountFailureIsMappedWithContext) {
  NvmlGpuDriver& driver = Start(
      {{"errors", {{"nvmlDeviceGetCount_v2", 18}}}, {"devices", {H100()}}});
  auto gpus = driver.ListGpus();
  EXPECT_EQ(gpus.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(gpus.status().message(),
            "nvmlDeviceGetCount_v2: RM has detected an NVML/RM version "
            "mismatch.");
}

TEST_F(NvmlDriverTest, CreatesMigDeviceWhereNvmlChooses) {
  NvmlGpuDriver& driver = Start({{"devices", {H100()}}});
  auto mig = driver.CreateMigDevice(0, "1g.10gb", std::nullopt);
  ASSERT_TRUE(mig.ok()) << mig.status().ToString();
  EXPECT_GE(mig->gpu_instance_id, 0);
  EXPECT_EQ(mig->compute_instance_id, 0);
  EXPECT_EQ(mig->profile, "1g.10gb");
  EXPECT_EQ(mig->placement, (MigPlacement{0, 1}));
  EXPECT_TRUE(mig->device_uuid.starts_with("MIG-")) << mig->device_uuid;
  EXPECT_FALSE(Contains(mig->device_uuid, "/"));  // a real MIG UUID

  auto listed = driver.ListMigDevices(0);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1U);
  EXPECT_EQ((*listed)[0].gpu_instance_id, mig->gpu_instance_id);
  EXPECT_EQ((*listed)[0].compute_instance_id, 0);
  EXPECT_EQ((*listed)[0].profile, "1g.10gb");
  EXPECT_EQ((*listed)[0].device_uuid, mig->device_uuid);

  const std::vector<std::string> calls = Calls();
  ASSERT_EQ(calls.size(), 2U);
  EXPECT_TRUE(calls[0].starts_with("nvmlDeviceCreateGpuInstance gpu=0"));
  EXPECT_TRUE(Contains(calls[0], "profile=19"));  // the NVML ID, not selector
  EXPECT_TRUE(calls[1].starts_with("nvmlGpuInstanceCreateComputeInstance"));
  EXPECT_TRUE(Contains(calls[1], "rc=0"));
}

TEST_F(NvmlDriverTest, CreatesMigDeviceAtAPlacement) {
  NvmlGpuDriver& driver = Start({{"devices", {H100()}}});
  auto mig = driver.CreateMigDevice(0, "MIG 3g.40gb", MigPlacement{4, 4});
  ASSERT_TRUE(mig.ok()) << mig.status().ToString();
  EXPECT_EQ(mig->profile, "3g.40gb");
  EXPECT_EQ(mig->placement, (MigPlacement{4, 4}));
  ASSERT_FALSE(Calls().empty());
  EXPECT_TRUE(
      Calls()[0].starts_with("nvmlDeviceCreateGpuInstanceWithPlacement"));

  // Taken: NVML says INSUFFICIENT_RESOURCES.
  auto again = driver.CreateMigDevice(0, "3g.40gb", MigPlacement{4, 4});
  EXPECT_EQ(again.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(again.status().message(),
                       "nvmlDeviceCreateGpuInstanceWithPlacement(GPU 0, "
                       "3g.40gb at 4:4): Insufficient resources"))
      << again.status().message();

  // Not a legal start for the profile.
  auto illegal = driver.CreateMigDevice(0, "3g.40gb", MigPlacement{2, 4});
  EXPECT_EQ(illegal.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(illegal.status().message(), "legal: 0:4, 4:4"))
      << illegal.status().message();

  // The lower half is still free.
  auto low = driver.CreateMigDevice(0, "3g.40gb", std::nullopt);
  ASSERT_TRUE(low.ok()) << low.status().ToString();
  EXPECT_EQ(low->placement, (MigPlacement{0, 4}));
  EXPECT_NE(low->gpu_instance_id, mig->gpu_instance_id);
}

TEST_F(NvmlDriverTest, ProfileNamesComeFromNvmlWhenTheTableHasNoIds) {
  // The H200 table has no published profile IDs; the fake makes its own, so
  // only the names NVML reports (nvmlDeviceGetGpuInstanceProfileInfoV) can
  // find the profile.
  NvmlGpuDriver& driver = Start({{"devices", {H200()}}});
  auto mig = driver.CreateMigDevice(0, "1g.18gb", std::nullopt);
  ASSERT_TRUE(mig.ok()) << mig.status().ToString();
  EXPECT_EQ(mig->profile, "1g.18gb");
  auto listed = driver.ListMigDevices(0);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1U);
  EXPECT_EQ((*listed)[0].profile, "1g.18gb");
}

TEST_F(NvmlDriverTest, OlderLibraryFallsBackAndSaysWhatIsMissing) {
  NvmlGpuDriver& driver =
      Start({{"devices", {H100(), H200()}}}, HF_FAKE_NVML_LEGACY_PATH);
  ASSERT_TRUE(driver.load_status().ok()) << driver.load_status().ToString();

  // v1 memory info: `used` includes the reserved memory.
  auto gpus = driver.ListGpus();
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ((*gpus)[0].used_memory_mib, 1024 + 512);

  // Profiles by geometry, confirmed against the table's IDs.
  auto mig = driver.CreateMigDevice(0, "2g.20gb", std::nullopt);
  ASSERT_TRUE(mig.ok()) << mig.status().ToString();
  EXPECT_EQ(mig->placement, (MigPlacement{0, 2}));
  // No MIG device handles: the GPU-UUID form of the device name.
  EXPECT_EQ(mig->device_uuid, "MIG-GPU-11111111-2222-3333-4444-555555555555/" +
                                  std::to_string(mig->gpu_instance_id) + "/0");
  auto on_h200 = driver.CreateMigDevice(1, "3g.71gb", std::nullopt);
  ASSERT_TRUE(on_h200.ok()) << on_h200.status().ToString();

  // A placement cannot be honoured without the _WithPlacement call.
  auto placed = driver.CreateMigDevice(0, "1g.10gb", MigPlacement{6, 1});
  EXPECT_EQ(placed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(placed.status().message(),
                       "nvmlDeviceCreateGpuInstanceWithPlacement"));
}

TEST_F(NvmlDriverTest, RejectedStructVersionFallsBackToV1Calls) {
  json gpu = H100();
  gpu["errors"] = {{"nvmlDeviceGetMemoryInfo_v2", 25},
                   {"nvmlDeviceGetGpuInstanceProfileInfoV", 25}};
  NvmlGpuDriver& driver = Start({{"devices", {gpu}}});
  auto gpus = driver.ListGpus();
  ASSERT_TRUE(gpus.ok());
  EXPECT_TRUE((*gpus)[0].healthy) << (*gpus)[0].health_detail;
  EXPECT_EQ((*gpus)[0].memory_mib, 81559);
  EXPECT_EQ((*gpus)[0].used_memory_mib, 1024 + 512);  // v1 semantics
  auto mig = driver.CreateMigDevice(0, "1g.20gb", std::nullopt);
  ASSERT_TRUE(mig.ok()) << mig.status().ToString();
  EXPECT_EQ(mig->placement, (MigPlacement{0, 2}));
}

TEST_F(NvmlDriverTest, ComputeInstanceFailureDestroysTheGpuInstance) {
  NvmlGpuDriver& driver =
      Start({{"errors", {{"nvmlGpuInstanceCreateComputeInstance", 23}}},
             {"devices", {H100()}}});
  auto mig = driver.CreateMigDevice(0, "2g.20gb", std::nullopt);
  EXPECT_EQ(mig.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(mig.status().message(),
            "nvmlGpuInstanceCreateComputeInstance(GPU 0, GI 1): Insufficient "
            "resources");
  auto listed = driver.ListMigDevices(0);
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());

  const std::vector<std::string> calls = Calls();
  ASSERT_EQ(calls.size(), 3U);
  EXPECT_TRUE(calls[0].starts_with("nvmlDeviceCreateGpuInstance "));
  EXPECT_TRUE(calls[1].starts_with("nvmlGpuInstanceCreateComputeInstance"));
  EXPECT_TRUE(Contains(calls[1], "rc=23"));
  EXPECT_EQ(calls[2], "nvmlGpuInstanceDestroy gpu=0 gi=1 rc=0");
}

TEST_F(NvmlDriverTest, FailedRollbackSaysTheInstanceIsLeftBehind) {
  NvmlGpuDriver& driver = Start({{"errors",
                                  {{"nvmlGpuInstanceCreateComputeInstance", 23},
                                   {"nvmlGpuInstanceDestroy", 999}}},
                                 {"devices", {H100()}}});
  auto mig = driver.CreateMigDevice(0, "2g.20gb", std::nullopt);
  EXPECT_EQ(mig.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(mig.status().message(), "left behind"));
  EXPECT_TRUE(Contains(mig.status().message(),
                       "nvmlGpuInstanceDestroy(GPU 0, GI 1): Unknown Error"))
      << mig.status().message();
}

TEST_F(NvmlDriverTest, DestroysComputeInstanceThenGpuInstance) {
  NvmlGpuDriver& driver = Start({{"devices", {H100()}}});
  auto mig = driver.CreateMigDevice(0, "4g.40gb", std::nullopt);
  ASSERT_TRUE(mig.ok()) << mig.status().ToString();
  const std::string gi = std::to_string(mig->gpu_instance_id);
  ASSERT_TRUE(driver.DestroyMigDevice(0, mig->gpu_instance_id).ok());

  const std::vector<std::string> calls = Calls();
  ASSERT_EQ(calls.size(), 4U);
  EXPECT_EQ(calls[2],
            "nvmlComputeInstanceDestroy gpu=0 gi=" + gi + " ci=0 rc=0");
  EXPECT_EQ(calls[3], "nvmlGpuInstanceDestroy gpu=0 gi=" + gi + " rc=0");
  auto listed = driver.ListMigDevices(0);
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());

  // Again: gone, NotFound (callers treat it as done).
  const Status repeat = driver.DestroyMigDevice(0, mig->gpu_instance_id);
  EXPECT_EQ(repeat.code(), StatusCode::kNotFound);
  EXPECT_TRUE(
      Contains(repeat.message(), "GPU instance " + gi + " not found on GPU 0"));
  EXPECT_EQ(driver.DestroyMigDevice(0, 12).code(), StatusCode::kNotFound);
  EXPECT_EQ(driver.DestroyMigDevice(0, -1).code(), StatusCode::kNotFound);
  EXPECT_EQ(Calls().size(), 4U);  // nothing else was destroyed
}

TEST_F(NvmlDriverTest, InstanceInUseIsFailedPrecondition) {
  json gpu = H100();
  gpu["gpu_instances"] = {{{"profile", "3g.40gb"}, {"start", 0}}};
  gpu["processes"] = {{{"pid", 4242},
                       {"used_mib", 2000},
                       {"gpu_instance_id", 1},
                       {"compute_instance_id", 0}}};
  NvmlGpuDriver& driver = Start({{"devices", {gpu}}});
  auto listed = driver.ListMigDevices(0);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1U);
  EXPECT_EQ((*listed)[0].gpu_instance_id, 1);
  EXPECT_EQ((*listed)[0].profile, "3g.40gb");
  EXPECT_EQ((*listed)[0].placement, (MigPlacement{0, 4}));

  const Status status = driver.DestroyMigDevice(0, 1);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "nvmlComputeInstanceDestroy(GPU 0, GI 1, CI 0): In use by another "
            "client (kInUse)");
  auto after = driver.ListMigDevices(0);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size(), 1U);  // still there, CI and all
  EXPECT_EQ((*after)[0].compute_instance_id, 0);
}

TEST_F(NvmlDriverTest, MigCallsNeedMigMode) {
  json t4 = {{"name", "Tesla T4"}, {"memory_total_mib", 15360}};
  NvmlGpuDriver& driver = Start({{"devices", {A100NoMig(), t4}}});
  auto listed = driver.ListMigDevices(0);
  EXPECT_EQ(listed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(listed.status().message(), "GPU 0 is not in MIG mode");
  EXPECT_EQ(driver.CreateMigDevice(0, "1g.5gb", std::nullopt).status().code(),
            StatusCode::kFailedPrecondition);
  auto t4_list = driver.ListMigDevices(1);
  EXPECT_EQ(t4_list.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(t4_list.status().message(), "GPU 1 does not support MIG");
}

TEST_F(NvmlDriverTest, UnknownGpuAndProfileAreNotFound) {
  NvmlGpuDriver& driver = Start({{"devices", {H100()}}});
  EXPECT_EQ(driver.ListMigDevices(3).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(driver.ListMigDevices(-1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(driver.ListProcesses(1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(driver.DestroyMigDevice(1, 1).code(), StatusCode::kNotFound);
  auto mig = driver.CreateMigDevice(0, "1g.18gb", std::nullopt);  // H200's
  EXPECT_EQ(mig.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(mig.status().message(), "1g.10gb, "))
      << mig.status().message();
  EXPECT_TRUE(Calls().empty());
}

TEST_F(NvmlDriverTest, ProcessListGrowsItsBufferUntilItFits) {
  json gpu = A100NoMig();
  json processes = json::array();
  for (int i = 0; i < 40; ++i) {
    processes.push_back({{"pid", 1000 + i}, {"used_mib", 10}});
  }
  gpu["processes"] = processes;
  // 200 more processes appear after each of the first two
  // INSUFFICIENT_SIZE answers, so one resize is never enough.
  gpu["process_growth"] = 200;
  NvmlGpuDriver& driver = Start({{"devices", {gpu}}});
  auto listed = driver.ListProcesses(0);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->size(), 440U);
  std::set<std::int64_t> pids;
  for (const GpuProcess& p : *listed) {
    pids.insert(p.pid);
    EXPECT_FALSE(p.gpu_instance_id.has_value());  // not in MIG mode
  }
  EXPECT_EQ(pids.size(), 440U);
  EXPECT_TRUE(pids.contains(1000));
  EXPECT_EQ((*listed)[0].used_memory_mib, 10);
}

TEST_F(NvmlDriverTest, ProcessesCarryTheirGpuInstance) {
  json gpu = H100();
  gpu["gpu_instances"] = {{{"profile", "1g.10gb"}, {"start", 0}}};
  gpu["processes"] = {{{"pid", 7},
                       {"used_mib", 5},
                       {"gpu_instance_id", 1},
                       {"compute_instance_id", 0}}};
  NvmlGpuDriver& driver = Start({{"devices", {gpu}}});
  auto listed = driver.ListProcesses(0);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1U);
  EXPECT_EQ((*listed)[0].pid, 7);
  EXPECT_EQ((*listed)[0].gpu_instance_id, 1);

  json idle = A100NoMig();
  NvmlGpuDriver& second = Start({{"devices", {idle}}});
  auto none = second.ListProcesses(0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(NvmlDriverTest, ConcurrentCreatesNeverOversubscribe) {
  NvmlGpuDriver& driver = Start({{"devices", {H100()}}});
  constexpr int kThreads = 9;  // 1g.10gb allows 7
  std::vector<StatusOr<MigDevice>> results(
      kThreads, StatusOr<MigDevice>(Status::Internal("not run")));
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      results[i] = driver.CreateMigDevice(0, "1g.10gb", std::nullopt);
    });
  }
  for (std::thread& t : threads) t.join();
  int created = 0;
  std::set<int> starts;
  for (const auto& r : results) {
    if (r.ok()) {
      ++created;
      starts.insert(r->placement.start);
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted)
          << r.status().ToString();
    }
  }
  EXPECT_EQ(created, 7);
  EXPECT_EQ(starts.size(), 7U);
  auto listed = driver.ListMigDevices(0);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 7U);
}

TEST(NvmlStatusTest, MapsEveryClassOfError) {
  EXPECT_TRUE(NvmlStatus(0, "x", "Success").ok());
  const Status lost =
      NvmlStatus(15, "nvmlDeviceGetMemoryInfo(GPU 2)", "GPU is lost");
  EXPECT_EQ(lost.code(), StatusCode::kUnavailable);
  EXPECT_EQ(lost.message(), "nvmlDeviceGetMemoryInfo(GPU 2): GPU is lost");
  EXPECT_EQ(NvmlStatus(2, "c", "t").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NvmlStatus(3, "c", "t").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(NvmlStatus(4, "c", "t").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(NvmlStatus(6, "c", "t").code(), StatusCode::kNotFound);
  EXPECT_EQ(NvmlStatus(7, "c", "t").code(), StatusCode::kInternal);
  EXPECT_EQ(NvmlStatus(9, "c", "t").code(), StatusCode::kUnavailable);
  EXPECT_EQ(NvmlStatus(23, "c", "t").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(NvmlStatus(999, "c", "t").code(), StatusCode::kInternal);
  const Status in_use = NvmlStatus(19, "c", "In use by another client");
  EXPECT_EQ(in_use.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(in_use.message(), "kInUse"));
  EXPECT_EQ(NvmlStatus(42, "c", nullptr).message(), "c: NVML error 42");
  EXPECT_TRUE(IsNvmlGpuHealthError(15));
  EXPECT_TRUE(IsNvmlGpuHealthError(999));
  EXPECT_FALSE(IsNvmlGpuHealthError(3));
}

}  // namespace
}  // namespace hf::gpu
