// A library built the ordinary way on a glibc 2.34+ machine, without
// src/hook/glibc_compat.h: its references take the newest versions
// (dlopen@GLIBC_2.34, fstat@GLIBC_2.33). glibc_symbols_test checks that
// the symbol check rejects it, and hook_bullseye_test that glibc 2.31's
// loader refuses it, so both tests are seen to catch the fault they guard
// against. Thread-safe: no state.
#include <dlfcn.h>
#include <sys/stat.h>

// 1 when `path` is a file that dlopen can load, 0 otherwise.
extern "C" __attribute__((visibility("default"))) int hf_control_loads(
    const char* path) {
  struct stat st {};
  if (fstat(0, &st) != 0 && path == nullptr) return 0;
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return 0;
  dlclose(handle);
  return 1;
}
