// signal_hooks: sigaction, for the signals the shim chains with a Go
// program's runtime (snapshot/signal_chain.h). Every other call, and every
// call in a program that is not a Go program, goes straight to libc: one
// load and compare per call, no guard (sigaction records nothing), and the
// result and errno are libc's.
#include <signal.h>

#include "record/hook_shape.h"
#include "snapshot/signal_chain.h"

using namespace retain::shim;

// glibc's sigaction under its internal name (exported, not declared).
extern "C" int __sigaction(int, const struct sigaction*, struct sigaction*);

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
