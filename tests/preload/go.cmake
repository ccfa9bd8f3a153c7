# Go programs under the shim (tests/fixtures/go.cmake; skipped where no Go
# toolchain was found):
#   go_stacks_test   stacks that cross cgo: the go_cgo fixture with each
#                    RETAIN_UNWIND method, read back with retain-diff
#   go_signals_test  the signal handlers chained with the Go runtime's
if(NOT RETAIN_HAVE_GO)
  return()
endif()
retain_acct_test(go_stacks_test
  SOURCES go_stacks_test.cc
  FIXTURES go_cgo)
target_link_libraries(go_stacks_test PRIVATE retain_diff_e2e_util)
add_dependencies(go_stacks_test retain-diff)

add_executable(go_signals_test
  ${CMAKE_CURRENT_LIST_DIR}/go_signals_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/proc_helpers.cc)
target_include_directories(go_signals_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(go_signals_test PRIVATE retain_test_support GTest::gtest_main)
add_dependencies(go_signals_test retain go_signals)
gtest_discover_tests(go_signals_test
  DISCOVERY_TIMEOUT 60
  PROPERTIES LABELS preload TIMEOUT 120)
