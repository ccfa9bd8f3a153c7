# The trend verdicts on the series the retain-diff issue names, and the
# category rules shipped for llama-server.
add_executable(trend_unit_tests trend_test.cc rules_test.cc)
target_link_libraries(trend_unit_tests PRIVATE retain_tool retain_test_support GTest::gtest_main)
gtest_discover_tests(trend_unit_tests DISCOVERY_TIMEOUT 60)
