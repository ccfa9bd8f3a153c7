// socket_hooks: accepted sockets and the bytes read from and written to
// them, for HTTP request tagging (net/socket_table.h). See record/hook_shape.h for the
// hook shape. The host's bytes are only inspected, after the real call
// returned; its results and errno are passed back untouched. Sockets the
// shim does not follow cost one table lookup.
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/own_fds.h"
#include "hooks/interruptible_call.h"
#include "net/socket_table.h"
#include "record/hook_shape.h"

using namespace retain::shim;

namespace retain::shim {
namespace {

bool Following(int fd) { return g_thread.busy == 0 && IsTrackedSocket(fd); }

void Inbound(int fd, const void* data, ssize_t result) {
  if (result <= 0 || !Following(fd)) return;
  int saved = errno;
  BusyScope scope;
  SocketInbound(fd, static_cast<const char*>(data), static_cast<size_t>(result));
  errno = saved;
}

void Outbound(int fd, const void* data, ssize_t result) {
  if (result <= 0 || !Following(fd)) return;
  int saved = errno;
  BusyScope scope;
  SocketOutbound(fd, static_cast<const char*>(data), static_cast<size_t>(result));
  errno = saved;
}

void Accepted(int fd) {
  if (fd < 0 || g_thread.busy != 0) return;
  CountHostAccept();
  int saved = errno;
  BusyScope scope;
  TrackAcceptedSocket(fd);
  errno = saved;
}

}  // namespace
}  // namespace retain::shim

RETAIN_EXPORT int accept(int fd, struct sockaddr* address, socklen_t* length) {
  if (!HookReady()) return static_cast<int>(syscall(SYS_accept, fd, address, length));
  int result = InterruptibleCall(SYS_accept, g_real.accept,
                                 [&] { return g_real.accept(fd, address, length); });
  Accepted(result);
  return result;
}

RETAIN_EXPORT int accept4(int fd, struct sockaddr* address, socklen_t* length, int flags) {
  if (!HookReady()) return static_cast<int>(syscall(SYS_accept4, fd, address, length, flags));
  int result = InterruptibleCall(SYS_accept4, g_real.accept4,
                                 [&] { return g_real.accept4(fd, address, length, flags); });
  Accepted(result);
  return result;
}

RETAIN_EXPORT ssize_t read(int fd, void* buffer, size_t size) {
  if (!HookReady()) return syscall(SYS_read, fd, buffer, size);
  ssize_t result =
      InterruptibleCall(SYS_read, g_real.read, [&] { return g_real.read(fd, buffer, size); });
  Inbound(fd, buffer, result);
  return result;
}

RETAIN_EXPORT ssize_t recv(int fd, void* buffer, size_t size, int flags) {
  if (!HookReady()) return syscall(SYS_recvfrom, fd, buffer, size, flags, nullptr, nullptr);
  // glibc's recv enters recvfrom
  ssize_t result = InterruptibleCall(SYS_recvfrom, g_real.recv,
                                     [&] { return g_real.recv(fd, buffer, size, flags); });
  if ((flags & MSG_PEEK) == 0) Inbound(fd, buffer, result);  // peeked bytes come again
  return result;
}

RETAIN_EXPORT ssize_t recvfrom(int fd, void* buffer, size_t size, int flags,
                               struct sockaddr* address, socklen_t* length) {
  if (!HookReady()) return syscall(SYS_recvfrom, fd, buffer, size, flags, address, length);
  ssize_t result = InterruptibleCall(SYS_recvfrom, g_real.recvfrom, [&] {
    return g_real.recvfrom(fd, buffer, size, flags, address, length);
  });
  if ((flags & MSG_PEEK) == 0) Inbound(fd, buffer, result);
  return result;
}

// _FORTIFY_SOURCE's forms (base/hook_table.h): a length past the buffer
// ends the program in glibc's __chk_fail, as without the shim; any other
// call is the plain one's, hooked as it is.
extern "C" [[noreturn]] void __chk_fail(void);

RETAIN_EXPORT ssize_t __read_chk(int fd, void* buffer, size_t size, size_t buffer_size) {
  if (size > buffer_size) __chk_fail();
  return read(fd, buffer, size);
}

RETAIN_EXPORT ssize_t __recv_chk(int fd, void* buffer, size_t size, size_t buffer_size, int flags) {
  if (size > buffer_size) __chk_fail();
  return recv(fd, buffer, size, flags);
}

