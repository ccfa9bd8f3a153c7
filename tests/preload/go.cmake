# Stacks that cross cgo: the go_cgo fixture (tests/fixtures/go.cmake) under
# the shim with each RETAIN_UNWIND method, read back with retain-diff.
# Skipped where no Go toolchain was found.
if(RETAIN_HAVE_GO)
  retain_acct_test(go_stacks_test
    SOURCES go_stacks_test.cc
    FIXTURES go_cgo)
  target_link_libraries(go_stacks_test PRIVATE retain_diff_e2e_util)
  add_dependencies(go_stacks_test retain-diff)
endif()
