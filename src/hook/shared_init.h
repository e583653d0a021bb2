// What the hook's shared-memory files (the slice region, region.h; the GPU
// region, gpu_region.h) have in common: a header initialised exactly once
// by whichever process maps the zero-filled file first, and a robust,
// process-shared mutex.
//
// No exceptions, no allocation, no libstdc++ runtime: compiled into
// libhfhook.so.
#ifndef HF_HOOK_SHARED_INIT_H_
#define HF_HOOK_SHARED_INIT_H_

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace hf::hook {

// A mutex that survives its holder's death (the next locker gets
// EOWNERDEAD) and works across the processes mapping it.
inline void InitRobustMutex(pthread_mutex_t* mutex) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(mutex, &attr);
  pthread_mutexattr_destroy(&attr);
}

// The first process to move `state` 0 -> 1 runs `init` (which writes the
// header) and publishes 2; the others wait for 2. An initialiser that died
// half-way (its pid is gone) is replaced. False when the file holds
// something else (a state past 2) or never becomes ready (10 s).
template <typename Init>
bool InitialiseOnce(std::atomic<uint32_t>& state, std::atomic<int32_t>& pid,
                    Init init) {
  for (int waited_ms = 0;; ++waited_ms) {
    const uint32_t seen = state.load(std::memory_order_acquire);
    if (seen == 2) return true;
    if (seen > 2) return false;
    uint32_t expected = 0;
    bool mine = seen == 0 && state.compare_exchange_strong(
                                 expected, 1, std::memory_order_acq_rel);
    if (!mine && seen == 1 && waited_ms > 200) {
      const int owner = pid.load(std::memory_order_relaxed);
      if (owner > 0 && kill(owner, 0) != 0 && errno == ESRCH) {
        expected = 1;
        mine = state.compare_exchange_strong(expected, 1,
                                             std::memory_order_acq_rel);
      }
    }
    if (mine) {
      pid.store(getpid(), std::memory_order_relaxed);
      init();
      state.store(2, std::memory_order_release);
      return true;
    }
    if (waited_ms > 10'000) return false;
    timespec ms{0, 1'000'000};
    nanosleep(&ms, nullptr);
  }
}

}  // namespace hf::hook

#endif  // HF_HOOK_SHARED_INIT_H_
