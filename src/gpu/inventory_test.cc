// Tests of the inventory parser (good files, and every kind of bad field with
// an error naming it), the MIG admission rules, the state file format, and
// that every example inventory in configs/ loads.
#include "gpu/inventory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hf::gpu {
namespace {

using json = nlohmann::json;

// A valid two-GPU node: an A100 80GB in MIG mode and a T4.
json BaseDoc() {
  return json::parse(R"({
    "node_id": "n1",
    "cpu_milli": 16000,
    "host_memory_mb": 65536,
    "gpus": [
      {"model": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920,
       "compute_capability": "8.0", "mig_enabled": true},
      {"model": "Tesla T4", "memory_mb": 15360, "compute_capability": "7.5"}
    ]
  })");
}

StatusOr<Inventory> Parse(const json& doc) {
  return ParseInventory(doc.dump(), "");
}

const MigModelTable& A100_80() {
  const MigModelTable* table = FindMigTable("NVIDIA A100-SXM4-80GB", 0);
  EXPECT_NE(table, nullptr);
  return *table;
}

// ---- Good files -----------------------------------------------------------

TEST(InventoryTest, ParsesEveryField) {
  const StatusOr<Inventory> inv = ParseInventory(R"({
    "_comment": "ignored",
    "node_id": "rack7-node3",
    "containerized": true,
    "cpu_milli": 64000,
    "host_memory_mb": 524288,
    "mps": {"daemon_can_start": false, "failure_reason": "no pipe dir"},
    "gpus": [
      {"index": 0, "uuid": "GPU-aaaa", "vendor": "nvidia",
       "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559,
       "compute_capability": "9.0", "mig_enabled": true,
       "mig_instances": [{"profile": "3g.40gb", "start": 4},
                         {"profile": "MIG 1G.10GB"}],
       "faults": [
         {"kind": "lost", "at_ms": 1000, "recover_at_ms": 2000},
         {"kind": "lost", "at_ms": 5000},
         {"kind": "mig_create_fails", "count": 2, "error": "unavailable",
          "message": "boom"},
         {"kind": "mig_create_fails", "at_ms": 300},
         {"kind": "uuid_change", "at_ms": 700, "uuid": "GPU-bbbb"}
       ]},
      {"model": "Tesla T4", "memory_mb": 15360, "compute_capability": "7.5"}
    ]
  })");
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->node_id, "rack7-node3");
  EXPECT_TRUE(inv->containerized);
  EXPECT_EQ(inv->cpu_milli, 64000);
  EXPECT_EQ(inv->host_memory_mib, 524288);
  EXPECT_FALSE(inv->mps.daemon_can_start);
  EXPECT_EQ(inv->mps.failure_reason, "no pipe dir");
  ASSERT_EQ(inv->gpus.size(), 2u);

  const InventoryGpu& h100 = inv->gpus[0];
  EXPECT_EQ(h100.index, 0);
  EXPECT_EQ(h100.uuid, "GPU-aaaa");
  EXPECT_EQ(h100.model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.memory_mib, 81559);
  EXPECT_EQ(h100.cc_major, 9);
  EXPECT_EQ(h100.cc_minor, 0);
  EXPECT_TRUE(h100.mig_enabled);
  ASSERT_NE(h100.mig_table, nullptr);
  EXPECT_EQ(h100.mig_table->model_key, "H100-80GB");
  // The second instance has no start: the lowest free legal slot, 0.
  ASSERT_EQ(h100.mig_instances.size(), 2u);
  EXPECT_EQ(h100.mig_instances[0], (MigInstance{"3g.40gb", {4, 4}}));
  EXPECT_EQ(h100.mig_instances[1], (MigInstance{"1g.10gb", {0, 1}}));

  ASSERT_EQ(h100.faults.lost.size(), 2u);
  EXPECT_EQ(h100.faults.lost[0].at_ms, 1000);
  EXPECT_EQ(h100.faults.lost[0].recover_at_ms, 2000);
  EXPECT_FALSE(h100.faults.lost[1].recover_at_ms.has_value());
  EXPECT_FALSE(h100.faults.lost[0].ActiveAt(999));
  EXPECT_TRUE(h100.faults.lost[0].ActiveAt(1000));
  EXPECT_FALSE(h100.faults.lost[0].ActiveAt(2000));
  ASSERT_EQ(h100.faults.mig_create_failures.size(), 2u);
  EXPECT_EQ(h100.faults.mig_create_failures[0].count, 2);
  EXPECT_EQ(h100.faults.mig_create_failures[0].error, StatusCode::kUnavailable);
  EXPECT_EQ(h100.faults.mig_create_failures[0].message, "boom");
  EXPECT_EQ(h100.faults.mig_create_failures[1].at_ms, 300);
  EXPECT_FALSE(h100.faults.mig_create_failures[1].count.has_value());
  EXPECT_EQ(h100.faults.mig_create_failures[1].error, StatusCode::kInternal);
  EXPECT_NE(
      h100.faults.mig_create_failures[1].message.find("NVML_ERROR_UNKNOWN"),
      std::string::npos);
  ASSERT_EQ(h100.faults.uuid_changes.size(), 1u);
  EXPECT_EQ(h100.faults.uuid_changes[0].uuid, "GPU-bbbb");

  const InventoryGpu& t4 = inv->gpus[1];
  EXPECT_EQ(t4.index, 1);
  EXPECT_EQ(t4.uuid, "GPU-sim-rack7-node3-1");
  EXPECT_FALSE(t4.mig_enabled);
  EXPECT_EQ(t4.mig_table, nullptr);
}

