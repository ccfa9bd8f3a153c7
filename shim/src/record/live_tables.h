// live_tables: every table of live records (the heap's and each GPU API's),
// for the code that must walk them all: the snapshot writer, the tag
// compaction.
//
// Thread-safe as the tables are.
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

// Records in all of them now (each shard counted under its lock).
inline size_t LiveRecordCount() {
  size_t total = 0;
  for (int i = 0; i < kLiveTableCount; ++i) total += LiveTableAt(i).Count();
  return total;
}

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_LIVE_TABLES_H_
