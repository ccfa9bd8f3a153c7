// own_fds: see base/own_fds.h. Raw system calls for close, accept4 and getpid:
// nothing here goes through the shim's own hooks.
#include "base/own_fds.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <span>

#include "base/hook_table.h"
#include "base/large_static.h"
#include "base/spin_lock.h"

namespace retain::shim {

std::atomic<int> g_shim_fd_floor{INT_MAX};

namespace {

struct Entry {
  bool used;
  int fd;  // -1 once lost
  dev_t dev;
  ino_t ino;
};

SpinLock g_lock;
RETAIN_LARGE_STATIC Entry g_entries[kMaxShimFds];  // guarded by g_lock
// Entries [0, g_entries_end) were ever used (Register takes the lowest
// free one): the scans stop there, so that a process touches only the
// table's pages it needs (a fork child writes none of the others).
int g_entries_end;  // guarded by g_lock

// Lock held.
std::span<Entry> UsedEntries() { return {g_entries, static_cast<size_t>(g_entries_end)}; }
int g_owner;  // the pid that holds them (0: none); guarded by g_lock
std::atomic<int> g_span{kShimFdSpan};

void RawClose(int fd) { syscall(SYS_close, fd); }

// The shim's own fcntl calls on its descriptors: not through the fcntl hook,
// which answers EBADF for them to the host (hooks/fd_hooks.cc).
int RawFcntl(int fd, int command, int argument) {
  return static_cast<int>(syscall(SYS_fcntl, fd, command, argument));
}
int RawPid() { return static_cast<int>(syscall(SYS_getpid)); }

// The entry's number, verified to still be the descriptor it was; marks it
// lost (-1) otherwise. Lock held.
int Current(Entry& entry) {
  if (entry.fd < 0) return -1;
  struct stat st;
  if (fstat(entry.fd, &st) != 0 || st.st_dev != entry.dev || st.st_ino != entry.ino) {
    entry.fd = -1;
  }
  return entry.fd;
}

// Lock held.
void UpdateFloor() {
  int floor = INT_MAX;
  for (const Entry& entry : UsedEntries()) {
    if (entry.used && entry.fd >= 0 && entry.fd < floor) floor = entry.fd;
  }
  g_shim_fd_floor.store(floor, std::memory_order_relaxed);
}

// Lock held. The entry holding `fd`, verified, or nullptr; nullptr too in a
// vfork child, whose descriptor table is its own.
Entry* FindOwn(int fd) {
  if (fd < 0 || g_owner != RawPid()) return nullptr;
  for (Entry& entry : UsedEntries()) {
    if (entry.used && entry.fd == fd) return Current(entry) >= 0 ? &entry : nullptr;
  }
  return nullptr;
}

int HighBase() {
  rlim_t top = 1024;
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < top) top = limit.rlim_cur;
  const int span = g_span.load(std::memory_order_relaxed);
  int base = top > 2 * static_cast<rlim_t>(span) ? static_cast<int>(top) - span
                                                 : static_cast<int>(top) / 2;
  return base < 3 ? 3 : base;
}

// A copy of `fd` at a free number in the shim's range (or, that full, the
// lowest free one), close-on-exec; -1 when the table is full.
int CopyHigh(int fd) {
  int copy = RawFcntl(fd, F_DUPFD_CLOEXEC, HighBase());
  return copy >= 0 ? copy : RawFcntl(fd, F_DUPFD_CLOEXEC, 3);
}

// Lock held. Takes a descriptor just created (close-on-exec) into the
// table, moved high. Returns its handle, or -1 with errno set (it is then
// closed).
int Register(int fd, ShimFdPlace place = ShimFdPlace::kPreferHigh) {
  for (int handle = 0; handle < kMaxShimFds; ++handle) {
    Entry& entry = g_entries[handle];
    if (entry.used) continue;
    int saved = errno;
    int base = HighBase();
    if (fd < base) {
      int high = RawFcntl(fd, F_DUPFD_CLOEXEC, base);
      if (high >= 0) {
        RawClose(fd);
        fd = high;
      } else if (place == ShimFdPlace::kHighOnly) {
        RawClose(fd);
        errno = EMFILE;
        return -1;
      }
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      saved = errno;
      RawClose(fd);
      errno = saved;
      return -1;
    }
    entry = Entry{true, fd, st.st_dev, st.st_ino};
    if (handle >= g_entries_end) g_entries_end = handle + 1;
    g_owner = RawPid();
    UpdateFloor();
    errno = saved;
    return handle;
  }
  RawClose(fd);
  errno = EMFILE;
  return -1;
}

bool ValidHandle(int handle) {
  return handle >= 0 && handle < kMaxShimFds && g_entries[handle].used;
}

int RawDup2(int old_fd, int new_fd) {
#if defined(SYS_dup2)
  return static_cast<int>(syscall(SYS_dup2, old_fd, new_fd));
#else
  if (old_fd == new_fd) return RawFcntl(old_fd, F_GETFD, 0) < 0 ? -1 : new_fd;
  return static_cast<int>(syscall(SYS_dup3, old_fd, new_fd, 0));
#endif
}

int RealCloseRange(unsigned first, unsigned last, int flags) {
  if (RealFunctionsReady() && g_real.close_range != nullptr) {
    return g_real.close_range(first, last, flags);
  }
  return static_cast<int>(syscall(SYS_close_range, first, last, flags));
}

// Closes [first, last] (both within int range) one range at a time, or one
// descriptor at a time where close_range is missing.
int ClosePiece(unsigned first, unsigned last) {
  if (RealCloseRange(first, last, 0) == 0) return 0;
  if (errno != ENOSYS) return -1;
  for (unsigned fd = first; fd <= last; ++fd) RawClose(static_cast<int>(fd));
  return 0;
}

// Lock held. The shim's verified numbers in [first, last], ascending.
int OwnInRange(unsigned first, unsigned last, int* out) {
  int count = 0;
  if (g_owner != RawPid()) return 0;
  for (Entry& entry : UsedEntries()) {
    if (!entry.used || Current(entry) < 0) continue;
    auto fd = static_cast<unsigned>(entry.fd);
    if (fd < first || fd > last) continue;
    int at = count++;
    while (at > 0 && out[at - 1] > entry.fd) {
      out[at] = out[at - 1];
      --at;
    }
    out[at] = entry.fd;
  }
  return count;
}

}  // namespace

