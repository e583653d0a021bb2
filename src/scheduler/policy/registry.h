// The one registry of placement policies, for the server and the trace
// simulator (hf-sim): each entry has its server name, its simulator name,
// or both, and makes its policy for either from one context.
//
//   server name     simulator name   policy
//   hf-frag *       hf-frag          server: LearnedFragPolicy (learned.h);
//                                    simulator: HfFragPolicy (hf_frag.h)
//                                    against the trace's workload
//   best-fit        hf-bestfit       BestFitPolicy (best_fit.h)
//   best-fit-scan   -                LinearScanBestFitPolicy
//   -               random, dotprod, gpuclustering, gpupacking, bestfit,
//                   fgd              the FGD artifact's (artifact.h)
//
// (* the server's default, kDefaultPolicyName.)
//
// Thread-safety: a made policy is safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ledger/placement_policy.h"
#include "scheduler/fragmentation.h"
#include "scheduler/policy/learned.h"

namespace hf::scheduler {

// hf-frag against the workload learned from the server's task history
// (learned.h), Best-Fit until that history is long enough.
inline constexpr std::string_view kDefaultPolicyName = "hf-frag";

// --- the server

// Names of every server policy, default first.
std::vector<std::string> PolicyNames();

// A policy made for one server: `observer` is set when the policy learns
// from the tasks it is told of (it is the same object as `policy`).
struct MadePolicy {
  std::unique_ptr<ledger::PlacementPolicy> policy;
  WorkloadObserver* observer = nullptr;
};

// The server policy called `name`; NotFound listing the known names
// otherwise.
StatusOr<MadePolicy> MakePolicy(std::string_view name,
                                const LearnedOptions& learned = {});

// --- the simulator

// What a simulator policy needs besides the name.
struct SimPolicyContext {
  std::uint64_t seed = 42;                   // RandomPolicy's generator
  const TargetWorkload* workload = nullptr;  // FGD's target (copied)
  // Every task of the workload (hf-frag's prices and CPU weight); none:
  // hf-frag without them.
  const std::vector<TaskClass>* tasks = nullptr;
  // hf-frag: nodes scored per decision (HfFragPolicy; 0: every node).
  std::size_t max_scored_nodes = 0;
};

// The simulator's policy names: the FGD artifact's six, then "hf-bestfit"
// and "hf-frag".
std::vector<std::string> SimPolicyNames();

// The simulator's name of a server policy: "best-fit" is "hf-bestfit"; ""
// for a server policy the simulator lacks.
std::string SimPolicyNameOf(std::string_view server_policy);

// The simulator's name of the server's default policy
// (kDefaultPolicyName), which `hf-sim --policy list` marks.
std::string SimServerDefaultPolicy();

// Builds the simulator policy called `name`. NotFound (listing the names)
// for an unknown one; InvalidArgument for "fgd" or "hf-frag" without a
// workload.
StatusOr<std::unique_ptr<ledger::PlacementPolicy>> MakeSimPolicy(
    std::string_view name, const SimPolicyContext& ctx);

}  // namespace hf::scheduler
