// wait_hooks: the calls a signal handler interrupts even with SA_RESTART
// (signal(7): sleeps, poll/select/epoll, the waits for signals). When the
// snapshot signal's handler was the only one that ran, the host never asked
// for an interruption: the call resumes with what is left of its timeout,
// as if the signal had not come. Any other EINTR goes back to the host.
//
// The hooks cost one thread-local load and compare per call, nothing more
// unless the call failed with EINTR. Calls made by the shim's own threads
// (which block every signal) pass straight through. errno is the host's: a
// resumed call that succeeds leaves errno as it was on entry.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "record/hook_shape.h"
#include "snapshot/triggers.h"

using namespace retain::shim;

namespace retain::shim {
namespace {

constexpr int64_t kNanosPerSecond = 1000000000;

int64_t MonotonicNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * kNanosPerSecond + now.tv_nsec;
}

// A relative timeout kept as an absolute point on the monotonic clock, so
// a resumed call waits only for what is left. Negative: no timeout.
class Deadline {
 public:
  static Deadline FromMillis(int timeout_ms) {
    return Deadline(timeout_ms < 0 ? -1 : MonotonicNanos() + int64_t{timeout_ms} * 1000000);
  }
  static Deadline FromMicros(uint64_t micros) {
    return Deadline(MonotonicNanos() + static_cast<int64_t>(micros) * 1000);
  }
  static Deadline FromTimespec(const timespec* timeout) {
    if (timeout == nullptr) return Deadline(-1);
    return Deadline(MonotonicNanos() + timeout->tv_sec * kNanosPerSecond + timeout->tv_nsec);
  }

  int64_t RemainingNanos() const {
    int64_t left = at_ - MonotonicNanos();
    return left > 0 ? left : 0;
  }
  // For poll and epoll: rounded up, so a resumed wait never ends early.
  int RemainingMillis() const {
    if (at_ < 0) return -1;
    int64_t millis = (RemainingNanos() + 999999) / 1000000;
    return millis > INT32_MAX ? INT32_MAX : static_cast<int>(millis);
  }
  // nullptr when there is no timeout.
  const timespec* Remaining(timespec* out) const {
    if (at_ < 0) return nullptr;
    int64_t left = RemainingNanos();
    out->tv_sec = left / kNanosPerSecond;
    out->tv_nsec = left % kNanosPerSecond;
    return out;
  }

 private:
  explicit Deadline(int64_t at) : at_(at) {}
  int64_t at_;
};

// Whether a call that just failed should be made again: it failed with
// EINTR and only the snapshot signal interrupted it. Restores the entry
// errno when it should.
bool Resume(int result_is_eintr, uint32_t signals_before, int entry_errno) {
  if (!result_is_eintr || !InterruptedOnlyBySnapshotSignal(signals_before)) return false;
  errno = entry_errno;
  return true;
}

// Shared shape: call `attempt` until it did not fail with EINTR caused by
// the snapshot signal alone.
template <typename Attempt>
auto Resuming(Attempt attempt) {
  MaybeRunServiceBeforeBlocking();
  const int entry_errno = errno;
  for (;;) {
    const uint32_t before = g_thread.snapshot_signals;
    auto result = attempt();
    if (!Resume(result == -1 && errno == EINTR, before, entry_errno)) return result;
  }
}

bool ShimThreadOrNotReady() { return !HookReady() || g_thread.busy != 0; }

long RawNanosleep(const timespec* request, timespec* remaining) {
  return syscall(SYS_clock_nanosleep, CLOCK_REALTIME, 0, request, remaining);
}

}  // namespace
}  // namespace retain::shim

RETAIN_EXPORT int pause(void) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady())
      return static_cast<int>(syscall(SYS_ppoll, nullptr, 0, nullptr, nullptr, 0));
    return g_real.pause();
  }
  return Resuming([] { return g_real.pause(); });
}

RETAIN_EXPORT int sigsuspend(const sigset_t* mask) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) return static_cast<int>(syscall(SYS_rt_sigsuspend, mask, 8));
    return g_real.sigsuspend(mask);
  }
  return Resuming([mask] { return g_real.sigsuspend(mask); });
}

