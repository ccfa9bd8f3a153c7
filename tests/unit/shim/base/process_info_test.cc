// process_info: the start time is read when first asked for, and a fork
// child reads its own rather than keeping its parent's.
#include "base/process_info.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace retain::shim {
namespace {

// Field 22 of /proc/self/stat, parsed here independently of the shim.
uint64_t StartTicksFromProc() {
  std::ifstream file("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));  // field 3 on
  std::string field;
  for (int number = 3; number <= 22; ++number) fields >> field;
  return std::stoull(field);
}

TEST(ProcessInfoTest, AForkChildReadsItsOwnStartTime) {
  InitProcessInfo();
  const uint64_t parent = ProcessStartTicks();
  EXPECT_EQ(parent, StartTicksFromProc());
  // Past the clock's tick (10 ms at most), so the child's start time
  // differs from this process's.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ResetProcessInfoInChild();  // as the shim's fork handler does
    const uint64_t own = StartTicksFromProc();
    _exit(ProcessStartTicks() == own && own != parent ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's start time is not its own";
  EXPECT_EQ(ProcessStartTicks(), parent);
  EXPECT_EQ(ForkedFromPid(), 0u);
}

}  // namespace
}  // namespace retain::shim
