# Request tags: the marker API with and without the shim.
add_executable(tags_test tags_test.cc)
target_link_libraries(tags_test PRIVATE retain_test_support GTest::gtest_main)
add_dependencies(tags_test retain tags_marker_api)
gtest_discover_tests(tags_test DISCOVERY_TIMEOUT 60)
