// The private heap (base/hook_table.h): one owner at a time, zeroed aligned
// blocks inside the bootstrap range, rewound when the last block is given
// back, refused while a block of an earlier scope is out, bounded.
#include <errno.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>

#include "base/hook_table.h"
#include "base/thread_state.h"

namespace retain::shim {
namespace {

TEST(PrivateHeapTest, ServesZeroedAlignedBlocksAndStartsOverWhenAllAreBack) {
  {
    PrivateHeapScope scope;
    ASSERT_TRUE(scope.ok());
    EXPECT_EQ(g_thread.private_heap, 1u);
    auto* a = static_cast<unsigned char*>(PrivateHeapAllocate(500, 16));
    auto* b = static_cast<unsigned char*>(PrivateHeapAllocate(40, 64));
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(IsBootstrapMemory(a));
    EXPECT_TRUE(IsBootstrapMemory(b + 39));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 16, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
    EXPECT_GE(b, a + 500) << "blocks never overlap";
    EXPECT_EQ(BootstrapAllocationSize(a), 500u);
    for (int i = 0; i < 500; ++i) ASSERT_EQ(a[i], 0) << i;
    memset(a, 0xab, 500);
    EXPECT_GT(PrivateHeapBytesInUse(), 540u);
    ReleaseBootstrap(b);
    ReleaseBootstrap(a);
    EXPECT_EQ(PrivateHeapBytesInUse(), 0u);
    // Rewound: the next block is where the first was, zeroed again.
    auto* again = static_cast<unsigned char*>(PrivateHeapAllocate(500, 16));
    EXPECT_EQ(again, a);
    for (int i = 0; i < 500; ++i) ASSERT_EQ(again[i], 0) << i;
    ReleaseBootstrap(again);
  }
  EXPECT_EQ(g_thread.private_heap, 0u);
  EXPECT_GT(PrivateHeapPeakBytes(), 540u);
}

TEST(PrivateHeapTest, OneOwnerAtATime) {
  PrivateHeapScope first;
  ASSERT_TRUE(first.ok());
  bool other_ok = true;
  std::thread([&] {
    PrivateHeapScope second;
    other_ok = second.ok();
  }).join();
  EXPECT_FALSE(other_ok);
  PrivateHeapScope nested;
  EXPECT_FALSE(nested.ok());
  EXPECT_EQ(g_thread.private_heap, 1u) << "a refused scope redirects nothing";
}

TEST(PrivateHeapTest, ABlockNeverGivenBackRefusesTheNextScope) {
  void* kept = nullptr;
  {
    PrivateHeapScope scope;
    ASSERT_TRUE(scope.ok());
    kept = PrivateHeapAllocate(100, 16);
    ASSERT_NE(kept, nullptr);
  }
  {
    PrivateHeapScope scope;
    EXPECT_FALSE(scope.ok()) << "it would grow with every call";
  }
  ReleaseBootstrap(kept);
  PrivateHeapScope scope;
  EXPECT_TRUE(scope.ok());
}

TEST(PrivateHeapTest, FullHeapFailsWithEnomem) {
  PrivateHeapScope scope;
  ASSERT_TRUE(scope.ok());
  errno = 0;
  EXPECT_EQ(PrivateHeapAllocate(size_t{1} << 20, 16), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(PrivateHeapAllocate(SIZE_MAX, 16), nullptr);
  void* small = PrivateHeapAllocate(1000, 16);
  EXPECT_NE(small, nullptr) << "a refused request leaves the heap as it was";
  ReleaseBootstrap(small);
}

TEST(PrivateHeapTest, BootstrapBlocksAreNeverReleased) {
  void* block = BootstrapAllocate(64, 16);
  ASSERT_NE(block, nullptr);
  ReleaseBootstrap(block);  // a no-op: the bootstrap buffer is never reused
  PrivateHeapScope scope;
  EXPECT_TRUE(scope.ok());
  EXPECT_EQ(PrivateHeapBytesInUse(), 0u);
}

}  // namespace
}  // namespace retain::shim
