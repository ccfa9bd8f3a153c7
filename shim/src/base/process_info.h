// process_info: facts about this process the shim reads once (at start and
// again in a fork child) so hooks and the snapshot writer never have to:
// executable path, pid, start time, clocks.
//
// Everything here is async-signal-safe after InitProcessInfo() and never
// allocates from the host heap.
#ifndef RETAIN_SHIM_SRC_BASE_PROCESS_INFO_H_
#define RETAIN_SHIM_SRC_BASE_PROCESS_INFO_H_

#include <cstdint>

namespace retain::shim {

// Reads /proc/self/exe and the pid, and starts the clocks.
void InitProcessInfo();
// In a fork child: new pid (and start time); remembers the parent's pid.
void ResetProcessInfoInChild();

const char* ExePath();      // real path of the executable
const char* ExeBaseName();  // its last component
uint32_t Pid();
uint32_t ForkedFromPid();  // 0 unless this process was forked from a traced one
// The process's start time (field 22 of /proc/self/stat), read on first
// use; 0 when it cannot be read. Not async-signal-safe (ReadSmallFile).
uint64_t ProcessStartTicks();
uint64_t ShimStartUnixNs();

// Microseconds since the shim started (in this process, or in the parent a
// fork child came from), from a coarse monotonic clock (a vDSO
// read, no system call; resolution of a few milliseconds).
uint64_t MicrosSinceStart();
// Same from the precise clock, for snapshot headers.
uint64_t PreciseMicrosSinceStart();
uint64_t NowUnixNs();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_PROCESS_INFO_H_
