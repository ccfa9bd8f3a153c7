// recorder: what a hook calls after the real function succeeded. Turns an
// allocation event into a record (stack, birth sequence, time, thread) in
// the live table or the mmap table, and a release into its removal.
//
// Every function here requires the calling thread's re-entry guard
// (g_thread.busy) to be held, preserves errno, never allocates from the host
// heap, never blocks except on the shim's own short locks, never throws.
#ifndef RETAIN_SHIM_SRC_RECORD_RECORDER_H_
#define RETAIN_SHIM_SRC_RECORD_RECORDER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "record/kinds.h"
#include "record/live_table.h"
#include "record/mmap_table.h"

namespace retain::shim {

// Heap (malloc family).
// From the shim's constructor (the process's recording copy only): young
// records go to per-thread rings (record/nursery.h) from then on.
void StartHeapNurseries();
// In a fork child, after the heap table's locks were reset: the rings of
// the threads that did not come along move to the table.
void HeapNurseriesAfterForkInChild();
void RecordHeapAlloc(void* pointer, size_t size);
// Call before the real free. Counts an unknown free when not recorded.
void RecordHeapFree(void* pointer);
// realloc support: see LiveTable::Take/Restore/CountFreed.
bool TakeHeapRecord(void* pointer, LiveRecord* out);
void RestoreHeapRecord(const LiveRecord& record);
void CompleteHeapRecordFree(const LiveRecord& record);

// Degraded mode (RETAIN_MAX_MEMORY reached): a heap block the table had no
// room for is still counted live, by its usable size (malloc_usable_size,
// the same measure when it is freed), so the totals stay right. Before the
// real free or realloc of a block the table does not know:
// DroppedBlockUsableSize gives what to forget (0 while nothing was dropped),
// ForgetDroppedHeapBytes forgets it once the call succeeded.
uint64_t DroppedBlockUsableSize(void* pointer);
void ForgetDroppedHeapBytes(uint64_t usable_bytes);
uint64_t DroppedHeapLiveBytes();
uint64_t DroppedHeapLiveCount();

// Mappings. The caller holds ProgramMappings().Lock() across the real call
// and these; `stack_id` was captured before taking that lock.
void RecordMapping(void* address, size_t length, int prot, int flags, int fd, uint32_t stack_id);
void RecordUnmapping(void* address, size_t length);

// Captures the current stack for a record (0 when unavailable).
uint32_t CaptureForRecord();

// A record of `size` bytes at `address` made now on this thread: its stack,
// thread, time and request tag (the birth number is the table's to give).
// Clobbers errno.
LiveRecord NewRecord(uintptr_t address, uint64_t size, Kind kind);

// The live heap records.
LiveTable& HeapTable();

// Hook calls passed through because the thread was already inside the shim.
void CountReentry();
uint64_t ReentriesSkipped();

// Birth sequence numbers given out so far (record/birth_sequence.h).
uint64_t NextBirthSequence();

// The kind of a host allocation made now on this thread: the given kind, or
// Kind::kGpuDriverHost while the thread is inside a GPU allocation call.
Kind HostKind(Kind kind);
uint64_t UnknownFrees();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_RECORDER_H_
