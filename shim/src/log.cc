// log: see log.h. vsnprintf with a stack buffer does not allocate for the
// plain %s/%d/%zu/%lu conversions the shim uses.
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>

namespace retain::shim {
namespace {

std::atomic<bool> g_diagnostics;

void WriteLine(const char* format, va_list args) {
  int saved = errno;
  char line[512] = "retain: ";
  constexpr int kPrefix = 8;
  int n = vsnprintf(line + kPrefix, sizeof(line) - kPrefix - 1, format, args);
  if (n < 0) n = 0;
  int length = kPrefix + (n < static_cast<int>(sizeof(line)) - kPrefix - 1
                              ? n
                              : static_cast<int>(sizeof(line)) - kPrefix - 2);
  line[length++] = '\n';
  for (int done = 0; done < length;) {
    ssize_t w = write(2, line + done, length - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += static_cast<int>(w);
  }
  errno = saved;
}

}  // namespace

void SetDiagnosticsEnabled(bool enabled) { g_diagnostics.store(enabled); }

void LogWarning(const char* format, ...) {
  va_list args;
  va_start(args, format);
  WriteLine(format, args);
  va_end(args);
}

void LogDiagnostic(const char* format, ...) {
  if (!g_diagnostics.load(std::memory_order_relaxed)) return;
  va_list args;
  va_start(args, format);
  WriteLine(format, args);
  va_end(args);
}

}  // namespace retain::shim
