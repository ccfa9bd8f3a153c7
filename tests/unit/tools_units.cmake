# Unit tests of the tools' library (tools/lib) and of the shared test support.
# Included from tests/unit/CMakeLists.txt, so paths are relative to this file.

add_executable(snapshot_reader_test ${CMAKE_CURRENT_LIST_DIR}/snapshot_reader_test.cc)
target_link_libraries(snapshot_reader_test PRIVATE retain_test_support GTest::gmock GTest::gtest_main)
gtest_discover_tests(snapshot_reader_test)

add_executable(dump_format_test ${CMAKE_CURRENT_LIST_DIR}/dump_format_test.cc)
target_link_libraries(dump_format_test PRIVATE retain_test_support GTest::gmock GTest::gtest_main)
# The command-line tests run the real binary.
target_compile_definitions(dump_format_test PRIVATE RETAIN_DUMP_PATH="$<TARGET_FILE:retain-dump>")
add_dependencies(dump_format_test retain-dump)
gtest_discover_tests(dump_format_test)

add_executable(test_support_test ${CMAKE_CURRENT_LIST_DIR}/test_support_test.cc)
target_link_libraries(test_support_test PRIVATE retain_test_support GTest::gmock GTest::gtest_main)
gtest_discover_tests(test_support_test)
