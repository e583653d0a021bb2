// Helpers shared by the files that implement ControlPlane. Not part of the
// server's interface.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "store/store.h"

namespace hf::server {

inline constexpr std::string_view kDefaultTenant = "default";
inline constexpr store::Millis kTokenCacheMillis = 5'000;

std::string Sha256Hex(std::string_view data);
StatusOr<std::string> NewTokenSecret();
// Tenant, group and node names: [a-z0-9][a-z0-9._-]{0,62}.
Status ValidateName(std::string_view name, std::string_view field);
Status RequireAdmin(const struct Caller& caller);

// A history entry describing `slice` (op, slice/task/tenant/node, GPUs,
// quantities); the caller fills `at`, `actor` and `reason`.
inline store::HistoryRow HistoryFor(const store::SliceRow& slice,
                                    std::string op) {
  store::HistoryRow h;
  h.op = std::move(op);
  h.slice_id = slice.id;
  h.task_id = slice.task_id;
  h.tenant_id = slice.tenant_id;
  h.node_id = slice.node_id;
  h.gpu_indices = slice.gpu_indices;
  h.memory_mib = slice.memory_mib;
  h.compute_percent = slice.compute_percent;
  return h;
}

}  // namespace hf::server
