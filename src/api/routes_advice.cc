#include "api/advice.h"
#include "api/routes.h"

namespace hf::api::routes {

using store::RowId;

namespace {

// GET /api/v1/advice
// slices should go, which needs the ledger
StatusOr<Reply> Advice(Ctx& c) {
  AdviceQuery q;
  auto threshold = ParseAdviceThreshold(Query(c.req, "threshold"));
  if (!threshold.ok()) return threshold.status();
  q.threshold = *threshold;
  if (auto v = Query(c.req, "node_id"); v && !v->empty()) q.node = *v;
  auto body = AdviceJson(c.cp, c.caller, q);
  if (!body.ok()) return body.status();
  return Ok(std::move(*body));
}

}  // namespace

std::span<const Route> AdviceRoutes() {
  // Interference advice (docs/API.md, "Interference advice"): where a slice
  // could go is the ledger's answer and the newest hook usage the leader's
  // memory, so only the leader answers.
  // clang-format off
  static const Route kRoutes[] = {
      {"GET", "/api/v1/advice", kTenantAdmins, kLeader,
       {"threshold", "node_id"}, Advice},
  };
  // clang-format on
  return kRoutes;
}

}  // namespace hf::api::routes
