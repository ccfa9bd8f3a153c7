# Process-level preload tests: real programs (python3, git, sort) and the
# proc_* fixtures (tests/fixtures/processes.cmake) run under libretain.so:
# transparency, errno, fork/exec, dlopen/dlclose, exceptions, signals,
# atomic snapshot writes, the host stack a hook takes, threads that ask for
# their own stack first, and other allocators preloaded beside the shim. One GoogleTest
# binary; every test runs the programs it needs itself.
set(_proc_dir ${CMAKE_CURRENT_LIST_DIR})

add_executable(proc_preload_test
  ${_proc_dir}/proc_helpers.cc
  ${_proc_dir}/proc_transparency_test.cc
  ${_proc_dir}/proc_errno_test.cc
  ${_proc_dir}/proc_fork_exec_test.cc
  ${_proc_dir}/proc_dlopen_test.cc
  ${_proc_dir}/proc_exceptions_test.cc
  ${_proc_dir}/proc_signals_test.cc
  ${_proc_dir}/proc_atomic_write_test.cc
  ${_proc_dir}/proc_fds_test.cc
  ${_proc_dir}/proc_waits_test.cc
  ${_proc_dir}/proc_quiet_test.cc
  ${_proc_dir}/proc_continuous_test.cc
  ${_proc_dir}/proc_stack_use_test.cc
  ${_proc_dir}/proc_allocators_test.cc
  ${_proc_dir}/proc_single_thread_test.cc
  ${_proc_dir}/proc_sandbox_test.cc)
target_include_directories(proc_preload_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(proc_preload_test PRIVATE retain_test_support GTest::gtest_main)
# Where Debian puts the allocators proc_allocators_test preloads (jemalloc,
# tcmalloc, mimalloc: scripts/install-deps.sh).
# retain-diff: what it says of a snapshot whose heap was not recorded.
# Chromium (scripts/install-deps.sh): a program that must stay
# single-threaded (its zygote) under the shim.
find_program(RETAIN_CHROMIUM NAMES chromium chromium-browser)
target_compile_definitions(proc_preload_test PRIVATE
  RETAIN_SYSTEM_LIBDIR="/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}"
  RETAIN_DIFF_PATH="$<TARGET_FILE:retain-diff>"
  RETAIN_CHROMIUM_PATH="$<$<BOOL:${RETAIN_CHROMIUM}>:${RETAIN_CHROMIUM}>")

# The tests run the shim and the fixtures: build them first.
get_property(_proc_fixtures GLOBAL PROPERTY RETAIN_PROC_FIXTURES)
add_dependencies(proc_preload_test retain retain-diff ${_proc_fixtures})

gtest_discover_tests(proc_preload_test
  DISCOVERY_TIMEOUT 120
  DISCOVERY_MODE PRE_TEST
  PROPERTIES LABELS "preload" TIMEOUT 300)
