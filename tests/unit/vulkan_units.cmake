# Unit tests of the Vulkan layer's manifest helpers (shim/src/vulkan_manifest.h).
add_executable(shim_vulkan_unit_tests shim_vulkan_manifest_test.cc)
target_link_libraries(shim_vulkan_unit_tests PRIVATE
  retain_shim_core GTest::gtest_main Threads::Threads)
gtest_discover_tests(shim_vulkan_unit_tests DISCOVERY_TIMEOUT 60)
