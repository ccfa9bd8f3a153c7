// log: see base/log.h. vsnprintf with a stack buffer does not allocate for the
// plain %s/%d/%zu/%lu conversions the shim uses.
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "base/files.h"

namespace retain::shim {
namespace {

constexpr char kReportedVariable[] = "RETAIN_CONFIG_REPORTED";

std::atomic<bool> g_enabled;
char g_path[1024];  // empty: stderr
bool g_printed_config_error;

int FormatLine(char (&line)[512], const char* format, va_list args) {
  constexpr int kPrefix = 8;
  memcpy(line, "retain: ", kPrefix);
  int n = vsnprintf(line + kPrefix, sizeof(line) - kPrefix - 1, format, args);
  if (n < 0) n = 0;
  int length = kPrefix + (n < static_cast<int>(sizeof(line)) - kPrefix - 1
                              ? n
                              : static_cast<int>(sizeof(line)) - kPrefix - 2);
  line[length++] = '\n';
  return length;
}

void WriteToStderr(const char* line, int length) {
  WriteAll([](const char* p, size_t left) -> ssize_t { return syscall(SYS_write, 2, p, left); },
           line, static_cast<size_t>(length));
}

void WriteToLog(const char* line, int length) {
  if (g_path[0] == '\0') return WriteToStderr(line, length);
  int file = OpenShimFile(g_path, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (file < 0) return;
  WriteAllToShimFile(file, line, static_cast<size_t>(length));
  CloseShimFile(file);
}

// RETAIN_LOG's line: when logging is on, to its file or stderr.
void LogToDestination(const char* format, va_list args) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  int saved = errno;
  char line[512];
  const int length = FormatLine(line, format, args);
  WriteToLog(line, length);
  errno = saved;
}

}  // namespace

void SetLogDestination(bool enabled, const char* path) {
  snprintf(g_path, sizeof(g_path), "%s", path != nullptr ? path : "");
  g_enabled.store(enabled);
}

void LogConfigError(const char* format, ...) {
  int saved = errno;
  char line[512];
  va_list args;
  va_start(args, format);
  int length = FormatLine(line, format, args);
  va_end(args);
  const char* reported = getenv(kReportedVariable);
  if (reported == nullptr || *reported == '\0') {
    WriteToStderr(line, length);
    g_printed_config_error = true;
  }
  if (g_enabled.load(std::memory_order_relaxed) && g_path[0] != '\0') WriteToLog(line, length);
  errno = saved;
}

void LogWarning(const char* format, ...) {
  va_list args;
  va_start(args, format);
  LogToDestination(format, args);
  va_end(args);
}

// The same destination and gate as a warning: two names so call sites say
// which they mean (a problem, or a diagnostic such as a write's timing).
void LogDiagnostic(const char* format, ...) {
  va_list args;
  va_start(args, format);
  LogToDestination(format, args);
  va_end(args);
}

void FinishConfigReport() {
  if (g_printed_config_error) setenv(kReportedVariable, "1", 0);
}

}  // namespace retain::shim
