// fd_hooks: dup2, dup3, close_range, closefrom and fcntl, so the host's
// calls never close, replace or see a descriptor of the shim's
// (base/own_fds.h); close is in hooks/socket_hooks.cc. A call that touches
// no number in the shim's range costs one load; the host's results and
// errno are what they would be without the shim.
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

#include "base/own_fds.h"
#include "record/hook_shape.h"

using namespace retain::shim;

namespace {

// dup2 before the shim is ready (or where it never will be).
int RawDup2(int old_fd, int new_fd) {
#if defined(SYS_dup2)
  return static_cast<int>(syscall(SYS_dup2, old_fd, new_fd));
#else
  if (old_fd == new_fd) return fcntl(old_fd, F_GETFD) < 0 ? -1 : new_fd;
  return static_cast<int>(syscall(SYS_dup3, old_fd, new_fd, 0));
#endif
}

// Where libc has no close_range or closefrom (glibc before 2.34: a caller
// found the hook with dlsym), the system call.
int LibcCloseRange(unsigned first, unsigned last, int flags) {
  if (RealFunctionsReady() && g_real.close_range != nullptr) {
    return g_real.close_range(first, last, flags);
  }
  return static_cast<int>(syscall(SYS_close_range, first, last, flags));
}

}  // namespace

RETAIN_EXPORT int dup2(int old_fd, int new_fd) {
  if (!HookReady()) return RawDup2(old_fd, new_fd);
  if (RETAIN_LIKELY(!MaybeShimFd(old_fd) && !MaybeShimFd(new_fd)) || g_thread.busy != 0) {
    return g_real.dup2(old_fd, new_fd);
  }
  BusyScope busy;  // the registry's lock is held inside (see IsShimFdBusy)
  return ShimFdsDup(old_fd, new_fd, 0, false);
}

RETAIN_EXPORT int dup3(int old_fd, int new_fd, int flags) {
  if (!HookReady()) return static_cast<int>(syscall(SYS_dup3, old_fd, new_fd, flags));
  if (RETAIN_LIKELY(!MaybeShimFd(old_fd) && !MaybeShimFd(new_fd)) || g_thread.busy != 0) {
    return g_real.dup3(old_fd, new_fd, flags);
  }
  BusyScope busy;
  return ShimFdsDup(old_fd, new_fd, flags, true);
}

// fcntl and fcntl64 (the same call on 64-bit targets; a program built with
// _FILE_OFFSET_BITS=64 on a 32-bit one calls the second). Every command
// takes at most one argument, an int or a pointer: read as a pointer, as
// glibc's wrapper reads it.
template <typename RealFcntl>
int Fcntl(RealFcntl real, int fd, int command, void* argument) {
  if (RETAIN_UNLIKELY(MaybeShimFd(fd)) && HookReady() && g_thread.busy == 0) {
    BusyScope busy;
    if (IsShimFd(fd)) {
      errno = EBADF;  // the host's view: no such descriptor
      return -1;
    }
  }
  if (RETAIN_UNLIKELY(!RealFunctionsReady() || real == nullptr)) {
    return static_cast<int>(syscall(SYS_fcntl, fd, command, argument));
  }
  return real(fd, command, argument);
}

RETAIN_EXPORT int fcntl(int fd, int command, ...) {
  va_list arguments;
  va_start(arguments, command);
  void* argument = va_arg(arguments, void*);
  va_end(arguments);
  return Fcntl(RealFunctionsReady() ? g_real.fcntl : nullptr, fd, command, argument);
}

RETAIN_EXPORT int fcntl64(int fd, int command, ...) {
  va_list arguments;
  va_start(arguments, command);
  void* argument = va_arg(arguments, void*);
  va_end(arguments);
  return Fcntl(RealFunctionsReady() ? g_real.fcntl64 : nullptr, fd, command, argument);
}

RETAIN_EXPORT int close_range(unsigned int first, unsigned int last, int flags) {
  if (!HookReady() || g_thread.busy != 0 ||
      RETAIN_LIKELY(!MaybeShimFd(last > INT_MAX ? INT_MAX : static_cast<int>(last)))) {
    return LibcCloseRange(first, last, flags);
  }
  BusyScope busy;
  return ShimFdsCloseRange(first, last, flags);
}

RETAIN_EXPORT void closefrom(int low) {
  if (HookReady() && g_thread.busy == 0 &&
      RETAIN_UNLIKELY(g_shim_fd_floor.load(std::memory_order_relaxed) != INT_MAX)) {
    BusyScope busy;
    ShimFdsCloseFrom(low);
    return;
  }
  if (RealFunctionsReady() && g_real.closefrom != nullptr) {
    g_real.closefrom(low);
  } else {
    LibcCloseRange(low < 0 ? 0u : static_cast<unsigned>(low), ~0u, 0);
  }
}
