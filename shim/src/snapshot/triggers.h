// triggers: the ways a snapshot gets asked for, other than the
// control endpoint: RETAIN_SIGNAL, process exit, and retain_snapshot(); and
// the shim's service thread, which writes signal snapshots and runs the
// shim's own upkeep (record/tag_compaction.h).
//
// A signal handler cannot write a snapshot (the writer takes locks and the
// loader lock), so it only counts the request and posts a semaphore
// (async-signal-safe); the service thread, named "retain", wakes and writes.
// The same thread writes the interval snapshots (RETAIN_SNAPSHOT_INTERVAL,
// continuous mode), waking when one is due.
//
// That thread starts lazily, from a hook (the first recorded allocation,
// the start of a blocking call, a wait the signal interrupted), and only in
// a program that may get one (ServiceThreadMayStart): one that has a thread
// of its own besides its first, or a shim thread already (the control
// endpoint's, the front door's), or asked for continuous mode, or a Go
// program. A single-threaded program stays single-threaded
// (base/threads.h says why): its snapshots are written on its own thread,
// at the next hook after the signal (an allocation, a blocking call's
// start), in a wait the signal interrupted (hooks/wait_hooks.cc), or in a
// read, accept or recv the signal ended (hooks/interruptible_call.h); a
// program blocked elsewhere gets it when it next calls into the shim, or at
// exit. Once started, the thread lives on; once a second it checks that
// the program still has a thread of its own, and ends the process as glibc
// would (exit(0)) when the program's last thread has ended
// (OnlyShimThreadsRemain).
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_TRIGGERS_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_TRIGGERS_H_

#include <atomic>
#include <cstdint>

#include "base/thread_state.h"
#include "base/threads.h"

namespace retain::shim {

// From the constructor: installs the signal handler (unless the signal is
// ignored or already handled, which the host decided) and allows the
// service thread to start. In a Go program, chains the snapshot signal and
// the stop signals with the Go runtime's handlers (snapshot/signal_chain.h).
void InstallSnapshotTriggers();

// From the snapshot signal's handler: asks the service thread for a
// snapshot. Async-signal-safe.
void NoteSnapshotSignal();

// From a stop signal's handler (snapshot/signal_chain.h): asks the service
// thread for the stop snapshot (Trigger::kStopSignal, `label`, a string that
// lives forever) and waits until it is written, at most
// kStopSnapshotWaitSeconds; only asks, without waiting, when this thread was
// inside the shim (the writer could need what it holds) or the service
// thread is not running. Returns true when it was written. Async-signal-safe.
bool WriteStopSnapshotFromHandler(const char* label);

// From a hook (guard held), when g_service_thread_wanted (base/threads.h)
// is raised: starts the service thread if it may start and has a reason to
// (a trigger is installed, or work waits); where it may not, does the
// waiting work (DoServiceWorkHere). Cheap otherwise: one relaxed load.
void RunService();
inline void MaybeRunService() {
  if (__builtin_expect(g_service_thread_wanted.load(std::memory_order_relaxed), 0)) RunService();
}
// The same from a hook that may block without the guard (reads, accepts,
// waits): a threaded program that never allocates after start and then
// blocks in read() still gets the thread, before it blocks, for the signal
// to come.
inline void MaybeRunServiceBeforeBlocking() {
  if (__builtin_expect(g_service_thread_wanted.load(std::memory_order_relaxed), 0) &&
      g_thread.busy == 0) {
    ++g_thread.busy;
    RunService();
    --g_thread.busy;
  }
}

// Whether the service thread may be started in this program (see above).
bool ServiceThreadMayStart();

// True when the service thread's work is done on the program's threads
// instead: it does not run and may not start.
bool ServiceWorkStaysHere();

// The service thread's work, on the calling thread (guard held): the
// pending signal snapshots, a queued every-N snapshot, tag compaction.
// Left for a later hook when this thread's stack has too little room left
// for a write (a coroutine's, an alternate signal stack).
void DoServiceWorkHere();

// Whether work waits for DoServiceWorkHere. Async-signal-safe.
bool ServiceWorkWaiting();

// From a wait hook that got EINTR: true when the interruption was the
// snapshot signal's alone, so the wait should resume: this thread's handler
// ran for it since `snapshot_signals_before` (g_thread.snapshot_signals),
// and the host has no signal handler of its own that could have run as well.
// Starts the service thread, or writes the snapshot here, when one waits.
bool InterruptedOnlyBySnapshotSignal(uint32_t snapshot_signals_before);

// Wakes the service thread for its upkeep (from any thread, guard held or
// not; not from a signal handler). If it is not running, the work waits for
// the next hook (MaybeRunService).
void WakeServiceThread();

// From the library destructor (process exit): writes pending signal
// snapshots, then the exit snapshot.
void WriteExitSnapshot();

// fork(): the child has no service thread; it starts its own when needed.
void SnapshotTriggersResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_TRIGGERS_H_
