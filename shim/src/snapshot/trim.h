// trim: POST /trim's work (net/control_endpoints.cc) and its record for the
// next snapshot (ProcessMemory.trims, trim_returned_bytes, last_trim_unix_ns
// in proto/retain.proto): glibc's malloc_trim(0), which gives back to the
// kernel the free memory every arena keeps (the top of each heap and whole
// free pages inside it), between two reads of /proc/self/status. The bytes
// returned are RssAnon before minus after (0 when it grew: the program's
// other threads keep allocating meanwhile), so they are a measurement, not
// what glibc says it freed.
//
// Thread and signal contract: any thread that is not in a hook; never from
// a signal handler (malloc_trim takes the arenas' locks). The caller's
// thread is made busy (BusyScope) so whatever malloc_trim calls passes
// through the hooks unrecorded; trims are serialized by a mutex. The record
// is atomics, read by the snapshot encoding without a lock. Nothing here
// allocates from the host heap or logs.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_TRIM_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_TRIM_H_

#include <cstdint>

namespace retain::shim {

// One trim, as /proc/self/status saw it (bytes).
struct TrimResult {
  uint64_t vm_rss_before;
  uint64_t vm_rss_after;
  uint64_t rss_anon_before;
  uint64_t rss_anon_after;
  uint64_t returned;     // rss_anon_before - rss_anon_after, or 0
  bool released;         // malloc_trim's answer: some memory was released
  uint64_t duration_us;  // time malloc_trim took
};

// Runs malloc_trim(0) and records it.
TrimResult TrimMalloc();

// Every trim since the shim started in this process.
struct TrimHistory {
  uint64_t trims;
  uint64_t returned_bytes;  // summed TrimResult.returned
  uint64_t last_unix_ns;    // when the last one ended; 0 before the first
};
TrimHistory GetTrimHistory();

// fork(): the child starts with no trims (they were the parent's) and a
// fresh mutex (the parent's control thread may have held it).
void TrimResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_TRIM_H_
