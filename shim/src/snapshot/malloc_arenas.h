// malloc_arenas: glibc's arenas one by one (ProcessMemory.malloc_arenas in
// proto/retain.proto), for the question "is it a leak, or does malloc just
// keep it?". mallinfo2 sums every arena; only malloc_info(3) tells them
// apart, and it prints XML to a stdio stream:
//
//   <heap nr="1">
//   <sizes>
//     <size from="49" to="64" total="1024" count="16"/>   (one per size class)
//     <unsorted from="113" to="9000" total="9113" count="2"/>
//   </sizes>
//   <total type="fast" count="3" size="128"/>
//   <total type="rest" count="84" size="195652"/>         (the top included)
//   <system type="current" size="135168"/>
//   <system type="max" size="135168"/>
//   <aspace type="total" size="135168"/>
//   <aspace type="mprotect" size="135168"/>
//   <aspace type="subheaps" size="1"/>                    (thread arenas only)
//   </heap>
//
// then totals over all arenas, which are not read (mallinfo2 has them).
//
// The stream is a fopencookie(3) stream, unbuffered, whose write function
// feeds MallocInfoParser as glibc prints: no buffer for the whole text, so
// nothing is cut however many arenas and size classes there are, and each
// arena is handed to the caller when its </heap> arrives. glibc prints an
// arena after it has let go of that arena's lock, so the caller's sink runs
// with no allocator lock held. The FILE glibc allocates for the stream
// comes from the private heap (base/hook_table.h), never the host's heap:
// on a thread of the shim's own that first allocation would make glibc
// create an arena, one more in the numbers being read.
//
// Thread and signal contract: ReadMallocArenas runs on the snapshot writer's
// thread, busy (BusyScope), as mallinfo2 does in snapshot/encoding.cc; never
// from a signal handler (malloc_info takes every arena's lock in turn, and
// stdio is not async-signal-safe) and never inside a hook. The parser
// (snapshot/malloc_info_parser.h) is plain code: any thread, no allocation.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_MALLOC_ARENAS_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_MALLOC_ARENAS_H_

#include <cstdint>

#include "snapshot/malloc_info_parser.h"

namespace retain::shim {

struct MallocArenasResult {
  bool ran;         // malloc_info printed to the stream (glibc, stream opened)
  bool complete;    // MallocInfoParser::Finish()
  uint32_t arenas;  // reported to the sink
};

// Runs malloc_info(0) into a MallocInfoParser that reports to `sink`. Not
// run (ran false) without glibc, when the private heap is taken or the
// stream cannot be opened. Saves and restores errno.
MallocArenasResult ReadMallocArenas(MallocArenaSink sink, void* context);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_MALLOC_ARENAS_H_
