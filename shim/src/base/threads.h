// threads: starts one of the shim's own threads (the service thread,
// the control endpoint).
//
// The thread never takes the host's signals (it is created with every signal
// blocked, and inherits that mask), is detached, has a small stack and a
// name the user can see in top/ps. The thread function should set
// g_thread.busy for its whole life so nothing it does is recorded.
#ifndef RETAIN_SHIM_SRC_BASE_THREADS_H_
#define RETAIN_SHIM_SRC_BASE_THREADS_H_

namespace retain::shim {

// Returns 0, or the pthread_create error number. `main` gets nullptr.
int StartShimThread(const char* name, void* (*main)(void*));

// True when every thread of the program itself has ended (its main thread
// called pthread_exit and the others are gone) and only the shim's threads
// keep the process: glibc would have exited it with status 0 when its last
// thread ended, so a shim thread that lives on must do that itself
// (exit(0)). Reads /proc; for a thread that polls about once a second.
bool OnlyShimThreadsRemain();

// exit(0) when OnlyShimThreadsRemain(), by one shim thread only. From a
// shim thread's loop, about once a second.
void ExitIfOnlyShimThreadsRemain();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_THREADS_H_
