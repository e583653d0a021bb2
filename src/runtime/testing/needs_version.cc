// Preloaded by the runtime tests: needs hf_versioned_value at version
// HF_TEST_2 (see versioned_lib.cc), which the copy of libhf_versioned.so.1
// the test puts on LD_LIBRARY_PATH lacks. Thread-safe: no state.
extern "C" int hf_versioned_value();

extern "C" __attribute__((visibility("default"))) int hf_needs_version() {
  return hf_versioned_value();
}
