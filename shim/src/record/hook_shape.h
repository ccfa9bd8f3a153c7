// hook_shape: what the extern "C" replacement functions share.
//
// Every hook has one shape: (1) before the shim is ready, initialise or
// serve from the bootstrap allocator; (2) if this thread is already inside
// the shim, call the real function and nothing else; (3) otherwise take the
// guard (BusyScope, base/thread_state.h), call the real function, record on
// success (a release is recorded before the real call, so the address cannot
// be reused by another thread before its record is gone), drop the guard. The hooks never change
// what the real function returns, nor errno.
#ifndef RETAIN_SHIM_SRC_RECORD_HOOK_SHAPE_H_
#define RETAIN_SHIM_SRC_RECORD_HOOK_SHAPE_H_

#include "base/hook_table.h"
#include "base/init_state.h"
#include "base/thread_state.h"
#include "record/recorder.h"

#define RETAIN_EXPORT extern "C" __attribute__((visibility("default")))
#define RETAIN_LIKELY(x) __builtin_expect(!!(x), 1)
#define RETAIN_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace retain::shim {

// True when the hook may use g_real (the shim is ready, or became ready now).
inline bool HookReady() { return RETAIN_LIKELY(ShimReady()) || InitializeShim(); }

// True when this call must pass straight through (re-entry); counts it.
inline bool PassThrough() {
  if (RETAIN_LIKELY(g_thread.busy == 0)) return false;
  CountReentry();
  return true;
}

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_HOOK_SHAPE_H_