TEST(InventoryTest, Defaults) {
  json doc = BaseDoc();
  doc.erase("node_id");
  const StatusOr<Inventory> inv = Parse(doc);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->node_id, "sim");
  EXPECT_FALSE(inv->containerized);
  EXPECT_TRUE(inv->mps.daemon_can_start);
  EXPECT_FALSE(inv->mps.failure_reason.empty());
  EXPECT_EQ(inv->gpus[0].uuid, "GPU-sim-sim-0");
  EXPECT_EQ(inv->gpus[1].uuid, "GPU-sim-sim-1");
  EXPECT_EQ(inv->gpus[0].vendor, "nvidia");
  EXPECT_TRUE(inv->gpus[0].mig_instances.empty());
}

TEST(InventoryTest, DerivedUuidsAreStableAcrossParses) {
  const StatusOr<Inventory> a = Parse(BaseDoc());
  const StatusOr<Inventory> b = Parse(BaseDoc());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->gpus[0].uuid, "GPU-sim-n1-0");
  EXPECT_EQ(a->gpus[0].uuid, b->gpus[0].uuid);
  EXPECT_NE(a->gpus[0].uuid, a->gpus[1].uuid);
}

TEST(InventoryTest, NodeWithoutGpusAndOtherVendors) {
  json doc = BaseDoc();
  doc["gpus"] = json::parse(
      R"([{"vendor": "amd", "model": "AMD Instinct MI210",
           "memory_mb": 65536}])");
  const StatusOr<Inventory> inv = Parse(doc);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->gpus[0].vendor, "amd");
  EXPECT_EQ(inv->gpus[0].cc_major, 0);

  doc["gpus"] = json::array();
  EXPECT_TRUE(Parse(doc).ok());
}

// ---- Bad fields -----------------------------------------------------------

struct BadCase {
  std::string name;
  std::function<void(json&)> mutate;
  std::string field;   // the path the error must name
  std::string reason;  // a fragment of the message
};

