// trim: see snapshot/trim.h.
#include "snapshot/trim.h"

#include <malloc.h>
#include <pthread.h>

#include <atomic>

#include "base/files.h"
#include "base/process_info.h"
#include "base/thread_state.h"

namespace retain::shim {
namespace {

pthread_mutex_t g_trim_mutex = PTHREAD_MUTEX_INITIALIZER;
std::atomic<uint64_t> g_trims;
std::atomic<uint64_t> g_returned_bytes;
std::atomic<uint64_t> g_last_unix_ns;

void ReadRss(uint64_t* vm_rss, uint64_t* rss_anon) {
  char text[8192];
  *vm_rss = 0;
  *rss_anon = 0;
  if (ReadSmallFile("/proc/self/status", text, sizeof(text)) <= 0) return;
  *vm_rss = ProcKilobytesField(text, "VmRSS");
  *rss_anon = ProcKilobytesField(text, "RssAnon");
}

}  // namespace

TrimResult TrimMalloc() {
  BusyScope busy;
  TrimResult result = {};
  pthread_mutex_lock(&g_trim_mutex);
  ReadRss(&result.vm_rss_before, &result.rss_anon_before);
  uint64_t started_us = PreciseMicrosSinceStart();
  result.released = malloc_trim(0) != 0;
  result.duration_us = PreciseMicrosSinceStart() - started_us;
  ReadRss(&result.vm_rss_after, &result.rss_anon_after);
  result.returned = result.rss_anon_before > result.rss_anon_after
                        ? result.rss_anon_before - result.rss_anon_after
                        : 0;
  g_returned_bytes.fetch_add(result.returned, std::memory_order_relaxed);
  g_last_unix_ns.store(NowUnixNs(), std::memory_order_relaxed);
  g_trims.fetch_add(1, std::memory_order_release);
  pthread_mutex_unlock(&g_trim_mutex);
  return result;
}

TrimHistory GetTrimHistory() {
  TrimHistory history;
  history.trims = g_trims.load(std::memory_order_acquire);
  history.returned_bytes = g_returned_bytes.load(std::memory_order_relaxed);
  history.last_unix_ns = g_last_unix_ns.load(std::memory_order_relaxed);
  return history;
}

void TrimResetInChild() {
  pthread_mutex_init(&g_trim_mutex, nullptr);
  g_trims.store(0, std::memory_order_relaxed);
  g_returned_bytes.store(0, std::memory_order_relaxed);
  g_last_unix_ns.store(0, std::memory_order_relaxed);
}

}  // namespace retain::shim
