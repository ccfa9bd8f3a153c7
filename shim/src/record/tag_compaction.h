// tag_compaction: releases the request tags nothing needs any more, so that
// the shim's memory follows the live set and not the number of requests
// served (record/tag_table.h says which tags go).
//
// One compaction scans every live record once (each table shard under its
// own lock, a few nanoseconds per record) for the tags they reference. It
// runs on the shim's service thread when TagCompactionDue(), that is after a
// number of ended requests proportional to the live records, so its cost per
// request stays small and bounded.
//
// Not async-signal-safe; takes table locks one at a time; never allocates
// from the host heap.
#ifndef RETAIN_SHIM_SRC_RECORD_TAG_COMPACTION_H_
#define RETAIN_SHIM_SRC_RECORD_TAG_COMPACTION_H_

namespace retain::shim {

void CompactTags();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_TAG_COMPACTION_H_
