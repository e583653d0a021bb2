// Tests of SimGpuDriver: MIG create/destroy on A100 80GB, H100, A30 and H200
// against the official tables (legal and illegal placements, max instances,
// overlap, the one-"+me" rule, id reuse), each fault kind on a FakeClock,
// persistence across two driver objects, lost GPUs, and registered processes
// blocking a destroy.
#include "gpu/sim_driver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace hf::gpu {
namespace {

// GPU 0 A100 80GB, 1 H100 80GB, 2 A30, 3 H200 (all in MIG mode), 4 T4.
constexpr const char* kNode = R"({
  "node_id": "t",
  "cpu_milli": 16000,
  "host_memory_mb": 65536,
  "gpus": [
    {"model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920,
     "compute_capability": "8.0", "mig_enabled": true},
    {"model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559,
     "compute_capability": "9.0", "mig_enabled": true},
    {"model": "NVIDIA A30", "memory_mb": 24576, "compute_capability": "8.0",
     "mig_enabled": true},
    {"model": "NVIDIA H200", "memory_mb": 143771,
     "compute_capability": "9.0", "mig_enabled": true},
    {"model": "Tesla T4", "memory_mb": 15360, "compute_capability": "7.5"}
  ]
})";
constexpr int kA100 = 0;
constexpr int kH100 = 1;
constexpr int kA30 = 2;
constexpr int kH200 = 3;
constexpr int kT4 = 4;

// An arbitrary non-zero epoch: fault times are relative to driver start.
constexpr std::int64_t kStartMillis = 1'700'000'000'000;

Inventory MustParse(const std::string& text) {
  StatusOr<Inventory> inv = ParseInventory(text);
  EXPECT_TRUE(inv.ok()) << inv.status().ToString();
  return inv.ok() ? std::move(inv).value() : Inventory{};
}

std::unique_ptr<SimGpuDriver> MustCreate(const std::string& text,
                                         const Clock& clock,
                                         SimDriverOptions options = {}) {
  StatusOr<std::unique_ptr<SimGpuDriver>> driver =
      SimGpuDriver::Create(MustParse(text), clock, std::move(options));
  EXPECT_TRUE(driver.ok()) << driver.status().ToString();
  return driver.ok() ? std::move(driver).value() : nullptr;
}

// One GPU with `gpu_fields` spliced into its object (e.g. faults).
std::string OneA100(const std::string& gpu_fields) {
  return R"({"node_id": "f", "cpu_milli": 1000, "host_memory_mb": 1024,
    "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920,
              "compute_capability": "8.0", "mig_enabled": true)" +
         (gpu_fields.empty() ? "" : ", " + gpu_fields) + "}]}";
}

class SimDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver_ = MustCreate(kNode, clock_);
    ASSERT_NE(driver_, nullptr);
  }

  MigDevice MustCreateMig(int gpu, const std::string& profile,
                          std::optional<MigPlacement> placement = {}) {
    StatusOr<MigDevice> device =
        driver_->CreateMigDevice(gpu, profile, placement);
    EXPECT_TRUE(device.ok()) << profile << ": " << device.status().ToString();
    return device.ok() ? *device : MigDevice{};
  }

  StatusCode CreateCode(int gpu, const std::string& profile,
                        std::optional<MigPlacement> placement = {}) {
    return driver_->CreateMigDevice(gpu, profile, placement).status().code();
  }

  std::vector<MigDevice> Devices(int gpu) {
    StatusOr<std::vector<MigDevice>> devices = driver_->ListMigDevices(gpu);
    EXPECT_TRUE(devices.ok()) << devices.status().ToString();
    return devices.ok() ? *devices : std::vector<MigDevice>{};
  }

  FakeClock clock_{kStartMillis};
  std::unique_ptr<SimGpuDriver> driver_;
};

// ---- Listing ----------------------------------------------------------------

TEST_F(SimDriverTest, ListsTheInventory) {
  EXPECT_EQ(driver_->Name(), "sim");
  const StatusOr<std::vector<GpuInfo>> gpus = driver_->ListGpus();
  ASSERT_TRUE(gpus.ok());
  ASSERT_EQ(gpus->size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*gpus)[i].index, i);
  const GpuInfo& h100 = (*gpus)[kH100];
  EXPECT_EQ(h100.uuid, "GPU-sim-t-1");
  EXPECT_EQ(h100.vendor, "nvidia");
  EXPECT_EQ(h100.model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.memory_mib, 81559);
  EXPECT_EQ(h100.cc_major, 9);
  EXPECT_EQ(h100.cc_minor, 0);
  EXPECT_TRUE(h100.mig_enabled);
  EXPECT_TRUE(h100.healthy);
  EXPECT_EQ(h100.used_memory_mib, 0);
  EXPECT_FALSE((*gpus)[kT4].mig_enabled);
  EXPECT_EQ((*gpus)[kT4].cc_minor, 5);
}

