// process_info: see base/process_info.h.
#include "base/process_info.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/files.h"
#include "base/large_static.h"

namespace retain::shim {
namespace {

RETAIN_LARGE_STATIC char g_exe_path[4096];
const char* g_exe_base = g_exe_path;
uint32_t g_pid;
uint32_t g_forked_from_pid;
// 0 until read: at the first snapshot (ProcessStartTicks), not at start and
// in every fork child (/proc/self/stat is ~130 us here, and a process that
// writes no snapshot, a wrapper that execs or a short fork child, never
// needs it). Atomic builtins.
uint64_t g_start_ticks;
uint64_t g_start_unix_ns;
uint64_t g_start_coarse_ns;
uint64_t g_start_precise_ns;

uint64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Field 22 of /proc/self/stat (starttime), after the parenthesised command
// name, which may itself contain spaces and parentheses.
uint64_t ReadStartTicks() {
  char buffer[1024];
  ssize_t length = ReadSmallFile("/proc/self/stat", buffer, sizeof(buffer));
  if (length <= 0) return 0;
  const char* p = strrchr(buffer, ')');
  if (p == nullptr) return 0;
  ++p;
  // After ')' come fields 3.. separated by single spaces; starttime is 22.
  for (int field = 2; field < 22 && *p != '\0'; ++p) {
    if (*p == ' ') ++field;
  }
  uint64_t value = 0;
  for (; *p >= '0' && *p <= '9'; ++p) value = value * 10 + static_cast<uint64_t>(*p - '0');
  return value;
}

void ReadIdentity() {
  g_pid = static_cast<uint32_t>(getpid());
  __atomic_store_n(&g_start_ticks, 0, __ATOMIC_RELAXED);
}

}  // namespace

void InitProcessInfo() {
  ssize_t length = readlink("/proc/self/exe", g_exe_path, sizeof(g_exe_path) - 1);
  g_exe_path[length > 0 ? length : 0] = '\0';
  const char* slash = strrchr(g_exe_path, '/');
  g_exe_base = slash == nullptr ? g_exe_path : slash + 1;
  g_start_unix_ns = ClockNs(CLOCK_REALTIME);
  g_start_coarse_ns = ClockNs(CLOCK_MONOTONIC_COARSE);
  g_start_precise_ns = ClockNs(CLOCK_MONOTONIC);
  ReadIdentity();
}

// The clocks keep the parent's origin: the child inherits the parent's
// records, whose birth times are measured from it.
void ResetProcessInfoInChild() {
  g_forked_from_pid = g_pid;
  ReadIdentity();
}

const char* ExePath() { return g_exe_path; }
const char* ExeBaseName() { return *g_exe_base != '\0' ? g_exe_base : "unknown"; }
uint32_t Pid() { return g_pid; }
uint32_t ForkedFromPid() { return g_forked_from_pid; }
uint64_t ProcessStartTicks() {
  uint64_t ticks = __atomic_load_n(&g_start_ticks, __ATOMIC_RELAXED);
  if (ticks == 0) {
    ticks = ReadStartTicks();  // the same for every reader: no lock needed
    __atomic_store_n(&g_start_ticks, ticks, __ATOMIC_RELAXED);
  }
  return ticks;
}
uint64_t ShimStartUnixNs() { return g_start_unix_ns; }

uint64_t MicrosSinceStart() { return (ClockNs(CLOCK_MONOTONIC_COARSE) - g_start_coarse_ns) / 1000; }

uint64_t PreciseMicrosSinceStart() {
  return (ClockNs(CLOCK_MONOTONIC) - g_start_precise_ns) / 1000;
}

uint64_t NowUnixNs() { return ClockNs(CLOCK_REALTIME); }

}  // namespace retain::shim
