// The shim writes kinds and triggers as raw numbers; they must be the values
// proto/retain.proto gives them, or every snapshot would be misread.
#include "record/kinds.h"

#include <gtest/gtest.h>

#include "retain.pb.h"
#include "snapshot/writer.h"

namespace retain::shim {
namespace {

TEST(KindsTest, ShimKindValuesMatchTheProto) {
  EXPECT_EQ(static_cast<int>(Kind::kHeap), v1::KIND_HEAP);
  EXPECT_EQ(static_cast<int>(Kind::kMmapAnon), v1::KIND_MMAP_ANON);
  EXPECT_EQ(static_cast<int>(Kind::kMmapFile), v1::KIND_MMAP_FILE);
  EXPECT_EQ(static_cast<int>(Kind::kHipDevice), v1::KIND_HIP_DEVICE);
  EXPECT_EQ(static_cast<int>(Kind::kHipHost), v1::KIND_HIP_HOST);
  EXPECT_EQ(static_cast<int>(Kind::kHipManaged), v1::KIND_HIP_MANAGED);
  EXPECT_EQ(static_cast<int>(Kind::kVulkanDevice), v1::KIND_VULKAN_DEVICE);
  EXPECT_EQ(static_cast<int>(Kind::kCudaDevice), v1::KIND_CUDA_DEVICE);
  EXPECT_EQ(static_cast<int>(Kind::kCudaHost), v1::KIND_CUDA_HOST);
  EXPECT_EQ(static_cast<int>(Kind::kCudaManaged), v1::KIND_CUDA_MANAGED);
  EXPECT_EQ(static_cast<int>(Kind::kMetal), v1::KIND_METAL);
}

TEST(KindsTest, EveryProtoKindHasAShimKind) {
  const google::protobuf::EnumDescriptor* kinds = v1::Kind_descriptor();
  ASSERT_EQ(kinds->value_count(), kKindCount + 1);  // + KIND_UNSPECIFIED
  for (int i = 0; i < kinds->value_count(); ++i) {
    int number = kinds->value(i)->number();
    if (number == 0) continue;
    bool found = false;
    for (Kind kind : kAllKinds) found |= static_cast<int>(kind) == number;
    EXPECT_TRUE(found) << kinds->value(i)->name();
  }
}

TEST(KindsTest, NamesAreTheHyphenatedOnesOfTheTable) {
  EXPECT_STREQ(KindName(Kind::kHeap), "heap");
  EXPECT_STREQ(KindName(Kind::kMmapAnon), "mmap-anon");
  EXPECT_STREQ(KindName(Kind::kGpuDriverHost), "gpu-driver-host");
  EXPECT_STREQ(KindName(Kind::kCudaManaged), "cuda-managed");
  EXPECT_STREQ(KindName(static_cast<Kind>(77)), "unspecified");
  for (Kind kind : kAllKinds) EXPECT_STRNE(KindName(kind), "unspecified");
}

TEST(KindsTest, KindIndexIsDenseAndDistinct) {
  for (int i = 0; i < kKindCount; ++i) EXPECT_EQ(KindIndex(kAllKinds[i]), i);
}

TEST(KindsTest, TriggerValuesMatchTheProto) {
  EXPECT_EQ(static_cast<int>(Trigger::kExit), v1::TRIGGER_EXIT);
  EXPECT_EQ(static_cast<int>(Trigger::kSignal), v1::TRIGGER_SIGNAL);
  EXPECT_EQ(static_cast<int>(Trigger::kApi), v1::TRIGGER_API);
  EXPECT_EQ(static_cast<int>(Trigger::kControl), v1::TRIGGER_CONTROL);
  EXPECT_EQ(static_cast<int>(Trigger::kEveryNRequests), v1::TRIGGER_EVERY_N_REQUESTS);
  EXPECT_EQ(static_cast<int>(Trigger::kInterval), v1::TRIGGER_INTERVAL);
}

}  // namespace
}  // namespace retain::shim
