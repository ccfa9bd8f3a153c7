// Tests for tools/lib/byte_size: the one byte formatter every tool output
// uses, at the edges where units switch and signs flip.
#include "tools/lib/byte_size.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace retain::tool {
namespace {

TEST(HumanBytesTest, UsesBinaryUnitsWithOneDecimal) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.0 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(126ull << 20), "126.0 MiB");
  EXPECT_EQ(HumanBytes((1ull << 20) - 1), "1.0 MiB");  // not "1024.0 KiB"
  EXPECT_EQ(HumanBytes(8ull << 30), "8.0 GiB");
  EXPECT_EQ(HumanBytes(UINT64_MAX), "16.0 EiB");
}

TEST(HumanBytesTest, SwitchesUnitWhereRoundingWouldReach1024) {
  // 1023.95 KiB is 1048524.8 bytes: below it one decimal still reads 1023.9.
  EXPECT_EQ(HumanBytes(1048524), "1023.9 KiB");
  EXPECT_EQ(HumanBytes(1048525), "1.0 MiB");
  EXPECT_EQ(HumanBytes((1ull << 30) - 1), "1.0 GiB");
  EXPECT_EQ(HumanBytes((1ull << 31) - 1), "2.0 GiB");  // the largest --max-snapshot-size
  EXPECT_EQ(HumanBytes(1ull << 40), "1.0 TiB");
  EXPECT_EQ(HumanBytes(1ull << 50), "1.0 PiB");
  EXPECT_EQ(HumanBytes(1ull << 60), "1.0 EiB");
}

TEST(SignedBytesTest, SignsTheMagnitude) {
  EXPECT_EQ(SignedBytes(0), "0 B");
  EXPECT_EQ(SignedBytes(1), "+1 B");
  EXPECT_EQ(SignedBytes(-300), "-300 B");
  EXPECT_EQ(SignedBytes(1536), "+1.5 KiB");
  EXPECT_EQ(SignedBytes(-(126ll << 20)), "-126.0 MiB");
  EXPECT_EQ(SignedBytes(std::numeric_limits<int64_t>::max()), "+8.0 EiB");
  EXPECT_EQ(SignedBytes(std::numeric_limits<int64_t>::min()), "-8.0 EiB");
}

}  // namespace
}  // namespace retain::tool
