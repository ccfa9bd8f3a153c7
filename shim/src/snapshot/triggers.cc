// triggers: see snapshot/triggers.h.
#include "snapshot/triggers.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/process_info.h"
#include "base/thread_state.h"
#include "base/threads.h"
#include "record/tag_compaction.h"
#include "record/tag_table.h"
#include "snapshot/interrupted_call.h"
#include "snapshot/request_events.h"
#include "snapshot/signal_chain.h"
#include "snapshot/writer.h"
#include "unwind/go_runtime.h"
#include "unwind/stack_capture.h"

namespace retain::shim {
namespace {

// What a snapshot write takes of the stack, with room to spare: the deepest
// path (-fstack-usage) is ~30 KiB, with glibc's malloc_info below it.
constexpr size_t kStackRoomForAWrite = 128 * 1024;

sem_t g_wakeup;
std::atomic<bool> g_service_running;
std::atomic<bool> g_service_started;  // StartServiceThread took the start
std::atomic<bool> g_triggers_installed;
// Work was asked of the service thread while it did not run (a signal, an
// every-N snapshot, tag compaction): what makes RunService start it, or do
// the work here.
std::atomic<bool> g_work_waiting;
std::atomic<uint32_t> g_pending_signal_snapshots;
// ClosedTagCount() when the newest pending signal arrived.
std::atomic<uint64_t> g_signal_requests_at_trigger;
std::atomic<bool> g_exit_written;
// In a fork child: PreciseMicrosSinceStart() / 1000 + 1 at the fork; 0 in a
// process that did not fork from one under the shim (or exec'd since).
std::atomic<uint64_t> g_forked_at_ms;
// Stop snapshots (snapshot/signal_chain.h): asked for by a handler
// (g_stop_asked counts the requests), written by the service thread, which
// then sets g_stop_written to the count it covered and wakes the waiters
// (a futex word).
std::atomic<uint32_t> g_stop_asked;
std::atomic<uint32_t> g_stop_written;
std::atomic<const char*> g_stop_label;

void WritePendingStopSnapshot() {
  uint32_t asked = g_stop_asked.load(std::memory_order_acquire);
  if (asked == g_stop_written.load(std::memory_order_acquire)) return;
  WriteSnapshot(Trigger::kStopSignal, g_stop_label.load(std::memory_order_acquire), nullptr, 0);
  g_stop_written.store(asked, std::memory_order_release);
  syscall(SYS_futex, &g_stop_written, FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

void WritePendingSignalSnapshots() {
  uint32_t pending = g_pending_signal_snapshots.load(std::memory_order_acquire);
  while (pending > 0) {
    if (g_pending_signal_snapshots.compare_exchange_weak(pending, pending - 1)) {
      WriteSnapshotAt(Trigger::kSignal, nullptr,
                      g_signal_requests_at_trigger.load(std::memory_order_acquire), nullptr, 0);
      pending = g_pending_signal_snapshots.load(std::memory_order_acquire);
    }
  }
}

int64_t MonotonicMs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

// RETAIN_SNAPSHOT_INTERVAL (continuous mode): writes the interval snapshot
// when it is due and moves `next_due_ms` on. A write that took longer than
// the interval is not made up for: the next is one interval after now.
void WriteIntervalSnapshotIfDue(int64_t* next_due_ms) {
  const int64_t interval = static_cast<int64_t>(GetConfig().snapshot_interval_ms);
  if (interval == 0) return;
  int64_t now = MonotonicMs();
  if (*next_due_ms == 0) *next_due_ms = now + interval;  // the first, one interval in
  if (now < *next_due_ms) return;
  WriteSnapshot(Trigger::kInterval, "interval", nullptr, 0);
  *next_due_ms += interval;
  now = MonotonicMs();
  if (*next_due_ms <= now) *next_due_ms = now + interval;
}

// The service thread waits for work (or the next interval snapshot), and
// once a second checks that the program still has a thread of its own: a
// shim thread must never be what keeps a process alive after its last
// thread ended.
void* ServiceThreadMain(void*) {
  // Everything this thread does is the shim's own work.
  g_thread.busy = 1;
  g_service_running.store(true, std::memory_order_seq_cst);
  int64_t next_interval_ms = 0;
  int64_t next_liveness_ms = MonotonicMs() + 1000;
  for (;;) {
    WritePendingStopSnapshot();  // first: a handler is waiting for it
    WritePendingSignalSnapshots();
    WriteQueuedRequestSnapshot();
    WriteIntervalSnapshotIfDue(&next_interval_ms);
    if (TagCompactionDue()) CompactTags();
    int64_t wake_ms = next_liveness_ms;
    if (next_interval_ms != 0 && next_interval_ms < wake_ms) wake_ms = next_interval_ms;
    timespec deadline = {static_cast<time_t>(wake_ms / 1000),
                         static_cast<long>((wake_ms % 1000) * 1000000)};
    int waited;
    while ((waited = sem_clockwait(&g_wakeup, CLOCK_MONOTONIC, &deadline)) != 0 && errno == EINTR) {
    }
    if (waited != 0 && MonotonicMs() >= next_liveness_ms) {
      ExitIfOnlyShimThreadsRemain();
      next_liveness_ms = MonotonicMs() + 1000;
    }
  }
  return nullptr;
}

// SA_SIGINFO: the interrupted registers tell whether a read or accept that
// a hook armed can be ended (snapshot/interrupted_call.h).
void OnSnapshotSignal(int, siginfo_t*, void* context) {
  NoteSnapshotSignal();
  const uint32_t armed = g_thread.interruptible_call;
  if (armed != 0 &&
      EndInterruptedSystemCall(context, static_cast<long>(armed) - 1,
                               g_thread.interruptible_function, g_thread.interruptible_frame)) {
    g_thread.call_interrupted = 1;
  }
}

void StartServiceThreadNow() {
  if (g_service_started.exchange(true)) return;
  int error = StartShimThread("retain", ServiceThreadMain);
  if (error != 0) {
    g_service_started.store(false);
    LogDiagnostic("cannot start the service thread: %s", strerror(error));
  }
}

// The kernel's struct for rt_sigaction (glibc's hides the signals it
// reserves for itself).
struct KernelSigaction {
  void* handler;
  unsigned long flags;
  void* restorer;
  unsigned long mask;
};

}  // namespace

void NoteSnapshotSignal() {
  int saved = errno;
  ++g_thread.snapshot_signals;
  g_signal_requests_at_trigger.store(ClosedTagCount(), std::memory_order_release);
  g_pending_signal_snapshots.fetch_add(1, std::memory_order_acq_rel);
  if (g_service_running.load(std::memory_order_seq_cst)) {
    sem_post(&g_wakeup);
  } else {
    g_work_waiting.store(true, std::memory_order_release);
    g_service_thread_wanted.store(true, std::memory_order_release);
  }
  errno = saved;
}

bool WriteStopSnapshotFromHandler(const char* label) {
  int saved = errno;
  g_stop_label.store(label, std::memory_order_release);
  uint32_t ticket = g_stop_asked.fetch_add(1, std::memory_order_acq_rel) + 1;
  bool written = false;
  // The writer may need what this thread holds when the signal came in
  // the middle of the shim's own code: then only ask.
  if (g_service_running.load(std::memory_order_seq_cst) && g_thread.busy == 0) {
    sem_post(&g_wakeup);
    timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += kStopSnapshotWaitSeconds;
    for (;;) {
      uint32_t done = g_stop_written.load(std::memory_order_acquire);
      if (static_cast<int32_t>(done - ticket) >= 0) {
        written = true;
        break;
      }
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      int64_t left_ns =
          (deadline.tv_sec - now.tv_sec) * 1000000000LL + (deadline.tv_nsec - now.tv_nsec);
      if (left_ns <= 0) break;
      timespec wait = {static_cast<time_t>(left_ns / 1000000000LL),
                       static_cast<long>(left_ns % 1000000000LL)};
      syscall(SYS_futex, &g_stop_written, FUTEX_WAIT_PRIVATE, done, &wait, nullptr, 0);
    }
  } else if (g_service_running.load(std::memory_order_seq_cst)) {
    sem_post(&g_wakeup);
  }
  errno = saved;
  return written;
}

void InstallSnapshotTriggers() {
  sem_init(&g_wakeup, 0, 0);
  // Continuous mode: the service thread writes the interval snapshots.
  if (GetConfig().snapshot_interval_ms != 0) {
    g_triggers_installed.store(true);
    g_service_thread_wanted.store(true, std::memory_order_release);
  }
  int signal_number = GetConfig().snapshot_signal;
  if (ProgramIsGo() && GetConfig().go_signals) {
    // Go's runtime replaces handlers through sigaction: chain with it. The
    // service thread is wanted either way: a stop signal's snapshot needs it.
    if (InstallSignalChain(signal_number)) g_triggers_installed.store(true);
    g_service_thread_wanted.store(true, std::memory_order_release);
    return;
  }
  if (signal_number == 0) return;
  struct sigaction current;
  if (sigaction(signal_number, nullptr, &current) != 0) return;
  if (current.sa_handler != SIG_DFL) {
    // Ignored (inherited from a parent) or already handled: the host's choice.
    LogDiagnostic("signal %d already has a disposition; snapshot-on-signal disabled",
                  signal_number);
    return;
  }
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_sigaction = OnSnapshotSignal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;  // the host's interrupted system calls resume
  sigemptyset(&action.sa_mask);
  if (sigaction(signal_number, &action, nullptr) != 0) return;
  g_triggers_installed.store(true);
  // Started by the next hook where it may start: it must exist before a
  // signal comes, to write the snapshot of a program that then blocks in
  // read().
  g_service_thread_wanted.store(true, std::memory_order_release);
}

bool ServiceThreadMayStart() {
  return ProgramIsThreaded() || ShimThreadRuns() || GetConfig().snapshot_interval_ms != 0 ||
         ProgramIsGo();
}

bool ServiceWorkStaysHere() {
  return !g_service_running.load(std::memory_order_acquire) && !ServiceThreadMayStart();
}

void RunService() {
  bool expected = true;
  if (!g_service_thread_wanted.compare_exchange_strong(expected, false)) return;
  const int saved = errno;  // pthread_setname_np opens a /proc file
  if (ServiceThreadMayStart()) {
    if (g_triggers_installed.load() || g_work_waiting.load(std::memory_order_acquire)) {
      StartServiceThreadNow();
    }
  } else {
    DoServiceWorkHere();
  }
  errno = saved;
}

bool ServiceWorkWaiting() { return g_work_waiting.load(std::memory_order_acquire); }

void DoServiceWorkHere() {
  if (!g_work_waiting.load(std::memory_order_acquire)) return;
  // A write needs tens of KiB of stack (the encoders' buffers): not on a
  // small one, where it would overflow into the host's memory.
  if (!StackRoomAtLeast(kStackRoomForAWrite)) {
    g_service_thread_wanted.store(true, std::memory_order_release);  // the next hook tries again
    return;
  }
  if (!g_work_waiting.exchange(false, std::memory_order_acq_rel)) return;
  const int saved = errno;  // a hook's caller finds the errno of its own call
  WritePendingSignalSnapshots();
  WriteQueuedRequestSnapshot();
  if (TagCompactionDue()) CompactTags();
  errno = saved;
}

bool InterruptedOnlyBySnapshotSignal(uint32_t snapshot_signals_before) {
  if (g_thread.snapshot_signals == snapshot_signals_before) return false;
  if (g_service_thread_wanted.load(std::memory_order_relaxed)) {
    BusyScope busy;  // the shim's allocations are not the host's
    RunService();
  }
  // Any handler of the host's could have run too, and the host would then
  // expect its EINTR: resume only when it has none.
  for (int signo = 1; signo < NSIG; ++signo) {
    if (signo == SIGKILL || signo == SIGSTOP || signo == GetConfig().snapshot_signal) continue;
    if (signo == SIGRTMIN - 2 || signo == SIGRTMIN - 1) continue;  // glibc's own (cancel, setxid)
    KernelSigaction current;
    if (syscall(SYS_rt_sigaction, signo, nullptr, &current, sizeof(current.mask)) != 0) continue;
    if (current.handler != reinterpret_cast<void*>(SIG_DFL) &&
        current.handler != reinterpret_cast<void*>(SIG_IGN)) {
      return false;
    }
  }
  return true;
}

void WakeServiceThread() {
  if (g_service_running.load(std::memory_order_seq_cst)) {
    sem_post(&g_wakeup);
  } else {
    g_work_waiting.store(true, std::memory_order_release);
    g_service_thread_wanted.store(true, std::memory_order_release);
  }
}

void WriteExitSnapshot() {
  if (g_exit_written.exchange(true)) return;
  WritePendingSignalSnapshots();
  // A fork child that ends soon after the fork (a shell's subshell, a
  // worker per connection) would write the heap it inherited, at the cost
  // of a full snapshot per fork: not unless it lived RETAIN_CHILD_EXIT_MIN.
  if (const uint64_t forked_at = g_forked_at_ms.load(std::memory_order_relaxed); forked_at != 0) {
    const uint64_t lived = PreciseMicrosSinceStart() / 1000 - forked_at;
    if (lived < GetConfig().child_exit_min_ms) {
      LogDiagnostic("no exit snapshot: a fork child that lived %lu ms (RETAIN_CHILD_EXIT_MIN)",
                    static_cast<unsigned long>(lived));
      return;
    }
  }
  // An every-N snapshot still queued is not written now: the program's
  // objects are already being destroyed, and it would show the state at
  // exit under a request count. The exit snapshot counts those requests.
  DropQueuedRequestSnapshot();
  WriteSnapshot(Trigger::kExit, nullptr, nullptr, 0);
}

void SnapshotTriggersResetInChild() {
  // + 1: a fork in the shim's first millisecond still marks a child.
  g_forked_at_ms.store(PreciseMicrosSinceStart() / 1000 + 1, std::memory_order_relaxed);
  sem_init(&g_wakeup, 0, 0);
  g_service_running.store(false);
  g_service_started.store(false);
  g_exit_written.store(false);
  g_pending_signal_snapshots.store(0);  // the parent's requests, not ours
  g_work_waiting.store(false);
  g_stop_written.store(g_stop_asked.load());
  RequestEventsResetInChild();
  g_service_thread_wanted.store(g_triggers_installed.load());
}

}  // namespace retain::shim
