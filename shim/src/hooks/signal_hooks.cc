// signal_hooks: sigaction and signal, for the signals the shim chains with a
// Go program's runtime (snapshot/signal_chain.h). Every other call, and every
// call in a program that is not a Go program, goes straight to libc: one
// load and compare per call, no guard (they record nothing), and the result
// and errno are libc's. signal() is hooked because glibc's calls its own
// sigaction internally: C code in a cgo program that sets a handler with
// signal() would otherwise replace the chain's behind the shim's back.
#include <signal.h>
#include <string.h>

#include "record/hook_shape.h"
#include "snapshot/signal_chain.h"

using namespace retain::shim;

// glibc's sigaction and signal under their other names (exported, not
// declared): what the hooks call before the real functions are known.
extern "C" int __sigaction(int, const struct sigaction*, struct sigaction*);
extern "C" sighandler_t bsd_signal(int, sighandler_t);

RETAIN_EXPORT int sigaction(int signal_number, const struct sigaction* action,
                            struct sigaction* old_action) {
  // Before the real functions are known (another library's constructor):
  // glibc's own entry point, which the chain never needs to see (it is
  // set up later, from the shim's constructor).
  if (RETAIN_UNLIKELY(!RealFunctionsReady() || g_real.sigaction == nullptr)) {
    return __sigaction(signal_number, action, old_action);
  }
  if (RETAIN_UNLIKELY(SignalIsChained(signal_number))) {
    return ChainedSigaction(signal_number, action, old_action);
  }
  return g_real.sigaction(signal_number, action, old_action);
}

RETAIN_EXPORT sighandler_t signal(int signal_number, sighandler_t handler) {
  if (RETAIN_UNLIKELY(!RealFunctionsReady() || g_real.signal == nullptr)) {
    return bsd_signal(signal_number, handler);
  }
  if (RETAIN_LIKELY(!SignalIsChained(signal_number))) return g_real.signal(signal_number, handler);
  // What glibc's signal() asks of sigaction (BSD semantics): the handler
  // blocks its own signal and interrupted calls restart.
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, signal_number);
  action.sa_flags = SA_RESTART;
  struct sigaction old_action;
  if (ChainedSigaction(signal_number, &action, &old_action) != 0) return SIG_ERR;
  return old_action.sa_handler;
}
