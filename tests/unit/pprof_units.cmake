# Tests of the pprof exporter (tools/lib/pprof_writer): the file is decoded
# back here and read by Go's pprof (`go tool pprof`, Debian package
# golang-go), which must be installed. Included from
# tests/unit/CMakeLists.txt, so paths are relative to this file.
find_package(ZLIB REQUIRED)

add_executable(pprof_writer_test ${CMAKE_CURRENT_LIST_DIR}/pprof_writer_test.cc)
target_link_libraries(pprof_writer_test PRIVATE
  retain_test_support retain_pprof_proto ZLIB::ZLIB GTest::gmock GTest::gtest_main)
# It exports a real snapshot: fixture pprof_sites run under the shim.
add_dependencies(pprof_writer_test pprof_sites)
if(TARGET retain)
  add_dependencies(pprof_writer_test retain)
endif()
gtest_discover_tests(pprof_writer_test DISCOVERY_TIMEOUT 60)