void ReserveShimFdSpan(int extra) {
  if (extra > 0) g_span.fetch_add(extra, std::memory_order_relaxed);
}

int ShimSocket(int domain, int type, ShimFdPlace place) {
  SpinLockHolder hold(g_lock);
  int fd = socket(domain, type | SOCK_CLOEXEC, 0);
  return fd < 0 ? -1 : Register(fd, place);
}

int ShimEpoll() {
  SpinLockHolder hold(g_lock);
  int fd = epoll_create1(EPOLL_CLOEXEC);
  return fd < 0 ? -1 : Register(fd);
}

int ShimEventFd() {
  SpinLockHolder hold(g_lock);
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return fd < 0 ? -1 : Register(fd);
}

int ShimAccept(int listener, int flags, ShimFdPlace place) {
  SpinLockHolder hold(g_lock);
  int listen_fd = ValidHandle(listener) ? Current(g_entries[listener]) : -1;
  if (listen_fd < 0) {
    errno = EBADF;
    return -1;
  }
  int fd =
      static_cast<int>(syscall(SYS_accept4, listen_fd, nullptr, nullptr, flags | SOCK_CLOEXEC));
  return fd < 0 ? -1 : Register(fd, place);
}

int ShimOpen(const char* path, int flags, unsigned int mode) {
  SpinLockHolder hold(g_lock);
  int fd = open(path, flags | O_CLOEXEC, static_cast<mode_t>(mode));
  return fd < 0 ? -1 : Register(fd);
}

ShimFdUse::ShimFdUse(int handle) {
  g_lock.Lock();
  fd_ = ValidHandle(handle) ? Current(g_entries[handle]) : -1;
}

ShimFdUse::~ShimFdUse() { g_lock.Unlock(); }

int ShimFdNumber(int handle) {
  SpinLockHolder hold(g_lock);
  return ValidHandle(handle) ? g_entries[handle].fd : -1;
}

