// shim_thread: starts one of the shim's own threads (the service thread,
// the control endpoint).
//
// The thread never takes the host's signals (it is created with every signal
// blocked, and inherits that mask), is detached, has a small stack and a
// name the user can see in top/ps. The thread function should set
// g_thread.busy for its whole life so nothing it does is recorded.
#ifndef RETAIN_SHIM_SRC_SHIM_THREAD_H_
#define RETAIN_SHIM_SRC_SHIM_THREAD_H_

namespace retain::shim {

// Returns 0, or the pthread_create error number.
int StartShimThread(const char* name, void* (*main)(void*));

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SHIM_THREAD_H_
