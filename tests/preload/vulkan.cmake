# The Vulkan layer inside libretain.so, on the real loader and Mesa's
# lavapipe (tests/fixtures/vulkan.cmake builds the programs; the tests skip
# when lavapipe is not installed).
if(NOT RETAIN_HAVE_VULKAN_FIXTURES)
  return()
endif()
add_executable(vulkan_test vulkan_test.cc)
target_include_directories(vulkan_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(vulkan_test PRIVATE retain_test_support GTest::gtest_main Threads::Threads)
add_dependencies(vulkan_test retain vulkan_alloc vulkan_hpp proc_true)
gtest_discover_tests(vulkan_test
  DISCOVERY_TIMEOUT 120
  PROPERTIES TIMEOUT 120 LABELS preload)

# Memory domains: lavapipe's device memory is host memory, counted once in
# retain-diff's every output.
find_package(ZLIB REQUIRED)
add_executable(vulkan_domains_test vulkan_domains_test.cc)
target_include_directories(vulkan_domains_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(vulkan_domains_test PRIVATE
  retain_test_support retain_diff_e2e_util retain_pprof_proto GTest::gtest_main ZLIB::ZLIB)
target_compile_definitions(vulkan_domains_test PRIVATE
  RETAIN_DUMP_PATH="$<TARGET_FILE:retain-dump>")
add_dependencies(vulkan_domains_test retain retain-diff retain-dump vulkan_alloc)
gtest_discover_tests(vulkan_domains_test
  DISCOVERY_TIMEOUT 120
  PROPERTIES TIMEOUT 180 LABELS preload)