void ShimFdClose(int handle) {
  int saved = errno;
  SpinLockHolder hold(g_lock);
  if (!ValidHandle(handle)) return;
  Entry& entry = g_entries[handle];
  if (Current(entry) >= 0) RawClose(entry.fd);
  entry = Entry{};
  UpdateFloor();
  errno = saved;
}

bool IsShimFd(int fd) {
  int saved = errno;
  SpinLockHolder hold(g_lock);
  bool own = FindOwn(fd) != nullptr;
  errno = saved;
  return own;
}

int ShimFdsCloseRange(unsigned first, unsigned last, int flags) {
  // CLOSE_RANGE_CLOEXEC closes nothing (the shim's descriptors are
  // close-on-exec already); CLOSE_RANGE_UNSHARE closes in the caller's
  // private copy of the table, never in the one the shim's thread uses; bad
  // arguments fail as they would.
  if (flags != 0 || first > last) return RealCloseRange(first, last, flags);
  SpinLockHolder hold(g_lock);
  int own[kMaxShimFds];
  int count = OwnInRange(first, last, own);
  if (count == 0) return RealCloseRange(first, last, 0);
  int result = 0;
  int error = 0;
  unsigned from = first;
  for (int i = 0; i < count; ++i) {
    auto fd = static_cast<unsigned>(own[i]);
    if (fd > from && ClosePiece(from, fd - 1) != 0 && result == 0) {
      result = -1;
      error = errno;
    }
    from = fd + 1;
  }
  if (from <= last && RealCloseRange(from, last, 0) != 0 && result == 0) {
    result = -1;
    error = errno;
  }
  if (result != 0) errno = error;
  return result;
}

void ShimFdsCloseFrom(int low) {
  unsigned first = low < 0 ? 0 : static_cast<unsigned>(low);
  SpinLockHolder hold(g_lock);
  int own[kMaxShimFds];
  int count = OwnInRange(first, UINT_MAX, own);
  unsigned from = first;
  int saved = errno;
  for (int i = 0; i < count; ++i) {
    auto fd = static_cast<unsigned>(own[i]);
    if (fd > from) ClosePiece(from, fd - 1);
    from = fd + 1;
  }
  errno = saved;
  if (RealFunctionsReady() && g_real.closefrom != nullptr) {
    g_real.closefrom(static_cast<int>(from));
  } else {
    RealCloseRange(from, UINT_MAX, 0);
  }
}

int ShimFdsDup(int old_fd, int new_fd, int flags, bool three) {
  SpinLockHolder hold(g_lock);
  if (FindOwn(old_fd) != nullptr && !(three && old_fd == new_fd)) {
    errno = EBADF;  // not open, as far as the host knows
    return -1;
  }
  Entry* entry = old_fd != new_fd ? FindOwn(new_fd) : nullptr;
  bool moved = false;
  if (entry != nullptr) {
    // The host gets the number; the shim's descriptor lives on under
    // another one (lost only when the table is full).
    int saved = errno;
    entry->fd = CopyHigh(new_fd);
    moved = entry->fd >= 0;
    errno = saved;
  }
  int result;
  if (three) {
    result = RealFunctionsReady() && g_real.dup3 != nullptr
                 ? g_real.dup3(old_fd, new_fd, flags)
                 : static_cast<int>(syscall(SYS_dup3, old_fd, new_fd, flags));
  } else {
    result = RealFunctionsReady() && g_real.dup2 != nullptr ? g_real.dup2(old_fd, new_fd)
                                                            : RawDup2(old_fd, new_fd);
  }
  if (result < 0 && moved) {
    // The host's call failed and left the old number open: without the
    // shim it would not be.
    int saved = errno;
    RawClose(new_fd);
    errno = saved;
  }
  if (entry != nullptr) UpdateFloor();
  return result;
}

void ShimFdsLockForFork() { g_lock.Lock(); }
void ShimFdsUnlockForFork() { g_lock.Unlock(); }

void ShimFdsResetInChild() {
  g_lock.ResetInChild();
  int saved = errno;
  for (Entry& entry : UsedEntries()) {
    if (entry.used && Current(entry) >= 0) RawClose(entry.fd);
    entry = Entry{};
  }
  g_entries_end = 0;
  g_owner = 0;
  UpdateFloor();
  errno = saved;
}

}  // namespace retain::shim
