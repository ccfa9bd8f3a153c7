// signal_chain: the shim's signal handlers in a Go program, chained with the
// Go runtime's.
//
// A Go program (built with cgo, so it takes LD_PRELOAD) installs its own
// handler for nearly every signal when its runtime starts, through libc's
// sigaction (runtime/cgo's x_cgo_sigaction), and ends with a raw exit_group
// system call (os.Exit, main returning, or death by a signal after the
// runtime's handler set SIG_DFL and raised it again). Without chaining, the
// snapshot signal is taken over and ignored, and no exit snapshot is ever
// written. So in a Go program (unwind/go_runtime.h; RETAIN_GO_SIGNALS=off to
// not), for a few signals, the shim keeps the kernel's disposition for
// itself and shows the program the disposition it asked for (sigaction's old
// action is what the program set), running the program's handler after its
// own, with the program's flags and mask:
//  - RETAIN_SIGNAL (SIGUSR2): counts a snapshot request for the service
//    thread (snapshot/triggers.h), then runs Go's handler, which ignores the
//    signal or hands it to os/signal.Notify's channel as without the shim.
//  - SIGTERM and SIGINT, while the program has a handler for them (Go's,
//    installed at start unless the signal was ignored): the stop snapshot
//    (Trigger::kStopSignal, labelled with the signal's name), written by the
//    service thread while the handler waits for it (at most
//    kStopSnapshotWaitSeconds; not at all when the signal interrupted the
//    shim's own code on that thread, which could hold what the writer
//    needs), then Go's handler: the program stops as it would have, or its
//    shutdown code gets the signal. SIG_DFL and SIG_IGN go to the kernel as
//    the program sets them, so the runtime's "die from this signal" still
//    dies from it.
// The shim's handler runs on the signal stack the program set up (Go's
// handlers are SA_ONSTACK, as Go requires of every handler in its process),
// uses a few hundred bytes of it, and calls only async-signal-safe
// functions.
//
// Every other signal, and every signal of a program that is not a Go
// program, is the program's alone: the sigaction hook passes the call through.
//
// Thread-safe and async-signal-safe: ChainedSigaction may be called from a
// signal handler (Go's runtime sets SIG_DFL from inside its handler); it
// blocks every signal while it updates a disposition.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_SIGNAL_CHAIN_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_SIGNAL_CHAIN_H_

#include <signal.h>

namespace retain::shim {

// The longest a stop signal's handler waits for its snapshot.
inline constexpr int kStopSnapshotWaitSeconds = 5;

// From the constructor, in a Go program with RETAIN_GO_SIGNALS on: chains
// the snapshot signal `snapshot_signal` (0: none), if it still has its
// default disposition, and the stop signals. Returns true when the snapshot
// signal was chained (its handler is installed).
bool InstallSignalChain(int snapshot_signal);

// True when sigaction() for `signal_number` must go through ChainedSigaction.
bool SignalIsChained(int signal_number);

// fork(): the child's copy of the chain's lock is free (another thread may
// have held it at fork). From the atfork child handler.
void SignalChainResetInChild();

// sigaction() for a chained signal: the program's view, kept by the shim.
// Same contract as sigaction(2).
int ChainedSigaction(int signal_number, const struct sigaction* action,
                     struct sigaction* old_action);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_SIGNAL_CHAIN_H_
