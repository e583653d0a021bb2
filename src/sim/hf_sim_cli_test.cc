// End-to-end tests of the hf-sim command line (a contract other tools use):
// the real binary on small trace files in a temporary directory.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Outcome RunHfSim(const std::string& args) {
  const std::string command = std::string(HF_SIM_BINARY) + " " + args + " 2>&1";
  Outcome out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) {
    out.output += buf.data();
  }
  const int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

class HfSimCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hf-sim-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    Write("nodes.csv",
          "sn,cpu_milli,memory_mib,gpu,model\n"
          "n1,64000,262144,4,T4\n"
          "n2,96000,524288,8,V100M32\n"
          "cpu,32000,65536,0,\n");
    std::ostringstream pods;
    pods << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
    for (int i = 0; i < 30; ++i) {
      pods << "share-" << i << ",4000,8192,1," << 100 + 50 * (i % 10) << ",\n";
    }
    pods << "whole-a,8000,16384,1,1000,\nmulti,16000,32768,2,1000,V100M32\n"
         << "cpu-a,2000,4096,0,0,\n";
    Write("pods.csv", pods.str());
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::string Path(const std::string& name) const {
    return (dir_ / name).string();
  }
  std::string Read(const std::string& name) const {
    std::ifstream in(dir_ / name);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

  fs::path dir_;
};

TEST_F(HfSimCliTest, PolicyListMarksTheServerDefault) {
  const Outcome out = RunHfSim("--policy list");
  EXPECT_EQ(out.exit_code, 0);
  for (const char* name :
       {"random\n", "dotprod\n", "gpuclustering\n", "gpupacking\n", "bestfit\n",
        "fgd\n", "hf-bestfit\n", "hf-frag *\n"}) {
    EXPECT_NE(out.output.find(name), std::string::npos) << name;
  }
}

TEST_F(HfSimCliTest, AVariantSeedWritesTheSameTaskListEveryTime) {
  const auto run = [&](const std::string& seed, const std::string& out) {
    return RunHfSim(
        "--nodes " + Path("nodes.csv") + " --pods " + Path("pods.csv") +
        " --policy fgd --seeds 1 --gpuspec-share 0.5 "
        "--cpu-only-scale 3 --variant-seed " +
        seed + " --write-pods " + Path(out) + " --json " + Path("out.json"));
  };
  ASSERT_EQ(run("5", "a.csv").exit_code, 0);
  ASSERT_EQ(run("5", "b.csv").exit_code, 0);
  ASSERT_EQ(run("6", "c.csv").exit_code, 0);
  EXPECT_EQ(Read("a.csv"), Read("b.csv"));
  EXPECT_NE(Read("a.csv"), Read("c.csv"));
  EXPECT_NE(Read("a.csv").find("cpu-a-c1"), std::string::npos);  // a clone
}

TEST_F(HfSimCliTest, ReplayNeedsTimesAndWritesItsJson) {
  // pods.csv has no creation/deletion times.
  const Outcome none =
      RunHfSim("--replay --nodes " + Path("nodes.csv") + " --pods " +
               Path("pods.csv") + " --policy fgd --json " + Path("r.json"));
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.output.find("creation_time"), std::string::npos)
      << none.output;
  Write("timed.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,"
        "creation_time,deletion_time\n"
        "a,1000,1024,8,1000,,LS,0,100\n"
        "b,1000,1024,8,1000,,BE,10,60\n");
  const Outcome out = RunHfSim(
      "--replay --nodes " + Path("nodes.csv") + " --pods " + Path("timed.csv") +
      " --policy hf-frag --defrag simple --json " + Path("r.json"));
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const auto doc = nlohmann::json::parse(Read("r.json"));
  EXPECT_EQ(doc.at("defrag"), "simple");
  EXPECT_EQ(doc.at("tasks"), 2);
  // b waits for a's 8 GPUs from 10 to 100.
  EXPECT_NEAR(doc.at("waiting_gpu_hours").get<double>(), 8.0 * 90 / 3600, 1e-9);
  EXPECT_FALSE(doc.at("samples").empty());

  const Outcome planned = RunHfSim(
      "--replay --nodes " + Path("nodes.csv") + " --pods " + Path("timed.csv") +
      " --policy hf-frag --defrag consolidate --json " + Path("c.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const auto moved = nlohmann::json::parse(Read("c.json"));
  EXPECT_EQ(moved.at("defrag"), "consolidate");
  EXPECT_EQ(moved.at("evictions_requeued"), 0);
  EXPECT_TRUE(moved.contains("waiting_evictable_gpu_hours"));
}

TEST_F(HfSimCliTest, ReplayTakesTheServersHoldOptions) {
  Write("timed.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,"
        "creation_time,deletion_time\n"
        "a,1000,1024,8,1000,,LS,0,100\n"
        "b,1000,1024,8,1000,,BE,10,60\n");
  const std::string replay = "--replay --nodes " + Path("nodes.csv") +
                             " --pods " + Path("timed.csv") +
                             " --policy hf-frag --json " + Path("h.json");
  const Outcome out = RunHfSim(replay + " --hold-after 30 --max-holds 2");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const auto doc = nlohmann::json::parse(Read("h.json"));
  EXPECT_TRUE(doc.contains("holds"));
  EXPECT_TRUE(doc.contains("holds_started"));
  EXPECT_TRUE(doc.contains("wait_max_s"));
  // b waits 90 s for a's GPUs; nothing ends before a does, and then b
  // fits at once: no hold begins.
  EXPECT_EQ(doc.at("wait_max_s"), 90);
  EXPECT_EQ(doc.at("holds"), 0);
  // Refused, naming the option: no holds below one, a negative wait, and
  // holds together with a defragmenter.
  const Outcome zero = RunHfSim(replay + " --max-holds 0");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_NE(zero.output.find("--max-holds"), std::string::npos) << zero.output;
  const Outcome negative = RunHfSim(replay + " --hold-after -5");
  EXPECT_NE(negative.exit_code, 0);
  EXPECT_NE(negative.output.find("--hold-after"), std::string::npos)
      << negative.output;
  const Outcome both = RunHfSim(replay + " --hold-after 30 --defrag simple");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("defragmenter"), std::string::npos) << both.output;
}

