# The shim's snapshot, parsed with the generated classes, field by field.
add_executable(snapshot_fields_test snapshot_fields_test.cc)
target_link_libraries(snapshot_fields_test PRIVATE retain_test_support GTest::gtest_main)
add_dependencies(snapshot_fields_test retain snapshot_fields)
gtest_discover_tests(snapshot_fields_test DISCOVERY_TIMEOUT 60)

# libretain.so must have no dynamic initialisers (hooks can run before they
# would) and must export nothing but the hooks and the public API.
add_test(NAME shim_exports_only_hooks_and_api
  COMMAND ${CMAKE_COMMAND} -DSHIM=$<TARGET_FILE:retain>
          -P ${CMAKE_CURRENT_SOURCE_DIR}/check_shim_symbols.cmake)
