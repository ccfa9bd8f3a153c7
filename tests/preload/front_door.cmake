# The front door (RETAIN_FRONT_DOOR): real loopback traffic through the shim's
# relay to raw_http_server (tests/fixtures/front_door.cmake), a server whose
# sockets bypass libc, and the configuration refused when not loopback.
add_executable(front_door_test
  ${CMAKE_CURRENT_LIST_DIR}/front_door_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/control_helpers.cc
  ${CMAKE_CURRENT_LIST_DIR}/proc_helpers.cc)
target_include_directories(front_door_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(front_door_test PRIVATE retain_shim_core retain_test_support
  GTest::gtest_main Threads::Threads)
add_dependencies(front_door_test retain raw_http_server)
if(TARGET go_http_server)
  add_dependencies(front_door_test go_http_server)
endif()
gtest_discover_tests(front_door_test
  DISCOVERY_TIMEOUT 60
  PROPERTIES LABELS "preload" TIMEOUT 180)
