// interruptible_call: the blocking calls the kernel restarts after the
// snapshot signal (read, accept, recv and their kin: the shim's handler is
// SA_RESTART), made so that a single-threaded program blocked in one still
// gets its signal snapshot, written on its own thread.
//
// Where the service thread does the work (snapshot/triggers.h), the call is
// simply made. Where the work stays on the program's threads, the hook arms
// the call (g_thread.interruptible_call) around it: the signal's handler
// may then end it with EINTR (snapshot/interrupted_call.h), and the hook
// writes the snapshot and makes the call again, with the errno it was
// entered with. The host sees only the call's own result: an EINTR that
// the kernel returned for another reason (a handler of the host's installed
// without SA_RESTART) is passed on as it came, unless the snapshot signal
// ended the same call in the same delivery (then the call is made again).
#ifndef RETAIN_SHIM_SRC_HOOKS_INTERRUPTIBLE_CALL_H_
#define RETAIN_SHIM_SRC_HOOKS_INTERRUPTIBLE_CALL_H_

#include <errno.h>

#include <atomic>

#include "base/thread_state.h"
#include "snapshot/triggers.h"

namespace retain::shim {

// Makes `call`, which calls `function` (the real one, which enters system
// call `number`).
template <typename Function, typename Call>
auto InterruptibleCall(long number, Function* function, Call call) {
  MaybeRunServiceBeforeBlocking();
  if (g_thread.busy != 0 || !ServiceWorkStaysHere()) return call();
  const int entry_errno = errno;
  // A call made inside a handler of the host's that interrupted an armed
  // one arms its own, and gives the outer one its arm back.
  const uint32_t outer_call = g_thread.interruptible_call;
  const uintptr_t outer_function = g_thread.interruptible_function;
  const uintptr_t outer_frame = g_thread.interruptible_frame;
  decltype(call()) result{};
  for (;;) {
    g_thread.interruptible_call = 0;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    g_thread.call_interrupted = 0;
    g_thread.interruptible_function = reinterpret_cast<uintptr_t>(function);
    g_thread.interruptible_frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    std::atomic_signal_fence(std::memory_order_seq_cst);
    g_thread.interruptible_call = static_cast<uint32_t>(number) + 1;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    // A signal that came before the arm: its work first.
    const bool waiting = ServiceWorkWaiting();
    if (!waiting) result = call();
    std::atomic_signal_fence(std::memory_order_seq_cst);
    g_thread.interruptible_call = 0;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (!waiting && g_thread.call_interrupted == 0) break;
    g_thread.call_interrupted = 0;
    {
      BusyScope busy;
      DoServiceWorkHere();
    }
    errno = entry_errno;
    // Work that cannot be done on this stack waits for a later hook; the
    // call is made meanwhile.
    if (ServiceWorkWaiting()) {
      result = call();
      break;
    }
  }
  g_thread.interruptible_function = outer_function;
  g_thread.interruptible_frame = outer_frame;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g_thread.interruptible_call = outer_call;
  return result;
}

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_HOOKS_INTERRUPTIBLE_CALL_H_