TEST_F(SimDriverTest, UnknownGpuIsNotFound) {
  EXPECT_EQ(driver_->ListMigDevices(5).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(driver_->ListMigDevices(-1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(CreateCode(9, "1g.10gb"), StatusCode::kNotFound);
  EXPECT_EQ(driver_->DestroyMigDevice(9, 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(driver_->ListProcesses(9).status().code(), StatusCode::kNotFound);
}

TEST_F(SimDriverTest, MigCallsOnAWholeGpuAreFailedPrecondition) {
  EXPECT_EQ(driver_->ListMigDevices(kT4).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(CreateCode(kT4, "1g.10gb"), StatusCode::kFailedPrecondition);
  EXPECT_EQ(driver_->DestroyMigDevice(kT4, 1).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(driver_->ListProcesses(kT4).ok());
}

// ---- MIG on A100 80GB
// ----------------------------------------------------------

TEST_F(SimDriverTest, A100AutomaticPlacementAndIds) {
  const MigDevice first = MustCreateMig(kA100, "3g.40gb");
  EXPECT_EQ(first.placement, (MigPlacement{0, 4}));
  EXPECT_EQ(first.gpu_instance_id, 1);
  EXPECT_EQ(first.compute_instance_id, 0);
  EXPECT_EQ(first.profile, "3g.40gb");
  EXPECT_TRUE(first.device_uuid.starts_with("MIG-"));
  EXPECT_EQ(first.device_uuid.size(), 40u);  // MIG- + 36-char UUID

  const MigDevice second = MustCreateMig(kA100, "3g.40gb");
  EXPECT_EQ(second.placement, (MigPlacement{4, 4}));
  EXPECT_EQ(second.gpu_instance_id, 2);
  EXPECT_NE(second.device_uuid, first.device_uuid);

  // Max 2 instances of 3g.40gb, and no room anyway.
  EXPECT_EQ(CreateCode(kA100, "3g.40gb"), StatusCode::kResourceExhausted);

  const std::vector<MigDevice> listed = Devices(kA100);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].device_uuid, first.device_uuid);
  EXPECT_EQ(listed[1].device_uuid, second.device_uuid);
}

TEST_F(SimDriverTest, A100IdsAreReusedAfterDestroy) {
  MustCreateMig(kA100, "1g.10gb");                           // gi 1 at 0
  const MigDevice middle = MustCreateMig(kA100, "1g.10gb");  // gi 2 at 1
  MustCreateMig(kA100, "1g.10gb");                           // gi 3 at 2
  EXPECT_EQ(middle.gpu_instance_id, 2);
  EXPECT_EQ(middle.placement.start, 1);
  ASSERT_TRUE(driver_->DestroyMigDevice(kA100, 2).ok());

  const MigDevice again = MustCreateMig(kA100, "1g.10gb");
  EXPECT_EQ(again.gpu_instance_id, 2);               // the freed id
  EXPECT_EQ(again.placement.start, 1);               // the lowest free slot
  EXPECT_NE(again.device_uuid, middle.device_uuid);  // a new device

  const std::vector<MigDevice> listed = Devices(kA100);
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].gpu_instance_id, 1);
  EXPECT_EQ(listed[1].gpu_instance_id, 2);
  EXPECT_EQ(listed[2].gpu_instance_id, 3);
}

TEST_F(SimDriverTest, A100MaxInstances) {
  std::set<int> ids;
  std::set<std::string> uuids;
  for (int i = 0; i < 7; ++i) {
    const MigDevice d = MustCreateMig(kA100, "1g.10gb");
    EXPECT_EQ(d.placement, (MigPlacement{i, 1}));
    ids.insert(d.gpu_instance_id);
    uuids.insert(d.device_uuid);
  }
  EXPECT_EQ(ids.size(), 7u);
  EXPECT_EQ(uuids.size(), 7u);
  // Slot 7 is free but 1g.10gb may not start there, and 7 is its maximum.
  const Status eighth =
      driver_->CreateMigDevice(kA100, "1g.10gb", std::nullopt).status();
  EXPECT_EQ(eighth.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(eighth.message().find("GPU 0"), std::string::npos);
}

TEST_F(SimDriverTest, A100OneGbTwentyMaxFour) {
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(MustCreateMig(kA100, "1g.20gb").placement.start, 2 * i);
  }
  EXPECT_EQ(CreateCode(kA100, "1g.20gb"), StatusCode::kResourceExhausted);
}

TEST_F(SimDriverTest, A100PlacementErrors) {
  // Not a legal start for 3g.40gb.
  EXPECT_EQ(CreateCode(kA100, "3g.40gb", MigPlacement{2, 4}),
            StatusCode::kInvalidArgument);
  // Legal start, wrong size.
  EXPECT_EQ(CreateCode(kA100, "3g.40gb", MigPlacement{0, 2}),
            StatusCode::kInvalidArgument);
  // A profile of the 40GB card, not this one.
  EXPECT_EQ(CreateCode(kA100, "3g.20gb"), StatusCode::kNotFound);
  EXPECT_TRUE(Devices(kA100).empty());

  MustCreateMig(kA100, "3g.40gb", MigPlacement{4, 4});
  // Overlaps 4:4.
  EXPECT_EQ(CreateCode(kA100, "1g.10gb", MigPlacement{5, 1}),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(CreateCode(kA100, "2g.20gb", MigPlacement{4, 2}),
            StatusCode::kResourceExhausted);
  // 4g.40gb only starts at 0, which is free.
  EXPECT_EQ(MustCreateMig(kA100, "4g.40gb").placement, (MigPlacement{0, 4}));
  EXPECT_EQ(Devices(kA100).size(), 2u);
}

TEST_F(SimDriverTest, A100OneMediaInstancePerGpu) {
  MustCreateMig(kA100, "1g.10gb+me");
  const Status second =
      driver_->CreateMigDevice(kA100, "1g.10gb+me", std::nullopt).status();
  EXPECT_EQ(second.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(second.message().find("+me"), std::string::npos);
  // Plain profiles still fit beside it.
  EXPECT_EQ(MustCreateMig(kA100, "1g.10gb").placement.start, 1);
}

TEST_F(SimDriverTest, A100WholeCardInstance) {
  const MigDevice whole = MustCreateMig(kA100, "7g.80gb");
  EXPECT_EQ(whole.gpu_instance_id, 0);  // NVML's id for the full instance
  EXPECT_EQ(whole.placement, (MigPlacement{0, 8}));
  EXPECT_EQ(CreateCode(kA100, "1g.10gb"), StatusCode::kResourceExhausted);
  ASSERT_TRUE(driver_->DestroyMigDevice(kA100, 0).ok());
  EXPECT_EQ(MustCreateMig(kA100, "1g.10gb").gpu_instance_id, 1);
}

TEST_F(SimDriverTest, DestroyOfAMissingInstanceIsNotFound) {
  const MigDevice d = MustCreateMig(kA100, "2g.20gb");
  EXPECT_EQ(driver_->DestroyMigDevice(kA100, d.gpu_instance_id + 1).code(),
            StatusCode::kNotFound);
  ASSERT_TRUE(driver_->DestroyMigDevice(kA100, d.gpu_instance_id).ok());
  // Repeated destroy: NotFound, which callers treat as already done.
  EXPECT_EQ(driver_->DestroyMigDevice(kA100, d.gpu_instance_id).code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(Devices(kA100).empty());
}

// ---- MIG on H100, A30, H200 -------------------------------------------------

TEST_F(SimDriverTest, H100Profiles) {
  // nvidia-smi's spelling is accepted; the table's comes back.
  const MigDevice big = MustCreateMig(kH100, "MIG 4g.40gb");
  EXPECT_EQ(big.profile, "4g.40gb");
  EXPECT_EQ(big.placement, (MigPlacement{0, 4}));
  EXPECT_EQ(MustCreateMig(kH100, "3g.40gb").placement, (MigPlacement{4, 4}));
  EXPECT_EQ(CreateCode(kH100, "1g.10gb"), StatusCode::kResourceExhausted);
  EXPECT_EQ(CreateCode(kH100, "1g.12gb"), StatusCode::kNotFound);  // NVL's
  ASSERT_TRUE(driver_->DestroyMigDevice(kH100, big.gpu_instance_id).ok());
  EXPECT_EQ(MustCreateMig(kH100, "2g.20gb", MigPlacement{2, 2}).placement,
            (MigPlacement{2, 2}));
  EXPECT_EQ(CreateCode(kH100, "2g.20gb", MigPlacement{1, 2}),
            StatusCode::kInvalidArgument);
}

TEST_F(SimDriverTest, A30Profiles) {
  EXPECT_EQ(MustCreateMig(kA30, "2g.12gb").placement, (MigPlacement{0, 2}));
  EXPECT_EQ(CreateCode(kA30, "2g.12gb", MigPlacement{1, 2}),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MustCreateMig(kA30, "2g.12gb").placement, (MigPlacement{2, 2}));
  EXPECT_EQ(CreateCode(kA30, "1g.6gb"), StatusCode::kResourceExhausted);
  EXPECT_EQ(CreateCode(kA30, "4g.24gb"), StatusCode::kResourceExhausted);
  EXPECT_EQ(CreateCode(kA30, "3g.40gb"), StatusCode::kNotFound);
}

TEST_F(SimDriverTest, A30MediaRuleSpansProfiles) {
  MustCreateMig(kA30, "1g.6gb+me", MigPlacement{3, 1});
  // Another +me profile: the media engines are taken.
  EXPECT_EQ(CreateCode(kA30, "2g.12gb+me"), StatusCode::kResourceExhausted);
  EXPECT_EQ(MustCreateMig(kA30, "1g.6gb").placement, (MigPlacement{0, 1}));
}

TEST_F(SimDriverTest, H200Profiles) {
  const MigDevice whole = MustCreateMig(kH200, "7g.141gb");
  EXPECT_EQ(whole.gpu_instance_id, 0);
  ASSERT_TRUE(driver_->DestroyMigDevice(kH200, 0).ok());
  EXPECT_EQ(MustCreateMig(kH200, "3g.71gb").placement, (MigPlacement{0, 4}));
  EXPECT_EQ(MustCreateMig(kH200, "3g.71gb").placement, (MigPlacement{4, 4}));
  EXPECT_EQ(CreateCode(kH200, "1g.18gb"), StatusCode::kResourceExhausted);
  EXPECT_EQ(CreateCode(kH200, "1g.10gb"), StatusCode::kNotFound);
}

TEST(SimDriverUuidTest, DeviceUuidsAreDeterministic) {
  FakeClock clock(kStartMillis);
  auto a = MustCreate(kNode, clock);
  auto b = MustCreate(kNode, clock);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (const char* profile : {"1g.10gb", "3g.40gb"}) {
    const StatusOr<MigDevice> da = a->CreateMigDevice(kA100, profile, {});
    const StatusOr<MigDevice> db = b->CreateMigDevice(kA100, profile, {});
    ASSERT_TRUE(da.ok() && db.ok());
    EXPECT_EQ(da->device_uuid, db->device_uuid);
  }
  // Other GPUs derive theirs from their own UUID.
  const StatusOr<MigDevice> h100 = a->CreateMigDevice(kH100, "1g.10gb", {});
  ASSERT_TRUE(h100.ok());
  EXPECT_NE(h100->device_uuid, a->ListMigDevices(kA100)->front().device_uuid);
}

TEST(SimDriverInventoryTest, PreExistingInstances) {
  FakeClock clock(kStartMillis);
  auto driver = MustCreate(
      OneA100(R"("mig_instances": [{"profile": "3g.40gb", "start": 4},
                                   {"profile": "1g.10gb"}])"),
      clock);
  ASSERT_NE(driver, nullptr);
  const StatusOr<std::vector<MigDevice>> devices = driver->ListMigDevices(0);
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 2u);
  EXPECT_EQ((*devices)[0].gpu_instance_id, 1);
  EXPECT_EQ((*devices)[0].placement, (MigPlacement{4, 4}));
  EXPECT_EQ((*devices)[1].gpu_instance_id, 2);
  EXPECT_EQ((*devices)[1].placement, (MigPlacement{0, 1}));
  EXPECT_EQ(driver->CreateMigDevice(0, "3g.40gb", {}).status().code(),
            StatusCode::kResourceExhausted);
}

// ---- Faults
// -------------------------------------------------------------------

TEST(SimDriverFaultTest, LostGpuAndRecovery) {
  FakeClock clock(kStartMillis);
  auto driver = MustCreate(
      R"({"cpu_milli": 1000, "host_memory_mb": 1024, "gpus": [
        {"model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920,
         "compute_capability": "8.0", "mig_enabled": true,
         "faults": [{"kind": "lost", "at_ms": 1000, "recover_at_ms": 2000}]},
        {"model": "Tesla T4", "memory_mb": 15360,
         "compute_capability": "7.5"}]})",
      clock);
  ASSERT_NE(driver, nullptr);
  const StatusOr<MigDevice> before = driver->CreateMigDevice(0, "1g.10gb", {});
  ASSERT_TRUE(before.ok());

  clock.Advance(999);
  EXPECT_TRUE(driver->ListGpus()->at(0).healthy);

  clock.Advance(1);  // 1000 ms after start: lost
  const StatusOr<std::vector<GpuInfo>> gpus = driver->ListGpus();
  ASSERT_TRUE(gpus.ok());
  ASSERT_EQ(gpus->size(), 2u);
  const GpuInfo& lost = (*gpus)[0];
  EXPECT_FALSE(lost.healthy);
  EXPECT_EQ(lost.health_detail,
            "GPU is lost (simulated NVML_ERROR_GPU_IS_LOST)");
  EXPECT_EQ(lost.uuid, "GPU-sim-sim-0");  // still named
  EXPECT_FALSE(lost.mig_enabled);
  EXPECT_FALSE(lost.used_memory_mib.has_value());
  EXPECT_TRUE((*gpus)[1].healthy);

  EXPECT_EQ(driver->ListMigDevices(0).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(driver->CreateMigDevice(0, "1g.10gb", {}).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(driver->DestroyMigDevice(0, before->gpu_instance_id).code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(driver->ListProcesses(0).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(
      driver->RegisterProcess({.pid = 5, .gpu_index = 0, .gpu_instance_id = 1})
          .code(),
      StatusCode::kUnavailable);
  EXPECT_TRUE(driver->ListProcesses(1).ok());

  clock.Advance(1000);  // 2000 ms: recovered, the instance still there
  EXPECT_TRUE(driver->ListGpus()->at(0).healthy);
  const StatusOr<std::vector<MigDevice>> devices = driver->ListMigDevices(0);
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 1u);
  EXPECT_EQ(devices->front().device_uuid, before->device_uuid);
}

TEST(SimDriverFaultTest, LostForever) {
  FakeClock clock(kStartMillis);
  auto driver =
      MustCreate(OneA100(R"("faults": [{"kind": "lost", "at_ms": 0}])"), clock);
  ASSERT_NE(driver, nullptr);
  EXPECT_FALSE(driver->ListGpus()->at(0).healthy);
  clock.Advance(int64_t{1} << 40);
  EXPECT_FALSE(driver->ListGpus()->at(0).healthy);
}

TEST(SimDriverFaultTest, NextCreatesFail) {
  FakeClock clock(kStartMillis);
  auto driver =
      MustCreate(OneA100(R"("faults": [{"kind": "mig_create_fails", "count": 2,
                             "message": "injected"}])"),
                 clock);
  ASSERT_NE(driver, nullptr);
  // A request the tables reject fails for that reason and uses no fault.
  EXPECT_EQ(
      driver->CreateMigDevice(0, "3g.40gb", MigPlacement{1, 4}).status().code(),
      StatusCode::kInvalidArgument);
  for (int i = 0; i < 2; ++i) {
    const Status failed =
        driver->CreateMigDevice(0, "1g.10gb", std::nullopt).status();
    EXPECT_EQ(failed.code(), StatusCode::kInternal);
    EXPECT_EQ(failed.message(), "GPU 0: injected");
  }
  EXPECT_TRUE(driver->ListMigDevices(0)->empty());  // nothing left behind
  const StatusOr<MigDevice> third = driver->CreateMigDevice(0, "1g.10gb", {});
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(third->gpu_instance_id, 1);
}

TEST(SimDriverFaultTest, CreatesFailFromATime) {
  FakeClock clock(kStartMillis);
  auto driver = MustCreate(
      OneA100(R"("faults": [{"kind": "mig_create_fails", "at_ms": 500,
                             "error": "resource_exhausted"}])"),
      clock);
  ASSERT_NE(driver, nullptr);
  EXPECT_TRUE(driver->CreateMigDevice(0, "1g.10gb", {}).ok());
  clock.Advance(500);
  for (int i = 0; i < 3; ++i) {
    const Status failed = driver->CreateMigDevice(0, "1g.10gb", {}).status();
    EXPECT_EQ(failed.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(failed.message().find("NVML_ERROR_INSUFFICIENT_RESOURCES"),
              std::string::npos);
  }
  EXPECT_EQ(driver->ListMigDevices(0)->size(), 1u);
  // Destroy is unaffected.
  EXPECT_TRUE(driver->DestroyMigDevice(0, 1).ok());
}

TEST(SimDriverFaultTest, CountedFailuresFromATimeWithAnErrorKind) {
  FakeClock clock(kStartMillis);
  auto driver = MustCreate(
      OneA100(R"("faults": [{"kind": "mig_create_fails", "at_ms": 100,
                             "count": 1, "error": "unavailable"}])"),
      clock);
  ASSERT_NE(driver, nullptr);
  EXPECT_TRUE(driver->CreateMigDevice(0, "1g.10gb", {}).ok());
  clock.Advance(100);
  EXPECT_EQ(driver->CreateMigDevice(0, "1g.10gb", {}).status().code(),
            StatusCode::kUnavailable);
  EXPECT_TRUE(driver->CreateMigDevice(0, "1g.10gb", {}).ok());
}

