# Accounting preload tests: exact bytes per call site, every allocation entry
# point, a concurrent workload, the mmap family, stacks and modules, and
# configuration. Each runs acct_* fixtures (tests/fixtures/accounting.cmake)
# under libretain.so; shared helpers are in acct_util.h.

# retain_acct_test(NAME SOURCES src... FIXTURES fixture...)
function(retain_acct_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;FIXTURES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE retain_test_support GTest::gtest_main)
  add_dependencies(${name} retain ${ARG_FIXTURES})
  # Every test starts real programs under the shim; the workload takes
  # seconds, so the per-test timeout is generous.
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 120
    PROPERTIES TIMEOUT 300 LABELS preload)
endfunction()

retain_acct_test(acct_accounting_test
  SOURCES acct_accounting_test.cc
  FIXTURES acct_sites acct_workload)
retain_acct_test(acct_entry_points_test
  SOURCES acct_entry_points_test.cc
  FIXTURES acct_entry_points)
retain_acct_test(acct_mmap_test
  SOURCES acct_mmap_test.cc
  FIXTURES acct_mmap)
retain_acct_test(acct_stacks_test
  SOURCES acct_stacks_test.cc
  FIXTURES acct_sites acct_unwinder acct_coroutine)
retain_acct_test(acct_config_test
  SOURCES acct_config_test.cc
  FIXTURES acct_many)
