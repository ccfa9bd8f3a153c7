// capture: see snapshot/capture.h.
#include "snapshot/capture.h"

#include "base/arena.h"
#include "record/birth_sequence.h"
#include "record/live_tables.h"
#include "record/recorder.h"
#include "record/tag_table.h"

namespace retain::shim {

bool CaptureTables(TableCapture& capture) {
  MmapTable& maps = ProgramMappings();
  for (int attempt = 0; attempt < 8; ++attempt) {
    maps.Lock();
    size_t map_estimate = maps.size();
    maps.Unlock();
    capture.Release();
    capture.heap_capacity = LiveRecordCount() * 9 / 8 + 1024 * (attempt + 1);
    capture.map_capacity = map_estimate + 64;
    capture.heap =
        static_cast<LiveRecord*>(MapScratchPages(sizeof(LiveRecord) * capture.heap_capacity));
    capture.maps =
        static_cast<MapRecord*>(MapScratchPages(sizeof(MapRecord) * capture.map_capacity));
    if (capture.heap == nullptr || capture.maps == nullptr) return false;
    maps.Lock();
    ForEachLiveTable([](LiveTable& table) { table.LockAll(); });
    size_t live_count = 0;
    ForEachLiveTable([&](LiveTable& table) { live_count += table.CountLocked(); });
    bool fits = live_count <= capture.heap_capacity && maps.size() <= capture.map_capacity;
    if (fits) {
      capture.heap_count = 0;
      capture.missed_frees = 0;
      ForEachLiveTable([&](LiveTable& table) {
        capture.heap_count += table.CopyLocked(capture.heap + capture.heap_count);
        table.SumCountersLocked(capture.counters);
        capture.missed_frees += table.missed_frees();
      });
      capture.map_count = maps.Copy(capture.maps, capture.map_capacity);
      for (int k = 0; k < kKindCount; ++k) capture.counters[k].Add(maps.counters(k));
      // Read with every table locked: every record numbered below this is
      // in the copy, and none numbered at or above it.
      capture.next_birth_sequence = Births().StartGeneration();
      // Blocks the heap table had no room for (degraded) are live all the
      // same: counted by usable size (record/recorder.h).
      KindCounters& heap = capture.counters[KindIndex(Kind::kHeap)];
      heap.live_bytes += DroppedHeapLiveBytes();
      heap.live_count += DroppedHeapLiveCount();
      capture.requests_opened = TagCount();
      capture.requests_closed = ClosedTagCount();
      capture.requests_aborted = AbortedTagCount();
    }
    ForEachLiveTableReversed([](LiveTable& table) { table.UnlockAll(); });
    maps.Unlock();
    if (fits) return true;
  }
  return false;
}

void CountTagBytes(TableCapture& capture, TagCapture& tags) {
  for (size_t i = 0; i < capture.heap_count; ++i) {
    tags.CountLive(&capture.heap[i].tag_id, capture.heap[i].size);
  }
  for (size_t i = 0; i < capture.map_count; ++i) {
    tags.CountLive(&capture.maps[i].tag_id, capture.maps[i].end - capture.maps[i].start);
  }
}

}  // namespace retain::shim
