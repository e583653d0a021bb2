# hf_library(NAME SOURCES ... DEPS ...): a static library of the project's own
# code, with the include root at src/ and the project's warnings.
function(hf_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${HF_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# hf_test(NAME SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s]): a GoogleTest
# binary registered as one CTest test. Labels: "core" (ledger/scheduler, run
# under sanitizers in CI), "tsan" (run by the ThreadSanitizer build in
# `make test`), "slow".
function(hf_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${HF_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main
                                        Threads::Threads)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
                                          LABELS "${ARG_LABELS}")
  # `core_tests` builds every test labelled core (the sanitizer runs need
  # only those).
  if("core" IN_LIST ARG_LABELS)
    if(NOT TARGET core_tests)
      add_custom_target(core_tests)
    endif()
    add_dependencies(core_tests ${name})
  endif()
  # `tsan_tests` builds every test labelled tsan (what `make test-tsan` runs).
  if("tsan" IN_LIST ARG_LABELS)
    if(NOT TARGET tsan_tests)
      add_custom_target(tsan_tests)
    endif()
    add_dependencies(tsan_tests ${name})
  endif()
endfunction()

# hf_keep_optimised(TARGET ...): targets that stay at -O1 in a sanitizer tree
# built at -O0 (HF_SANITIZE_OPT; the Makefile's ASan + UBSan tree for tests),
# for code that tests drive so hard that -O0 costs more time running them
# than it saves compiling.
function(hf_keep_optimised)
  if(HF_SANITIZE_OPT STREQUAL "-O0")
    foreach(target IN LISTS ARGN)
      target_compile_options(${target} PRIVATE -O1)
    endforeach()
  endif()
endfunction()
