// capture: see snapshot/capture.h.
#include "snapshot/capture.h"

#include <algorithm>

#include "base/arena.h"
#include "record/birth_sequence.h"
#include "record/live_tables.h"
#include "record/recorder.h"
#include "record/tag_table.h"

namespace retain::shim {
namespace {

// With every table held: the residency of each large row, as of now.
void MeasureLargeRowsLocked(TableCapture& capture, ResidencyMeter& meter) {
  capture.measured_count = 0;
  meter.set_rows_only(true);
  auto measure = [&](Kind kind, uintptr_t start, uint64_t size) {
    if (size < kMeasuredUnderLockBytes || !MeasuresResidency(kind) ||
        capture.measured_count == kMeasuredUnderLockRows) {
      return;
    }
    capture.measured[capture.measured_count++] = {start, size, meter.Measure(start, size)};
  };
  for (size_t i = 0; i < capture.heap_count; ++i) {
    measure(capture.heap[i].kind, capture.heap[i].address, capture.heap[i].size);
  }
  for (size_t i = 0; i < capture.map_count; ++i) {
    measure(capture.maps[i].kind, capture.maps[i].start,
            capture.maps[i].end - capture.maps[i].start);
  }
  meter.set_rows_only(false);
}

}  // namespace

const Residency* TableCapture::MeasuredAt(uintptr_t start, uint64_t size) const {
  if (size < kMeasuredUnderLockBytes) return nullptr;
  const MeasuredRow* begin = measured;
  const MeasuredRow* end = measured + measured_count;
  const MeasuredRow* found = std::lower_bound(
      begin, end, start, [](const MeasuredRow& row, uintptr_t at) { return row.start < at; });
  if (found == end || found->start != start || found->size != size) return nullptr;
  return &found->residency;
}

bool CaptureTables(TableCapture& capture, ResidencyMeter* meter) {
  if (meter != nullptr && capture.measured == nullptr) {
    capture.measured =
        static_cast<MeasuredRow*>(MapScratchPages(sizeof(MeasuredRow) * kMeasuredUnderLockRows));
  }
  if (capture.measured == nullptr) meter = nullptr;
  capture.measured_count = 0;
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
      if (meter != nullptr) MeasureLargeRowsLocked(capture, *meter);
    }
    ForEachLiveTableReversed([](LiveTable& table) { table.UnlockAll(); });
    maps.Unlock();
    if (fits) {
      std::sort(capture.measured, capture.measured + capture.measured_count,
                [](const MeasuredRow& a, const MeasuredRow& b) { return a.start < b.start; });
      return true;
    }
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
