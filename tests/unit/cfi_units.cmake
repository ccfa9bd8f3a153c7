# The CFI unwinder against libunwind (cfi_unwinder_test.cc) and its
# .eh_frame parser on hand-made tables (eh_frame_test.cc). A program of its
# own: it replaces malloc.
#
# cfi_fixture_nofp.cc and cfi_fixture_lib.so are built without frame
# pointers (the code the walks go through); the test itself with them (the
# walks start from its malloc's frame).
add_library(cfi_fixture_lib SHARED cfi_fixture_lib.cc)
target_compile_options(cfi_fixture_lib PRIVATE -O2 -fomit-frame-pointer)
target_include_directories(cfi_fixture_lib PRIVATE ${PROJECT_SOURCE_DIR})

add_executable(cfi_unwinder_tests cfi_unwinder_test.cc cfi_fixture_nofp.cc eh_frame_test.cc)
set_source_files_properties(cfi_fixture_nofp.cc PROPERTIES COMPILE_OPTIONS "-O2;-fomit-frame-pointer")
set_source_files_properties(cfi_unwinder_test.cc PROPERTIES COMPILE_OPTIONS "-fno-omit-frame-pointer")
target_include_directories(cfi_unwinder_tests PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(cfi_unwinder_tests PRIVATE
  retain_shim_core cfi_fixture_lib GTest::gtest_main Threads::Threads ${CMAKE_DL_LIBS})
gtest_discover_tests(cfi_unwinder_tests DISCOVERY_TIMEOUT 60)
