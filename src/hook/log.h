// The hook's log: one line per unusual event on stderr, prefixed
// "heteroflow-hook[pid]:", each kind of event at most once per process
// unless the level is debug. Quiet by default (warnings and errors only).
// Uses write(2) on a stack buffer: safe in any thread, after fork, and with
// stdio in any state.
#ifndef HF_HOOK_LOG_H_
#define HF_HOOK_LOG_H_

#include <atomic>

#include "hook/config.h"

namespace hf::hook {

// A once-per-process flag for one kind of event.
struct LogOnce {
  std::atomic<bool> done{false};
};

void SetLogLevel(LogLevel level);
// Logs `fmt` (printf-style) at `level`; with `once`, only the first time.
void Log(LogLevel level, LogOnce* once, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace hf::hook

#endif  // HF_HOOK_LOG_H_
