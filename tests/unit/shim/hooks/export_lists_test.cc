// export_lists_test: the lists of what libretain.so may export
// (tests/preload/shim_exports/*.txt, which the shim_exports_only_hooks_and_api
// test compares with the built library) name exactly the hooks of the
// shim's X-macro lists, so a row added to a list cannot be left out of the
// export lists, nor an export be listed that no row defines.
//
// host.txt: RETAIN_FOR_EACH_HOOK (base/hook_table.h) and the public API;
// hip.txt: RETAIN_FOR_EACH_HIP_HOOK (gpu/hip_api.h); cuda.txt:
// RETAIN_FOR_EACH_CUDART_HOOK and RETAIN_FOR_EACH_CUDA_DRIVER_HOOK
// (gpu/cuda_api.h) and dlsym.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "base/hook_table.h"
#include "gpu/cuda_api.h"
#include "gpu/hip_api.h"

namespace {

std::set<std::string> ReadList(const std::string& file) {
  std::set<std::string> names;
  std::ifstream list(std::string(RETAIN_SHIM_EXPORTS_DIR) + "/" + file);
  EXPECT_TRUE(list.is_open()) << file;
  std::string line;
  while (std::getline(list, line)) {
    if (!line.empty() && line[0] != '#') names.insert(line);
  }
  return names;
}

TEST(ExportListsTest, HostListIsTheHookTableAndThePublicApi) {
  std::set<std::string> expected = {"retain_snapshot", "retain_request_begin", "retain_request_end",
                                    "retain_request_adopt", "retain_request_release"};
#define RETAIN_NAME_HOOK(name) expected.insert(#name);
  RETAIN_FOR_EACH_HOOK(RETAIN_NAME_HOOK)
#undef RETAIN_NAME_HOOK
  EXPECT_EQ(ReadList("host.txt"), expected);
}

TEST(ExportListsTest, HipListIsTheHipHooks) {
  std::set<std::string> expected;
#define RETAIN_NAME_HIP(name, params) expected.insert(#name);
  RETAIN_FOR_EACH_HIP_HOOK(RETAIN_NAME_HIP)
#undef RETAIN_NAME_HIP
  EXPECT_EQ(ReadList("hip.txt"), expected);
}

TEST(ExportListsTest, CudaListIsTheCudaHooksAndDlsym) {
  std::set<std::string> expected = {"dlsym"};
#define RETAIN_NAME_CUDART(entry, name, alias, impl, params, args) expected.insert(#name);
#define RETAIN_NAME_CUDA_DRIVER(entry, name, alias, proc_name, min_version, impl, params, args) \
  expected.insert(#name);
  RETAIN_FOR_EACH_CUDART_HOOK(RETAIN_NAME_CUDART)
  RETAIN_FOR_EACH_CUDA_DRIVER_HOOK(RETAIN_NAME_CUDA_DRIVER)
#undef RETAIN_NAME_CUDART
#undef RETAIN_NAME_CUDA_DRIVER
  EXPECT_EQ(ReadList("cuda.txt"), expected);
}

}  // namespace
