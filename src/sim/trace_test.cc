// Tests for the trace CSV parser: the openb columns, optional and extra
// columns, and a clear error naming file, line and column for every kind of
// malformed row.
#include "sim/trace.h"

#include <gtest/gtest.h>

namespace hf::sim {
namespace {

constexpr char kPodHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase\n";

::testing::AssertionResult ErrorMentions(const Status& s,
                                         const std::string& needle) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error";
  if (s.message().find(needle) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "'" << s.message() << "' does not mention '" << needle << "'";
  }
  return ::testing::AssertionSuccess();
}

TEST(TraceTest, ParsesNodes) {
  auto nodes = ParseNodeCsv(
      "sn,cpu_milli,memory_mib,gpu,model\n"
      "node-a,64000,262144,2,P100\n"
      "node-b,96000,786432,8,V100M32\n"
      "cpu-only,32000,131072,0,\n",
      "nodes.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[0].name, "node-a");
  EXPECT_EQ((*nodes)[0].cpu_milli, 64000);
  EXPECT_EQ((*nodes)[0].memory_mib, 262144);
  EXPECT_EQ((*nodes)[0].gpu_count, 2);
  EXPECT_EQ((*nodes)[0].model, "P100");
  EXPECT_EQ((*nodes)[1].gpu_count, 8);
  EXPECT_EQ((*nodes)[2].gpu_count, 0);
}

TEST(TraceTest, ParsesQosAndTimes) {
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,"
      "creation_time,deletion_time\n"
      "p0,1000,1024,1,1000,,BE,5,20\n"
      "p1,1000,1024,1,1000,,LS,7,\n",
      "pods.csv");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_EQ((*pods)[0].qos, "BE");
  EXPECT_EQ((*pods)[0].creation_time, 5);
  EXPECT_EQ((*pods)[0].deletion_time, 20);
  EXPECT_EQ((*pods)[1].qos, "LS");
  EXPECT_EQ((*pods)[1].deletion_time, -1);  // never leaves
  auto bad = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,"
      "deletion_time\np0,1000,1024,0,0,30,20\n",
      "pods.csv");
  EXPECT_TRUE(ErrorMentions(bad.status(), "pods.csv:2: deletion_time"));
}

TEST(TraceTest, ParsesPodsWithSpecAndExtraColumns) {
  auto pods = ParsePodCsv(std::string(kPodHeader) +
                              "p0,12000,16384,1,1000,,LS,Running\n"
                              "p1,6000,12288,1,460,nan,LS,Running\n"
                              "p2,4000,8192,8,1000,V100M16|V100M32,BE,Running\n"
                              "p3,2000,4096,0,0,,BE,Running\n",
                          "pods.csv");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 4u);
  EXPECT_FALSE((*pods)[0].is_share());
  EXPECT_TRUE((*pods)[1].is_share());
  EXPECT_EQ((*pods)[1].gpu_milli, 460);
  EXPECT_TRUE((*pods)[1].gpu_spec.empty());  // "nan" = any model
  EXPECT_EQ((*pods)[2].total_gpu_milli(), 8000);
  EXPECT_EQ((*pods)[2].gpu_spec,
            (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_EQ((*pods)[3].num_gpu, 0);
}

TEST(TraceTest, GpuSpecColumnIsOptional) {
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,2,1000\n",
      "multigpu.csv");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  EXPECT_TRUE((*pods)[0].gpu_spec.empty());
}

TEST(TraceTest, MalformedNumberNamesFileLineAndColumn) {
  auto pods = ParsePodCsv(std::string(kPodHeader) +
                              "p0,12000,16384,1,1000,,LS,Running\n"
                              "p1,6000,12288,1,4x0,,LS,Running\n",
                          "pods.csv");
  ASSERT_FALSE(pods.ok());
  EXPECT_EQ(pods.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ErrorMentions(pods.status(), "pods.csv:3: gpu_milli"));
  EXPECT_TRUE(ErrorMentions(pods.status(), "'4x0' is not an integer"));
  EXPECT_EQ(pods.status().field(), "gpu_milli");
}

