// Hostile requests through the whole route table in-process (LocalApi over
// a real ControlPlane on SQLite in a temporary directory): what a client
// sees for bodies and query strings the decoders must refuse. Every one is
// a 400 naming the field, never a 500. Regression tests are named after the
// bug they pin.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "api/http_api.h"
#include "common/clock.h"
#include "server/control_plane.h"
#include "store/store.h"
#include "store/testing/temp_store.h"

namespace hf::api {
namespace {

using nlohmann::json;

class LocalApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = store::sqlite_testing::OpenSqliteStore(dir_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    auto cp = server::ControlPlane::Create(store_.get(), &clock_, {});
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    cp_ = std::move(*cp);
    auto admin = cp_->BootstrapAdmin(std::nullopt);
    ASSERT_TRUE(admin.ok() && admin->has_value());
    admin_ = **admin;
    api_ = std::make_unique<LocalApi>(cp_.get(), &clock_);
  }
  void TearDown() override {
    api_.reset();
    cp_.reset();
    store_.reset();
  }

  LocalResponse Call(const std::string& method, const std::string& target,
                     const std::string& body = "") {
    return api_->Handle({method, target, admin_, body, {}});
  }

  // A 400 whose JSON error names `field`.
  static ::testing::AssertionResult Is400On(const LocalResponse& r,
                                            const std::string& field) {
    const json body = json::parse(r.body, nullptr, false);
    if (r.status == 400 && body.is_object() &&
        body.value("error", "") == "invalid_argument" &&
        body.value("field", "") == field) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "expected 400 on '" << field << "', got " << r.status << " "
           << r.body;
  }

  store::sqlite_testing::TempDir dir_{"hf-local-api-test"};
  FakeClock clock_{1'700'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<server::ControlPlane> cp_;
  std::unique_ptr<LocalApi> api_;
  std::string admin_;
};

// Regression: nlohmann's out_of_range on 1e400 escaped the codec and the
// route answered 500 "internal error".
TEST_F(LocalApiTest, NumberOverflowInATaskIs400NotInternalError) {
  const LocalResponse r =
      Call("POST", "/api/v1/tasks", R"({"name":"t","gpu_memory_mb":1e400})");
  EXPECT_TRUE(Is400On(r, "gpu_memory_mb"));
  EXPECT_NE(r.body.find("out of range"), std::string::npos) << r.body;
  // Every body-taking route parses the same way.
  EXPECT_TRUE(Is400On(Call("POST", "/api/v1/nodes/register",
                           R"({"node_id":"n1","cpu_milli":-1e999,"gpus":[]})"),
                      "cpu_milli"));
}

// Regression: a NUL inside a task name was accepted and stored.
TEST_F(LocalApiTest, NulInATaskNameIs400) {
  EXPECT_TRUE(Is400On(Call("POST", "/api/v1/tasks",
                           R"({"name":"a\u0000b","gpu_memory_mb":64})"),
                      "name"));
  EXPECT_TRUE(Is400On(
      Call("POST", "/api/v1/tasks",
           R"({"name":"t","gpu_memory_mb":64,"labels":{"k":"v\u0000"}})"),
      "labels.k"));
}

// Regression: {"name":"a","name":"b"} was accepted ("b" won silently).
TEST_F(LocalApiTest, DuplicateKeyIs400NamingTheKey) {
  EXPECT_TRUE(Is400On(Call("POST", "/api/v1/tasks",
                           R"({"name":"a","name":"b","gpu_memory_mb":64})"),
                      "name"));
  EXPECT_TRUE(
      Is400On(Call("POST", "/api/v1/nodes/register",
                   R"({"node_id":"n1","gpus":[{"index":0,"uuid":"GPU-1",)"
                   R"("model":"A100","memory_mb":1024,"memory_mb":2048}]})"),
              "gpus[0].memory_mb"));
  EXPECT_EQ(Call("GET", "/api/v1/tasks").body.find("\"a\""), std::string::npos)
      << "nothing was created";
}

// Regression: a GPU's memory_mb had no upper bound.
TEST_F(LocalApiTest, RegisterWithAGpuLargerThan16TiBIs400) {
  EXPECT_TRUE(
      Is400On(Call("POST", "/api/v1/nodes/register",
                   R"({"node_id":"n1","gpus":[{"index":0,"uuid":"GPU-1",)"
                   R"("model":"A100","memory_mb":9223372036854775807}]})"),
              "gpus[0].memory_mb"));
  const LocalResponse ok =
      Call("POST", "/api/v1/nodes/register",
           R"({"node_id":"n1","cpu_milli":1073741824,"host_memory_mb":)"
           R"(1073741824,"gpus":[{"index":0,"uuid":"GPU-1",)"
           R"("model":"A100","memory_mb":81920}]})");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

TEST_F(LocalApiTest, ControlCharactersInQueryAndPathAre400) {
  EXPECT_TRUE(Is400On(Call("GET", "/api/v1/tasks?tenant=a%00b"), "tenant"));
  EXPECT_TRUE(Is400On(Call("GET", "/api/v1/nodes/n%0A1"), "node"));
  EXPECT_TRUE(Is400On(Call("GET", "/api/v1/tenants/a%00"), "name"));
  EXPECT_EQ(Call("GET", "/api/v1/tasks?tenant=default").status, 200);
}

}  // namespace
}  // namespace hf::api
