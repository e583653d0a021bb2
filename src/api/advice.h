// GET /api/v1/advice (docs/API.md, "Interference advice"): the GPUs where a
// live slice runs measurably slower while it shares its GPU than while it
// has it alone (the `interference` its agent reports), and what to do about
// it — move it, give it gold, or lower a neighbour's compute share — with the
// numbers behind each piece of advice.
//
// Advice is read only: nothing here changes the ledger or the store. Where a
// slice could go is the ledger's answer (ControlPlane::SliceTargets), never a
// second copy of its capacity rules.
//
// Thread-safety: pure functions of the control plane's state.
#pragma once

#include <optional>
#include <string>

#include "api/codec.h"
#include "common/status.h"
#include "server/control_plane.h"

namespace hf::api {

// The interference at or above which a slice counts as suffering, when the
// query names none: 30% slower shared than alone.
inline constexpr double kDefaultAdviceThreshold = 1.3;

// ?threshold=: a number above 1 (1.0 is no slowdown at all) and at most 100;
// absent or empty gives kDefaultAdviceThreshold. InvalidArgument naming
// `threshold` otherwise.
StatusOr<double> ParseAdviceThreshold(const std::optional<std::string>& text);

struct AdviceQuery {
  double threshold = kDefaultAdviceThreshold;
  std::optional<std::string> node;  // ?node_id=: only that node's GPUs
};

// The reply of GET /api/v1/advice for `caller`: an admin sees every tenant;
// a tenant-admin sees the GPUs where a slice of its own tenant suffers, its
// own slices on them, and the others only as a count and a compute total.
// InvalidArgument naming `node_id` for an unknown node; PermissionDenied for
// any other role.
StatusOr<json> AdviceJson(server::ControlPlane& cp,
                          const server::Caller& caller,
                          const AdviceQuery& query);

}  // namespace hf::api
