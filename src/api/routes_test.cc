// The routes hf-server serves and the routes openapi.json documents are the
// same set (method + path), in both directions; the document served is the
// file in the source tree; docs/OPERATIONS.md says for every route the
// instance the route tables say answers it; and the tables' order lets each
// route be reached.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
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

// Requests go to the first route (in table order) whose method and path
// match: a fixed path placed after a parameter in the same place would
// never be reached.
TEST(RoutesTest, EveryRouteIsReachedInTableOrder) {
  const std::vector<RouteInfo> routes = ServedRoutes();
  std::vector<std::regex> patterns;
  for (const RouteInfo& r : routes) {
    patterns.emplace_back(
        std::regex_replace(r.path, std::regex(R"(\{[a-z_]+\})"), "[^/]+"));
  }
  for (const RouteInfo& r : routes) {
    const std::string target =
        std::regex_replace(r.path, std::regex(R"(\{[a-z_]+\})"), "7");
    for (std::size_t i = 0; i < routes.size(); ++i) {
      if (routes[i].method != r.method) continue;
      if (!std::regex_match(target, patterns[i])) continue;
      EXPECT_EQ(routes[i].path, r.path)
          << r.method << " " << target << " reaches " << routes[i].path
          << " first: list " << r.path << " before it";
      break;
    }
  }
}

// The rows of the table under "Which instance answers what": every
// `METHOD /path` in a row's first cell, with the row's second cell.
std::map<Route, std::string> DocumentedInstances() {
  std::ifstream in(HF_OPERATIONS_DOC_PATH);
  EXPECT_TRUE(in.good()) << HF_OPERATIONS_DOC_PATH;
  std::map<Route, std::string> out;
  std::string line;
  bool in_section = false;
  const std::regex route(R"(`(GET|POST|PUT|PATCH|DELETE) (/[^`]*)`)");
  while (std::getline(in, line)) {
    if (line.starts_with("Which instance answers what.")) in_section = true;
    if (!in_section) continue;
    if (line.starts_with("| route |")) continue;
    if (!line.starts_with("| ")) {
      if (!out.empty()) break;  // the table's end
      continue;
    }
    const std::size_t first = line.find(" | ");
    const std::size_t second = line.find(" | ", first + 3);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string routes = line.substr(0, first);
    const std::string where = line.substr(first + 3, second - first - 3);
    for (auto it = std::sregex_iterator(routes.begin(), routes.end(), route);
         it != std::sregex_iterator(); ++it) {
      EXPECT_TRUE(out.emplace(Route{(*it)[1], (*it)[2]}, where).second)
          << "listed twice: " << it->str();
    }
  }
  return out;
}

TEST(RoutesTest, OperationsDocSaysWhichInstanceAnswersEveryRoute) {
  const std::map<Route, std::string> documented = DocumentedInstances();
  ASSERT_FALSE(documented.empty());
  std::set<Route> served;
  for (const RouteInfo& r : ServedRoutes()) {
    SCOPED_TRACE(r.method + " " + r.path);
    served.insert({r.method, r.path});
    const auto doc = documented.find({r.method, r.path});
    ASSERT_NE(doc, documented.end())
        << "docs/OPERATIONS.md, \"Which instance answers what\": add it";
    switch (r.instance) {
      case Instance::kAny:
        EXPECT_EQ(doc->second, "any instance");
        break;
      case Instance::kLeader:
        EXPECT_EQ(doc->second, "leader");
        break;
      case Instance::kEach:
        EXPECT_EQ(doc->second, "each instance its own");
        break;
    }
  }
  for (const auto& [route, where] : documented) {
    EXPECT_TRUE(served.contains(route))
        << "documented but not served: " << route.first << " " << route.second;
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
