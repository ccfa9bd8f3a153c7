# Tests of the symbolizer (tools/lib/symbolizer): real programs built with
# -g -O2 (tests/fixtures/symbolizer.cmake) run under the shim, their
# snapshots symbolized. Uses objcopy (binutils) to make separate debug files.
# Included from tests/unit/CMakeLists.txt, so paths are relative to this file.
add_executable(symbolizer_test ${CMAKE_CURRENT_LIST_DIR}/symbolizer_test.cc)
target_link_libraries(symbolizer_test PRIVATE
  retain_test_support absl::str_format GTest::gmock GTest::gtest_main)
target_link_options(symbolizer_test PRIVATE -Wl,--build-id=sha1)
add_dependencies(symbolizer_test sym_program sym_program_split sym_lib)
if(TARGET retain)
  add_dependencies(symbolizer_test retain)
endif()
gtest_discover_tests(symbolizer_test DISCOVERY_TIMEOUT 60)
