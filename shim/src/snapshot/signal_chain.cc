// signal_chain: see snapshot/signal_chain.h.
#include "snapshot/signal_chain.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <atomic>
#include <cstdint>

#include "base/hook_table.h"
#include "base/log.h"
#include "base/spin_lock.h"
#include "snapshot/triggers.h"

namespace retain::shim {
namespace {

// One chained signal: what the program asked for, as the program sees it.
// The handler and flags are read by the trampoline without the lock (one
// word each); the mask only by ChainedSigaction, under it.
struct ChainedSignal {
  int signal_number = 0;
  bool stop = false;  // SIGTERM/SIGINT: the stop snapshot; else the snapshot signal
  std::atomic<bool> active{false};
  std::atomic<uintptr_t> handler{0};  // SIG_DFL, SIG_IGN or the program's function
  std::atomic<unsigned long> flags{0};
  sigset_t mask{};
};

constexpr int kMaxChained = 3;  // the snapshot signal, SIGTERM, SIGINT
ChainedSignal g_chained[kMaxChained];
std::atomic<int> g_chained_count;
SpinLock g_lock;  // serializes ChainedSigaction (taken with every signal blocked)

// Stop-signal handlers this thread is inside. Go's runtime, to die from a
// signal, raises it again on the same thread from inside its handler (after
// unblocking it): that second delivery is the same stop, not a new one.
__attribute__((tls_model("initial-exec"))) __thread int t_stop_depth;

ChainedSignal* Find(int signal_number) {
  int count = g_chained_count.load(std::memory_order_acquire);
  for (int i = 0; i < count; ++i) {
    if (g_chained[i].signal_number == signal_number &&
        g_chained[i].active.load(std::memory_order_acquire)) {
      return &g_chained[i];
    }
  }
  return nullptr;
}

const char* StopSignalName(int signal_number) {
  switch (signal_number) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "stop-signal";
  }
}

// Ends the process as the kernel would for a signal whose disposition is
// SIG_DFL: the program set SIG_DFL after the kernel chose this handler.
void DieFromSignal(int signal_number) {
  struct sigaction default_action;
  memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  g_real.sigaction(signal_number, &default_action, nullptr);
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, signal_number);
  pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
  raise(signal_number);
}

// The handler the kernel runs for every chained signal.
void ChainTrampoline(int signal_number, siginfo_t* info, void* context) {
  int saved_errno = errno;
  ChainedSignal* chained = nullptr;
  int count = g_chained_count.load(std::memory_order_acquire);
  for (int i = 0; i < count; ++i) {
    if (g_chained[i].signal_number == signal_number) chained = &g_chained[i];
  }
  if (chained == nullptr) return;  // cannot happen: installed only for these
  if (!chained->stop) {
    NoteSnapshotSignal();
  } else if (t_stop_depth == 0) {
    WriteStopSnapshotFromHandler(StopSignalName(signal_number));
  }
  // The program's action, read whole (handler and flags together) and, for
  // a one-shot handler, reset to the default in the same step, under the
  // lock ChainedSigaction holds only with every signal blocked: it is never
  // held by this thread, and another thread holds it for a few instructions.
  uintptr_t handler;
  unsigned long flags;
  {
    SpinLockHolder hold(g_lock);
    handler = chained->handler.load(std::memory_order_relaxed);
    flags = chained->flags.load(std::memory_order_relaxed);
    if ((flags & SA_RESETHAND) != 0 && handler != reinterpret_cast<uintptr_t>(SIG_DFL) &&
        handler != reinterpret_cast<uintptr_t>(SIG_IGN)) {
      chained->handler.store(reinterpret_cast<uintptr_t>(SIG_DFL), std::memory_order_release);
      chained->flags.store(flags & ~static_cast<unsigned long>(SA_RESETHAND),
                           std::memory_order_release);
      if (chained->stop) {
        struct sigaction default_action;
        memset(&default_action, 0, sizeof(default_action));
        default_action.sa_handler = SIG_DFL;
        g_real.sigaction(signal_number, &default_action, nullptr);
      }
    }
  }
  errno = saved_errno;
  if (handler == reinterpret_cast<uintptr_t>(SIG_IGN)) return;
  if (handler == reinterpret_cast<uintptr_t>(SIG_DFL)) {
    // The snapshot signal's default is the shim's snapshot (as without Go);
    // a stop signal's default is death.
    if (chained->stop) DieFromSignal(signal_number);
    errno = saved_errno;
    return;
  }
  if (chained->stop) ++t_stop_depth;
  // Always the three-argument call: a one-argument handler ignores the
  // other two (x86-64 and AArch64 pass them in registers), and a handler
  // that wants them gets them whatever `flags` said a moment ago.
  reinterpret_cast<void (*)(int, siginfo_t*, void*)>(handler)(signal_number, info, context);
  if (chained->stop) --t_stop_depth;
}

