// RunMain: the one wrapper every binary's main() uses, so an unexpected
// exception (out of memory, a library's error) ends the program with a
// message and exit code 2 instead of an uncaught-exception abort.
//
// Thread-safety: call once, from main().
#pragma once

#include <cstdio>
#include <exception>

namespace hf {

template <typename Main>
int RunMain(const char* program, Main&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: unknown error\n", program);
  }
  return 2;
}

}  // namespace hf
