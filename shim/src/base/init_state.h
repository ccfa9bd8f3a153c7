// init_state: whether the shim is ready to record, and how it gets there.
//
// Initialisation happens in two steps. The first hook call of the process
// (often before the shim's constructor, from another library's) resolves
// the real functions and reads the configuration: enough to record. The
// constructor then does what must not happen inside an arbitrary malloc
// call: loading libunwind, installing the snapshot signal handler and the
// fork handlers. Until the constructor ran, stacks come from the
// frame-pointer walker only.
#ifndef RETAIN_SHIM_SRC_BASE_INIT_STATE_H_
#define RETAIN_SHIM_SRC_BASE_INIT_STATE_H_

#include <atomic>

namespace retain::shim {

extern std::atomic<bool> g_shim_ready;
inline bool ShimReady() { return g_shim_ready.load(std::memory_order_acquire); }

// The first step above. Idempotent and thread-safe; returns false while it
// cannot complete on this thread (dlsym re-entering the hooks), in which
// case the caller serves the request from the bootstrap allocator.
bool InitializeShim();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_INIT_STATE_H_
