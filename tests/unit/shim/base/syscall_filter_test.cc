// syscall_filter: the "Seccomp:" field of /proc/self/status as the shim
// reads it, on the texts the kernel writes, and this process's own status.
#include "base/syscall_filter.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace retain::shim {
namespace {

constexpr char kHead[] = "Name:\tserver\nUmask:\t0022\nState:\tS (sleeping)\nNoNewPrivs:\t1\n";

TEST(SyscallFilterTest, ModeZeroIsNoFilter) {
  EXPECT_FALSE(StatusShowsSeccomp((std::string(kHead) + "Seccomp:\t0\nSeccomp_filters:\t0\n"
                                                        "Speculation_Store_Bypass:\tvulnerable\n")
                                      .c_str()));
}

TEST(SyscallFilterTest, FilterAndStrictModesAreFilters) {
  EXPECT_TRUE(
      StatusShowsSeccomp((std::string(kHead) + "Seccomp:\t2\nSeccomp_filters:\t3\n").c_str()));
  EXPECT_TRUE(StatusShowsSeccomp((std::string(kHead) + "Seccomp:\t1\n").c_str()));
}

TEST(SyscallFilterTest, TheFiltersCountAloneIsNotTheMode) {
  // A kernel that lists only the count (none does today) is not read as a
  // mode: the count line must not be mistaken for "Seccomp:".
  EXPECT_FALSE(StatusShowsSeccomp((std::string(kHead) + "Seccomp_filters:\t1\n").c_str()));
}

TEST(SyscallFilterTest, KernelsWithoutTheFieldShowNoFilter) {
  EXPECT_FALSE(StatusShowsSeccomp(kHead));
  EXPECT_FALSE(StatusShowsSeccomp(""));
}

TEST(SyscallFilterTest, ThisProcessAgreesWithItsStatus) {
  std::ifstream status("/proc/self/status");
  std::stringstream text;
  text << status.rdbuf();
  const std::string whole = "\n" + text.str();
  const size_t at = whole.find("\nSeccomp:");
  ASSERT_NE(at, std::string::npos);
  const bool filtered = whole.find_first_of("12", at + 9) == whole.find_first_not_of(" \t", at + 9);
  EXPECT_EQ(StatusShowsSeccomp(whole.c_str()), filtered);
}

}  // namespace
}  // namespace retain::shim
