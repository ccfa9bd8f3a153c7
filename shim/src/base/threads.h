// threads: starts one of the shim's own threads (the service thread,
// the control endpoint), and knows whether the program has threads of its
// own.
//
// A program that runs on one thread is left on one thread: the service
// thread starts only in a program that has started a thread of its own
// (ProgramIsThreaded) or where the user asked for a shim thread
// (snapshot/triggers.h). Some programs must be single-threaded to work:
// unshare(CLONE_NEWUSER) and setns() into a user or mount namespace fail
// with EINVAL in a multi-threaded caller (unshare -U, container runtimes,
// sandboxes), and Chromium's zygote checks /proc/self/task before it forks
// and stops when it finds a second thread.
//
// The thread never takes the host's signals (it is created with every signal
// blocked, and inherits that mask), is detached, has a small stack and a
// name the user can see in top/ps. The thread function should set
// g_thread.busy for its whole life so nothing it does is recorded.
#ifndef RETAIN_SHIM_SRC_BASE_THREADS_H_
#define RETAIN_SHIM_SRC_BASE_THREADS_H_

#include <atomic>
#include <cstdint>

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

// Whether a shim thread runs (started and not returned).
bool ShimThreadRuns();

// Whether the program has run a thread of its own besides its first one:
// one the shim saw (NoteProgramThread). A program whose other threads never
// call into the shim reads as single-threaded, which only means the shim's
// work is done on its thread.
bool ProgramIsThreaded();

// From a thread's first call of CurrentThreadId (base/thread_state.h): a
// thread whose kernel id is not the process id is a second thread. The
// first such one raises g_service_thread_wanted.
void NoteProgramThread(uint32_t tid);

// Set when the service thread (snapshot/triggers.h) should be started or
// has work; hooks read it with one relaxed load. Here, not in the triggers,
// so that NoteProgramThread can raise it.
extern std::atomic<bool> g_service_thread_wanted;

// fork(): the child has one thread and none of the shim's.
void ShimThreadsResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_THREADS_H_
