// module_table: a refresh finds the objects loaded since the last one (the
// loader's counts changed), and one with nothing new keeps the table as it
// was.
#include "unwind/module_table.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace retain::shim {
namespace {

std::vector<std::string> ModulePaths() {
  std::vector<std::string> paths;
  ForEachModule([&](const ModuleEntry& entry) {
    if (!entry.unloaded) paths.push_back(entry.path);
  });
  return paths;
}

bool HasModuleEndingWith(const std::string& suffix) {
  for (const std::string& path : ModulePaths()) {
    if (path.size() >= suffix.size() &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return true;
    }
  }
  return false;
}

TEST(ModuleTableTest, ARefreshFindsWhatWasLoadedSinceAndOnlyThen) {
  // libunwind: installed with the project, and loaded only by the shim's
  // constructor, which does not run in this test.
  ASSERT_EQ(dlopen("libunwind.so.8", RTLD_NOW | RTLD_NOLOAD), nullptr);
  RefreshModules();
  const std::vector<std::string> before = ModulePaths();
  ASSERT_FALSE(before.empty());
  RefreshModules();  // nothing loaded meanwhile
  EXPECT_EQ(ModulePaths(), before);

  void* library = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  EXPECT_FALSE(HasModuleEndingWith("/libunwind.so.8"));  // not until a refresh
  RefreshModules();
  EXPECT_TRUE(HasModuleEndingWith("/libunwind.so.8"));
  EXPECT_GT(ModulePaths().size(), before.size());

  ASSERT_EQ(dlclose(library), 0);
  RefreshModules();
  EXPECT_FALSE(HasModuleEndingWith("/libunwind.so.8"));  // kept, marked unloaded
}

}  // namespace
}  // namespace retain::shim