RETAIN_EXPORT int sigtimedwait(const sigset_t* set, siginfo_t* info, const timespec* timeout) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) {
      return static_cast<int>(syscall(SYS_rt_sigtimedwait, set, info, timeout, 8));
    }
    return g_real.sigtimedwait(set, info, timeout);
  }
  const Deadline deadline = Deadline::FromTimespec(timeout);
  return Resuming([&] {
    timespec left;
    return g_real.sigtimedwait(set, info, deadline.Remaining(&left));
  });
}

RETAIN_EXPORT int sigwaitinfo(const sigset_t* set, siginfo_t* info) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) {
      return static_cast<int>(syscall(SYS_rt_sigtimedwait, set, info, nullptr, 8));
    }
    return g_real.sigwaitinfo(set, info);
  }
  return Resuming([&] { return g_real.sigwaitinfo(set, info); });
}

RETAIN_EXPORT int poll(struct pollfd* fds, nfds_t count, int timeout_ms) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) {
      timespec timeout{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
      return static_cast<int>(
          syscall(SYS_ppoll, fds, count, timeout_ms < 0 ? nullptr : &timeout, nullptr, 0));
    }
    return g_real.poll(fds, count, timeout_ms);
  }
  const Deadline deadline = Deadline::FromMillis(timeout_ms);
  return Resuming([&] { return g_real.poll(fds, count, deadline.RemainingMillis()); });
}

RETAIN_EXPORT int ppoll(struct pollfd* fds, nfds_t count, const timespec* timeout,
                        const sigset_t* mask) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady())
      return static_cast<int>(syscall(SYS_ppoll, fds, count, timeout, mask, 8));
    return g_real.ppoll(fds, count, timeout, mask);
  }
  const Deadline deadline = Deadline::FromTimespec(timeout);
  return Resuming([&] {
    timespec left;
    return g_real.ppoll(fds, count, deadline.Remaining(&left), mask);
  });
}

// Linux writes the time left into *timeout, so the same call resumes.
RETAIN_EXPORT int select(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
                         struct timeval* timeout) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) {
#if defined(SYS_select)
      return static_cast<int>(syscall(SYS_select, count, read_set, write_set, error_set, timeout));
#else
      timespec converted;
      if (timeout != nullptr) converted = {timeout->tv_sec, timeout->tv_usec * 1000};
      return static_cast<int>(syscall(SYS_pselect6, count, read_set, write_set, error_set,
                                      timeout != nullptr ? &converted : nullptr, nullptr));
#endif
    }
    return g_real.select(count, read_set, write_set, error_set, timeout);
  }
  return Resuming([&] { return g_real.select(count, read_set, write_set, error_set, timeout); });
}

RETAIN_EXPORT int pselect(int count, fd_set* read_set, fd_set* write_set, fd_set* error_set,
                          const timespec* timeout, const sigset_t* mask) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) {
      struct {
        const sigset_t* mask;
        size_t size;
      } mask_argument{mask, 8};
      return static_cast<int>(syscall(SYS_pselect6, count, read_set, write_set, error_set, timeout,
                                      mask != nullptr ? &mask_argument : nullptr));
    }
    return g_real.pselect(count, read_set, write_set, error_set, timeout, mask);
  }
  const Deadline deadline = Deadline::FromTimespec(timeout);
  return Resuming([&] {
    timespec left;
    return g_real.pselect(count, read_set, write_set, error_set, deadline.Remaining(&left), mask);
  });
}

RETAIN_EXPORT int epoll_wait(int epoll_fd, struct epoll_event* events, int max_events,
                             int timeout_ms) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) {
      return static_cast<int>(
          syscall(SYS_epoll_pwait, epoll_fd, events, max_events, timeout_ms, nullptr, 8));
    }
    return g_real.epoll_wait(epoll_fd, events, max_events, timeout_ms);
  }
  const Deadline deadline = Deadline::FromMillis(timeout_ms);
  return Resuming(
      [&] { return g_real.epoll_wait(epoll_fd, events, max_events, deadline.RemainingMillis()); });
}