std::vector<BadCase> BadCases() {
  auto gpu0 = [](json& d) -> json& { return d["gpus"][0]; };
  return {
      {"unknown top-level field", [](json& d) { d["cpus"] = 4; }, "cpus",
       "unknown field"},
      {"misspelt GPU field", [](json& d) { d["gpus"][1]["memroy_mb"] = 1; },
       "gpus[1].memroy_mb", "unknown field"},
      {"unknown mps field",
       [](json& d) {
         d["mps"] = {{"daemon_can_star", true}};
       },
       "mps.daemon_can_star", "unknown field"},
      {"mps not an object", [](json& d) { d["mps"] = true; }, "mps",
       "JSON object"},
      {"mps flag not a bool",
       [](json& d) {
         d["mps"] = {{"daemon_can_start", 1}};
       },
       "mps.daemon_can_start", "true or false"},
      {"missing cpu_milli", [](json& d) { d.erase("cpu_milli"); }, "cpu_milli",
       "is required"},
      {"cpu_milli a string", [](json& d) { d["cpu_milli"] = "8"; }, "cpu_milli",
       "integer"},
      {"cpu_milli a fraction", [](json& d) { d["cpu_milli"] = 1.5; },
       "cpu_milli", "integer"},
      {"cpu_milli zero", [](json& d) { d["cpu_milli"] = 0; }, "cpu_milli",
       "between"},
      {"host memory negative", [](json& d) { d["host_memory_mb"] = -1; },
       "host_memory_mb", "between"},
      {"host memory huge",
       [](json& d) { d["host_memory_mb"] = 18446744073709551615ULL; },
       "host_memory_mb", "between"},
      {"containerized not a bool", [](json& d) { d["containerized"] = "yes"; },
       "containerized", "true or false"},
      {"node_id with a space", [](json& d) { d["node_id"] = "a b"; }, "node_id",
       "letters"},
      {"node_id empty", [](json& d) { d["node_id"] = ""; }, "node_id", "empty"},
      {"missing gpus", [](json& d) { d.erase("gpus"); }, "gpus", "is required"},
      {"gpus an object", [](json& d) { d["gpus"] = json::object(); }, "gpus",
       "JSON array"},
      {"gpu not an object", [](json& d) { d["gpus"][1] = 3; }, "gpus[1]",
       "JSON object"},
      {"missing model", [=](json& d) { gpu0(d).erase("model"); },
       "gpus[0].model", "is required"},
      {"empty model", [=](json& d) { gpu0(d)["model"] = ""; }, "gpus[0].model",
       "empty"},
      {"missing memory", [=](json& d) { gpu0(d).erase("memory_mb"); },
       "gpus[0].memory_mb", "is required"},
      {"zero memory", [=](json& d) { gpu0(d)["memory_mb"] = 0; },
       "gpus[0].memory_mb", "between"},
      {"missing compute capability",
       [](json& d) { d["gpus"][1].erase("compute_capability"); },
       "gpus[1].compute_capability", "is required"},
      {"compute capability without minor",
       [](json& d) { d["gpus"][1]["compute_capability"] = "7"; },
       "gpus[1].compute_capability", "<major>.<minor>"},
      {"compute capability with three parts",
       [](json& d) { d["gpus"][1]["compute_capability"] = "7.5.1"; },
       "gpus[1].compute_capability", "<major>.<minor>"},
      {"compute capability a number",
       [](json& d) { d["gpus"][1]["compute_capability"] = 7.5; },
       "gpus[1].compute_capability", "string"},
      {"uuid without prefix", [](json& d) { d["gpus"][1]["uuid"] = "abc"; },
       "gpus[1].uuid", "GPU-"},
      {"duplicate uuid",
       [=](json& d) {
         gpu0(d)["uuid"] = "GPU-x";
         d["gpus"][1]["uuid"] = "GPU-x";
       },
       "gpus[1].uuid", "also the UUID of gpus[0]"},
      {"index not the position", [](json& d) { d["gpus"][1]["index"] = 2; },
       "gpus[1].index", "position 1"},
      {"vendor with capitals", [](json& d) { d["gpus"][1]["vendor"] = "A B"; },
       "gpus[1].vendor", "plain"},
      {"MIG on a T4", [](json& d) { d["gpus"][1]["mig_enabled"] = true; },
       "gpus[1].mig_enabled", "has no MIG profile table"},
      {"MIG flag not a bool", [=](json& d) { gpu0(d)["mig_enabled"] = 1; },
       "gpus[0].mig_enabled", "true or false"},
      {"instances without MIG mode",
       [](json& d) {
         d["gpus"][1]["mig_instances"] = {{{"profile", "1g.10gb"}}};
       },
       "gpus[1].mig_instances", "needs mig_enabled"},
      {"instances not an array",
       [=](json& d) { gpu0(d)["mig_instances"] = "1g.10gb"; },
       "gpus[0].mig_instances", "JSON array"},
      {"unknown profile",
       [=](json& d) {
         gpu0(d)["mig_instances"] = {{{"profile", "5g.50gb"}}};
       },
       "gpus[0].mig_instances[0].profile", "no MIG profile \"5g.50gb\""},
      {"profile of another model",
       [=](json& d) {
         gpu0(d)["mig_instances"] = {{{"profile", "1g.5gb"}}};
       },
       "gpus[0].mig_instances[0].profile", "A100-80GB"},
      {"missing profile",
       [=](json& d) {
         gpu0(d)["mig_instances"] = {{{"start", 0}}};
       },
       "gpus[0].mig_instances[0].profile", "is required"},
      {"unknown instance field",
       [=](json& d) {
         gpu0(d)["mig_instances"] = {
             {{"profile", "1g.10gb"}, {"placement", 0}}};
       },
       "gpus[0].mig_instances[0].placement", "unknown field"},
      {"illegal start",
       [=](json& d) {
         gpu0(d)["mig_instances"] = {{{"profile", "3g.40gb"}, {"start", 2}}};
       },
       "gpus[0].mig_instances[0]", "not legal"},
      {"start beyond the card",
       [=](json& d) {
         gpu0(d)["mig_instances"] = {{{"profile", "1g.10gb"}, {"start", 8}}};
       },
       "gpus[0].mig_instances[0].start", "between 0 and 7"},
      {"overlapping instances",
       [=](json& d) {
         gpu0(d)["mig_instances"] = {{{"profile", "3g.40gb"}, {"start", 0}},
                                     {{"profile", "1g.10gb"}, {"start", 3}}};
       },
       "gpus[0].mig_instances[1]", "overlaps 3g.40gb at 0:4"},
      {"too many instances",
       [=](json& d) {
         gpu0(d)["mig_instances"] = json::array();
         for (int i = 0; i < 5; ++i) {
           gpu0(d)["mig_instances"].push_back({{"profile", "1g.20gb"}});
         }
       },
       "gpus[0].mig_instances[4]", "all 4 instances of 1g.20gb"},
      {"two +me instances",
       [=](json& d) {
         gpu0(d)["mig_instances"] = {{{"profile", "1g.10gb+me"}},
                                     {{"profile", "1g.10gb+me"}}};
       },
       "gpus[0].mig_instances[1]", "1g.10gb+me"},
      {"no room left",
       [=](json& d) {
         gpu0(d)["mig_instances"] = {{{"profile", "4g.40gb"}},
                                     {{"profile", "3g.40gb"}},
                                     {{"profile", "1g.10gb"}}};
       },
       "gpus[0].mig_instances[2]", "no free placement"},
      {"faults not an array", [=](json& d) { gpu0(d)["faults"] = 1; },
       "gpus[0].faults", "JSON array"},
      {"fault without kind",
       [=](json& d) {
         gpu0(d)["faults"] = {{{"at_ms", 1}}};
       },
       "gpus[0].faults[0].kind", "is required"},
      {"unknown fault kind",
       [=](json& d) {
         gpu0(d)["faults"] = {{{"kind", "melt"}}};
       },
       "gpus[0].faults[0].kind", "unknown fault kind \"melt\""},
      {"unknown fault field",
       [=](json& d) {
         gpu0(d)["faults"] = {{{"kind", "lost"}, {"at_ms", 1}, {"when", 2}}};
       },
       "gpus[0].faults[0].when", "unknown field"},
      {"field of another fault kind",
       [=](json& d) {
         gpu0(d)["faults"] = {{{"kind", "lost"}, {"at_ms", 1}, {"count", 2}}};
       },
       "gpus[0].faults[0].count", "unknown field"},
      {"lost without a time",
       [=](json& d) {
         gpu0(d)["faults"] = {{{"kind", "lost"}}};
       },
       "gpus[0].faults[0].at_ms", "is required"},
      {"lost with a negative time",
       [=](json& d) {
         gpu0(d)["faults"] = {{{"kind", "lost"}, {"at_ms", -5}}};
       },
       "gpus[0].faults[0].at_ms", "between"},
      {"recovery before loss",
       [=](json& d) {
         gpu0(d)["faults"] = {
             {{"kind", "lost"}, {"at_ms", 10}, {"recover_at_ms", 10}}};
       },
       "gpus[0].faults[0].recover_at_ms", "later than at_ms"},
      {"zero failing creates",
       [=](json& d) {
         gpu0(d)["faults"] = {{{"kind", "mig_create_fails"}, {"count", 0}}};
       },
       "gpus[0].faults[0].count", "between 1"},
      {"unknown error kind",
       [=](json& d) {
         gpu0(d)["faults"] = {
             {{"kind", "mig_create_fails"}, {"error", "boom"}}};
       },
       "gpus[0].faults[0].error", "unknown error kind \"boom\""},
      {"create faults on a non-MIG GPU",
       [](json& d) {
         d["gpus"][1]["faults"] = {{{"kind", "mig_create_fails"}}};
       },
       "gpus[1].faults[0].kind", "needs mig_enabled"},
      {"uuid change without uuid",
       [=](json& d) {
         gpu0(d)["faults"] = {{{"kind", "uuid_change"}, {"at_ms", 1}}};
       },
       "gpus[0].faults[0].uuid", "is required"},
      {"uuid change to a bad uuid",
       [=](json& d) {
         gpu0(d)["faults"] = {
             {{"kind", "uuid_change"}, {"at_ms", 1}, {"uuid", "xyz"}}};
       },
       "gpus[0].faults[0].uuid", "GPU-"},
  };
}

