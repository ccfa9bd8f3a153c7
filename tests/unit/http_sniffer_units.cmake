# The HTTP/1.x sniffer (shim/src/http_sniffer.h), fed byte streams directly.
add_executable(http_sniffer_unit_tests http_sniffer_test.cc)
target_link_libraries(http_sniffer_unit_tests PRIVATE
  retain_shim_core GTest::gtest_main)
gtest_discover_tests(http_sniffer_unit_tests DISCOVERY_TIMEOUT 60)
