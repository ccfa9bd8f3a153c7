// snapshot_triggers: see snapshot_triggers.h.
#include "snapshot_triggers.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "shim_thread.h"
#include "snapshot_writer.h"
#include "tag_compaction.h"
#include "tag_table.h"
#include "thread_state.h"

namespace retain::shim {

std::atomic<bool> g_service_thread_wanted;

namespace {

sem_t g_wakeup;
std::atomic<bool> g_service_running;
std::atomic<bool> g_service_started;  // StartServiceThread took the start
std::atomic<bool> g_triggers_installed;
std::atomic<uint32_t> g_pending_signal_snapshots;
std::atomic<bool> g_exit_written;

void WritePendingSignalSnapshots() {
  uint32_t pending = g_pending_signal_snapshots.load(std::memory_order_acquire);
  while (pending > 0) {
    if (g_pending_signal_snapshots.compare_exchange_weak(pending, pending - 1)) {
      WriteSnapshot(Trigger::kSignal, nullptr, nullptr, 0);
      pending = g_pending_signal_snapshots.load(std::memory_order_acquire);
    }
  }
}

void* ServiceThreadMain(void*) {
  // Everything this thread does is the shim's own work.
  g_thread.busy = 1;
  for (;;) {
    WritePendingSignalSnapshots();
    if (TagCompactionDue()) CompactTags();
    while (sem_wait(&g_wakeup) != 0 && errno == EINTR) {
    }
  }
  return nullptr;
}

void OnSnapshotSignal(int) {
  int saved = errno;
  g_pending_signal_snapshots.fetch_add(1, std::memory_order_acq_rel);
  if (g_service_running.load(std::memory_order_acquire)) sem_post(&g_wakeup);
  errno = saved;
}

}  // namespace

void InstallSnapshotTriggers() {
  sem_init(&g_wakeup, 0, 0);
  int signal_number = GetConfig().snapshot_signal;
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
  action.sa_handler = OnSnapshotSignal;
  action.sa_flags = SA_RESTART;  // the host's interrupted system calls resume
  sigemptyset(&action.sa_mask);
  if (sigaction(signal_number, &action, nullptr) != 0) return;
  g_triggers_installed.store(true);
  g_service_thread_wanted.store(true, std::memory_order_release);
}

void StartServiceThread() {
  bool expected = true;
  if (!g_service_thread_wanted.compare_exchange_strong(expected, false)) return;
  if (g_service_started.exchange(true)) return;
  int error = StartShimThread("retain", ServiceThreadMain);
  if (error != 0) {
    LogDiagnostic("cannot start the service thread: %s", strerror(error));
    return;
  }
  g_service_running.store(true, std::memory_order_release);
  sem_post(&g_wakeup);  // requests that arrived before it existed
}

void WakeServiceThread() {
  if (g_service_running.load(std::memory_order_acquire)) {
    sem_post(&g_wakeup);
  } else if (!g_service_started.load(std::memory_order_acquire)) {
    g_service_thread_wanted.store(true, std::memory_order_release);
  }
}

void WriteExitSnapshot() {
  if (g_exit_written.exchange(true)) return;
  WritePendingSignalSnapshots();
  WriteSnapshot(Trigger::kExit, nullptr, nullptr, 0);
}

void SnapshotTriggersResetInChild() {
  sem_init(&g_wakeup, 0, 0);
  g_service_running.store(false);
  g_service_started.store(false);
  g_exit_written.store(false);
  g_pending_signal_snapshots.store(0);  // the parent's requests, not ours
  g_service_thread_wanted.store(g_triggers_installed.load() || TagCount() != 0);
}

}  // namespace retain::shim
