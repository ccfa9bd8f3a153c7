// The arena's small objects: 16-byte aligned, and on request on cache lines
// of their own (what per-thread data that other threads' data must not
// share a line with is allocated by: walk memos, rings of young records).
#include "base/arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace retain::shim {
namespace {

uintptr_t Line(const void* p) { return reinterpret_cast<uintptr_t>(p) / kCacheLine; }

TEST(ArenaTest, SmallObjectsAreAlignedAndZeroed) {
  for (size_t bytes : {1u, 16u, 24u, 100u}) {
    auto* p = static_cast<unsigned char*>(ArenaAllocate(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << bytes << " bytes, byte " << i;
  }
}

// Between 16-byte objects (which leave the arena's next byte anywhere in a
// line), each object on lines of its own starts a line, and neither the
// object before nor the one after shares one of its lines.
TEST(ArenaTest, LinesOfTheirOwn) {
  for (size_t bytes : {1u, 40u, 64u, 2600u}) {
    void* before = ArenaAllocate(24);
    auto* lines = static_cast<unsigned char*>(ArenaAllocateLines(bytes));
    void* after = ArenaAllocate(24);
    ASSERT_NE(before, nullptr);
    ASSERT_NE(lines, nullptr);
    ASSERT_NE(after, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(lines) % kCacheLine, 0u) << bytes;
    EXPECT_LT(Line(static_cast<char*>(before) + 23), Line(lines)) << bytes;
    EXPECT_GT(Line(after), Line(lines + bytes - 1)) << bytes;
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(lines[i], 0) << bytes << " bytes, byte " << i;
  }
}

}  // namespace
}  // namespace retain::shim
