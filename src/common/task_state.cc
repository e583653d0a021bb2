#include "common/task_state.h"

#include <array>
#include <utility>

namespace hf {
namespace {

// The one place each name is spelled, read in both directions.
constexpr std::array<std::pair<TaskState, std::string_view>, 6> kNames = {{
    {TaskState::kPending, "pending"},
    {TaskState::kScheduled, "scheduled"},
    {TaskState::kRunning, "running"},
    {TaskState::kSucceeded, "succeeded"},
    {TaskState::kFailed, "failed"},
    {TaskState::kCancelled, "cancelled"},
}};

}  // namespace

std::string_view TaskStateName(TaskState state) {
  for (const auto& [value, name] : kNames) {
    if (value == state) return name;
  }
  return "unknown";
}

std::optional<TaskState> ParseTaskState(std::string_view name) {
  for (const auto& [value, spelled] : kNames) {
    if (spelled == name) return value;
  }
  return std::nullopt;
}

bool IsTerminal(TaskState state) {
  return state == TaskState::kSucceeded || state == TaskState::kFailed ||
         state == TaskState::kCancelled;
}

}  // namespace hf
