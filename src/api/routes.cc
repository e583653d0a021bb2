#include "api/routes.h"

#include <charconv>

namespace hf::api::routes {

namespace {

constexpr store::Role kAllRoles[] = {
    store::Role::kAdmin, store::Role::kTenantAdmin, store::Role::kUser,
    store::Role::kNode, store::Role::kMetrics};

}  // namespace

std::vector<std::string> RoleSet::Names() const {
  std::vector<std::string> out;
  for (store::Role r : kAllRoles) {
    if (Has(r)) out.emplace_back(store::RoleName(r));
  }
  return out;
}

std::string RoleSet::Describe() const {
  const std::vector<std::string> names = Names();
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

const std::vector<const Route*>& AllRoutes() {
  static const std::vector<const Route*>* const kAll = [] {
    auto* all = new std::vector<const Route*>();
    for (std::span<const Route> table :
         {ClusterRoutes(), TaskRoutes(), SliceRoutes(), AdviceRoutes(),
          SliceRequestRoutes(), TenantRoutes(), TokenRoutes(), ApprovalRoutes(),
          DefragRoutes(), NodeRoutes()}) {
      for (const Route& route : table) all->push_back(&route);
    }
    return all;
  }();
  return *kAll;
}

Reply Ok(json body, int status) {
  Reply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

StatusOr<store::RowId> ParseId(const std::string& text,
                               const std::string& field) {
  store::RowId value = 0;
  auto [ptr, ec] =
      std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || value <= 0) {
    return Status::InvalidArgument(
        "must be a positive integer, got '" + text.substr(0, 64) + "'", field);
  }
  return value;
}

std::optional<std::string> Query(const httplib::Request& req,
                                 const char* name) {
  if (!req.has_param(name)) return std::nullopt;
  return req.get_param_value(name);
}

StatusOr<int> ParseLimit(const httplib::Request& req) {
  auto v = Query(req, "limit");
  if (!v) return 100;
  auto id = ParseId(*v, "limit");
  if (!id.ok() || *id > 1000) {
    return Status::InvalidArgument("must be 1..1000", "limit");
  }
  return static_cast<int>(*id);
}

StatusOr<store::RowId> ParseCursor(const httplib::Request& req) {
  auto v = Query(req, "cursor");
  if (!v || v->empty() || *v == "0") return store::RowId{0};
  auto id = ParseId(*v, "cursor");
  if (!id.ok()) {
    return Status::InvalidArgument("is not a cursor this server handed out",
                                   "cursor");
  }
  return *id;
}

std::string PositionCursor(const store::ListPosition& position) {
  if (position.txn == 0) return std::to_string(position.id);
  return std::to_string(position.txn) + "." + std::to_string(position.id);
}

StatusOr<store::ListPosition> ParsePositionCursor(const httplib::Request& req) {
  auto v = Query(req, "cursor");
  if (!v || v->empty() || *v == "0") return store::ListPosition{};
  const std::size_t dot = v->find('.');
  if (dot == std::string::npos) {
    auto id = ParseCursor(req);
    if (!id.ok()) return id.status();
    return store::ListPosition{.txn = 0, .id = *id};
  }
  auto txn = ParseId(v->substr(0, dot), "cursor");
  auto id = ParseId(v->substr(dot + 1), "cursor");
  if (!txn.ok() || !id.ok()) {
    return Status::InvalidArgument("is not a cursor this server handed out",
                                   "cursor");
  }
  return store::ListPosition{.txn = *txn, .id = *id};
}

json PageBody(json items, std::optional<std::string> next, std::string resume) {
  return {{"items", std::move(items)},
          {"next_cursor", next ? json(std::move(*next)) : json(nullptr)},
          {"resume_cursor", std::move(resume)}};
}

StatusOr<json> Body(const Ctx& ctx) { return ParseBody(ctx.req.body); }

std::optional<std::string> StringField(const json& body, const char* field) {
  const auto it = body.find(field);
  if (it == body.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace hf::api::routes
