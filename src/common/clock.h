// Clock seam: real time for production, a settable clock for tests.
//
// Thread-safety: SystemClock is stateless; FakeClock is safe to read and
// advance from several threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace hf {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch.
  virtual std::int64_t NowMillis() const = 0;
};

class SystemClock final : public Clock {
 public:
  std::int64_t NowMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// A monotonic clock: NowMillis is milliseconds since an arbitrary origin,
// never going back. Only comparable with itself (leases measure durations
// on it, so a wall-clock step cannot shorten or stretch them).
class SteadyClock final : public Clock {
 public:
  std::int64_t NowMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(std::int64_t start_millis = 0) : now_(start_millis) {}
  std::int64_t NowMillis() const override { return now_.load(); }
  void Advance(std::int64_t millis) { now_.fetch_add(millis); }
  void Set(std::int64_t millis) { now_.store(millis); }

 private:
  std::atomic<std::int64_t> now_;
};

}  // namespace hf
