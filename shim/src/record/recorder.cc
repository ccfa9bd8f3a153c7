// recorder: see record/recorder.h.
#include "record/recorder.h"

#include <errno.h>
#include <sys/mman.h>
#if defined(__APPLE__)
#include <malloc/malloc.h>
#endif

#include <atomic>

#include "base/hook_table.h"
#include "base/large_static.h"
#include "base/process_info.h"
#include "base/thread_state.h"
#include "record/gpu_backing.h"
#include "record/nursery.h"
#include "record/sampler.h"
#include "record/tag_table.h"
#include "unwind/stack_capture.h"

namespace retain::shim {
namespace {

// constinit: hooks may run before any dynamic initialiser of this library.
RETAIN_LARGE_STATIC constinit LiveTable g_heap;
RETAIN_LARGE_STATIC constinit BirthSequence g_births;
RETAIN_LARGE_STATIC constinit Nurseries g_nurseries;
std::atomic<uint64_t> g_unknown_frees;
std::atomic<uint64_t> g_reentries;
std::atomic<uint64_t> g_dropped_live_bytes;
std::atomic<uint64_t> g_dropped_live_count;

// The allocator's usable size of a live block (Darwin: malloc_size).
uint64_t UsableSize(void* pointer) {
#if defined(__APPLE__)
  return malloc_size(pointer);
#else
  return g_real.malloc_usable_size(pointer);
#endif
}

// Subtracts without going below 0: a block freed here may predate the shim
// (then it was never added).
void SaturatingSubtract(std::atomic<uint64_t>& value, uint64_t amount) {
  uint64_t current = value.load(std::memory_order_relaxed);
  while (!value.compare_exchange_weak(current, current > amount ? current - amount : 0,
                                      std::memory_order_relaxed)) {
  }
}

// Page-aligned length as the kernel sees a mapping.
size_t PageRound(size_t length) { return (length + 4095) & ~size_t{4095}; }

}  // namespace

LiveTable& HeapTable() { return g_heap; }

BirthSequence& Births() { return g_births; }
uint64_t NextBirthSequence() { return g_births.Peek(); }

Kind HostKind(Kind kind) {
  return __builtin_expect(g_thread.gpu_depth != 0, 0) ? Kind::kGpuDriverHost : kind;
}
void CountReentry() { g_reentries.fetch_add(1, std::memory_order_relaxed); }
uint64_t ReentriesSkipped() { return g_reentries.load(std::memory_order_relaxed); }
uint64_t UnknownFrees() { return g_unknown_frees.load(std::memory_order_relaxed); }

uint32_t CaptureForRecord() {
  int saved = errno;
  uint32_t id = CaptureStackId();
  errno = saved;
  return id;
}

LiveRecord NewRecord(uintptr_t address, uint64_t size, Kind kind) {
  LiveRecord record{};
  record.address = address;
  record.size = size;
  record.kind = kind;
  record.stack_id = CaptureStackId();
  record.thread_id = CurrentThreadId();
  record.birth_time_us = MicrosSinceStart();
  Attribution rule;
  record.tag_id = AttributeAllocation(size, &rule);
  record.attribution = static_cast<uint8_t>(rule);
  return record;
}

void StartHeapNurseries() { g_nurseries.Attach(&g_heap, &g_births); }
void HeapNurseriesAfterForkInChild() {
  if (g_nurseries.attached()) g_nurseries.ReleaseOthersInChild();
}

void RecordHeapAlloc(void* pointer, size_t size) {
  int saved = errno;
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  const Kind kind = HostKind(Kind::kHeap);
  // Full tracking keeps a heap record in its thread's ring of young ones
  // first (record/nursery.h); sampled records and GPU drivers' blocks go to
  // the table directly.
  Nursery* const ring =
      g_sample_interval == 0 && kind == Kind::kHeap ? g_nurseries.Mine() : nullptr;
  // The table's index line for what will be inserted there (this block, or
  // the record its ring will move) arrives during the walk.
  LiveTable::Spot spot{};
  if (ring == nullptr) {
    spot = g_heap.Locate(address);
    g_heap.Prefetch(spot);
  } else if (const uintptr_t moving = Nurseries::NextToMove(*ring); moving != 0) {
    g_heap.Prefetch(g_heap.Locate(moving));
  }
  const LiveRecord record = NewRecord(address, size, kind);
  uintptr_t dropped = 0;
  if (ring != nullptr) {
    g_nurseries.Insert(*ring, record, &dropped);
  } else {
    if (g_sample_interval != 0) SampledInsert(address);
    if (!g_heap.Insert(record, g_births, spot)) dropped = address;
    if (__builtin_expect(kind == Kind::kGpuDriverHost, 0)) NoteGpuHostBlock(address, size);
  }
  if (__builtin_expect(dropped != 0, 0)) {
    g_dropped_live_bytes.fetch_add(UsableSize(reinterpret_cast<void*>(dropped)),
                                   std::memory_order_relaxed);
    g_dropped_live_count.fetch_add(1, std::memory_order_relaxed);
  }
  errno = saved;
}

uint64_t DroppedBlockUsableSize(void* pointer) {
  if (__builtin_expect(g_heap.dropped() == 0, 1)) return 0;
  return UsableSize(pointer);
}

void ForgetDroppedHeapBytes(uint64_t usable_bytes) {
  if (usable_bytes == 0) return;
  SaturatingSubtract(g_dropped_live_bytes, usable_bytes);
  SaturatingSubtract(g_dropped_live_count, 1);
}

uint64_t DroppedHeapLiveBytes() { return g_dropped_live_bytes.load(std::memory_order_relaxed); }
uint64_t DroppedHeapLiveCount() { return g_dropped_live_count.load(std::memory_order_relaxed); }

void RecordHeapFree(void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  if (g_sample_interval != 0) {
    // Most blocks were never sampled: no lock, no lookup for them.
    if (!SampledMayContain(address)) return;
    if (g_heap.Remove(address)) {
      SampledErase(address);
    } else {
      ForgetDroppedHeapBytes(DroppedBlockUsableSize(pointer));
    }
    return;
  }
  const bool removed = g_nurseries.attached() ? g_nurseries.Remove(g_nurseries.MineIfAny(), address)
                                              : g_heap.Remove(address);
  if (!removed) {
    g_unknown_frees.fetch_add(1, std::memory_order_relaxed);
    ForgetDroppedHeapBytes(DroppedBlockUsableSize(pointer));
  }
}

bool TakeHeapRecord(void* pointer, LiveRecord* out) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  if (g_sample_interval != 0) {
    return SampledMayContain(address) && g_heap.Take(address, out);
  }
  const bool taken = g_nurseries.attached()
                         ? g_nurseries.Take(g_nurseries.MineIfAny(), address, out)
                         : g_heap.Take(address, out);
  if (taken) return true;
  g_unknown_frees.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void RestoreHeapRecord(const LiveRecord& record) { g_heap.Restore(record); }
void CompleteHeapRecordFree(const LiveRecord& record) {
  g_heap.CountFreed(record);
  if (g_sample_interval != 0) SampledErase(record.address);
}

void RecordMapping(void* address, size_t length, int prot, int flags, int fd, uint32_t stack_id) {
  MapRecord record{};
  record.start = reinterpret_cast<uintptr_t>(address);
  record.end = record.start + PageRound(length);
  record.kind =
      HostKind((flags & MAP_ANONYMOUS) != 0 || fd < 0 ? Kind::kMmapAnon : Kind::kMmapFile);
  record.flags = record.kind == Kind::kGpuDriverHost
                     ? 1
                     : static_cast<uint64_t>(static_cast<uint32_t>(prot)) |
                           (static_cast<uint64_t>(static_cast<uint32_t>(flags)) << 8);
  record.stack_id = stack_id;
  record.thread_id = CurrentThreadId();
  record.birth_time_us = MicrosSinceStart();
  Attribution rule;
  record.tag_id = AttributeAllocation(record.end - record.start, &rule);
  record.attribution = static_cast<uint8_t>(rule);
  // Under the mappings lock, like the heap's under its shard lock.
  uint16_t unused_offset;  // the mapping keeps its own thread and time
  record.birth_sequence = g_births.Take(record.thread_id, record.birth_time_us, &unused_offset);
  ProgramMappings().Insert(record);
  if (record.kind == Kind::kGpuDriverHost)
    NoteGpuHostBlock(record.start, record.end - record.start);
}

void RecordUnmapping(void* address, size_t length) {
  auto start = reinterpret_cast<uintptr_t>(address);
  if (!ProgramMappings().RemoveRange(start, start + PageRound(length))) {
    ProgramMappings().CountUnknownUnmap();
  }
}

}  // namespace retain::shim
