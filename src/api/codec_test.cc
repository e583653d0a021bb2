// The request decoders of src/api/codec.h against hostile input: numbers
// out of range, duplicate keys, NUL and other control characters, and the
// bounds on what an agent reports. Each bad input must be an
// InvalidArgument naming the field at fault, never an exception, a
// truncated value or a silently accepted body. Regression tests are named
// after the bug they pin.
#include "api/codec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "wire/node_wire.h"

namespace hf::api {
namespace {

// The body, parsed and then decoded by `decode`; the status of the first
// step that failed.
template <typename Fn>
Status Decode(std::string_view body, Fn decode) {
  auto parsed = ParseBody(body);
  if (!parsed.ok()) return parsed.status();
  auto decoded = decode(*parsed);
  return decoded.status();
}

Status TaskCreate(std::string_view body) {
  return Decode(body, [](const json& j) { return ParseTaskCreate(j); });
}
Status Register(std::string_view body) {
  return Decode(body, [](const json& j) { return ParseNodeReport(j, true); });
}
Status RunningTasks(std::string_view body) {
  return Decode(body, [](const json& j) { return ParseRunningTasks(j); });
}
Status TaskStates(std::string_view body) {
  return Decode(body, [](const json& j) { return ParseTaskStates(j); });
}
Status MigResult(std::string_view body) {
  return Decode(body, [](const json& j) { return ParseMigResult(j); });
}

// The status is InvalidArgument naming `field`.
::testing::AssertionResult Names(const Status& s, const std::string& field) {
  if (s.code() == StatusCode::kInvalidArgument && s.field() == field) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "expected invalid_argument on '" << field << "', got "
         << s.ToString() << " (field '" << s.field() << "')";
}

// A node report with one GPU whose fields are `gpu_fields` (JSON members
// without braces) and node-level members `extra`.
std::string NodeBody(const std::string& gpu_fields,
                     const std::string& extra = "") {
  return R"({"node_id":"n1",)" + extra + R"("gpus":[{)" + gpu_fields + "}]}";
}
const std::string kGpu =
    R"("index":0,"uuid":"GPU-1","model":"A100","memory_mb":81920)";

// ------------------------------------------------------------ ParseBody

TEST(ParseBodyTest, NumberOverflowIsInvalidArgumentNamingTheField) {
  // nlohmann throws out_of_range (not parse_error) on 1e400; it used to
  // escape ParseBody and answer 500 "internal error".
  EXPECT_TRUE(Names(ParseBody(R"({"name":"t","gpu_memory_mb":1e400})").status(),
                    "gpu_memory_mb"));
  EXPECT_TRUE(Names(ParseBody(R"({"a":{"b":[1,-1e999]}})").status(), "a.b[1]"));
  const Status top = ParseBody(R"({"x":1}  )").status();
  EXPECT_TRUE(top.ok()) << top.ToString();
  const Status s = ParseBody(R"({"gpu_memory_mb":1e400})").status();
  EXPECT_NE(s.message().find("out of range"), std::string::npos) << s.message();
}

TEST(ParseBodyTest, DuplicateKeyIsRejectedAtAnyDepth) {
  EXPECT_TRUE(Names(ParseBody(R"({"name":"a","name":"b"})").status(), "name"));
  EXPECT_TRUE(
      Names(ParseBody(R"({"env":{"A":"1","A":"2"}})").status(), "env.A"));
  EXPECT_TRUE(Names(
      ParseBody(R"({"gpus":[{"index":0},{"index":1,"index":2}]})").status(),
      "gpus[1].index"));
  EXPECT_TRUE(Names(ParseBody(R"({"a":[[1],[2,{"k":1,"k":1}]]})").status(),
                    "a[1][1].k"));
  // The same key in sibling objects is fine.
  EXPECT_TRUE(ParseBody(R"({"gpus":[{"index":0},{"index":1}]})").ok());
  const Status s = ParseBody(R"({"name":"a","name":"b"})").status();
  EXPECT_NE(s.message().find("duplicate key 'name'"), std::string::npos)
      << s.message();
}

TEST(ParseBodyTest, NulInAnyStringIsRejectedNamingTheField) {
  EXPECT_TRUE(Names(ParseBody(R"({"name":"a\u0000b"})").status(), "name"));
  EXPECT_TRUE(Names(ParseBody(R"({"command":["sh","x\u0000"]})").status(),
                    "command[1]"));
  EXPECT_TRUE(Names(ParseBody(R"({"env":{"A":"\u0000"}})").status(), "env.A"));
}

TEST(ParseBodyTest, ControlCharacterInAKeyIsRejected) {
  EXPECT_TRUE(
      Names(ParseBody(R"({"labels":{"a\nb":"x"}})").status(), "labels.a\nb"));
  EXPECT_TRUE(ParseBody(R"({"labels":{"a":"line\nbreak"}})").ok());
}

// Found by codec_fuzz: {"": 1} was refused as "unknown field ''", an
// error that named no field.
TEST(ParseBodyTest, EmptyKeyIsRejectedNamingItsObject) {
  EXPECT_TRUE(Names(ParseBody(R"({"":1})").status(), "body"));
  EXPECT_TRUE(Names(ParseBody(R"({"env":{"":"x"}})").status(), "env"));
  EXPECT_TRUE(Names(ParseBody(R"({"gpus":[{"":0}]})").status(), "gpus[0]"));
}

TEST(ParseBodyTest, NestingLimitAndSyntaxErrors) {
  std::string deep(17, '[');
  deep = "{\"a\":" + deep + std::string(17, ']') + "}";
  EXPECT_EQ(ParseBody(deep).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Names(ParseBody("{").status(), "body"));
  EXPECT_TRUE(Names(ParseBody("[1]").status(), "body"));
  EXPECT_TRUE(Names(ParseBody("").status(), "body"));
  EXPECT_TRUE(Names(ParseBody("{\"a\":\"\xff\"}").status(), "body"));
}

// ------------------------------------------------------------ tasks

TEST(ParseTaskCreateTest, NamesWithControlCharactersAreRejected) {
  EXPECT_TRUE(
      Names(TaskCreate(R"({"name":"a\u0000b","gpu_memory_mb":64})"), "name"));
  EXPECT_TRUE(
      Names(TaskCreate(R"({"name":"a\nb","gpu_memory_mb":64})"), "name"));
  EXPECT_TRUE(Names(
      TaskCreate(R"({"name":"t","image":"img\u001b[2J","gpu_memory_mb":64})"),
      "image"));
  EXPECT_TRUE(
      Names(TaskCreate(R"({"name":"t","tenant":"a\tb","gpu_memory_mb":64})"),
            "tenant"));
  EXPECT_TRUE(Names(
      TaskCreate(R"({"name":"t","gpu_memory_mb":64,"env":{"A":"x\u0000"}})"),
      "env.A"));
  // A shell command may hold newlines.
  EXPECT_TRUE(TaskCreate(R"({"name":"t","gpu_memory_mb":64,)"
                         R"("command":"echo a\necho b"})")
                  .ok());
}

TEST(ParseTaskCreateTest, IntegerAboveInt64IsOutOfRangeNotNegative) {
  // 2^64 - 1 used to be read as int64 -1 ("must be at least 32, got -1").
  const Status s =
      TaskCreate(R"({"name":"t","gpu_memory_mb":18446744073709551615})");
  EXPECT_TRUE(Names(s, "gpu_memory_mb"));
  EXPECT_NE(s.message().find("out of range"), std::string::npos) << s.message();
  EXPECT_TRUE(Names(TaskCreate(R"({"name":"t","gpu_memory_mb":1e30})"),
                    "gpu_memory_mb"));
}

TEST(ParseTaskCreateTest, DuplicateFieldIsRejected) {
  EXPECT_TRUE(Names(TaskCreate(R"({"name":"a","name":"b","gpu_memory_mb":64})"),
                    "name"));
}

TEST(ParseTaskCreateTest, GpuComputeModeIsOneOfTwoNamesDefaultWorkConserving) {
  const auto parse = [](std::string_view body) {
    auto j = ParseBody(body);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return ParseTaskCreate(j.ok() ? *j : json::object());
  };
  auto absent = parse(R"({"name":"t","gpu_memory_mb":64})");
  ASSERT_TRUE(absent.ok()) << absent.status().ToString();
  EXPECT_EQ(absent->gpu_compute_mode, GpuComputeMode::kWorkConserving);
  auto null =
      parse(R"({"name":"t","gpu_memory_mb":64,"gpu_compute_mode":null})");
  ASSERT_TRUE(null.ok()) << null.status().ToString();
  EXPECT_EQ(null->gpu_compute_mode, GpuComputeMode::kWorkConserving);
  auto strict = parse(
      R"({"name":"t","gpu_compute_ratio":0.25,"gpu_compute_mode":"strict"})");
  ASSERT_TRUE(strict.ok()) << strict.status().ToString();
  EXPECT_EQ(strict->gpu_compute_mode, GpuComputeMode::kStrict);
  auto conserving = parse(R"({"name":"t","gpu_compute_ratio":0.25,)"
                          R"("gpu_compute_mode":"work-conserving"})");
  ASSERT_TRUE(conserving.ok()) << conserving.status().ToString();
  EXPECT_EQ(conserving->gpu_compute_mode, GpuComputeMode::kWorkConserving);
  // Whole GPUs ignore it but take it.
  EXPECT_TRUE(
      parse(R"({"name":"t","gpu_required":1,"gpu_compute_mode":"strict"})")
          .ok());
}

TEST(ParseTaskCreateTest, BadGpuComputeModeNamesTheFieldAndTheChoices) {
  for (const char* value :
       {R"("")", R"("Strict")", R"("work_conserving")", R"(" strict")",
        R"("fair")", "1", "true", R"(["strict"])", R"({"mode":"strict"})"}) {
    SCOPED_TRACE(value);
    const Status s = TaskCreate(std::string(R"({"name":"t","gpu_memory_mb":64,)"
                                            R"("gpu_compute_mode":)") +
                                value + "}");
    EXPECT_TRUE(Names(s, "gpu_compute_mode"));
    EXPECT_NE(s.message().find(R"(must be "strict" or "work-conserving")"),
              std::string::npos)
        << s.message();
  }
  // The value it got is quoted back.
  EXPECT_NE(TaskCreate(R"({"name":"t","gpu_memory_mb":64,)"
                       R"("gpu_compute_mode":"fast"})")
                .message()
                .find(R"(got "fast")"),
            std::string::npos);
}

// ------------------------------------------------------------ agent reports

TEST(ParseNodeReportTest, ValidReportDecodes) {
  auto j = ParseBody(NodeBody(kGpu + R"(,"compute_capability":"8.0")",
                              R"("cpu_milli":64000,"host_memory_mb":1024,)"));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  auto r = ParseNodeReport(*j, true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->gpus.size(), 1u);
  EXPECT_EQ(r->gpus[0].memory_mib, 81920);
  EXPECT_EQ(r->gpus[0].cc_major, 8);
  EXPECT_EQ(r->cpu_milli, 64000);
}

TEST(ParseNodeReportTest, GpuIndexIsRangeCheckedBeforeNarrowing) {
  // 2^32 used to be narrowed to int 0 before any check: a report naming
  // GPU 4294967296 updated GPU 0.
  EXPECT_TRUE(Names(
      Register(NodeBody(R"("index":4294967296,"uuid":"GPU-1","model":"A100",)"
                        R"("memory_mb":81920)")),
      "gpus[0].index"));
  EXPECT_TRUE(
      Names(Register(NodeBody(R"("index":-1,"uuid":"GPU-1","model":"A100",)"
                              R"("memory_mb":81920)")),
            "gpus[0].index"));
  EXPECT_TRUE(
      Names(Register(NodeBody(R"("index":1024,"uuid":"GPU-1","model":"A100",)"
                              R"("memory_mb":81920)")),
            "gpus[0].index"));
}

TEST(ParseNodeReportTest, GpuMemoryIsBoundedTo16TiB) {
  const std::string base = R"("index":0,"uuid":"GPU-1","model":"A100",)";
  EXPECT_TRUE(Register(NodeBody(base + R"("memory_mb":16777216)")).ok());
  EXPECT_TRUE(Names(Register(NodeBody(base + R"("memory_mb":16777217)")),
                    "gpus[0].memory_mb"));
  EXPECT_TRUE(Names(Register(NodeBody(base + R"("memory_mb":0)")),
                    "gpus[0].memory_mb"));
  EXPECT_TRUE(
      Names(Register(NodeBody(base + R"("memory_mb":9223372036854775807)")),
            "gpus[0].memory_mb"));
}

TEST(ParseNodeReportTest, CpuAndHostMemoryAreBounded) {
  EXPECT_TRUE(Register(NodeBody(kGpu, R"("cpu_milli":1073741824,)")).ok());
  EXPECT_TRUE(Names(Register(NodeBody(kGpu, R"("cpu_milli":1073741825,)")),
                    "cpu_milli"));
  EXPECT_TRUE(
      Names(Register(NodeBody(kGpu, R"("cpu_milli":9223372036854775807,)")),
            "cpu_milli"));
  EXPECT_TRUE(Names(Register(NodeBody(kGpu, R"("host_memory_mb":1073741825,)")),
                    "host_memory_mb"));
  EXPECT_TRUE(Names(Register(NodeBody(kGpu, R"("host_memory_mb":-1,)")),
                    "host_memory_mb"));
}

TEST(ParseNodeReportTest, ReportNumbersComeTogetherAndAreBounded) {
  auto j = ParseBody(NodeBody(kGpu, R"("report_epoch":3,"report_seq":0,)"));
  ASSERT_TRUE(j.ok());
  auto r = ParseNodeReport(*j, true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->number);
  EXPECT_EQ(*r->number, (server::ReportNumber{3, 0}));
  j = ParseBody(NodeBody(kGpu));
  ASSERT_TRUE(j.ok());
  EXPECT_FALSE(ParseNodeReport(*j, true)->number);  // an older agent
  EXPECT_TRUE(
      Names(Register(NodeBody(kGpu, R"("report_epoch":3,)")), "report_seq"));
  EXPECT_TRUE(
      Names(Register(NodeBody(kGpu, R"("report_seq":3,)")), "report_epoch"));
  EXPECT_TRUE(
      Names(Register(NodeBody(kGpu, R"("report_epoch":0,"report_seq":1,)")),
            "report_epoch"));
  EXPECT_TRUE(
      Names(Register(NodeBody(kGpu, R"("report_epoch":1,"report_seq":-1,)")),
            "report_seq"));
  EXPECT_TRUE(Register(NodeBody(kGpu, R"("report_epoch":9007199254740991,)"
                                      R"("report_seq":9007199254740991,)"))
                  .ok());
  EXPECT_TRUE(
      Names(Register(NodeBody(kGpu, R"("report_epoch":1,)"
                                    R"("report_seq":9007199254740992,)")),
            "report_seq"));
}

TEST(ParseNodeReportTest, RuntimeIsTheAgentsRuntimeNameOrAbsent) {
  auto j = ParseBody(NodeBody(kGpu, R"("runtime":"docker",)"));
  ASSERT_TRUE(j.ok());
  auto r = ParseNodeReport(*j, true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->runtime, "docker");
  j = ParseBody(NodeBody(kGpu));
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(ParseNodeReport(*j, true)->runtime, "");  // an older agent
  EXPECT_TRUE(Register(NodeBody(kGpu, R"("runtime":"null",)")).ok());
  EXPECT_TRUE(Names(Register(NodeBody(kGpu, R"("runtime":7,)")), "runtime"));
  EXPECT_TRUE(
      Names(Register(NodeBody(kGpu, R"("runtime":"Docker",)")), "runtime"));
  EXPECT_TRUE(
      Names(Register(NodeBody(kGpu, R"("runtime":"a b",)")), "runtime"));
  EXPECT_TRUE(Names(
      Register(NodeBody(kGpu, "\"runtime\":\"" + std::string(33, 'a') + "\",")),
      "runtime"));
}

// What the agent sends (wire::ToJson of the shared types) is what the
// server decodes, field for field: one set of types for both ends.
TEST(ParseNodeReportTest, TheAgentsEncodingDecodesToTheSameValues) {
  wire::NodeReport r;
  r.name = "gpu-node-7";
  r.number = wire::ReportNumber{12, 345};
  r.containerized = true;
  r.hook_available = true;
  r.runtime = "docker";
  r.cpu_milli = 96000;
  r.host_memory_mib = 1 << 20;
  r.agent_version = "1.2.3";
  wire::GpuReport mig;
  mig.index = 0;
  mig.uuid = "GPU-aaaa";
  mig.model = "NVIDIA H100 80GB HBM3";
  mig.memory_mib = 81559;
  mig.cc_major = 9;
  mig.cc_minor = 0;
  mig.mig_capable = true;
  mig.mig_devices = std::vector<std::string>{"MIG-1", "MIG-2"};
  wire::GpuReport lost;
  lost.index = 3;
  lost.uuid = "GPU-bbbb";
  lost.vendor = "nvidia";
  lost.model = "Tesla T4";
  lost.memory_mib = 15360;
  lost.cc_major = 7;
  lost.cc_minor = 5;
  lost.mps_capable = true;
  lost.lost = true;
  r.gpus = {mig, lost};
  auto decoded = ParseNodeReport(wire::ToJson(r, true), true);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, r);

  json heartbeat = wire::ToJson(r, false);
  wire::RunningTask plain{41, "running", {0, 3}, std::nullopt};
  wire::RunningTask hooked{42, "running", {3}, wire::HookReport{}};
  hooked.hook->attached = true;
  hooked.hook->attaches = 2;
  hooked.hook->processes = 1;
  hooked.hook->used_bytes = 1LL << 30;
  hooked.hook->peak_bytes = 3LL << 29;
  hooked.hook->quota_bytes = 2LL << 30;
  hooked.hook->quota_ooms = 4;
  hooked.hook->physical_ooms = 1;
  hooked.hook->driver_bytes = 300LL << 20;
  hooked.hook->share_achieved_percent = 24.5;
  hooked.hook->interference = 1.42;
  hooked.hook->interference_samples = 310;
  wire::RunningTask uncapped = hooked;
  uncapped.task_id = 43;
  uncapped.hook->quota_bytes.reset();
  wire::RunningTask unhooked = hooked;
  unhooked.task_id = 44;
  unhooked.hook->unhooked_pids = {4242, 4243};
  unhooked.hook->unhooked_reason = "process 4242 runs without the hook";
  heartbeat["tasks"] = {wire::ToJson(plain), wire::ToJson(hooked),
                        wire::ToJson(uncapped), wire::ToJson(unhooked)};
  auto body = ParseNodeReport(heartbeat, false);
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  wire::NodeReport unnamed = r;
  unnamed.name.clear();
  EXPECT_EQ(*body, unnamed);
  auto tasks = ParseRunningTasks(heartbeat);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  EXPECT_EQ(*tasks, (std::vector<wire::RunningTask>{plain, hooked, uncapped,
                                                    unhooked}));
}

TEST(ParseRunningTasksTest, RefusesAMalformedProofOfTheHook) {
  const std::string pids(1000, 'x');
  for (const std::string& hook :
       {std::string(R"({"attached": true, "unhooked_pids": 7})"),
        std::string(R"({"attached": true, "unhooked_pids": [0]})"),
        std::string(R"({"attached": true, "unhooked_pids": ["7"]})"),
        std::string(R"({"attached": true, "unhooked_pids": [1.5]})"),
        std::string(R"({"attached": true, "unhooked_pids": [7],)"
                    R"( "unhooked_reason": 5})"),
        R"({"attached": true, "unhooked_pids": [7], "unhooked_reason": ")" +
            pids + pids + R"("})",
        std::string(R"({"attached": true, "driver_bytes": -1})"),
        std::string(R"({"attached": true, "share_achieved_percent": 101})"),
        std::string(R"({"attached": true, "share_achieved_percent": -1})"),
        std::string(R"({"attached": true, "share_achieved_percent": "9"})"),
        std::string(R"({"attached": true, "interference": 0})"),
        std::string(R"({"attached": true, "interference": 1001})"),
        std::string(R"({"attached": true, "interference": "1.2"})"),
        std::string(R"({"attached": true, "interference": 1.2,)"
                    R"( "interference_samples": -3})")}) {
    const json body = json::parse(R"({"tasks": [{"task_id": 1, "state": )"
                                  R"("running", "hook": )" +
                                  hook + "}]}");
    EXPECT_FALSE(ParseRunningTasks(body).ok()) << hook;
  }
  json many = {{"attached", true}, {"unhooked_pids", json::array()}};
  for (int i = 1; i <= 65; ++i) many["unhooked_pids"].push_back(i);
  EXPECT_FALSE(
      ParseRunningTasks(
          json{{"tasks",
                {{{"task_id", 1}, {"state", "running"}, {"hook", many}}}}})
          .ok());
}

