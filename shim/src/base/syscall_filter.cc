// syscall_filter: see base/syscall_filter.h.
#include "base/syscall_filter.h"

#include <errno.h>
#include <string.h>

#include "base/files.h"

namespace retain::shim {

std::atomic<int> g_filter_level;

namespace {

// What the first reading of the status said.
enum : int { kStartUnknown, kStartFree, kStartFiltered };
std::atomic<int> g_status_at_start{kStartUnknown};

}  // namespace

void NoteSyscallFilter(FilterLevel level) {
  const int wanted = static_cast<int>(level);
  int current = g_filter_level.load(std::memory_order_relaxed);
  while (current < wanted &&
         !g_filter_level.compare_exchange_weak(current, wanted, std::memory_order_relaxed)) {
  }
}

bool StatusShowsSeccomp(const char* status_text) {
  const char* line = strstr(status_text, "\nSeccomp:");
  if (line == nullptr) return false;
  for (const char* p = line + 9; *p != '\0' && *p != '\n'; ++p) {
    if (*p >= '1' && *p <= '9') return true;
  }
  return false;
}

bool ProcHiddenError(int error) {
  return error == ENOENT || error == EACCES || error == EPERM || error == ENOSYS;
}

void NoteSyscallFilterFromStatus(bool read, int open_error, const char* status_text) {
  if (!read) {
    if (ProcHiddenError(open_error)) NoteSyscallFilter(FilterLevel::kSandboxed);
    return;
  }
  const bool filtered = StatusShowsSeccomp(status_text);
  int expected = kStartUnknown;
  g_status_at_start.compare_exchange_strong(expected, filtered ? kStartFiltered : kStartFree);
  if (!filtered) return;
  NoteSyscallFilter(g_status_at_start.load() == kStartFree ? FilterLevel::kSandboxed
                                                           : FilterLevel::kInherited);
}

void CheckSyscallFilter() {
  char text[4096];
  int open_error = 0;
  const bool read = ReadSmallFile("/proc/self/status", text, sizeof(text), &open_error) > 0;
  NoteSyscallFilterFromStatus(read, open_error, text);
}

}  // namespace retain::shim
