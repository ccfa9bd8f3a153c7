// own_fds: the file descriptors the shim holds for its own work (the
// control endpoint's listener and connections, a snapshot being streamed, a
// /proc file being read), kept out of the host's way.
//
// Descriptor numbers belong to the host; the shim borrows a few (and the
// front door two per relayed connection), and:
//  - keeps them above the range programs reuse: each is created under the
//    lock and moved (fcntl F_DUPFD_CLOEXEC) to the lowest free number from
//    the span below min(soft RLIMIT_NOFILE, 1024) (1024: the kernel's
//    descriptor table, which fork copies, stays small), close-on-exec. The
//    span is kShimFdSpan numbers, plus kFrontDoorFds once the front door
//    reserved them (ReserveShimFdSpan), never more than the upper half;
//  - keeps them out of the host's close/close_range/closefrom/dup2/dup3
//    and fcntl (hooks/fd_hooks.cc): close() of one fails with EBADF, and
//    dup2() from one and fcntl() on one too, as they would without the shim
//    (bash asks fcntl(F_GETFD) whether a number is free before `exec 960>f`,
//    took the endpoint's socket for its own and later put it back over the
//    user's file); close_range() and closefrom()
//    close everything else in their range; dup2()/dup3() onto one gets the
//    number, the shim's descriptor having moved to another first. The host's
//    results and errno are those it would get without the shim;
//  - checks each on every use against the identity recorded when it was
//    created (fstat's device and inode): a number the host closed or
//    replaced behind the hooks (a raw system call) is "lost", and the shim
//    never operates on it again (never reads, accepts, writes or closes it);
//  - closes all of them in a fork child (ShimFdsResetInChild). A vfork child
//    (the parent's memory, its own descriptor table) is told apart by its
//    pid and left alone.
//
// Thread-safe: one spin lock, held only around non-blocking system calls
// (the shim's sockets are non-blocking) and the host's close_range/closefrom
// /dup2/dup3 onto the shim's range. Never allocates, never throws; errno is
// preserved except where a function says it sets it. A process has at most
// kMaxShimFds of them; the handle table is scanned linearly (hundreds of
// entries) when a descriptor is created or closed, never on its use.
#ifndef RETAIN_SHIM_SRC_BASE_OWN_FDS_H_
#define RETAIN_SHIM_SRC_BASE_OWN_FDS_H_

#include <atomic>
#include <climits>

namespace retain::shim {

// The front door (net/front_door.h): its listener, handover socket, epoll
// and eventfd, and two per relayed connection.
inline constexpr int kMaxFrontDoorConnections = 192;
inline constexpr int kFrontDoorFds = 4 + 2 * kMaxFrontDoorConnections;
// The rest: the control endpoint's listener and connections, snapshot files
// being written or streamed, /proc files being read.
inline constexpr int kMaxShimFds = 32 + kFrontDoorFds;
inline constexpr int kShimFdSpan = 64;

// Widens the span the shim's descriptors are moved into by `extra`
// numbers (the front door's, at its start), within the upper half of the
// table. Call before creating them.
void ReserveShimFdSpan(int extra);

// Where a new descriptor may live: moved into the span if it can be, else
// where the kernel put it (kPreferHigh); or only in the span, failing with
// EMFILE when it is full (kHighOnly: the front door's connections, which
// would otherwise crowd the host's low numbers).
enum class ShimFdPlace { kPreferHigh, kHighOnly };

// Each creates a descriptor for the shim (close-on-exec, moved high) and
// returns its handle (>= 0), or -1 with errno set (EMFILE when the table is
// full). ShimAccept accepts on `listener` (a handle) with accept4 `flags`
// (SOCK_CLOEXEC is added); it fails with EBADF when the listener is lost.
int ShimSocket(int domain, int type, ShimFdPlace place = ShimFdPlace::kPreferHigh);
int ShimAccept(int listener, int flags, ShimFdPlace place = ShimFdPlace::kPreferHigh);
int ShimOpen(const char* path, int flags, unsigned int mode = 0);
// An epoll instance, and an eventfd (non-blocking, counter 0).
int ShimEpoll();
int ShimEventFd();

// Holds the lock while the shim operates on the handle's descriptor: fd()
// is its number, verified to still be the shim's, or -1 when lost. Make
// only non-blocking calls on it, and keep the scope short.
class ShimFdUse {
 public:
  explicit ShimFdUse(int handle);
  ~ShimFdUse();
  ShimFdUse(const ShimFdUse&) = delete;
  ShimFdUse& operator=(const ShimFdUse&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// The handle's number for poll(), not verified (-1 when lost): an event on
// it may belong to a number that has just moved or been lost, so the caller
// then looks again with ShimFdUse.
int ShimFdNumber(int handle);

// Closes the handle's descriptor if it is still the shim's, and frees the
// handle. -1 is ignored.
void ShimFdClose(int handle);

// The lowest number the shim may hold (INT_MAX when none): the hooks' fast
// path, one relaxed load.
extern std::atomic<int> g_shim_fd_floor;
inline bool MaybeShimFd(int fd) { return fd >= g_shim_fd_floor.load(std::memory_order_relaxed); }

// For the hooks (hooks/fd_hooks.cc and close in hooks/socket_hooks.cc). Each
// makes the host's call, keeping the shim's descriptors out of it, and
// returns its result with its errno.
// True when `fd` is the shim's (close() then fails with EBADF).
bool IsShimFd(int fd);
int ShimFdsCloseRange(unsigned first, unsigned last, int flags);
void ShimFdsCloseFrom(int low);
// dup2 (three = false) or dup3 (with `flags`).
int ShimFdsDup(int old_fd, int new_fd, int flags, bool three);

// fork(): the prepare handler takes the lock, the parent releases it, the
// child closes every descriptor of the shim (they are copies of the
// parent's) and starts with none.
void ShimFdsLockForFork();
void ShimFdsUnlockForFork();
void ShimFdsResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_OWN_FDS_H_
