// For the old-glibc builds of the hook's test programs (hf_old_glibc_build
// in tests/glibc/CMakeLists.txt): what GCC 12's headers call that the
// libstdc++ of Debian bullseye (GCC 10, up to GLIBCXX_3.4.28) does not
// have. Each is defined here, hidden, so the program never asks for it.
// Thread-safe: no state.
#include <cstdlib>
#include <new>

#if defined(_GLIBCXX_RELEASE) && _GLIBCXX_RELEASE >= 11
namespace std {

// GLIBCXX_3.4.29: std::allocator<T>::allocate(n) for an n whose byte size
// overflows. The name is libstdc++'s.
// NOLINTNEXTLINE(bugprone-reserved-identifier)
__attribute__((visibility("hidden"))) void __throw_bad_array_new_length() {
#if defined(__cpp_exceptions)
  throw bad_array_new_length();
#else
  abort();
#endif
}

}  // namespace std
#endif
