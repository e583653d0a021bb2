// For the old-glibc builds of the hook's test programs (hf_old_glibc_build
// in tests/glibc/CMakeLists.txt): the program's start binds the version of
// __libc_start_main that glibc 2.31 has.
//
// crt1.o of glibc 2.34 and later calls __libc_start_main@GLIBC_2.34 and
// passes no init function, because that version runs the program's
// constructors itself. The program is linked with
// --wrap=__libc_start_main, so crt1.o's call lands here; this calls the
// old version and hands it the init function the old crt1.o passed,
// which runs _init and .init_array (ld.so runs .preinit_array). Newer
// glibc versions accept the same call. Thread-safe: runs once, before
// main.
#if defined(__x86_64__)
__asm__(".symver hf_libc_start_main_old,__libc_start_main@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver hf_libc_start_main_old,__libc_start_main@GLIBC_2.17");
#endif

#include <cstddef>

using MainFn = int (*)(int, char**, char**);
using InitFn = void (*)(int, char**, char**);
using FiniFn = void (*)();

extern "C" {

// From the linker (the default script) and crti.o: their names, not ours.
// NOLINTBEGIN(bugprone-reserved-identifier)
extern InitFn __init_array_start[] __attribute__((visibility("hidden")));
extern InitFn __init_array_end[] __attribute__((visibility("hidden")));
// NOLINTEND(bugprone-reserved-identifier)
void _init();

int hf_libc_start_main_old(MainFn main, int argc, char** argv, InitFn init,
                           FiniFn fini, FiniFn rtld_fini, void* stack_end);

}  // extern "C"

namespace {

void RunConstructors(int argc, char** argv, char** envp) {
  _init();
  const std::size_t count =
      static_cast<std::size_t>(__init_array_end - __init_array_start);
  for (std::size_t i = 0; i < count; ++i) {
    __init_array_start[i](argc, argv, envp);
  }
}

}  // namespace

// The name --wrap gives crt1.o's call.
// NOLINTNEXTLINE(bugprone-reserved-identifier)
extern "C" int __wrap___libc_start_main(MainFn main, int argc, char** argv,
                                        InitFn init, FiniFn fini,
                                        FiniFn rtld_fini, void* stack_end) {
  return hf_libc_start_main_old(main, argc, argv,
                                init != nullptr ? init : &RunConstructors, fini,
                                rtld_fini, stack_end);
}
