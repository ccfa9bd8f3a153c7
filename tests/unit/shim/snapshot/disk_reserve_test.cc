// disk_reserve: the reserve a snapshot leaves free, and the check of a real
// filesystem against it.
#include "snapshot/disk_reserve.h"

#include <sys/statvfs.h>

#include <string>

#include "gtest/gtest.h"

namespace retain::shim {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(DiskReserveTest, TheDefaultIsFivePercentWithinSixtyFourMiBAndOneGiB) {
  EXPECT_EQ(ReserveBytes(256 * 1024, kAutoMinFree), 64 * kMiB);  // more than the filesystem
  EXPECT_EQ(ReserveBytes(1 * kGiB, kAutoMinFree), 64 * kMiB);
  EXPECT_EQ(ReserveBytes(10 * kGiB, kAutoMinFree), 512 * kMiB);
  EXPECT_EQ(ReserveBytes(100 * kGiB, kAutoMinFree), 1 * kGiB);
  EXPECT_EQ(ReserveBytes(4096 * kGiB, kAutoMinFree), 1 * kGiB);
}

TEST(DiskReserveTest, AConfiguredReserveIsTakenAsItIs) {
  EXPECT_EQ(ReserveBytes(10 * kGiB, 0), 0u);
  EXPECT_EQ(ReserveBytes(10 * kGiB, 3 * kGiB), 3 * kGiB);
  EXPECT_EQ(ReserveBytes(kMiB, 5 * kMiB), 5 * kMiB);
}

TEST(DiskReserveTest, TheCheckReadsTheRealFilesystem) {
  struct statvfs fs;
  ASSERT_EQ(statvfs("/tmp", &fs), 0);
  const uint64_t available = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  ASSERT_GT(available, 2 * kMiB) << "the test needs some room in /tmp";
  char why[192] = "";
  EXPECT_TRUE(RoomForSnapshot("/tmp", kMiB, 0, why, sizeof(why)));
  EXPECT_TRUE(RoomForSnapshot("/tmp", kMiB, available / 4, why, sizeof(why)));
  EXPECT_FALSE(RoomForSnapshot("/tmp", kMiB, available + kGiB, why, sizeof(why)));
  EXPECT_NE(std::string(why).find("RETAIN_MIN_FREE"), std::string::npos) << why;
  // The snapshot's own size counts: a reserve that would fit alone does not
  // fit with a snapshot larger than what is left above it.
  EXPECT_FALSE(RoomForSnapshot("/tmp", available, available / 2, why, sizeof(why)));
  // A directory whose filesystem cannot be asked: the write is left to fail
  // (or not) on its own.
  EXPECT_TRUE(RoomForSnapshot("/nonexistent/retain", kMiB, kGiB, why, sizeof(why)));
}

}  // namespace
}  // namespace retain::shim
