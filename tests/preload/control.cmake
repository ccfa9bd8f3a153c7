# The control endpoint (RETAIN_CONTROL): real sockets against the
# control_idle fixture (tests/fixtures/control.cmake) under the shim.
add_executable(control_test
  ${CMAKE_CURRENT_LIST_DIR}/control_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/proc_helpers.cc)
target_include_directories(control_test PRIVATE ${PROJECT_SOURCE_DIR})
# retain_shim_core: the config parser and label check, tested directly.
target_link_libraries(control_test PRIVATE retain_shim_core retain_test_support GTest::gtest_main)
add_dependencies(control_test retain control_idle)
gtest_discover_tests(control_test
  DISCOVERY_TIMEOUT 60
  PROPERTIES LABELS "preload" TIMEOUT 120)