TEST(SimDriverFaultTest, UuidChangesAndIndicesSwap) {
  FakeClock clock(kStartMillis);
  auto driver = MustCreate(
      R"({"cpu_milli": 1000, "host_memory_mb": 1024, "gpus": [
        {"model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920,
         "compute_capability": "8.0", "mig_enabled": true, "uuid": "GPU-a",
         "faults": [{"kind": "uuid_change", "at_ms": 500, "uuid": "GPU-b"}]},
        {"model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920,
         "compute_capability": "8.0", "uuid": "GPU-b",
         "faults": [{"kind": "uuid_change", "at_ms": 500, "uuid": "GPU-a"},
                    {"kind": "uuid_change", "at_ms": 900,
                     "uuid": "GPU-c"}]}]})",
      clock);
  ASSERT_NE(driver, nullptr);
  const auto uuids = [&] {
    const StatusOr<std::vector<GpuInfo>> gpus = driver->ListGpus();
    EXPECT_TRUE(gpus.ok());
    return std::vector<std::string>{gpus->at(0).uuid, gpus->at(1).uuid};
  };
  EXPECT_EQ(uuids(), (std::vector<std::string>{"GPU-a", "GPU-b"}));
  clock.Advance(499);
  EXPECT_EQ(uuids(), (std::vector<std::string>{"GPU-a", "GPU-b"}));
  clock.Advance(1);
  EXPECT_EQ(uuids(), (std::vector<std::string>{"GPU-b", "GPU-a"}));
  clock.Advance(400);
  EXPECT_EQ(uuids(), (std::vector<std::string>{"GPU-b", "GPU-c"}));
  // MIG keeps working on the index.
  EXPECT_TRUE(driver->CreateMigDevice(0, "1g.10gb", {}).ok());
}