TEST(InventoryTest, EveryBadFieldIsNamed) {
  for (const BadCase& c : BadCases()) {
    SCOPED_TRACE(c.name);
    json doc = BaseDoc();
    c.mutate(doc);
    const StatusOr<Inventory> inv = Parse(doc);
    ASSERT_FALSE(inv.ok());
    EXPECT_EQ(inv.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(inv.status().field(), c.field);
    EXPECT_TRUE(inv.status().message().starts_with(c.field + ": "))
        << inv.status().message();
    EXPECT_NE(inv.status().message().find(c.reason), std::string::npos)
        << inv.status().message();
  }
}

TEST(InventoryTest, DocumentMustBeAnObject) {
  const StatusOr<Inventory> inv = ParseInventory("[1, 2]");
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(inv.status().message().find("must be a JSON object"),
            std::string::npos);
}

TEST(InventoryTest, BadJsonSaysWhere) {
  const StatusOr<Inventory> inv =
      ParseInventory("{\n  \"cpu_milli\": 1,\n  oops\n}", "node.json");
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(inv.status().message().starts_with("node.json: "))
      << inv.status().message();
  EXPECT_NE(inv.status().message().find("line 3"), std::string::npos)
      << inv.status().message();
}

// Found by inventory_fuzz: nlohmann's out_of_range on -1e400 escaped
// ParseInventory (only parse_error was caught) and terminated the agent.
TEST(InventoryTest, NumberOutOfRangeIsAFieldError) {
  const std::string text = BaseDoc().dump();
  const std::string bad =
      std::string(text).replace(text.find("81920"), 5, "-1e400");
  const StatusOr<Inventory> inv = ParseInventory(bad, "node.json");
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(inv.status().field(), "gpus[0].memory_mb");
  EXPECT_NE(inv.status().message().find("out of range"), std::string::npos)
      << inv.status().message();
  EXPECT_FALSE(ParseSimMigState("{\"version\": 1e999}").ok());
}

// A field given twice used to be read as the last one, hiding a typo.
TEST(InventoryTest, DuplicateKeysAreRejectedButCommentsMayRepeat) {
  const StatusOr<Inventory> inv = ParseInventory(
      R"({"cpu_milli": 1, "host_memory_mb": 1, "gpus": [
           {"model": "Tesla T4", "memory_mb": 15360, "memory_mb": 1,
            "compute_capability": "7.5"}]})");
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().field(), "gpus[0].memory_mb");
  EXPECT_NE(inv.status().message().find("duplicate key"), std::string::npos)
      << inv.status().message();
  EXPECT_TRUE(ParseInventory(R"({"_c": 1, "_c": 2, "cpu_milli": 1,
                                 "host_memory_mb": 1, "gpus": []})")
                  .ok());
}

