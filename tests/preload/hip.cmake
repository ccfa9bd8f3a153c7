# HIP preload tests (hip_test.cc): the shim's HIP hooks against the real
# runtime with no GPU (failures unchanged, nothing recorded) and against the
# FAKE runtime of tests/fixtures/fake_hip (the success path: exact sizes and
# kinds, nesting, RTLD_LOCAL, driver host memory, per-kind totals in
# retain-diff). Fixtures: tests/fixtures/hip.cmake.
add_executable(hip_test ${CMAKE_CURRENT_LIST_DIR}/hip_test.cc)
target_include_directories(hip_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(hip_test PRIVATE retain_test_support GTest::gtest_main)
target_compile_definitions(hip_test PRIVATE
  RETAIN_DIFF_PATH="$<TARGET_FILE:retain-diff>"
  RETAIN_REAL_AMDHIP64="${RETAIN_REAL_AMDHIP64}"
  RETAIN_HIP_EXPORTS="${CMAKE_CURRENT_LIST_DIR}/shim_exports/hip.txt")
add_dependencies(hip_test retain retain-diff ${RETAIN_HIP_FIXTURES})
gtest_discover_tests(hip_test
  DISCOVERY_TIMEOUT 60
  PROPERTIES LABELS preload TIMEOUT 120)
