// Binds libhfhook.so to the oldest glibc it can run on (GLIBC_2.17), so
// that the hook loads in the images tasks bring (Debian 11, Ubuntu 20.04,
// UBI 8, CentOS 7), not only in the userland it was built in.
//
// glibc 2.34 moved libdl and libpthread into libc and gave every moved
// function a new default version, GLIBC_2.34; a library linked against a
// newer glibc therefore asks for `dlopen@GLIBC_2.34`, which an older
// loader refuses ("version `GLIBC_2.34' not found"). The old versions are
// still exported by every newer libc, so each reference is bound to the
// version the function had before the move, with a `.symver` directive.
// The directive must be seen by every translation unit that makes the
// call, so CMake force-includes this header (-include) into every source
// of the hfhook target: a source added later is covered with no change.
// A `.symver` for a function the unit never calls emits nothing.
//
// The link adds libdl.so.2 and libpthread.so.0 as NEEDED entries: before
// 2.34 the old versions live there, not in libc.so.6.
//
// What has no version old enough (fstat, stat, lstat, fstatat: 2.33) is
// defined inside the library instead (glibc_compat.cc). What is neither
// here nor there is caught by glibc_symbols_test, which fails on any
// dependency newer than GLIBC_2.17.
//
// Not for the agent's builds, which run where they were built (region.cc
// is compiled both ways and needs nothing else). The old-glibc builds of
// the hook's test programs (tests/glibc) use it too.
#ifndef HF_HOOK_GLIBC_COMPAT_H_
#define HF_HOOK_GLIBC_COMPAT_H_

// HF_GLIBC_BIND(symbol, x86-64 version): references to `symbol` in this
// unit bind to that version. aarch64's glibc begins at 2.17, so there
// every function below has GLIBC_2.17. Other architectures are built as
// they are (and glibc_symbols_test says what they need).
#if defined(__x86_64__)
#define HF_GLIBC_BIND(symbol, version) \
  __asm__(".symver " #symbol "," #symbol "@" version)
#elif defined(__aarch64__)
#define HF_GLIBC_BIND(symbol, version) \
  __asm__(".symver " #symbol "," #symbol "@GLIBC_2.17")
#else
#define HF_GLIBC_BIND(symbol, version)
#endif

// libdl (GLIBC_2.34 in libc since).
HF_GLIBC_BIND(dladdr, "GLIBC_2.2.5");
HF_GLIBC_BIND(dladdr1, "GLIBC_2.3.3");
HF_GLIBC_BIND(dlclose, "GLIBC_2.2.5");
HF_GLIBC_BIND(dlerror, "GLIBC_2.2.5");
HF_GLIBC_BIND(dlinfo, "GLIBC_2.3.3");
HF_GLIBC_BIND(dlmopen, "GLIBC_2.3.4");
HF_GLIBC_BIND(dlopen, "GLIBC_2.2.5");
HF_GLIBC_BIND(dlvsym, "GLIBC_2.2.5");
// The hook defines dlsym itself (resolution.cc; a .symver would rename
// that definition) and finds libc's at run time: its build defines
// HF_GLIBC_COMPAT_NO_DLSYM. Programs built with this header bind the old
// one.
#if !defined(HF_GLIBC_COMPAT_NO_DLSYM)
HF_GLIBC_BIND(dlsym, "GLIBC_2.2.5");
#endif

// libpthread (GLIBC_2.34 in libc since; pthread_sigmask GLIBC_2.32).
// Only functions that kept one ABI: pthread_cond_* keep their 2.3.2
// default (2.2.5 is the LinuxThreads ABI), and timer_* are left alone.
HF_GLIBC_BIND(pthread_create, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_detach, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_join, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_kill, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_sigmask, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_getname_np, "GLIBC_2.12");
HF_GLIBC_BIND(pthread_setname_np, "GLIBC_2.12");
HF_GLIBC_BIND(pthread_attr_setstacksize, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_once, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_key_create, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_key_delete, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_getspecific, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_setspecific, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_mutex_consistent, "GLIBC_2.12");
HF_GLIBC_BIND(pthread_mutex_timedlock, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_mutex_trylock, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_mutexattr_destroy, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_mutexattr_init, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_mutexattr_getpshared, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_mutexattr_setpshared, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_mutexattr_getrobust, "GLIBC_2.12");
HF_GLIBC_BIND(pthread_mutexattr_setrobust, "GLIBC_2.12");
HF_GLIBC_BIND(pthread_mutexattr_gettype, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_mutexattr_settype, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_condattr_setclock, "GLIBC_2.3.3");
HF_GLIBC_BIND(pthread_condattr_setpshared, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_rwlock_destroy, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_rwlock_init, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_rwlock_rdlock, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_rwlock_tryrdlock, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_rwlock_trywrlock, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_rwlock_unlock, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_rwlock_wrlock, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_spin_destroy, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_spin_init, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_spin_lock, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_spin_trylock, "GLIBC_2.2.5");
HF_GLIBC_BIND(pthread_spin_unlock, "GLIBC_2.2.5");
HF_GLIBC_BIND(sem_close, "GLIBC_2.2.5");
HF_GLIBC_BIND(sem_destroy, "GLIBC_2.2.5");
HF_GLIBC_BIND(sem_init, "GLIBC_2.2.5");
HF_GLIBC_BIND(sem_open, "GLIBC_2.2.5");
HF_GLIBC_BIND(sem_post, "GLIBC_2.2.5");
HF_GLIBC_BIND(sem_timedwait, "GLIBC_2.2.5");
HF_GLIBC_BIND(sem_trywait, "GLIBC_2.2.5");
HF_GLIBC_BIND(sem_unlink, "GLIBC_2.2.5");
HF_GLIBC_BIND(sem_wait, "GLIBC_2.2.5");

#endif  // HF_HOOK_GLIBC_COMPAT_H_
