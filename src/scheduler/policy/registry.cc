#include "scheduler/policy/registry.h"

#include <memory>

#include "scheduler/policy/best_fit.h"

namespace hf::scheduler {
namespace {

const std::vector<const ledger::PlacementPolicy*>& Policies() {
  static const auto* policies = new std::vector<const ledger::PlacementPolicy*>{
      new BestFitPolicy(), new LinearScanBestFitPolicy()};
  return *policies;
}

}  // namespace

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const auto* p : Policies()) names.emplace_back(p->name());
  return names;
}

StatusOr<const ledger::PlacementPolicy*> FindPolicy(std::string_view name) {
  for (const auto* p : Policies()) {
    if (p->name() == name) return p;
  }
  std::string known;
  for (const auto& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::NotFound("unknown placement policy \"" + std::string(name) +
                          "\"; known: " + known);
}

const ledger::PlacementPolicy& DefaultPolicy() { return *Policies().front(); }

}  // namespace hf::scheduler
