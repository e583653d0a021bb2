// The placement policies by name, for command lines and configuration.
//
// Thread-safety: the returned policies are stateless and shared.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ledger/placement_policy.h"

namespace hf::scheduler {

inline constexpr std::string_view kDefaultPolicyName = "best-fit";

// Names of every registered policy, default first.
std::vector<std::string> PolicyNames();

// The policy called `name`; NotFound listing the known names otherwise.
StatusOr<const ledger::PlacementPolicy*> FindPolicy(std::string_view name);

// The default policy (Best-Fit).
const ledger::PlacementPolicy& DefaultPolicy();

}  // namespace hf::scheduler
