# Residency and trim on real memory: resident_memory_test runs the residency
# fixture under the shim and reads the snapshot's resident and swapped
# columns; trim_test drives POST /trim on a fragmented heap and reads what
# retain-diff says of it and of free memory spread over thread arenas
# (tests/fixtures/residency.cmake).
add_executable(resident_memory_test ${CMAKE_CURRENT_LIST_DIR}/resident_memory_test.cc)
target_include_directories(resident_memory_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(resident_memory_test PRIVATE retain_test_support GTest::gtest_main)
add_dependencies(resident_memory_test retain residency residency_churn)
gtest_discover_tests(resident_memory_test
  DISCOVERY_TIMEOUT 60
  PROPERTIES LABELS preload TIMEOUT 300)

add_executable(trim_test
  ${CMAKE_CURRENT_LIST_DIR}/trim_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/control_helpers.cc
  ${CMAKE_CURRENT_LIST_DIR}/proc_helpers.cc)
target_include_directories(trim_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(trim_test PRIVATE retain_test_support GTest::gtest_main)
# It reads what retain-diff makes of the snapshots.
target_compile_definitions(trim_test PRIVATE RETAIN_DIFF_PATH="$<TARGET_FILE:retain-diff>")
add_dependencies(trim_test retain retain-diff trim_fragment arena_spread control_idle)
gtest_discover_tests(trim_test
  DISCOVERY_TIMEOUT 60
  PROPERTIES LABELS preload TIMEOUT 120)
