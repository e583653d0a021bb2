// Helpers shared by the runtime tests: scratch directories and polling with
// a deadline instead of fixed sleeps.
//
// Thread-safety: the helpers may be called from several test threads.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "runtime/runtime.h"

namespace hf::runtime::testing {

// A fresh directory under the test temp dir, removed by the destructor.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "hf-runtime-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed";
    }
    path_ = pattern;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Polls `condition` every few milliseconds until it holds or `timeout`.
template <typename Condition>
bool Eventually(Condition condition,
                std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// Polls until the task has finished; fails the test (and returns the last
// status seen) when it does not within `timeout`.
inline TaskStatus WaitFinished(
    Runtime& runtime, std::int64_t task_id,
    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  TaskStatus last;
  const bool finished = Eventually(
      [&] {
        StatusOr<TaskStatus> status = runtime.Poll(task_id);
        if (!status.ok()) {
          ADD_FAILURE() << status.status().ToString();
          return true;
        }
        last = *status;
        return last.finished();
      },
      timeout);
  EXPECT_TRUE(finished) << "task " << task_id << " still "
                        << DescribeTaskStatus(last);
  return last;
}

}  // namespace hf::runtime::testing
