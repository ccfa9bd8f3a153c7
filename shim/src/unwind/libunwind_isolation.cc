// libunwind_isolation: see unwind/libunwind_isolation.h.
#include "unwind/libunwind_isolation.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>

#include "base/syscall_filter.h"
#include "unwind/import_redirect.h"

namespace retain::shim {
namespace {

// The two ends of libunwind's validation "pipe": negative, so never a
// descriptor, and not -1, which libunwind reads as "no pipe".
constexpr int kReadEnd = -0x5245;
constexpr int kWriteEnd = -0x5246;

using ReadFn = ssize_t (*)(int, void*, size_t);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using CloseFn = int (*)(int);
using SyscallFn = long (*)(long, ...);
using MincoreFn = int (*)(void*, size_t, unsigned char*);
using MsyncFn = int (*)(void*, size_t, int);

void* g_original_read;
void* g_original_write;
void* g_original_close;
void* g_original_syscall;
void* g_original_pipe;
void* g_original_pipe2;
void* g_original_mincore;
void* g_original_msync;
std::atomic<uint64_t> g_validations;

// True when `size` bytes at `address` can be read: the kernel copies them
// (process_vm_readv on this very process) or reports EFAULT, never a fault.
bool Readable(const void* address, size_t size) {
  // In a sandbox, process_vm_readv may be what kills the process
  // (base/syscall_filter.h): libunwind's reads are refused instead, and its
  // stacks end at the first frame that needs one.
  if (AvoidProcessVmReadv()) return false;
  char sink[64];
  const char* cursor = static_cast<const char*>(address);
  while (size > 0) {
    const size_t chunk = size < sizeof(sink) ? size : sizeof(sink);
    iovec local{sink, chunk};
    iovec remote{const_cast<char*>(cursor), chunk};
    long copied = syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0);
    if (copied != static_cast<long>(chunk)) return false;
    cursor += chunk;
    size -= chunk;
  }
  return true;
}

int UnwinderPipe(int fds[2]) {
  fds[0] = kReadEnd;
  fds[1] = kWriteEnd;
  return 0;
}

int UnwinderPipe2(int fds[2], int) { return UnwinderPipe(fds); }

// The pipe is always empty and never broken: libunwind goes on to write.
ssize_t UnwinderRead(int fd, void* buffer, size_t size) {
  if (fd == kReadEnd) {
    errno = EAGAIN;
    return -1;
  }
  if (g_original_read != nullptr)
    return reinterpret_cast<ReadFn>(g_original_read)(fd, buffer, size);
  return syscall(SYS_read, fd, buffer, size);
}

// write(2) of unreadable memory fails with EFAULT: the answer libunwind wants.
ssize_t ValidateByWrite(const void* buffer, size_t size) {
  g_validations.fetch_add(1, std::memory_order_relaxed);
  if (Readable(buffer, size)) return static_cast<ssize_t>(size);
  errno = EFAULT;
  return -1;
}

ssize_t UnwinderWrite(int fd, const void* buffer, size_t size) {
  if (fd == kWriteEnd) return ValidateByWrite(buffer, size);
  if (g_original_write != nullptr) {
    return reinterpret_cast<WriteFn>(g_original_write)(fd, buffer, size);
  }
  return syscall(SYS_write, fd, buffer, size);
}

int UnwinderClose(int fd) {
  if (fd == kReadEnd || fd == kWriteEnd) return 0;
  if (g_original_close != nullptr) return reinterpret_cast<CloseFn>(g_original_close)(fd);
  return static_cast<int>(syscall(SYS_close, fd));
}

// Some builds (Debian's 1.6.2) write with syscall(SYS_write, ...).
long UnwinderSyscall(long number, ...) {
  va_list list;
  va_start(list, number);
  long arguments[6];
  for (long& argument : arguments) argument = va_arg(list, long);
  va_end(list);
  if (number == SYS_write && static_cast<int>(arguments[0]) == kWriteEnd) {
    return ValidateByWrite(reinterpret_cast<const void*>(arguments[1]),
                           static_cast<size_t>(arguments[2]));
  }
  if (number == SYS_close &&
      (static_cast<int>(arguments[0]) == kReadEnd || static_cast<int>(arguments[0]) == kWriteEnd)) {
    return 0;
  }
  if (number == SYS_read && static_cast<int>(arguments[0]) == kReadEnd) {
    errno = EAGAIN;
    return -1;
  }
  auto real =
      g_original_syscall != nullptr ? reinterpret_cast<SyscallFn>(g_original_syscall) : &syscall;
  return real(number, arguments[0], arguments[1], arguments[2], arguments[3], arguments[4],
              arguments[5]);
}

// libunwind also validates with mincore (Debian's 1.6.2 first) and msync,
// which a seccomp filter may kill the process for: under one, the pages are
// checked as the pipe's writes are (Readable), and reported all resident.
// Whether each of the `length` bytes' pages at page-aligned `first` can be
// read: one byte of each tells. Counts as one validation.
bool PagesReadable(uintptr_t first, size_t length, size_t page) {
  g_validations.fetch_add(1, std::memory_order_relaxed);
  for (uintptr_t at = first; at < first + length; at += page) {
    if (!Readable(reinterpret_cast<const void*>(at), 1)) return false;
  }
  return true;
}

int UnwinderMincore(void* address, size_t length, unsigned char* vector) {
  if (AvoidMincore()) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const auto first = reinterpret_cast<uintptr_t>(address);
    if ((first & (page - 1)) != 0) {
      errno = EINVAL;  // as mincore
      return -1;
    }
    if (!PagesReadable(first, length, page)) {
      errno = ENOMEM;
      return -1;
    }
    memset(vector, 1, (length + page - 1) / page);
    return 0;
  }
  if (g_original_mincore != nullptr) {
    return reinterpret_cast<MincoreFn>(g_original_mincore)(address, length, vector);
  }
  return static_cast<int>(syscall(SYS_mincore, address, length, vector));
}

