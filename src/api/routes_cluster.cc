#include "api/routes.h"
#include "metrics/metrics.h"
#include "server/leadership.h"

namespace hf::api::routes {

using server::ControlPlane;
using store::RowId;

namespace {

// GET /healthz
StatusOr<Reply> Healthz(Ctx& /*c*/) { return Ok({{"ok", true}}); }

// GET /api/v1/openapi.json
StatusOr<Reply> OpenApi(Ctx& /*c*/) {
  Reply reply;
  reply.text = OpenApiDocument();
  reply.content_type = "application/json";
  return reply;
}

// GET /metrics
// Every instance serves its own: its HTTP and commit series always, the
// ledger's series only while it holds the ledger (docs/METRICS.md).
StatusOr<Reply> Metrics(Ctx& c) {
  Reply reply;
  reply.text = ServerExposition(&c.cp, c.leadership).Render();
  reply.content_type = metrics::kContentType;
  return reply;
}

// GET /api/v1/cluster
StatusOr<Reply> GetCluster(Ctx& c) {
  ControlPlane& cp = c.cp;
  if (!c.caller.admin()) {
    return Status::PermissionDenied("this needs a platform admin token");
  }
  auto cluster = server::ReadCluster(*cp.store());
  if (!cluster.ok()) return cluster.status();
  const std::string leader_id =
      cluster->leader ? cluster->leader->id : std::string();
  json instances = json::array();
  for (const server::InstanceInfo& i : cluster->instances) {
    instances.push_back({{"id", i.id},
                         {"url", i.url},
                         {"leader", i.id == leader_id},
                         {"last_seen", FormatTime(i.last_seen)}});
  }
  json leader = nullptr;
  if (cluster->leader) {
    leader = {{"id", cluster->leader->id},
              {"url", cluster->leader->url},
              {"term", cluster->leader->term},
              {"since", FormatTime(cluster->leader->since)}};
  }
  return Ok({{"instances", std::move(instances)},
             {"leader", std::move(leader)},
             {"this", c.leadership != nullptr ? json(c.leadership->id())
                                              : json(nullptr)}});
}

// GET /api/v1/whoami
StatusOr<Reply> WhoAmI(Ctx& c) {
  return Ok({{"role", store::RoleName(c.caller.role)},
             {"tenant",
              c.caller.tenant.empty() ? json(nullptr) : json(c.caller.tenant)},
             {"token_id", c.caller.token_id}});
}

}  // namespace

std::span<const Route> ClusterRoutes() {
  // Health, the API's own description, who the instances are (issue 8) and
  // who is calling: nothing from the ledger, so any instance answers;
  // /metrics is each instance's own (the ledger's series only from the
  // leader, docs/METRICS.md).
  // clang-format off
  static const Route kRoutes[] = {
      {"GET", "/healthz", kPublic, kAnyInstance, {}, Healthz},
      {"GET", "/api/v1/openapi.json", kPublic, kAnyInstance, {}, OpenApi},
      {"GET", "/metrics", kMetricsReaders, kEachInstance, {}, Metrics},
      {"GET", "/api/v1/cluster", kAdminOnly, kAnyInstance, {}, GetCluster},
      {"GET", "/api/v1/whoami", kAnyRole, kAnyInstance, {}, WhoAmI},
  };
  // clang-format on
  return kRoutes;
}

}  // namespace hf::api::routes
