# The control endpoint (RETAIN_CONTROL): real sockets against the
# control_idle and control_fds fixtures (tests/fixtures/control.cmake) under
# the shim. control_test: what each endpoint answers and the configuration;
# control_limits_test: what no client can do; control_owner_test: whose
# endpoint it is, and its descriptors.
foreach(test control_test control_limits_test control_owner_test)
  add_executable(${test}
    ${CMAKE_CURRENT_LIST_DIR}/${test}.cc
    ${CMAKE_CURRENT_LIST_DIR}/control_helpers.cc
    ${CMAKE_CURRENT_LIST_DIR}/proc_helpers.cc)
  target_include_directories(${test} PRIVATE ${PROJECT_SOURCE_DIR})
  # retain_shim_core: the config parser, label check and request parser,
  # tested directly.
  target_link_libraries(${test} PRIVATE retain_shim_core retain_test_support GTest::gtest_main)
  add_dependencies(${test} retain control_idle control_fds)
  gtest_discover_tests(${test}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "preload" TIMEOUT 120)
endforeach()