RETAIN_EXPORT ssize_t __recvfrom_chk(int fd, void* buffer, size_t size, size_t buffer_size,
                                     int flags, struct sockaddr* address, socklen_t* length) {
  if (size > buffer_size) __chk_fail();
  return recvfrom(fd, buffer, size, flags, address, length);
}

RETAIN_EXPORT ssize_t recvmsg(int fd, struct msghdr* message, int flags) {
  if (!HookReady()) return syscall(SYS_recvmsg, fd, message, flags);
  ssize_t result = InterruptibleCall(SYS_recvmsg, g_real.recvmsg,
                                     [&] { return g_real.recvmsg(fd, message, flags); });
  if (result > 0 && (flags & MSG_PEEK) == 0 && Following(fd)) {
    int saved = errno;
    BusyScope scope;
    SocketInboundVector(fd, message->msg_iov, static_cast<int>(message->msg_iovlen),
                        static_cast<size_t>(result));
    errno = saved;
  }
  return result;
}

RETAIN_EXPORT ssize_t readv(int fd, const struct iovec* iov, int count) {
  if (!HookReady()) return syscall(SYS_readv, fd, iov, count);
  ssize_t result =
      InterruptibleCall(SYS_readv, g_real.readv, [&] { return g_real.readv(fd, iov, count); });
  if (result > 0 && Following(fd)) {
    int saved = errno;
    BusyScope scope;
    SocketInboundVector(fd, iov, count, static_cast<size_t>(result));
    errno = saved;
  }
  return result;
}

RETAIN_EXPORT ssize_t write(int fd, const void* buffer, size_t size) {
  if (!HookReady()) return syscall(SYS_write, fd, buffer, size);
  ssize_t result = g_real.write(fd, buffer, size);
  Outbound(fd, buffer, result);
  return result;
}

RETAIN_EXPORT ssize_t send(int fd, const void* buffer, size_t size, int flags) {
  if (!HookReady()) return syscall(SYS_sendto, fd, buffer, size, flags, nullptr, 0);
  ssize_t result = g_real.send(fd, buffer, size, flags);
  Outbound(fd, buffer, result);
  return result;
}

RETAIN_EXPORT ssize_t sendto(int fd, const void* buffer, size_t size, int flags,
                             const struct sockaddr* address, socklen_t length) {
  if (!HookReady()) return syscall(SYS_sendto, fd, buffer, size, flags, address, length);
  ssize_t result = g_real.sendto(fd, buffer, size, flags, address, length);
  Outbound(fd, buffer, result);
  return result;
}

RETAIN_EXPORT ssize_t sendmsg(int fd, const struct msghdr* message, int flags) {
  if (!HookReady()) return syscall(SYS_sendmsg, fd, message, flags);
  ssize_t result = g_real.sendmsg(fd, message, flags);
  if (result > 0 && Following(fd)) {
    int saved = errno;
    BusyScope scope;
    SocketOutboundVector(fd, message->msg_iov, static_cast<int>(message->msg_iovlen),
                         static_cast<size_t>(result));
    errno = saved;
  }
  return result;
}

RETAIN_EXPORT ssize_t writev(int fd, const struct iovec* iov, int count) {
  if (!HookReady()) return syscall(SYS_writev, fd, iov, count);
  ssize_t result = g_real.writev(fd, iov, count);
  if (result > 0 && Following(fd)) {
    int saved = errno;
    BusyScope scope;
    SocketOutboundVector(fd, iov, count, static_cast<size_t>(result));
    errno = saved;
  }
  return result;
}

// IsShimFd takes the registry's lock: the thread counts as inside the shim
// meanwhile, so a stop signal landing here never waits for a snapshot that
// needs that lock (snapshot/signal_chain.h).
static bool IsShimFdBusy(int fd) {
  BusyScope scope;
  return IsShimFd(fd);
}

// The connection's open requests end before the descriptor can be reused.
// A descriptor of the shim's is not the host's to close (base/own_fds.h): as
// without the shim, it is not open.
RETAIN_EXPORT int close(int fd) {
  if (!HookReady()) return static_cast<int>(syscall(SYS_close, fd));
  if (RETAIN_UNLIKELY(MaybeShimFd(fd)) && g_thread.busy == 0 && IsShimFdBusy(fd)) {
    errno = EBADF;
    return -1;
  }
  if (Following(fd)) {
    int saved = errno;
    {
      BusyScope scope;
      SocketClosed(fd);
    }
    errno = saved;
  }
  return g_real.close(fd);
}
