# RETAIN_SAMPLE: Poisson sampling by bytes, estimated with retain-diff's
# scaling, against a workload that knows its own live bytes.
retain_acct_test(sampling_test
  SOURCES sampling_test.cc
  FIXTURES sampling_workload)
target_link_libraries(sampling_test PRIVATE retain_diff_e2e_util)
add_dependencies(sampling_test retain-diff)
