// syscall_filter: whether the process may run under a seccomp filter that
// kills it (or traps into a handler that crashes it on purpose) for a
// system call the filter does not list. The shim makes system calls on the
// host's behalf that the host itself may never make; under a filter it
// gives up those hosts rarely make, and loses only precision:
//  - mincore (residency; libunwind's validation of its reads): outside
//    systemd's @system-service set, whose default action kills. Under any
//    filter, residency comes from /proc/self/pagemap instead (mapped pages,
//    what RSS counts) and libunwind's reads are checked as its other ones;
//  - process_vm_readv (how those reads are checked; the Go walker's reads):
//    in @system-service and Docker's default profile, but not in a
//    browser's sandbox (Chromium's renderers died of it). Under a sandbox
//    the reads are refused: such stacks end at the first frame that needs
//    one.
//
// Seen as: "Seccomp:" not 0 in /proc/self/status, at start and at every
// snapshot: a filter from the service manager, the container runtime or
// the parent (FilterInherited). A sandbox (Sandboxed): the program asking
// for no_new_privs or a filter itself (prctl: hooks/prctl_hook.cc), or
// /proc/self hidden from it (an empty root, a broker). Never cleared: a
// filter is for life. Reads are async-signal-safe.
#ifndef RETAIN_SHIM_SRC_BASE_SYSCALL_FILTER_H_
#define RETAIN_SHIM_SRC_BASE_SYSCALL_FILTER_H_

#include <atomic>

namespace retain::shim {

enum class FilterLevel : int { kNone = 0, kInherited = 1, kSandboxed = 2 };

extern std::atomic<int> g_filter_level;

inline bool AvoidMincore() {
  return g_filter_level.load(std::memory_order_relaxed) >=
         static_cast<int>(FilterLevel::kInherited);
}
inline bool AvoidProcessVmReadv() {
  return g_filter_level.load(std::memory_order_relaxed) >=
         static_cast<int>(FilterLevel::kSandboxed);
}

// Raises the level to at least `level`.
void NoteSyscallFilter(FilterLevel level);

// Reads /proc/self/status: notes kInherited when its "Seccomp:" field is not
// 0 (kSandboxed when it was 0 at the first check: the program installed the
// filter itself, by a raw system call the prctl hook did not see), and
// kSandboxed when the file is hidden (ENOENT, EACCES, EPERM: not a full
// descriptor table). Not from a signal handler. The first call is the
// constructor's.
void CheckSyscallFilter();

// The same on status text already read (`read` false when it could not
// be, with the open's errno).
void NoteSyscallFilterFromStatus(bool read, int open_error, const char* status_text);

// Whether an errno from opening a /proc/self file says /proc is hidden from
// the process, rather than that it is out of descriptors or memory.
bool ProcHiddenError(int error);

// Whether "Seccomp:" in /proc/self/status text says a filter or strict
// mode is on; false when the field is 0 or absent (kernels without it).
bool StatusShowsSeccomp(const char* status_text);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_SYSCALL_FILTER_H_
