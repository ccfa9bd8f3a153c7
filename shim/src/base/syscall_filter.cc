// syscall_filter: see base/syscall_filter.h.
#include "base/syscall_filter.h"

#include <string.h>

#include "base/files.h"

namespace retain::shim {

std::atomic<int> g_filter_level;

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

void NoteSyscallFilterFromStatus(bool read, const char* status_text) {
  if (!read) {
    NoteSyscallFilter(FilterLevel::kSandboxed);
  } else if (StatusShowsSeccomp(status_text)) {
    NoteSyscallFilter(FilterLevel::kInherited);
  }
}

void CheckSyscallFilter() {
  char text[4096];
  const bool read = ReadSmallFile("/proc/self/status", text, sizeof(text)) > 0;
  NoteSyscallFilterFromStatus(read, text);
}

}  // namespace retain::shim
