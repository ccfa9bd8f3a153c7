// tag_compaction: see record/tag_compaction.h.
#include "record/tag_compaction.h"

#include <cstddef>
#include <cstdint>

#include "record/live_tables.h"
#include "record/mmap_table.h"
#include "record/recorder.h"
#include "record/tag_table.h"

namespace retain::shim {
namespace {

void MarkReferenced(uint32_t tag_id, uint64_t generation) { MarkTagReferenced(tag_id, generation); }

}  // namespace

void CompactTags() {
  const uint64_t generation = BeginTagScan();
  size_t live_records = 0;
  ForEachLiveTable(
      [&](LiveTable& table) { live_records += table.VisitTags(MarkReferenced, generation); });
  MmapTable& maps = ProgramMappings();
  maps.Lock();
  maps.VisitTags(MarkReferenced, generation);
  live_records += maps.size();
  maps.Unlock();
  FinishTagScan(generation, live_records);
}

}  // namespace retain::shim