// ---- Files ----------------------------------------------------------------

class InventoryFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("hf_inventory_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(InventoryFileTest, LoadsAFile) {
  const std::string path = Write("node.json", BaseDoc().dump(2));
  const StatusOr<Inventory> inv = LoadInventory(path);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->gpus.size(), 2u);
}

TEST_F(InventoryFileTest, MissingFileIsNotFound) {
  const StatusOr<Inventory> inv =
      LoadInventory((dir_ / "absent.json").string());
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), StatusCode::kNotFound);
  EXPECT_NE(inv.status().message().find("absent.json"), std::string::npos);
}

TEST_F(InventoryFileTest, BadFieldNamesFileAndField) {
  json doc = BaseDoc();
  doc["gpus"][1]["memroy_mb"] = 1;
  const std::string path = Write("typo.json", doc.dump());
  const StatusOr<Inventory> inv = LoadInventory(path);
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(inv.status().field(), "gpus[1].memroy_mb");
  EXPECT_EQ(inv.status().message(),
            path + ": gpus[1].memroy_mb: unknown field");
}

TEST(InventoryExamplesTest, EveryExampleInConfigsLoads) {
  const std::filesystem::path configs =
      std::filesystem::path(HF_SOURCE_DIR) / "configs";
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(configs)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("sim-") || !name.ends_with(".json")) continue;
    SCOPED_TRACE(name);
    const StatusOr<Inventory> inv = LoadInventory(entry.path().string());
    EXPECT_TRUE(inv.ok()) << inv.status().ToString();
    if (inv.ok()) {
      EXPECT_FALSE(inv->gpus.empty());
    }
    ++loaded;
  }
  EXPECT_GE(loaded, 2) << "expected configs/sim-mixed.json and sim-mig.json";
}

