#include "hook/log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace hf::hook {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};

}  // namespace

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void Log(LogLevel level, LogOnce* once, const char* fmt, ...) {
  const int max = g_level.load(std::memory_order_relaxed);
  if (static_cast<int>(level) > max) return;
  if (once != nullptr && max < static_cast<int>(LogLevel::kDebug) &&
      once->done.exchange(true, std::memory_order_relaxed)) {
    return;
  }
  char buf[512];
  int n = std::snprintf(buf, sizeof(buf),
                        "heteroflow-hook[%d]: ", static_cast<int>(getpid()));
  va_list args;
  va_start(args, fmt);
  int m = std::vsnprintf(buf + n, sizeof(buf) - static_cast<size_t>(n) - 1, fmt,
                         args);
  va_end(args);
  if (m < 0) m = 0;
  size_t len = static_cast<size_t>(n) + static_cast<size_t>(m);
  if (len > sizeof(buf) - 2) len = sizeof(buf) - 2;
  buf[len++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, buf, len);
  (void)ignored;
}

}  // namespace hf::hook