int UnwinderMsync(void* address, size_t length, int flags) {
  if (AvoidMincore()) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    if (PagesReadable(reinterpret_cast<uintptr_t>(address), length, page)) return 0;
    errno = ENOMEM;
    return -1;
  }
  if (g_original_msync != nullptr) {
    return reinterpret_cast<MsyncFn>(g_original_msync)(address, length, flags);
  }
  return static_cast<int>(syscall(SYS_msync, address, length, flags));
}

}  // namespace

bool IsolateLibunwind(void* libunwind_handle) {
  ImportRedirect redirects[] = {
      {"pipe", reinterpret_cast<void*>(&UnwinderPipe), &g_original_pipe, 0},
      {"pipe2", reinterpret_cast<void*>(&UnwinderPipe2), &g_original_pipe2, 0},
      {"read", reinterpret_cast<void*>(&UnwinderRead), &g_original_read, 0},
      {"write", reinterpret_cast<void*>(&UnwinderWrite), &g_original_write, 0},
      {"close", reinterpret_cast<void*>(&UnwinderClose), &g_original_close, 0},
      {"syscall", reinterpret_cast<void*>(&UnwinderSyscall), &g_original_syscall, 0},
      {"mincore", reinterpret_cast<void*>(&UnwinderMincore), &g_original_mincore, 0},
      {"msync", reinterpret_cast<void*>(&UnwinderMsync), &g_original_msync, 0},
  };
  // Every slot or none: a half-rewritten libunwind could create a real pipe
  // and then treat it as the fake one, or the reverse.
  return RedirectImports(libunwind_handle, redirects, sizeof(redirects) / sizeof(redirects[0]));
}

uint64_t LibunwindValidations() { return g_validations.load(std::memory_order_relaxed); }

}  // namespace retain::shim