// What the kernel gets for `signal` when the program asks for `requested`:
// the trampoline with the program's flags and mask, or (a stop signal set to
// SIG_DFL or SIG_IGN) the program's action itself. The snapshot signal
// always keeps the trampoline: its default is the snapshot.
struct sigaction KernelAction(const ChainedSignal& chained, const struct sigaction& requested) {
  bool program_handler = requested.sa_handler != SIG_DFL && requested.sa_handler != SIG_IGN;
  if (chained.stop && !program_handler) return requested;
  struct sigaction kernel;
  memset(&kernel, 0, sizeof(kernel));
  kernel.sa_sigaction = ChainTrampoline;
  if (program_handler) {
    kernel.sa_mask = requested.sa_mask;
    kernel.sa_flags = requested.sa_flags & ~SA_RESETHAND;
  } else {
    sigemptyset(&kernel.sa_mask);
    kernel.sa_flags = SA_RESTART;
  }
  // Go requires every handler in its process to run on the signal stack
  // (a goroutine's stack is too small for a signal frame).
  kernel.sa_flags |= SA_SIGINFO | SA_ONSTACK;
  return kernel;
}

// The program's view of `chained`, as sigaction's old action.
void ProgramView(const ChainedSignal& chained, struct sigaction* out) {
  memset(out, 0, sizeof(*out));
  uintptr_t handler = chained.handler.load(std::memory_order_acquire);
  unsigned long flags = chained.flags.load(std::memory_order_acquire);
  if ((flags & SA_SIGINFO) != 0) {
    out->sa_sigaction = reinterpret_cast<void (*)(int, siginfo_t*, void*)>(handler);
  } else {
    out->sa_handler = reinterpret_cast<void (*)(int)>(handler);
  }
  out->sa_flags = static_cast<int>(flags);
  out->sa_mask = chained.mask;
}

void StoreProgramAction(ChainedSignal* chained, const struct sigaction& action) {
  uintptr_t handler = (action.sa_flags & SA_SIGINFO) != 0
                          ? reinterpret_cast<uintptr_t>(action.sa_sigaction)
                          : reinterpret_cast<uintptr_t>(action.sa_handler);
  chained->mask = action.sa_mask;
  chained->flags.store(static_cast<unsigned long>(action.sa_flags), std::memory_order_release);
  chained->handler.store(handler, std::memory_order_release);
}

// Takes over `signal_number`, which has the disposition `current` now.
// `stop`: a stop signal (left to the kernel until the program installs a
// handler); else the snapshot signal (the trampoline from now on).
bool Chain(int signal_number, bool stop) {
  struct sigaction current;
  if (g_real.sigaction(signal_number, nullptr, &current) != 0) return false;
  int index = g_chained_count.load(std::memory_order_relaxed);
  if (index >= kMaxChained) return false;
  ChainedSignal& chained = g_chained[index];
  chained.signal_number = signal_number;
  chained.stop = stop;
  StoreProgramAction(&chained, current);
  bool program_handler = current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN;
  if (!stop || program_handler) {
    struct sigaction kernel = KernelAction(chained, current);
    if (g_real.sigaction(signal_number, &kernel, nullptr) != 0) return false;
  }
  chained.active.store(true, std::memory_order_release);
  g_chained_count.store(index + 1, std::memory_order_release);
  return true;
}

}  // namespace

bool InstallSignalChain(int snapshot_signal) {
  if (g_real.sigaction == nullptr) return false;
  bool snapshot_chained = false;
  if (snapshot_signal != 0) {
    struct sigaction current;
    if (g_real.sigaction(snapshot_signal, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL) {
      snapshot_chained = Chain(snapshot_signal, /*stop=*/false);
    } else {
      LogDiagnostic("signal %d already has a disposition; snapshot-on-signal disabled",
                    snapshot_signal);
    }
  }
  for (int stop_signal : {SIGTERM, SIGINT}) {
    if (stop_signal == snapshot_signal) continue;
    if (!Chain(stop_signal, /*stop=*/true)) {
      LogDiagnostic("cannot chain signal %d: no snapshot when it stops the program", stop_signal);
    }
  }
  LogDiagnostic("Go program: signal handlers chained with the Go runtime's (snapshot signal %s)",
                snapshot_chained ? "on" : "off");
  return snapshot_chained;
}

bool SignalIsChained(int signal_number) { return Find(signal_number) != nullptr; }

void SignalChainResetInChild() {
  // Another thread may have held it at fork; the child has only this one.
  g_lock.ResetInChild();
  t_stop_depth = 0;
}

int ChainedSigaction(int signal_number, const struct sigaction* action,
                     struct sigaction* old_action) {
  ChainedSignal* chained = Find(signal_number);
  if (chained == nullptr) return g_real.sigaction(signal_number, action, old_action);
  // `action` and `old_action` may be the same struct.
  struct sigaction requested;
  if (action != nullptr) requested = *action;
  // Every signal blocked: the trampoline, or a handler calling sigaction,
  // never runs on this thread while it holds the lock.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  int result = 0;
  int error = 0;
  {
    SpinLockHolder hold(g_lock);
    struct sigaction view;
    ProgramView(*chained, &view);
    if (action != nullptr) {
      struct sigaction kernel = KernelAction(*chained, requested);
      if (g_real.sigaction(signal_number, &kernel, nullptr) != 0) {
        result = -1;
        error = errno;
      } else {
        StoreProgramAction(chained, requested);
      }
    }
    if (result == 0 && old_action != nullptr) *old_action = view;
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (result != 0) errno = error;
  return result;
}

}  // namespace retain::shim