RETAIN_EXPORT int epoll_pwait(int epoll_fd, struct epoll_event* events, int max_events,
                              int timeout_ms, const sigset_t* mask) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) {
      return static_cast<int>(
          syscall(SYS_epoll_pwait, epoll_fd, events, max_events, timeout_ms, mask, 8));
    }
    return g_real.epoll_pwait(epoll_fd, events, max_events, timeout_ms, mask);
  }
  const Deadline deadline = Deadline::FromMillis(timeout_ms);
  return Resuming([&] {
    return g_real.epoll_pwait(epoll_fd, events, max_events, deadline.RemainingMillis(), mask);
  });
}

// The kernel writes the time left into *remaining: the resumed sleep takes
// that (into a buffer of ours when the host passed none).
RETAIN_EXPORT int nanosleep(const timespec* request, timespec* remaining) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) return static_cast<int>(RawNanosleep(request, remaining));
    return g_real.nanosleep(request, remaining);
  }
  timespec own_remaining;
  timespec* left = remaining != nullptr ? remaining : &own_remaining;
  timespec next = *request;
  return Resuming([&] {
    int result = g_real.nanosleep(&next, left);
    if (result == -1 && errno == EINTR) next = *left;
    return result;
  });
}

// Returns an error number rather than setting errno.
RETAIN_EXPORT int clock_nanosleep(clockid_t clock, int flags, const timespec* request,
                                  timespec* remaining) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) {
      return syscall(SYS_clock_nanosleep, clock, flags, request, remaining) == 0 ? 0 : errno;
    }
    return g_real.clock_nanosleep(clock, flags, request, remaining);
  }
  timespec own_remaining;
  timespec* left = remaining != nullptr ? remaining : &own_remaining;
  timespec next = *request;
  MaybeRunServiceBeforeBlocking();
  for (;;) {
    const uint32_t before = g_thread.snapshot_signals;
    int error = g_real.clock_nanosleep(clock, flags, &next, left);
    if (error != EINTR || !InterruptedOnlyBySnapshotSignal(before)) return error;
    if ((flags & TIMER_ABSTIME) == 0) next = *left;  // absolute: the same end
  }
}

RETAIN_EXPORT int usleep(useconds_t micros) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) {
      timespec request{static_cast<time_t>(micros / 1000000),
                       static_cast<long>(micros % 1000000) * 1000};
      return static_cast<int>(RawNanosleep(&request, nullptr));
    }
    return g_real.usleep(micros);
  }
  const Deadline deadline = Deadline::FromMicros(micros);
  bool first = true;
  return Resuming([&] {
    if (first) {
      first = false;
      return g_real.usleep(micros);
    }
    timespec left;
    deadline.Remaining(&left);
    return g_real.nanosleep(&left, nullptr);
  });
}

// glibc's sleep returns the whole seconds left when a handler interrupted
// it; the resumed sleep is a nanosleep of the time left, and returns the
// same way if the host's own handler interrupts it.
RETAIN_EXPORT unsigned int sleep(unsigned int seconds) {
  if (ShimThreadOrNotReady()) {
    if (!RealFunctionsReady()) {
      timespec request{static_cast<time_t>(seconds), 0};
      timespec left{0, 0};
      return RawNanosleep(&request, &left) == 0 ? 0 : static_cast<unsigned int>(left.tv_sec);
    }
    return g_real.sleep(seconds);
  }
  MaybeRunServiceBeforeBlocking();
  const int entry_errno = errno;
  const uint32_t before = g_thread.snapshot_signals;
  const Deadline deadline = Deadline::FromMicros(uint64_t{seconds} * 1000000);
  unsigned int result = g_real.sleep(seconds);
  // Not `result == 0` for "slept it all": glibc rounds what is left to the
  // nearest second, so a sleep interrupted with under half a second to go
  // also returns 0 (and ended early by up to that half second).
  if (!InterruptedOnlyBySnapshotSignal(before)) return result;
  errno = entry_errno;
  timespec left;
  deadline.Remaining(&left);
  if (nanosleep(&left, &left) == 0) {
    errno = entry_errno;
    return 0;
  }
  // Rounded as glibc's sleep rounds.
  return static_cast<unsigned int>(left.tv_sec) + (left.tv_nsec >= 500000000L ? 1 : 0);
}
