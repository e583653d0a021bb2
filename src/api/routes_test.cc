// The routes hf-server serves and the routes openapi.json documents are the
// same set (method + path), in both directions; and the document served is
// the file in the source tree.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "api/http_api.h"

namespace hf::api {
namespace {

using Route = std::pair<std::string, std::string>;

std::set<Route> DocumentedRoutes(const nlohmann::json& doc) {
  std::set<Route> out;
  for (const auto& [path, ops] : doc.at("paths").items()) {
    for (const auto& [method, op] : ops.items()) {
      std::string upper;
      for (char c : method) upper.push_back(static_cast<char>(std::toupper(c)));
      if (upper == "PARAMETERS") continue;
      out.insert({upper, path});
    }
  }
  return out;
}

TEST(RoutesTest, ServedRoutesEqualTheOpenApiDocument) {
  const nlohmann::json doc = nlohmann::json::parse(OpenApiDocument());
  const std::set<Route> documented = DocumentedRoutes(doc);
  std::set<Route> served;
  for (const RouteInfo& r : ServedRoutes()) {
    EXPECT_TRUE(served.insert({r.method, r.path}).second)
        << "served twice: " << r.method << " " << r.path;
  }
  for (const Route& r : served) {
    EXPECT_TRUE(documented.contains(r))
        << "served but not in openapi.json: " << r.first << " " << r.second;
  }
  for (const Route& r : documented) {
    EXPECT_TRUE(served.contains(r))
        << "in openapi.json but not served: " << r.first << " " << r.second;
  }
}

// The roles openapi.json gives each operation (`x-roles`) are the roles the
// route table lets through; public routes have none.
TEST(RoutesTest, DocumentedRolesAreTheServedRoles) {
  const nlohmann::json doc = nlohmann::json::parse(OpenApiDocument());
  for (const RouteInfo& r : ServedRoutes()) {
    std::string method;
    for (char c : r.method)
      method.push_back(static_cast<char>(std::tolower(c)));
    SCOPED_TRACE(r.method + " " + r.path);
    ASSERT_TRUE(doc["paths"].contains(r.path));
    const nlohmann::json& op = doc["paths"][r.path][method];
    if (!r.auth) {
      EXPECT_FALSE(op.contains("x-roles"));
      continue;
    }
    ASSERT_TRUE(op.contains("x-roles")) << "openapi.json: add x-roles";
    EXPECT_EQ(op["x-roles"].get<std::vector<std::string>>(), r.roles);
    EXPECT_TRUE(op["responses"].contains("403"));
  }
}

TEST(RoutesTest, EmbeddedDocumentIsTheSourceFile) {
  std::ifstream in(HF_OPENAPI_PATH);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(nlohmann::json::parse(ss.str()),
            nlohmann::json::parse(OpenApiDocument()));
}

TEST(RoutesTest, StatusCodesMapToHttp) {
  EXPECT_EQ(HttpStatusFor(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(HttpStatusFor(StatusCode::kAborted), 409);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInternal), 500);
  EXPECT_EQ(ErrorCodeFor(StatusCode::kInvalidArgument), "invalid_argument");
}

}  // namespace
}  // namespace hf::api
