// Lock ownership the compiler checks: Clang's thread-safety analysis
// (-Wthread-safety) reads these attributes and reports, at compile time, a
// guarded member touched without its mutex, a *Locked function called
// without the lock it requires, or a lock not released on some path.
//
// The build compiles with GCC, which has no such analysis: every macro
// expands to nothing there. `make tidy` runs clang-tidy with -Wthread-safety
// over the same sources, so a violation fails CI (docs/ARCHITECTURE.md,
// "Threading").
//
// libstdc++'s std::mutex and std::lock_guard carry no attributes, so the
// analysis cannot see them lock anything. Code whose members are guarded
// uses hf::Mutex, hf::MutexLock and hf::CondVar below instead: thin
// wrappers around the standard types, with the same cost.
//
// Usage:
//   hf::Mutex mu_;
//   int count_ HF_GUARDED_BY(mu_) = 0;
//   void BumpLocked() HF_REQUIRES(mu_);
//   void Bump() { hf::MutexLock lock(mu_); BumpLocked(); }
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <utility>

#if defined(__clang__)
#define HF_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define HF_THREAD_ANNOTATION_(x)
#endif

// A type that is a lock (hf::Mutex).
#define HF_CAPABILITY(name) HF_THREAD_ANNOTATION_(capability(name))
// An RAII type that holds a lock for its lifetime (hf::MutexLock).
#define HF_SCOPED_CAPABILITY HF_THREAD_ANNOTATION_(scoped_lockable)
// A member read or written only with `mu` held.
#define HF_GUARDED_BY(mu) HF_THREAD_ANNOTATION_(guarded_by(mu))
// A pointer member whose pointee is read or written only with `mu` held.
#define HF_PT_GUARDED_BY(mu) HF_THREAD_ANNOTATION_(pt_guarded_by(mu))
// The caller must hold the lock(s), exclusively / at least shared.
#define HF_REQUIRES(...) HF_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define HF_REQUIRES_SHARED(...) \
  HF_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
// The function takes / gives up the lock(s) and returns with / without it.
#define HF_ACQUIRE(...) HF_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define HF_RELEASE(...) HF_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define HF_ACQUIRE_SHARED(...) \
  HF_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#define HF_RELEASE_SHARED(...) \
  HF_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
#define HF_RELEASE_GENERIC(...) \
  HF_THREAD_ANNOTATION_(release_generic_capability(__VA_ARGS__))
// Takes the lock when it returns `result` (try_lock).
#define HF_TRY_ACQUIRE(...) \
  HF_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// The caller must not hold the lock(s): the function takes them itself.
#define HF_EXCLUDES(...) HF_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
// From here to the end of the scope the lock counts as held (AssertHeld).
#define HF_ASSERT_CAPABILITY(x) HF_THREAD_ANNOTATION_(assert_capability(x))
// The function returns a reference to the lock `x`.
#define HF_RETURN_CAPABILITY(x) HF_THREAD_ANNOTATION_(lock_returned(x))
// Opts one function out of the analysis. Say why next to each use; prefer
// AssertHeld() where the lock is held but the analysis cannot see it.
#define HF_NO_THREAD_SAFETY_ANALYSIS \
  HF_THREAD_ANNOTATION_(no_thread_safety_analysis)

namespace hf {

// A std::mutex the analysis knows as a lock.
class HF_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() HF_ACQUIRE() { mu_.lock(); }
  void unlock() HF_RELEASE() { mu_.unlock(); }
  bool try_lock() HF_TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tells the analysis that this mutex is held here although it cannot see
  // it taken: in a callback run while the code that called it holds the
  // lock and waits for it (a store transaction's body runs on the store's
  // writer thread while the issuing thread holds the lock and blocks on its
  // result; a condition variable's predicate runs with the lock held).
  // Checks nothing at run time: std::mutex cannot tell who holds it.
  void AssertHeld() const HF_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction (std::lock_guard), or, with
// Unlock() and Lock(), for parts of the scope (std::unique_lock): a store
// write between two critical sections runs with the lock given up.
class HF_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) HF_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() HF_RELEASE() {
    if (held_) mu_.unlock();
  }

  void Unlock() HF_RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void Lock() HF_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }

  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A std::shared_mutex the analysis knows as a lock: many holders share it,
// or one holds it alone.
class HF_CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() HF_ACQUIRE() { mu_.lock(); }
  void unlock() HF_RELEASE() { mu_.unlock(); }
  void lock_shared() HF_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() HF_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds `mu` alone from construction to destruction.
class HF_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) HF_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() HF_RELEASE() { mu_.unlock(); }

  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Shares `mu` from construction to destruction (std::shared_lock).
class HF_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) HF_ACQUIRE_SHARED(mu) : mu_(mu) {
    mu_.lock_shared();
  }
  ~ReaderLock() HF_RELEASE_GENERIC() { mu_.unlock_shared(); }

  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

// A std::condition_variable for an hf::Mutex. The waits take the mutex the
// caller holds (by an hf::MutexLock), so the analysis checks that it is
// held; they return with it held, as std::condition_variable's do. A
// predicate reading guarded members runs with the mutex held but is a
// separate function to the analysis: it starts with `mu.AssertHeld()`.
class CondVar {
 public:
  void NotifyOne() noexcept { cv_.notify_one(); }
  void NotifyAll() noexcept { cv_.notify_all(); }

  // std::condition_variable::wait(lock, pred): returns once `pred` holds.
  template <typename Predicate>
  void Wait(Mutex& mu, Predicate pred) HF_REQUIRES(mu) {
    // Borrows the caller's ownership for the wait and hands it back.
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock, std::move(pred));
    lock.release();
  }

  // std::condition_variable::wait_for(lock, timeout, pred): true when
  // `pred` held before the timeout passed.
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(Mutex& mu, const std::chrono::duration<Rep, Period>& timeout,
               Predicate pred) HF_REQUIRES(mu) {
    // Borrows the caller's ownership for the wait and hands it back.
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool result = cv_.wait_for(lock, timeout, std::move(pred));
    lock.release();
    return result;
  }

 private:
  std::condition_variable cv_;
};

}  // namespace hf
