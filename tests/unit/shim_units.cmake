# Unit tests of the shim's internals, linked directly against
# retain_shim_core (no interposition involved).
add_executable(shim_unit_tests
  shim_config_test.cc
  shim_gpu_recorder_test.cc
  shim_kinds_test.cc
  shim_live_table_test.cc
  shim_sampler_test.cc
  shim_mmap_table_test.cc
  shim_stack_table_test.cc
  shim_wire_encoder_test.cc
)
# zlib: the independent CRC-32 the shim's (crc32.h) is checked against.
find_package(ZLIB REQUIRED)
target_link_libraries(shim_unit_tests PRIVATE
  retain_shim_core retain_proto GTest::gtest_main Threads::Threads ZLIB::ZLIB)
gtest_discover_tests(shim_unit_tests DISCOVERY_TIMEOUT 60)