TEST(ParseTaskStatesTest, TheAgentsEncodingDecodesToTheSameValues) {
  const std::vector<wire::TaskStateReport> states = {
      {1, TaskState::kRunning, std::nullopt, "", 10},
      {2, TaskState::kSucceeded, 0, "exited 0", 11},
      {3, TaskState::kFailed, 137, "killed by signal 9", std::nullopt},
      {4, TaskState::kCancelled, std::nullopt, "stopped", 12}};
  json body = {{"states", json::array()}};
  for (const auto& s : states) body["states"].push_back(wire::ToJson(s));
  auto decoded = ParseTaskStates(body);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, states);
}

TEST(ParseMigResultTest, TheAgentsEncodingDecodesToTheSameValues) {
  for (const wire::MigResult& r :
       {wire::MigResult{true, "MIG-1", "", false},
        wire::MigResult{true, "", "", false},
        wire::MigResult{false, "", "RESOURCE_EXHAUSTED: no placement", false},
        wire::MigResult{false, "", "busy", true}}) {
    auto decoded = ParseMigResult(wire::ToJson(r));
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, r) << wire::ToJson(r).dump();
  }
}

TEST(ParseNodeReportTest, ComputeCapabilityIsStrict) {
  for (const char* bad : {"8", "8.", ".0", "+8.0", " 8.0", "8.0x", "100.0",
                          "99999999999999999999.0", "8.-1"}) {
    EXPECT_TRUE(Names(
        Register(NodeBody(kGpu + R"(,"compute_capability":")" + bad + "\"")),
        "gpus[0].compute_capability"))
        << bad;
  }
  EXPECT_TRUE(
      Register(NodeBody(kGpu + R"(,"compute_capability":"12.10")")).ok());
}

