// shim_thread: see shim_thread.h.
#include "shim_thread.h"

#include <pthread.h>
#include <signal.h>

namespace retain::shim {

int StartShimThread(const char* name, void* (*main)(void*)) {
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t thread;
  int error = pthread_create(&thread, &attr, main, nullptr);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (error == 0) pthread_setname_np(thread, name);
  return error;
}

}  // namespace retain::shim
