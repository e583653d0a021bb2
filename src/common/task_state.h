// A task's lifecycle state (docs/CONTRACT.md section 4), as the store keeps it
// and the API and agents name it.
#pragma once

#include <optional>
#include <string_view>

namespace hf {

enum class TaskState {
  kPending,
  kScheduled,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled
};

std::string_view TaskStateName(TaskState state);  // "pending", ...
std::optional<TaskState> ParseTaskState(std::string_view name);
bool IsTerminal(TaskState state);

}  // namespace hf
