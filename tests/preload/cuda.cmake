# CUDA interposition: the runtime and driver hooks, the dlsym hook and the
# cuGetProcAddress wrappers, on fake CUDA libraries (no GPU or driver here)
# and on the real runtime when the toolkit is installed (fixtures:
# tests/fixtures/cuda.cmake).
add_executable(cuda_test
  ${CMAKE_CURRENT_LIST_DIR}/cuda_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/proc_helpers.cc)
target_include_directories(cuda_test PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(cuda_test PRIVATE retain_test_support GTest::gtest_main)
target_compile_definitions(cuda_test PRIVATE
  RETAIN_HAVE_CUDA_TOOLKIT=${RETAIN_HAVE_CUDA_TOOLKIT}
  RETAIN_CUDA_ROOT="${RETAIN_CUDA_ROOT}")
get_property(_cuda_fixtures GLOBAL PROPERTY RETAIN_CUDA_FIXTURES)
add_dependencies(cuda_test retain ${_cuda_fixtures})
gtest_discover_tests(cuda_test
  DISCOVERY_TIMEOUT 60
  PROPERTIES LABELS "preload" TIMEOUT 120)
