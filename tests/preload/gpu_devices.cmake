# Device memory per device (gpu_devices_test.cc): CUDA and HIP allocations on
# the two devices of the FAKE runtimes (no GPU here; tests/fixtures/cuda.cmake,
# tests/fixtures/hip.cmake) split into a domain per device in the snapshot and
# in every output of retain-diff.
find_package(ZLIB REQUIRED)
add_executable(gpu_devices_test ${CMAKE_CURRENT_LIST_DIR}/gpu_devices_test.cc)
target_include_directories(gpu_devices_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(gpu_devices_test PRIVATE
  retain_test_support retain_diff_e2e_util retain_pprof_proto GTest::gtest_main ZLIB::ZLIB)
add_dependencies(gpu_devices_test retain retain-diff cuda_devices_app hip_devices)
gtest_discover_tests(gpu_devices_test
  DISCOVERY_TIMEOUT 60
  PROPERTIES LABELS preload TIMEOUT 120)