// ---- MIG admission rules ----------------------------------------------------

TEST(PlaceMigInstanceTest, LowestFreeLegalStart) {
  std::vector<MigInstance> existing = {{"1g.10gb", {0, 1}}};
  const StatusOr<MigInstance> placed =
      PlaceMigInstance(A100_80(), existing, "2g.20gb", std::nullopt);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  // 0:2 overlaps slot 0, so the next legal start for 2g.20gb is 2.
  EXPECT_EQ(placed->placement, (MigPlacement{2, 2}));
}

TEST(PlaceMigInstanceTest, ErrorKinds) {
  const std::vector<MigInstance> existing = {{"3g.40gb", {4, 4}}};
  EXPECT_EQ(PlaceMigInstance(A100_80(), existing, "9g.90gb", std::nullopt)
                .status()
                .code(),
            StatusCode::kNotFound);
  EXPECT_EQ(PlaceMigInstance(A100_80(), existing, "3g.40gb", MigPlacement{1, 4})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  // Right start, wrong size: not a legal placement either.
  EXPECT_EQ(PlaceMigInstance(A100_80(), existing, "3g.40gb", MigPlacement{0, 3})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceMigInstance(A100_80(), existing, "1g.10gb", MigPlacement{5, 1})
                .status()
                .code(),
            StatusCode::kResourceExhausted);
  // 4g.40gb may only start at slot 0, which 3g.40gb at 0:4 holds.
  EXPECT_EQ(PlaceMigInstance(A100_80(), {{"3g.40gb", {0, 4}}}, "4g.40gb",
                             std::nullopt)
                .status()
                .code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(
      PlaceMigInstance(A100_80(), existing, "4g.40gb", MigPlacement{0, 4})
          .ok());
}

// ---- State file
// ---------------------------------------------------------------

TEST(SimMigStateTest, RoundTrips) {
  SimMigState state;
  SimGpuMigState gpu;
  gpu.index = 2;
  gpu.uuid = "GPU-sim-n-2";
  gpu.next_mig_sequence = 7;
  gpu.devices.push_back(MigDevice{1, 0, "3g.40gb", {0, 4}, "MIG-abc"});
  gpu.devices.push_back(MigDevice{3, 0, "1g.10gb", {6, 1}, "MIG-def"});
  state.gpus.push_back(gpu);
  const std::string text = SerializeSimMigState(state);
  const StatusOr<SimMigState> back = ParseSimMigState(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->gpus.size(), 1u);
  const SimGpuMigState& g = back->gpus[0];
  EXPECT_EQ(g.index, 2);
  EXPECT_EQ(g.uuid, "GPU-sim-n-2");
  EXPECT_EQ(g.next_mig_sequence, 7);
  ASSERT_EQ(g.devices.size(), 2u);
  EXPECT_EQ(g.devices[1].gpu_instance_id, 3);
  EXPECT_EQ(g.devices[1].profile, "1g.10gb");
  EXPECT_EQ(g.devices[1].placement, (MigPlacement{6, 1}));
  EXPECT_EQ(g.devices[1].device_uuid, "MIG-def");
  EXPECT_EQ(SerializeSimMigState(*back), text);
}

TEST(SimMigStateTest, RejectsBadDocuments) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"format": "other", "version": 1, "gpus": []})", "format"},
      {R"({"format": "heteroflow-sim-mig-state", "version": 2,
           "gpus": []})",
       "version"},
      {R"({"format": "heteroflow-sim-mig-state", "version": 1,
           "gpus": [], "extra": 1})",
       "extra"},
      {R"({"format": "heteroflow-sim-mig-state", "version": 1,
           "gpus": [{"index": 0, "uuid": "GPU-a", "next_mig_sequence": 0,
                     "devices": [{"gpu_instance_id": 1,
                                  "compute_instance_id": 0,
                                  "profile": "1g.10gb", "start": 0,
                                  "size": 1, "device_uuid": "X"}]}]})",
       "gpus[0].devices[0].device_uuid"},
      {"{", "(document)"},
  };
  for (const auto& [text, field] : cases) {
    SCOPED_TRACE(text);
    const StatusOr<SimMigState> state = ParseSimMigState(text);
    ASSERT_FALSE(state.ok());
    EXPECT_EQ(state.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(state.status().field(), field);
  }
}

}  // namespace
}  // namespace hf::gpu
