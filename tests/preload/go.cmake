# Go programs under the shim (tests/fixtures/go.cmake; skipped without Go):
# go_signals_test checks the signal handlers chained with the Go runtime's.
if(NOT RETAIN_HAVE_GO)
  return()
endif()
add_executable(go_signals_test
  ${CMAKE_CURRENT_LIST_DIR}/go_signals_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/proc_helpers.cc)
target_include_directories(go_signals_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(go_signals_test PRIVATE retain_test_support GTest::gtest_main)
add_dependencies(go_signals_test retain go_signals)
gtest_discover_tests(go_signals_test
  DISCOVERY_TIMEOUT 60
  PROPERTIES LABELS preload TIMEOUT 120)
