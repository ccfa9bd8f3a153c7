// tag_table: request tags — who asked for the work an allocation serves.
//
// A tag is opened by retain_request_begin(), by an HTTP request head read
// on an accepted socket, or by one the front door relays (net/front_door.h),
// and closed when the request ends. Ids count from 1
// in opening order. Which tag an allocation gets is decided by
// AttributeAllocation: the thread's own tag (explicit or from the HTTP head
// it read), else the most recently opened request still open (a server's
// inference loop works for whoever asked last), else none.
//
// Memory is bounded by the live set, not by the requests served: a tag that
// has ended, that no live allocation references and that a snapshot has
// reported (or that is older than the newest kUnreportedKept unreported
// ones) is released by a compaction (record/tag_compaction.h) and its entry reused.
// Release takes two compactions: the first marks the tag retiring (no new
// allocation is attributed to it from then on), the second, finding it still
// unreferenced, releases it. Released entries and directory pages are
// reused, never unmapped, and only after one more compaction, so a reader
// that loaded a pointer just before the release reads valid memory; a
// lookup checks the entry's id and misses rather than returning another
// request's entry.
//
// Ids are found through a three-level directory (10 + 12 + 10 bits) whose
// lower levels exist only where tags are retained.
//
// Thread-safe. Never allocates from the host heap. Not async-signal-safe.
#ifndef RETAIN_SHIM_SRC_RECORD_TAG_TABLE_H_
#define RETAIN_SHIM_SRC_RECORD_TAG_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace retain::shim {

// Values of retain.v1.Attribution and retain.v1.TagSource.
enum class Attribution : uint8_t { kNone = 0, kExplicit = 1, kHttpThread = 2, kProcessLatest = 3 };
enum class TagSource : uint8_t { kApi = 1, kHttp = 2, kControl = 3, kFrontDoor = 4 };

// Ended tags no live allocation references, kept for the next snapshot to
// report (each request's bytes allocated while open) even when snapshots
// are rare; older ones are released unreported (counted).
inline constexpr uint32_t kUnreportedKept = 1024;

enum class TagState : uint8_t { kOpen = 0, kEnded = 1, kRetiring = 2, kReleased = 3 };

struct TagEntry {
  uint32_t id;
  uint32_t thread_id;
  TagSource source;
  std::atomic<TagState> state;
  // Set by the snapshot writer once a snapshot has shown the ended tag.
  std::atomic<bool> reported;
  char request_id[128];
  char method[16];
  char path[256];
  uint64_t start_us;
  std::atomic<uint64_t> end_us;  // 0 while open
  // Ended without a complete response (an HTTP connection closed first).
  // Stored right after end_us: a snapshot racing the close may miss it.
  std::atomic<bool> aborted;
  std::atomic<uint64_t> bytes_allocated;
  // The compaction generation in which it closed, and the last one whose
  // scan found a live allocation referencing it.
  uint64_t closed_generation;
  std::atomic<uint64_t> referenced_generation;
  TagEntry* next_free;
};

// Opens a tag; any string may be null. Returns its id, 0 when the arena is
// full (then nothing is tagged for this request).
uint32_t OpenTag(TagSource source, const char* request_id, const char* method, const char* path);
// Closes a tag (idempotent), `aborted` when its request ended without a
// complete response. Returns the request's ordinal among ended ones (1 for
// the first to end; ClosedTagCount() as of this close, exact under
// concurrent closes) when this call closed it, else 0.
uint64_t CloseTag(uint32_t id, bool aborted);
// The entry for `id`, or nullptr (never opened, or released).
TagEntry* FindTag(uint32_t id);
// Ids handed out so far (the highest id).
uint32_t TagCount();
// Requests closed so far, and of those, aborted.
uint64_t ClosedTagCount();
uint64_t AbortedTagCount();

// The tag and rule for an allocation by the calling thread now; counts
// `bytes` into the tag's bytes_allocated. A thread whose own tag is retiring
// (its request ended long ago) falls back to the process-latest rule.
uint32_t AttributeAllocation(uint64_t bytes, Attribution* rule);

// The calling thread's own tag (0: none) and how it got it.
void SetThreadTag(uint32_t id, Attribution rule);

// --- Compaction (driven by record/tag_compaction.cc) -------------------------------

// True when enough tags ended since the last compaction that one is due.
bool TagCompactionDue();
// Starts a compaction: returns its generation. Tags closed from now on
// belong to the next one.
uint64_t BeginTagScan();
// During the scan: a live allocation references `id`.
void MarkTagReferenced(uint32_t id, uint64_t generation);
// Ends the scan: retires and releases what it can, recycles what the
// previous compaction released. `live_records` (all tables) sets when the
// next compaction is due, so its cost stays a small share per request.
void FinishTagScan(uint64_t generation, size_t live_records);

// --- Snapshots ----------------------------------------------------------------

// Calls `visit(entry, argument)` for every tag not released, in id order,
// with the table's lock held (visit must not open or close tags).
void ForEachRetainedTag(void (*visit)(TagEntry* entry, void* argument), void* argument);

struct TagTableStats {
  uint64_t retained;             // entries not released
  uint64_t released;             // released so far
  uint64_t released_unreported;  // of those, never shown by a snapshot
  uint64_t bytes;                // arena memory the table holds
  uint64_t compactions;
};
TagTableStats GetTagTableStats();

// fork(): the child must not inherit the lock mid-update.
void TagTableLockForFork();
void TagTableUnlockForFork();
void TagTableResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_RECORD_TAG_TABLE_H_
