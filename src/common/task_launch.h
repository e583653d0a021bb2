// What a task can be started from, one rule for both ends: a runtime that
// runs host processes needs a command whose first argument is not empty,
// one that runs containers an image that cannot be taken for an option.
// The agent's runtimes refuse a task without it (runtime::ValidateTaskSpec);
// the server places a task only on a node whose runtime it can start
// (ledger::PlacementRequest::has_command / has_image).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hf {

inline bool HasStartableCommand(const std::vector<std::string>& command) {
  return !command.empty() && !command.front().empty();
}

inline bool HasStartableImage(std::string_view image) {
  return !image.empty() && image.front() != '-';
}

}  // namespace hf
