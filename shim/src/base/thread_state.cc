// thread_state: definitions for base/thread_state.h.
#include "base/thread_state.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "base/threads.h"

namespace retain::shim {

__thread ThreadState g_thread __attribute__((tls_model("initial-exec")));

uint32_t FirstThreadIdCall() {
  g_thread.tid = static_cast<uint32_t>(syscall(SYS_gettid));
  NoteProgramThread(g_thread.tid);
  return g_thread.tid;
}

}  // namespace retain::shim