TEST(TraceTest, RejectsInconsistentGpuRequests) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"p,1,1,1,1200,,x,y", "above 1000"},
      {"p,1,1,0,500,,x,y", "must be 0 for a task without GPUs"},
      {"p,1,1,2,0,,x,y", "is 0 for a task with num_gpu 2"},
      {"p,1,1,2,500,,x,y", "must be 1000 for a multi-GPU task"},
      {"p,-5,1,1,500,,x,y", "is negative"},
      {"p,1,,1,500,,x,y", "memory_mib: is empty"},
      {"p,1,1,99999999999999999999,1000,,x,y", "out of range"},
      {",1,1,1,500,,x,y", "name: is empty"},
  };
  for (const auto& [row, expected] : cases) {
    auto pods = ParsePodCsv(std::string(kPodHeader) + row + "\n", "t.csv");
    ASSERT_FALSE(pods.ok()) << row;
    EXPECT_TRUE(ErrorMentions(pods.status(), "t.csv:2")) << row;
    EXPECT_TRUE(ErrorMentions(pods.status(), expected)) << row;
  }
}

// CPU and memory beyond 2^30 were accepted up to int64's limit, past what
// the ledger's placement index holds exactly (32 bits).
TEST(TraceTest, ResourcesAreBoundedTo2To30) {
  auto pods = ParsePodCsv(std::string(kPodHeader) +
                              "p,1073741824,1073741824,1,500,,x,y\n"
                              "q,1073741825,1,1,500,,x,y\n",
                          "t.csv");
  ASSERT_FALSE(pods.ok());
  EXPECT_TRUE(ErrorMentions(pods.status(), "t.csv:3: cpu_milli"));
  EXPECT_TRUE(ErrorMentions(pods.status(), "is above 1073741824"));
  auto nodes = ParseNodeCsv(
      "sn,cpu_milli,memory_mib,gpu,model\n"
      "n,1,9223372036854775807,1,V100\n",
      "n.csv");
  ASSERT_FALSE(nodes.ok());
  EXPECT_TRUE(ErrorMentions(nodes.status(), "n.csv:2: memory_mib"));
}

TEST(TraceTest, RejectsDuplicateNames) {
  auto pods = ParsePodCsv(
      std::string(kPodHeader) + "p0,1,1,1,500,,x,y\np0,1,1,1,500,,x,y\n",
      "t.csv");
  EXPECT_TRUE(ErrorMentions(pods.status(), "t.csv:3: name: duplicate"));
  auto nodes = ParseNodeCsv(
      "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,T4\nn,1,1,1,T4\n", "n.csv");
  EXPECT_TRUE(ErrorMentions(nodes.status(), "n.csv:3: sn: duplicate"));
}

TEST(TraceTest, MissingColumnsAndWrongFieldCount) {
  auto no_gpu_milli =
      ParsePodCsv("name,cpu_milli,memory_mib,num_gpu\n", "t.csv");
  EXPECT_FALSE(no_gpu_milli.ok());
  EXPECT_TRUE(ErrorMentions(no_gpu_milli.status(), "gpu_milli"));

  auto nodes = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu\n", "n.csv");
  EXPECT_FALSE(nodes.ok());
  EXPECT_TRUE(ErrorMentions(nodes.status(), "model"));

  auto short_row = ParsePodCsv(std::string(kPodHeader) + "p0,1,1\n", "t.csv");
  EXPECT_FALSE(short_row.ok());
  EXPECT_TRUE(ErrorMentions(short_row.status(), "t.csv"));
  EXPECT_TRUE(ErrorMentions(short_row.status(), "2"));

  auto gpu_without_model =
      ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,\n", "n.csv");
  EXPECT_TRUE(ErrorMentions(gpu_without_model.status(), "n.csv:2: model"));
}

TEST(TraceTest, EmptyInputHasNoHeader) {
  EXPECT_FALSE(ParsePodCsv("", "empty.csv").ok());
  EXPECT_FALSE(ParseNodeCsv("", "empty.csv").ok());
}

TEST(TraceTest, MissingFileIsNotFound) {
  auto pods = ReadPodCsv("/nonexistent/pods.csv");
  EXPECT_EQ(pods.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace hf::sim