// ---- Processes
// ----------------------------------------------------------------

TEST_F(SimDriverTest, ProcessesBlockDestroy) {
  const MigDevice d = MustCreateMig(kA100, "3g.40gb");
  const MigDevice other = MustCreateMig(kA100, "3g.40gb");
  ASSERT_TRUE(driver_
                  ->RegisterProcess({.pid = 100,
                                     .gpu_index = kA100,
                                     .gpu_instance_id = d.gpu_instance_id,
                                     .used_memory_mib = 2048})
                  .ok());
  ASSERT_TRUE(driver_
                  ->RegisterProcess({.pid = 101,
                                     .gpu_index = kA100,
                                     .gpu_instance_id = d.gpu_instance_id})
                  .ok());

  const StatusOr<std::vector<GpuProcess>> procs = driver_->ListProcesses(kA100);
  ASSERT_TRUE(procs.ok());
  ASSERT_EQ(procs->size(), 2u);
  EXPECT_EQ((*procs)[0].pid, 100);
  EXPECT_EQ((*procs)[0].used_memory_mib, 2048);
  EXPECT_EQ((*procs)[0].gpu_instance_id, d.gpu_instance_id);
  EXPECT_FALSE((*procs)[1].used_memory_mib.has_value());
  EXPECT_EQ(driver_->ListGpus()->at(kA100).used_memory_mib, 2048);
  EXPECT_TRUE(driver_->ListProcesses(kH100)->empty());

  const Status in_use = driver_->DestroyMigDevice(kA100, d.gpu_instance_id);
  EXPECT_EQ(in_use.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(in_use.message().find("kInUse"), std::string::npos);
  EXPECT_NE(in_use.message().find("100, 101"), std::string::npos);
  EXPECT_EQ(Devices(kA100).size(), 2u);
  // The other instance is free to go.
  EXPECT_TRUE(driver_->DestroyMigDevice(kA100, other.gpu_instance_id).ok());

  ASSERT_TRUE(driver_->UnregisterProcess(100).ok());
  EXPECT_EQ(driver_->DestroyMigDevice(kA100, d.gpu_instance_id).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(driver_->UnregisterProcess(101).ok());
  EXPECT_TRUE(driver_->DestroyMigDevice(kA100, d.gpu_instance_id).ok());
  EXPECT_EQ(driver_->UnregisterProcess(101).code(), StatusCode::kNotFound);
}

TEST_F(SimDriverTest, ProcessRegistrationIsChecked) {
  const MigDevice d = MustCreateMig(kA100, "1g.10gb");
  // On a MIG GPU a process runs in a GPU instance that exists.
  EXPECT_EQ(driver_->RegisterProcess({.pid = 1, .gpu_index = kA100}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(driver_
                ->RegisterProcess({.pid = 1,
                                   .gpu_index = kA100,
                                   .gpu_instance_id = d.gpu_instance_id + 1})
                .code(),
            StatusCode::kNotFound);
  // On a whole GPU it has none.
  EXPECT_EQ(
      driver_
          ->RegisterProcess({.pid = 1, .gpu_index = kT4, .gpu_instance_id = 1})
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(driver_->RegisterProcess({.pid = 0, .gpu_index = kT4}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(driver_->RegisterProcess({.pid = 1, .gpu_index = 7}).code(),
            StatusCode::kNotFound);
  ASSERT_TRUE(driver_
                  ->RegisterProcess(
                      {.pid = 1, .gpu_index = kT4, .used_memory_mib = 100})
                  .ok());
  EXPECT_EQ(driver_->RegisterProcess({.pid = 1, .gpu_index = kT4}).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(driver_->ListGpus()->at(kT4).used_memory_mib, 100);
  const StatusOr<std::vector<GpuProcess>> procs = driver_->ListProcesses(kT4);
  ASSERT_TRUE(procs.ok());
  ASSERT_EQ(procs->size(), 1u);
  EXPECT_FALSE(procs->front().gpu_instance_id.has_value());
}

// ---- Persistence
// -----------------------------------------------------------------

class SimDriverStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("hf_sim_driver_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    options_.state_file = (dir_ / "mig-state.json").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  FakeClock clock_{kStartMillis};
  std::filesystem::path dir_;
  SimDriverOptions options_;
};

TEST_F(SimDriverStateTest, InstancesSurviveARestart) {
  std::vector<MigDevice> before;
  std::set<std::string> issued;
  {
    auto first = MustCreate(kNode, clock_, options_);
    ASSERT_NE(first, nullptr);
    EXPECT_FALSE(std::filesystem::exists(options_.state_file));
    for (const char* profile : {"1g.10gb", "2g.20gb", "3g.40gb"}) {
      const StatusOr<MigDevice> d = first->CreateMigDevice(kA100, profile, {});
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      issued.insert(d->device_uuid);
    }
    ASSERT_TRUE(
        first->CreateMigDevice(kA30, "2g.12gb", MigPlacement{2, 2}).ok());
    ASSERT_TRUE(first->DestroyMigDevice(kA100, 2).ok());
    before = *first->ListMigDevices(kA100);
    EXPECT_TRUE(std::filesystem::exists(options_.state_file));
    EXPECT_FALSE(std::filesystem::exists(options_.state_file + ".tmp"));
  }
  auto second = MustCreate(kNode, clock_, options_);
  ASSERT_NE(second, nullptr);
  const StatusOr<std::vector<MigDevice>> after = second->ListMigDevices(kA100);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), before.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ((*after)[i].gpu_instance_id, before[i].gpu_instance_id);
    EXPECT_EQ((*after)[i].compute_instance_id, before[i].compute_instance_id);
    EXPECT_EQ((*after)[i].profile, before[i].profile);
    EXPECT_EQ((*after)[i].placement, before[i].placement);
    EXPECT_EQ((*after)[i].device_uuid, before[i].device_uuid);
  }
  ASSERT_EQ(second->ListMigDevices(kA30)->size(), 1u);
  EXPECT_EQ(second->ListMigDevices(kA30)->front().placement,
            (MigPlacement{2, 2}));
  // The restarted driver never reissues a UUID, even a destroyed one's.
  const StatusOr<MigDevice> fresh =
      second->CreateMigDevice(kA100, "1g.10gb", {});
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->gpu_instance_id, 2);
  EXPECT_FALSE(issued.contains(fresh->device_uuid));
}

TEST_F(SimDriverStateTest, StateFileReplacesInventoryInstances) {
  const std::string node =
      OneA100(R"("mig_instances": [{"profile": "7g.80gb"}])");
  {
    auto first = MustCreate(node, clock_, options_);
    ASSERT_NE(first, nullptr);
    ASSERT_EQ(first->ListMigDevices(0)->size(), 1u);
    ASSERT_TRUE(first->DestroyMigDevice(0, 0).ok());
  }
  auto second = MustCreate(node, clock_, options_);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(second->ListMigDevices(0)->empty());
}

TEST_F(SimDriverStateTest, WithoutAStateFileARestartForgets) {
  {
    auto first = MustCreate(kNode, clock_);
    ASSERT_TRUE(first->CreateMigDevice(kA100, "1g.10gb", {}).ok());
  }
  auto second = MustCreate(kNode, clock_);
  EXPECT_TRUE(second->ListMigDevices(kA100)->empty());
}

TEST_F(SimDriverStateTest, StateOfAnotherInventoryIsRejected) {
  {
    auto first = MustCreate(kNode, clock_, options_);
    ASSERT_TRUE(first->CreateMigDevice(kA100, "1g.10gb", {}).ok());
  }
  std::string other = kNode;
  const std::string from = R"("node_id": "t")";
  other.replace(other.find(from), from.size(), R"("node_id": "u")");
  const StatusOr<std::unique_ptr<SimGpuDriver>> driver =
      SimGpuDriver::Create(MustParse(other), clock_, options_);
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(driver.status().message().find("GPU-sim-u-0"), std::string::npos)
      << driver.status().message();
}

TEST_F(SimDriverStateTest, CorruptOrIllegalStateIsRejected) {
  std::ofstream(options_.state_file) << "{ not json";
  StatusOr<std::unique_ptr<SimGpuDriver>> driver =
      SimGpuDriver::Create(MustParse(kNode), clock_, options_);
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(driver.status().message().find("mig-state.json"),
            std::string::npos);

  // Two overlapping instances: the tables reject the saved state.
  std::ofstream(options_.state_file, std::ios::trunc) << R"({
    "format": "heteroflow-sim-mig-state", "version": 1,
    "gpus": [{"index": 0, "uuid": "GPU-sim-t-0", "next_mig_sequence": 2,
      "devices": [
        {"gpu_instance_id": 1, "compute_instance_id": 0,
         "profile": "3g.40gb", "start": 0, "size": 4, "device_uuid": "MIG-1"},
        {"gpu_instance_id": 2, "compute_instance_id": 0,
         "profile": "1g.10gb", "start": 2, "size": 1, "device_uuid": "MIG-2"}
      ]}]})";
  driver = SimGpuDriver::Create(MustParse(kNode), clock_, options_);
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(driver.status().message().find("overlaps"), std::string::npos)
      << driver.status().message();
}

TEST_F(SimDriverStateTest, UnwritableStateFailsTheChange) {
  options_.state_file = (dir_ / "no-such-dir" / "state.json").string();
  auto driver = MustCreate(kNode, clock_, options_);
  ASSERT_NE(driver, nullptr);
  EXPECT_EQ(driver->CreateMigDevice(kA100, "1g.10gb", {}).status().code(),
            StatusCode::kInternal);
  EXPECT_TRUE(driver->ListMigDevices(kA100)->empty());  // rolled back
}

// ---- Threads
// ----------------------------------------------------------------------

TEST(SimDriverThreadTest, ConcurrentCreatesNeverOverlap) {
  FakeClock clock(kStartMillis);
  auto driver = MustCreate(kNode, clock);
  ASSERT_NE(driver, nullptr);
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        const StatusOr<MigDevice> d =
            driver->CreateMigDevice(kA100, "1g.10gb", {});
        if (d.ok()) {
          ++created;
          if (i % 2 == 0) {
            EXPECT_TRUE(
                driver->DestroyMigDevice(kA100, d->gpu_instance_id).ok());
            --created;
          }
        }
        EXPECT_TRUE(driver->ListGpus().ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const StatusOr<std::vector<MigDevice>> devices =
      driver->ListMigDevices(kA100);
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ(static_cast<int>(devices->size()), created.load());
  EXPECT_LE(devices->size(), 7u);
  for (std::size_t i = 0; i < devices->size(); ++i) {
    for (std::size_t j = i + 1; j < devices->size(); ++j) {
      EXPECT_FALSE((*devices)[i].placement.Overlaps((*devices)[j].placement));
      EXPECT_NE((*devices)[i].gpu_instance_id, (*devices)[j].gpu_instance_id);
    }
  }
}

}  // namespace
}  // namespace hf::gpu
