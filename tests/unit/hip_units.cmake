# The shim's hand-written HIP ABI (shim/src/hip_api.h) against ROCm's real
# header (libamdhip64-dev); skipped when the header is not installed.
find_path(RETAIN_HIP_INCLUDE hip/hip_runtime_api.h)
if(RETAIN_HIP_INCLUDE)
  add_executable(shim_hip_api_test shim_hip_api_test.cc)
  target_include_directories(shim_hip_api_test PRIVATE
    ${PROJECT_SOURCE_DIR}/shim/src ${RETAIN_HIP_INCLUDE})
  target_compile_definitions(shim_hip_api_test PRIVATE
    __HIP_PLATFORM_AMD__
    RETAIN_HIP_EXPORTS="${PROJECT_SOURCE_DIR}/tests/preload/shim_exports/hip.txt")
  target_link_libraries(shim_hip_api_test PRIVATE GTest::gtest_main)
  gtest_discover_tests(shim_hip_api_test DISCOVERY_TIMEOUT 60)
else()
  message(STATUS "hip/hip_runtime_api.h not found: shim_hip_api_test not built")
endif()