TEST_F(HfSimCliTest, WritesTheJsonContractAndAPlot) {
  const Outcome out =
      RunHfSim("--nodes " + Path("nodes.csv") + " --pods " + Path("pods.csv") +
               " --policy fgd --seeds 1-3 --inflate 1.3 --json " +
               Path("out.json") + " --plot " + Path("out.svg"));
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const auto doc = nlohmann::json::parse(Read("out.json"));
  EXPECT_EQ(doc.at("policy"), "fgd");
  EXPECT_EQ(doc.at("seeds"), nlohmann::json::array({1, 2, 3}));
  EXPECT_GT(doc.at("decisions_per_second").get<double>(), 0);
  const auto& points = doc.at("points");
  ASSERT_EQ(points.size(), 131u);
  for (int x = 0; x <= 130; ++x) {
    const auto& p = points[static_cast<std::size_t>(x)];
    EXPECT_EQ(p.at("x"), x);
    for (const char* key :
         {"unallocated_pct", "frag_amount_pct", "frag_ratio_pct"}) {
      const auto& s = p.at(key);
      EXPECT_LE(s.at("p25").get<double>(), s.at("median").get<double>());
      EXPECT_LE(s.at("median").get<double>(), s.at("p75").get<double>());
    }
  }
  EXPECT_DOUBLE_EQ(points[0].at("unallocated_pct").at("median"), 100.0);
  EXPECT_EQ(Read("out.svg").rfind("<svg", 0), 0u);
}

TEST_F(HfSimCliTest, MalformedRowFailsWithFileAndLine) {
  Write("bad.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        "a,1000,1024,1,500\n"
        "b,1000,1024,one,500\n");
  const Outcome out =
      RunHfSim("--nodes " + Path("nodes.csv") + " --pods " + Path("bad.csv") +
               " --policy fgd --json " + Path("out.json"));
  EXPECT_EQ(out.exit_code, 2);
  EXPECT_NE(out.output.find(Path("bad.csv") + ":3: num_gpu"), std::string::npos)
      << out.output;
  EXPECT_FALSE(fs::exists(dir_ / "out.json"));
}

TEST_F(HfSimCliTest, UnknownPolicyAndBadSeedsAreRefused) {
  const std::string base = "--nodes " + Path("nodes.csv") + " --pods " +
                           Path("pods.csv") + " --json " + Path("o.json");
  const Outcome policy = RunHfSim(base + " --policy nope");
  EXPECT_EQ(policy.exit_code, 2);
  EXPECT_NE(policy.output.find("hf-bestfit"), std::string::npos);
  const Outcome seeds = RunHfSim(base + " --policy fgd --seeds 9-3");
  EXPECT_NE(seeds.exit_code, 0);
  EXPECT_NE(seeds.output.find("--seeds"), std::string::npos);
  const Outcome missing = RunHfSim("--policy fgd --json " + Path("o.json"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("--nodes"), std::string::npos);
}

// The MIG variant through the binary: the V100 node's GPUs in MIG mode with
// the A100-80GB table; sharing tasks are charged partitions there, so what
// is allocated differs from the run without it; unknown models and tables
// are refused, naming the flag.
TEST_F(HfSimCliTest, TheMigVariantRunsAndRefusesWhatItDoesNotKnow) {
  const std::string base = "--nodes " + Path("nodes.csv") + " --pods " +
                           Path("pods.csv") + " --policy hf-frag --seeds 1-2";
  const Outcome plain = RunHfSim(base + " --json " + Path("plain.json"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const Outcome mig =
      RunHfSim(base + " --mig V100M32 --json " + Path("mig.json"));
  ASSERT_EQ(mig.exit_code, 0) << mig.output;
  const auto without = nlohmann::json::parse(Read("plain.json"));
  const auto with = nlohmann::json::parse(Read("mig.json"));
  EXPECT_GT(with.at("placed").get<int>(), 0);
  EXPECT_NE(with.at("points").at(100).at("unallocated_pct"),
            without.at("points").at(100).at("unallocated_pct"))
      << "rounding up to partitions must change what is allocated";
  const Outcome model = RunHfSim(base + " --mig P100 --json " + Path("x.json"));
  EXPECT_EQ(model.exit_code, 2) << model.output;
  EXPECT_NE(model.output.find("--mig: no GPU node of model 'P100'"),
            std::string::npos)
      << model.output;
  const Outcome table =
      RunHfSim(base + " --mig V100M32 --mig-table Z9 --json " + Path("x.json"));
  EXPECT_EQ(table.exit_code, 2) << table.output;
  EXPECT_NE(table.output.find("--mig-table"), std::string::npos)
      << table.output;
}

}  // namespace
