# The trend verdicts on the series the retain-diff issue names, and the
# category rules shipped for llama-server, the warning for degraded snapshots.
add_executable(trend_unit_tests trend_test.cc rules_test.cc degraded_test.cc)
target_link_libraries(trend_unit_tests PRIVATE
  retain_tool retain_test_support GTest::gmock GTest::gtest_main)
gtest_discover_tests(trend_unit_tests DISCOVERY_TIMEOUT 60)
