// A GPU driver that passes every call to another one: tests derive from it
// and override the one call they watch or change (a MIG create that
// "crashes the agent", a count of utilisation samples).
//
// Thread-safety: as the driver underneath.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_driver.h"

namespace hf::agent::test_driver {

class ForwardingDriver : public gpu::GpuDriver {
 public:
  explicit ForwardingDriver(gpu::GpuDriver* real) : real_(real) {}

  std::string Name() const override { return real_->Name(); }
  StatusOr<std::vector<gpu::GpuInfo>> ListGpus() override {
    return real_->ListGpus();
  }
  StatusOr<std::vector<gpu::MigDevice>> ListMigDevices(int index) override {
    return real_->ListMigDevices(index);
  }
  StatusOr<gpu::MigDevice> CreateMigDevice(
      int index, const std::string& profile,
      std::optional<gpu::MigPlacement> placement) override {
    return real_->CreateMigDevice(index, profile, placement);
  }
  Status DestroyMigDevice(int index, int gpu_instance_id) override {
    return real_->DestroyMigDevice(index, gpu_instance_id);
  }
  StatusOr<std::vector<gpu::GpuProcess>> ListProcesses(int index) override {
    return real_->ListProcesses(index);
  }
  StatusOr<std::vector<gpu::ProcessUtilization>> SampleProcessUtilization(
      int index, std::uint64_t since_us) override {
    return real_->SampleProcessUtilization(index, since_us);
  }

 protected:
  gpu::GpuDriver* real() const { return real_; }

 private:
  gpu::GpuDriver* const real_;
};

}  // namespace hf::agent::test_driver