TEST(ParseNodeReportTest, IdentifiersWithControlCharactersAreRejected) {
  EXPECT_TRUE(Names(Register(NodeBody(R"("index":0,"uuid":"GPU-\n1",)"
                                      R"("model":"A100","memory_mb":1024)")),
                    "gpus[0].uuid"));
  EXPECT_TRUE(Names(Register(NodeBody(R"("index":0,"uuid":"GPU-1",)"
                                      R"("model":"A\u007f","memory_mb":1024)")),
                    "gpus[0].model"));
  EXPECT_TRUE(Names(Register(NodeBody(kGpu, R"("agent_version":"1\r",)")),
                    "agent_version"));
  EXPECT_TRUE(Names(Register(NodeBody(kGpu + R"(,"mig_devices":["MIG-\t"])")),
                    "gpus[0].mig_devices"));
}

TEST(ParseRunningTasksTest, GpuIndicesAreRangeCheckedBeforeNarrowing) {
  EXPECT_TRUE(Names(RunningTasks(R"({"tasks":[{"task_id":1,"state":"running",)"
                                 R"("gpu_indices":[4294967296]}]})"),
                    "tasks[0].gpu_indices"));
  EXPECT_TRUE(Names(RunningTasks(R"({"tasks":[{"task_id":1,"state":"running",)"
                                 R"("gpu_indices":[-1]}]})"),
                    "tasks[0].gpu_indices"));
  EXPECT_TRUE(
      Names(RunningTasks(R"({"tasks":[{"task_id":0,"state":"running"}]})"),
            "tasks[0].task_id"));
  auto j = ParseBody(
      R"({"tasks":[{"task_id":7,"state":"running","gpu_indices":[0,1023]}]})");
  ASSERT_TRUE(j.ok());
  auto tasks = ParseRunningTasks(*j);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  EXPECT_EQ((*tasks)[0].gpu_indices, (std::vector<int>{0, 1023}));
}

