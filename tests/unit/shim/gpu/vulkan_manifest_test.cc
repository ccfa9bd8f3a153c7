// The Vulkan layer manifest's pure parts (shim/src/gpu/vulkan_manifest.h): the
// JSON text and appending to list variables without clobbering or
// duplicating. The whole install (files, environment, the loader) is
// tested for real in tests/preload/vulkan_test.cc.
#include "gpu/vulkan_manifest.h"

#include <gtest/gtest.h>

#include <string>

namespace retain::shim {
namespace {

std::string Append(const char* existing, const char* item, char separator, int* changed) {
  char out[64];
  *changed = AppendListItem(existing, item, separator, out, sizeof(out));
  return *changed == 1 ? std::string(out) : std::string();
}

// Proves: an unset or empty variable gets the item alone; an existing value
// keeps its content with the item appended after one separator (none added
// after a trailing one); an item already present as a whole element is not
// added again (a child inheriting the environment), while a mere prefix or
// substring of an element does not count; too long a result is refused.
TEST(VulkanManifest, AppendListItemAppendsOnceAndPreserves) {
  int changed = 0;
  EXPECT_EQ(Append(nullptr, "/a", ':', &changed), "/a");
  EXPECT_EQ(changed, 1);
  EXPECT_EQ(Append("", "/a", ':', &changed), "/a");
  EXPECT_EQ(Append("/user", "/a", ':', &changed), "/user:/a");
  EXPECT_EQ(Append("/user:", "/a", ':', &changed), "/user:/a");
  EXPECT_EQ(Append("VK_LAYER_X", "VK_LAYER_Y", ',', &changed), "VK_LAYER_X,VK_LAYER_Y");

  Append("/user:/a", "/a", ':', &changed);
  EXPECT_EQ(changed, 0);
  Append("/a:/user", "/a", ':', &changed);
  EXPECT_EQ(changed, 0);
  Append("VK_LAYER_X,VK_LAYER_Y,VK_LAYER_Z", "VK_LAYER_Y", ',', &changed);
  EXPECT_EQ(changed, 0);
  EXPECT_EQ(Append("/a/b:/ab", "/a", ':', &changed), "/a/b:/ab:/a");
  EXPECT_EQ(Append("VK_LAYER_YY", "VK_LAYER_Y", ',', &changed), "VK_LAYER_YY,VK_LAYER_Y");

  char small[8];
  EXPECT_EQ(AppendListItem("/longer", "/path", ':', small, sizeof(small)), -1);
  EXPECT_EQ(AppendListItem(nullptr, "/1234567", ':', small, sizeof(small)), -1);
  EXPECT_EQ(AppendListItem(nullptr, "/123456", ':', small, sizeof(small)), 1);
  EXPECT_STREQ(small, "/123456");
}

// Proves: the manifest names the layer, type GLOBAL, the library path
// JSON-escaped (quotes, backslashes, control characters), an api_version
// and implementation_version; a buffer too small yields 0, never a cut file.
TEST(VulkanManifest, ManifestTextIsCompleteAndEscaped) {
  char text[2048];
  size_t length = FormatVulkanManifest("/opt/re\"tain\\x\n/libretain.so", text, sizeof(text));
  ASSERT_GT(length, 0u);
  const std::string manifest(text, length);
  EXPECT_NE(manifest.find("\"name\": \"VK_LAYER_RETAIN_memory\""), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("\"type\": \"GLOBAL\""), std::string::npos);
  EXPECT_NE(manifest.find("\"library_path\": \"/opt/re\\\"tain\\\\x\\u000a/libretain.so\""),
            std::string::npos)
      << manifest;
  EXPECT_NE(manifest.find("\"api_version\": \"1."), std::string::npos);
  EXPECT_NE(manifest.find("\"implementation_version\": \"1\""), std::string::npos);
  EXPECT_EQ(manifest.back(), '\n');
  EXPECT_EQ(manifest[manifest.size() - 2], '}');

  char small[100];
  EXPECT_EQ(FormatVulkanManifest("/opt/libretain.so", small, sizeof(small)), 0u);
  EXPECT_EQ(FormatVulkanManifest("/opt/libretain.so", small, 0), 0u);
}

}  // namespace
}  // namespace retain::shim
