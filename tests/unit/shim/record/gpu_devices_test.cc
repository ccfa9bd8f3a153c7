// gpu_devices: the registry of the GPU devices allocations were seen on.
// Ids count from 1 in the order devices are first seen, per (API, number);
// a device is described (name, UUID) once; the registry holds 63 devices
// and then answers 0; a snapshot copies them in id order.
#include "record/gpu_devices.h"

#include <gtest/gtest.h>
#include <string.h>

#include <thread>
#include <vector>

namespace retain::shim {
namespace {

int g_described = 0;

void Describe(int32_t index, GpuDeviceInfo* info, void* context) {
  ++g_described;
  snprintf(info->name, sizeof(info->name), "%s %d", static_cast<const char*>(context), index);
  info->has_uuid = true;
  memset(info->uuid, index, sizeof(info->uuid));
}

// Runs in its own process under ctest; in one binary with the other tests
// it is the only one that registers devices.
TEST(GpuDeviceRegistryTest, IdsNamesAndTheLimit) {
  ASSERT_EQ(GpuDeviceCount(), 0u);
  EXPECT_EQ(FindGpuDevice(GpuApi::kCuda, 0), 0u) << "never seen";
  char label[] = "GPU";
  const uint8_t cuda0 = GpuDeviceId(GpuApi::kCuda, 0, &Describe, label);
  const uint8_t cuda1 = GpuDeviceId(GpuApi::kCuda, 1, &Describe, label);
  const uint8_t hip0 = GpuDeviceId(GpuApi::kHip, 0, &Describe, label);
  EXPECT_EQ(cuda0, 1u);
  EXPECT_EQ(cuda1, 2u);
  EXPECT_EQ(hip0, 3u) << "another API's device 0 is another device";
  EXPECT_EQ(g_described, 3);
  EXPECT_EQ(GpuDeviceId(GpuApi::kCuda, 1, &Describe, label), cuda1);
  EXPECT_EQ(g_described, 3) << "a known device is not described again";
  EXPECT_EQ(FindGpuDevice(GpuApi::kCuda, 1), cuda1);
  EXPECT_EQ(GpuDeviceId(GpuApi::kCuda, -1, &Describe, label), 0u) << "no device";

  GpuDeviceInfo vulkan{};
  vulkan.api = GpuApi::kVulkan;
  vulkan.index = 0;
  snprintf(vulkan.name, sizeof(vulkan.name), "llvmpipe");
  EXPECT_EQ(RegisterGpuDevice(vulkan), 4u);
  snprintf(vulkan.name, sizeof(vulkan.name), "renamed");
  EXPECT_EQ(RegisterGpuDevice(vulkan), 4u) << "the first registration stays";

  GpuDeviceInfo copies[kMaxGpuDevices];
  ASSERT_EQ(CopyGpuDevices(copies, kMaxGpuDevices), 4u);
  EXPECT_EQ(copies[0].id, 1u);
  EXPECT_EQ(copies[0].api, GpuApi::kCuda);
  EXPECT_STREQ(copies[1].name, "GPU 1");
  EXPECT_TRUE(copies[1].has_uuid);
  EXPECT_EQ(copies[1].uuid[15], 1u);
  EXPECT_STREQ(copies[3].name, "llvmpipe");
  EXPECT_EQ(CopyGpuDevices(copies, 2), 2u) << "no more than asked";

  // Threads meeting new devices at once get one id per device.
  std::vector<std::thread> threads;
  std::vector<uint8_t> ids(8 * 20);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i)
        ids[t * 20 + i] = GpuDeviceId(GpuApi::kHip, 100 + i, nullptr, nullptr);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < 20; ++i) {
    for (int t = 1; t < 8; ++t) EXPECT_EQ(ids[t * 20 + i], ids[i]);
    EXPECT_EQ(FindGpuDevice(GpuApi::kHip, 100 + i), ids[i]);
  }
  EXPECT_EQ(GpuDeviceCount(), 24u);

  // Full at 63: further devices have none; known ones keep theirs.
  for (int i = 0; GpuDeviceCount() < static_cast<size_t>(kMaxGpuDevices); ++i) {
    EXPECT_NE(GpuDeviceId(GpuApi::kMetal, i, nullptr, nullptr), 0u);
  }
  EXPECT_EQ(GpuDeviceId(GpuApi::kMetal, 1000, nullptr, nullptr), 0u);
  EXPECT_EQ(GpuDeviceId(GpuApi::kCuda, 1, nullptr, nullptr), cuda1);
}

}  // namespace
}  // namespace retain::shim