TEST(ParseTaskStatesTest, ExitCodeIsRangeCheckedBeforeNarrowing) {
  // 2^32 + 1 used to be narrowed to exit code 1.
  EXPECT_TRUE(Names(TaskStates(R"({"states":[{"task_id":1,"state":"failed",)"
                               R"("exit_code":4294967297}]})"),
                    "states[0].exit_code"));
  EXPECT_TRUE(
      Names(TaskStates(R"({"states":[{"task_id":-5,"state":"failed"}]})"),
            "states[0].task_id"));
  auto j = ParseBody(
      R"({"states":[{"task_id":1,"state":"failed","exit_code":-2147483648}]})");
  ASSERT_TRUE(j.ok());
  auto states = ParseTaskStates(*j);
  ASSERT_TRUE(states.ok()) << states.status().ToString();
  EXPECT_EQ((*states)[0].exit_code, -2147483648LL);
}

TEST(ParseMigResultTest, DeviceIdIsAnIdentifier) {
  EXPECT_TRUE(
      Names(MigResult(R"({"ok":true,"device_id":"MIG-\u0001"})"), "device_id"));
  EXPECT_TRUE(Names(
      MigResult(R"({"ok":true,"device_id":")" + std::string(300, 'x') + "\"}"),
      "device_id"));
  EXPECT_TRUE(Names(MigResult(R"({"ok":true,"ok":false})"), "ok"));
  EXPECT_TRUE(MigResult(R"({"ok":true,"device_id":"MIG-1/2/0"})").ok());
}

}  // namespace
}  // namespace hf::api
