// The calls of libhfhook.so that glibc has no version old enough for
// (see glibc_compat.h): fstat, stat, lstat and fstatat were inline
// wrappers around __fxstat and friends until glibc 2.33 and exist as
// functions only since (GLIBC_2.33). The hook defines them itself, as
// system calls: they are hidden, so every call inside the library, from
// any source, binds here, and nothing outside sees them. The kernel's
// struct stat is glibc's on both architectures built.
// Thread-safe: no state.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__aarch64__)

// The sizes of the kernel's struct stat (x86-64: struct stat of
// asm/stat.h; aarch64: asm-generic/stat.h).
#if defined(__x86_64__)
static_assert(sizeof(struct stat) == 144, "struct stat is not the kernel's");
#else
static_assert(sizeof(struct stat) == 128, "struct stat is not the kernel's");
#endif

extern "C" {

// Hidden as well as local by the version script: a program built with these
// (the old-glibc test builds of tests/glibc) must not export them either.
#define HF_COMPAT_HIDDEN __attribute__((visibility("hidden")))

HF_COMPAT_HIDDEN int fstat(int fd, struct stat* buf) noexcept {
  return static_cast<int>(syscall(SYS_fstat, fd, buf));
}

HF_COMPAT_HIDDEN int fstatat(int dirfd, const char* path, struct stat* buf,
                             int flags) noexcept {
  return static_cast<int>(syscall(SYS_newfstatat, dirfd, path, buf, flags));
}

HF_COMPAT_HIDDEN int stat(const char* path, struct stat* buf) noexcept {
  return fstatat(AT_FDCWD, path, buf, 0);
}

HF_COMPAT_HIDDEN int lstat(const char* path, struct stat* buf) noexcept {
  return fstatat(AT_FDCWD, path, buf, AT_SYMLINK_NOFOLLOW);
}

#undef HF_COMPAT_HIDDEN

}  // extern "C"

#endif
