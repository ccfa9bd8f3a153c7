// live_tables: every table of live records (the heap's and each GPU API's),
// and the one walk over them, for the code that must visit them all: the
// snapshot writer's capture and health block, the control endpoint's
// /stats and /metrics, the tag compaction, the fork handlers.
//
// Thread-safe as the tables are. The walk's order (heap, then each GpuApi in
// enum order) is the order their locks are taken in; the reversed walk is
// the order they are released in. Neither allocates; each is as
// async-signal-safe as what it calls on each table.
#ifndef RETAIN_SHIM_SRC_RECORD_LIVE_TABLES_H_
#define RETAIN_SHIM_SRC_RECORD_LIVE_TABLES_H_

#include <cstddef>

#include "record/gpu_recorder.h"
#include "record/live_table.h"
#include "record/recorder.h"

namespace retain::shim {

inline constexpr int kLiveTableCount = 1 + kGpuApiCount;

// Table 0 is the heap's, then one per GpuApi in enum order.
inline LiveTable& LiveTableAt(int i) {
  return i == 0 ? HeapTable() : GpuTable(static_cast<GpuApi>(i - 1));
}

// Calls visit(LiveTable&) for every live table, in lock order.
template <typename Visit>
void ForEachLiveTable(Visit visit) {
  for (int i = 0; i < kLiveTableCount; ++i) visit(LiveTableAt(i));
}

// The same, in unlock order.
template <typename Visit>
void ForEachLiveTableReversed(Visit visit) {
  for (int i = kLiveTableCount - 1; i >= 0; --i) visit(LiveTableAt(i));
}

// Records in all of them now (each shard counted under its lock).
inline size_t LiveRecordCount() {
  size_t total = 0;
  ForEachLiveTable([&](LiveTable& table) { total += table.Count(); });
  return total;
}

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_LIVE_TABLES_H_
