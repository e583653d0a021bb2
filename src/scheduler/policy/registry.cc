#include "scheduler/policy/registry.h"

#include "scheduler/policy/best_fit.h"

namespace hf::scheduler {

std::vector<std::string> PolicyNames() {
  return {std::string(kDefaultPolicyName), "best-fit", "best-fit-scan"};
}

StatusOr<MadePolicy> MakePolicy(std::string_view name,
                                const LearnedOptions& learned) {
  MadePolicy made;
  if (name == "hf-frag") {
    auto policy = std::make_unique<LearnedFragPolicy>(learned);
    made.observer = policy.get();
    made.policy = std::move(policy);
  } else if (name == "best-fit") {
    made.policy = std::make_unique<BestFitPolicy>();
  } else if (name == "best-fit-scan") {
    made.policy = std::make_unique<LinearScanBestFitPolicy>();
  } else {
    std::string known;
    for (const auto& n : PolicyNames()) {
      known += (known.empty() ? "" : ", ") + n;
    }
    return Status::NotFound("unknown placement policy \"" + std::string(name) +
                            "\"; known: " + known);
  }
  return made;
}

}  // namespace hf::scheduler
