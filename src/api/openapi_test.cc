// Checks that src/api/openapi.json is a well-formed OpenAPI 3 document and
// describes exactly the routes docs/API.md lists: same paths, same methods,
// nothing more. The prose contract and the machine-readable one can then only
// drift apart with a failing test. (A server-side test compares the served
// routes with this document.)
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#ifndef HF_OPENAPI_PATH
#error "HF_OPENAPI_PATH must name src/api/openapi.json"
#endif
#ifndef HF_API_DOC_PATH
#error "HF_API_DOC_PATH must name docs/API.md"
#endif

namespace {

using nlohmann::json;

const char* const kMethods[] = {"get",     "put",  "post",  "delete",
                                "options", "head", "patch", "trace"};

std::string ReadFile(const char* path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The names in a path template: "/a/{id}/b/{node}" -> {"id", "node"}.
std::set<std::string> TemplateParams(const std::string& path) {
  std::set<std::string> names;
  std::size_t open = path.find('{');
  while (open != std::string::npos) {
    const std::size_t close = path.find('}', open);
    if (close == std::string::npos) break;
    names.insert(path.substr(open + 1, close - open - 1));
    open = path.find('{', close);
  }
  return names;
}

// Every "`METHOD /path" in the doc (the path ends at a backquote, "?" or
// white space), as (METHOD, path).
std::set<std::pair<std::string, std::string>> DocRoutes(
    const std::string& doc) {
  std::set<std::pair<std::string, std::string>> routes;
  for (const char* method : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
    const std::string marker = std::string("`") + method + " /";
    for (std::size_t at = doc.find(marker); at != std::string::npos;
         at = doc.find(marker, at + 1)) {
      const std::size_t begin = at + marker.size() - 1;  // the "/"
      const std::size_t end = doc.find_first_of("`? \t\n", begin);
      routes.emplace(method, doc.substr(begin, end - begin));
    }
  }
  return routes;
}

class OpenApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    text_ = new std::string(ReadFile(HF_OPENAPI_PATH));
    doc_ = new json(json::parse(*text_, nullptr, /*allow_exceptions=*/false));
  }
  static void TearDownTestSuite() {
    delete doc_;
    delete text_;
    doc_ = nullptr;
    text_ = nullptr;
  }

  // The object a local "$ref" ("#/components/...") points to, or nullptr.
  static const json* Resolve(const std::string& ref) {
    if (!ref.starts_with("#/")) return nullptr;
    json::json_pointer pointer;
    try {
      pointer = json::json_pointer(ref.substr(1));
    } catch (const json::exception&) {
      return nullptr;
    }
    if (!doc_->contains(pointer)) return nullptr;
    return &doc_->at(pointer);
  }

  // `node` itself, or what its "$ref" names.
  static const json& Deref(const json& node) {
    if (node.is_object() && node.contains("$ref")) {
      const json* target = Resolve(node["$ref"].get<std::string>());
      if (target != nullptr) return *target;
    }
    return node;
  }

  // Calls fn(path, method, operation) for every operation.
  static void ForEachOperation(
      const std::function<void(const std::string&, const std::string&,
                               const json&)>& fn) {
    for (const auto& [path, item] : (*doc_)["paths"].items()) {
      for (const char* method : kMethods) {
        if (item.contains(method)) fn(path, method, item[method]);
      }
    }
  }

  static std::string* text_;
  static json* doc_;
};

std::string* OpenApiTest::text_ = nullptr;
json* OpenApiTest::doc_ = nullptr;

TEST_F(OpenApiTest, ParsesAsOpenApi3) {
  ASSERT_FALSE(doc_->is_discarded()) << "openapi.json is not valid JSON";
  ASSERT_TRUE(doc_->is_object());
  ASSERT_TRUE(doc_->contains("openapi"));
  EXPECT_TRUE((*doc_)["openapi"].get<std::string>().starts_with("3."));
  EXPECT_TRUE((*doc_)["info"].contains("title"));
  EXPECT_TRUE((*doc_)["info"].contains("version"));
  ASSERT_TRUE((*doc_)["paths"].is_object());
  EXPECT_FALSE((*doc_)["paths"].empty());
}

TEST_F(OpenApiTest, EveryOperationHasAUniqueIdAndResponses) {
  ASSERT_FALSE(doc_->is_discarded());
  std::set<std::string> ids;
  int operations = 0;
  ForEachOperation(
      [&](const std::string& path, const std::string& method, const json& op) {
        ++operations;
        SCOPED_TRACE(method + " " + path);
        ASSERT_TRUE(op.contains("operationId"));
        EXPECT_TRUE(ids.insert(op["operationId"].get<std::string>()).second)
            << "duplicate operationId " << op["operationId"];
        ASSERT_TRUE(op.contains("responses"));
        EXPECT_TRUE(op["responses"].is_object());
        EXPECT_FALSE(op["responses"].empty());
        bool has_success = false;
        for (const auto& [code, response] : op["responses"].items()) {
          if (code.starts_with("2")) has_success = true;
          EXPECT_TRUE(Deref(response).contains("description")) << code;
        }
        EXPECT_TRUE(has_success);
      });
  EXPECT_GT(operations, 0);
}

