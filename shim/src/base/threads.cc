// threads: see base/threads.h.
#include "base/threads.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "base/files.h"
#include "base/thread_state.h"

namespace retain::shim {

std::atomic<bool> g_service_thread_wanted;

namespace {

std::atomic<int> g_running;  // shim threads started and not yet returned
std::atomic<bool> g_program_threaded;

using ThreadMain = void* (*)(void*);

// The thread's function travels as pthread's argument (POSIX lets a
// function pointer round-trip through void*, as dlsym does).
void* RunShimThread(void* argument) {
  auto main = reinterpret_cast<ThreadMain>(argument);
  g_thread.shim_thread = 1;
  void* result = main(nullptr);
  g_running.fetch_sub(1, std::memory_order_acq_rel);
  return result;
}

// "Threads:" of /proc/self/status, and the state letter of /proc/self/stat
// (the thread group leader's). 0 when unreadable.
int ThreadCount() {
  char text[4096];
  if (ReadSmallFile("/proc/self/status", text, sizeof(text)) <= 0) return 0;
  const char* line = strstr(text, "\nThreads:");
  return line == nullptr ? 0 : atoi(line + 9);
}

char LeaderState() {
  char text[1024];
  if (ReadSmallFile("/proc/self/stat", text, sizeof(text)) <= 0) return 0;
  const char* end_of_name = strrchr(text, ')');  // the name may hold spaces and ')'
  return end_of_name != nullptr && end_of_name[1] == ' ' ? end_of_name[2] : 0;
}

}  // namespace

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
  g_running.fetch_add(1, std::memory_order_acq_rel);
  int error = pthread_create(&thread, &attr, RunShimThread, reinterpret_cast<void*>(main));
  if (error != 0) g_running.fetch_sub(1, std::memory_order_acq_rel);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (error == 0) pthread_setname_np(thread, name);
  return error;
}

bool OnlyShimThreadsRemain() {
  // While the leader (the main thread) runs, the program does. Once it has
  // ended (pthread_exit) it stays a zombie, still counted in Threads:,
  // until the whole group ends.
  const char state = LeaderState();
  if (state != 'Z' && state != 'X') return false;
  const int threads = ThreadCount();
  return threads > 0 && threads - 1 <= g_running.load(std::memory_order_acquire);
}

void ExitIfOnlyShimThreadsRemain() {
  static std::atomic<bool> exiting;
  if (OnlyShimThreadsRemain() && !exiting.exchange(true)) exit(0);
}

bool ShimThreadRuns() { return g_running.load(std::memory_order_acquire) > 0; }

bool ProgramIsThreaded() { return g_program_threaded.load(std::memory_order_acquire); }

void NoteProgramThread(uint32_t tid) {
  if (g_thread.shim_thread != 0 || g_program_threaded.load(std::memory_order_relaxed)) return;
  if (tid == static_cast<uint32_t>(getpid())) return;
  g_program_threaded.store(true, std::memory_order_release);
  g_service_thread_wanted.store(true, std::memory_order_release);
}

void ShimThreadsResetInChild() {
  g_running.store(0, std::memory_order_relaxed);
  g_program_threaded.store(false, std::memory_order_relaxed);
}

}  // namespace retain::shim
