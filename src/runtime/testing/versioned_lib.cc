// A library that exists in two builds with the same soname,
// libhf_versioned.so.1: one defines hf_versioned_value at version
// HF_TEST_2, the other only at HF_TEST_1 (src/runtime/CMakeLists.txt).
// libhf_needs_version.so is linked against the first; a process that
// preloads it and finds the second stops in the dynamic loader with
// "version `HF_TEST_2' not found", exactly as a library built against a
// newer glibc does in an older one. The runtime tests use it for the
// loader's real words. Thread-safe: no state.
extern "C" __attribute__((visibility("default"))) int hf_versioned_value() {
  return 2;
}