TEST_F(OpenApiTest, EveryRefResolves) {
  ASSERT_FALSE(doc_->is_discarded());
  int refs = 0;
  std::function<void(const json&, const std::string&)> walk =
      [&](const json& node, const std::string& where) {
        if (node.is_object()) {
          for (const auto& [key, value] : node.items()) {
            if (key == "$ref") {
              ++refs;
              ASSERT_TRUE(value.is_string()) << where;
              EXPECT_NE(Resolve(value.get<std::string>()), nullptr)
                  << "unresolved $ref " << value << " at " << where;
            } else {
              std::string child = where;
              child.append("/").append(key);
              walk(value, child);
            }
          }
        } else if (node.is_array()) {
          for (std::size_t i = 0; i < node.size(); ++i) {
            walk(node[i], where + "/" + std::to_string(i));
          }
        }
      };
  walk(*doc_, "");
  EXPECT_GT(refs, 0);
}

TEST_F(OpenApiTest, PathTemplateParametersAreDeclared) {
  ASSERT_FALSE(doc_->is_discarded());
  for (const auto& [path, item] : (*doc_)["paths"].items()) {
    const std::set<std::string> in_template = TemplateParams(path);
    std::set<std::string> path_level;
    if (item.contains("parameters")) {
      for (const json& p : item["parameters"]) {
        const json& param = Deref(p);
        if (param["in"] == "path") path_level.insert(param["name"]);
      }
    }
    for (const char* method : kMethods) {
      if (!item.contains(method)) continue;
      SCOPED_TRACE(std::string(method) + " " + path);
      std::set<std::string> declared = path_level;
      const json& op = item[method];
      if (op.contains("parameters")) {
        for (const json& p : op["parameters"]) {
          const json& param = Deref(p);
          ASSERT_TRUE(param.contains("name"));
          ASSERT_TRUE(param.contains("in"));
          if (param["in"] == "path") {
            declared.insert(param["name"].get<std::string>());
            EXPECT_EQ(param.value("required", false), true)
                << "path parameter " << param["name"] << " must be required";
          }
        }
      }
      EXPECT_EQ(declared, in_template);
    }
  }
}

// Every route docs/API.md names as "`METHOD /path" is in the document with
// that method, and the document has no route the doc lacks.
TEST_F(OpenApiTest, RoutesMatchTheApiDoc) {
  ASSERT_FALSE(doc_->is_discarded());
  const std::string api_doc = ReadFile(HF_API_DOC_PATH);
  const std::set<std::pair<std::string, std::string>> in_doc =
      DocRoutes(api_doc);
  ASSERT_GT(in_doc.size(), 20u) << "docs/API.md parsed to too few routes";

  std::set<std::pair<std::string, std::string>> in_openapi;
  ForEachOperation(
      [&](const std::string& path, const std::string& method, const json&) {
        std::string upper = method;
        for (char& c : upper) c = static_cast<char>(c - 'a' + 'A');
        in_openapi.emplace(upper, path);
      });

  for (const auto& r : in_doc) {
    EXPECT_TRUE(in_openapi.contains(r))
        << "docs/API.md route missing from openapi.json: " << r.first << " "
        << r.second;
  }
  for (const auto& r : in_openapi) {
    EXPECT_TRUE(in_doc.contains(r))
        << "openapi.json route not in docs/API.md: " << r.first << " "
        << r.second;
  }
}

// Bearer auth everywhere except the three public routes.
TEST_F(OpenApiTest, BearerSecurityWithThreePublicRoutes) {
  ASSERT_FALSE(doc_->is_discarded());
  const json& schemes = (*doc_)["components"]["securitySchemes"];
  ASSERT_TRUE(schemes.contains("bearerAuth"));
  EXPECT_EQ(schemes["bearerAuth"]["type"], "http");
  EXPECT_EQ(schemes["bearerAuth"]["scheme"], "bearer");
  EXPECT_EQ((*doc_)["security"], json::parse(R"([{"bearerAuth": []}])"));

  const std::set<std::string> public_routes = {"/healthz",
                                               "/api/v1/openapi.json"};
  ForEachOperation(
      [&](const std::string& path, const std::string& method, const json& op) {
        SCOPED_TRACE(method + " " + path);
        if (public_routes.contains(path)) {
          ASSERT_TRUE(op.contains("security"));
          EXPECT_EQ(op["security"], json::array());
        } else {
          EXPECT_FALSE(op.contains("security") && op["security"].empty())
              << "only the public routes may drop the bearer token";
        }
      });
}

// Bodies reject unknown fields (docs/API.md), so every request schema says
// so; every error answer uses the common Error shape.
TEST_F(OpenApiTest, BodiesAreClosedAndErrorsShareOneSchema) {
  ASSERT_FALSE(doc_->is_discarded());
  const json& error = (*doc_)["components"]["schemas"]["Error"];
  for (const char* field : {"error", "message", "field"}) {
    EXPECT_TRUE(error["properties"].contains(field)) << field;
  }
  ForEachOperation([&](const std::string& path, const std::string& method,
                       const json& op) {
    SCOPED_TRACE(method + " " + path);
    if (op.contains("requestBody")) {
      const json& body = Deref(op["requestBody"]);
      ASSERT_TRUE(body["content"].contains("application/json"));
      const json& schema = Deref(body["content"]["application/json"]["schema"]);
      EXPECT_EQ(schema.value("additionalProperties", true), false);
    }
    for (const auto& [code, r] : op["responses"].items()) {
      if (code.starts_with("2")) continue;
      const json& response = Deref(r);
      ASSERT_TRUE(response.contains("content")) << code;
      EXPECT_EQ(response["content"]["application/json"]["schema"],
                json::parse(R"({"$ref": "#/components/schemas/Error"})"))
          << code;
    }
  });
}

}  // namespace
