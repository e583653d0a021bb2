// The server's placement policies by name, for command lines and
// configuration. The simulator (artifact.h, MakeSimPolicy) has "hf-frag"
// under the same name and "best-fit" as "hf-bestfit".
//
// Thread-safety: a made policy is safe to call from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ledger/placement_policy.h"
#include "scheduler/policy/learned.h"

namespace hf::scheduler {

// hf-frag against the workload learned from the server's task history
// (learned.h), Best-Fit until that history is long enough.
inline constexpr std::string_view kDefaultPolicyName = "hf-frag";

// Names of every registered policy, default first.
std::vector<std::string> PolicyNames();

// A policy made for one server: `observer` is set when the policy learns
// from the tasks it is told of (it is the same object as `policy`).
struct MadePolicy {
  std::unique_ptr<ledger::PlacementPolicy> policy;
  WorkloadObserver* observer = nullptr;
};

// The policy called `name`; NotFound listing the known names otherwise.
StatusOr<MadePolicy> MakePolicy(std::string_view name,
                                const LearnedOptions& learned = {});

}  // namespace hf::scheduler
