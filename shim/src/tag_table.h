// tag_table: request tags — who asked for the work an allocation serves.
//
// A tag is opened by retain_request_begin() or by an HTTP request head read
// on an accepted socket, and closed when the request ends. Ids count from 1
// in opening order. Entries live in the arena, found by id through a
// two-level directory, and are never freed (a tag stays in every later
// snapshot). Which tag an allocation gets is decided by AttributeAllocation:
// the thread's own tag (explicit or from the HTTP head it read), else the
// most recently opened request still open (a server's inference loop works
// for whoever asked last), else none.
//
// Thread-safe. Never allocates from the host heap. Not async-signal-safe.
#ifndef RETAIN_SHIM_SRC_TAG_TABLE_H_
#define RETAIN_SHIM_SRC_TAG_TABLE_H_

#include <atomic>
#include <cstdint>

namespace retain::shim {

// Values of retain.v1.Attribution and retain.v1.TagSource.
enum class Attribution : uint8_t { kNone = 0, kExplicit = 1, kHttpThread = 2, kProcessLatest = 3 };
enum class TagSource : uint8_t { kApi = 1, kHttp = 2, kControl = 3 };

struct TagEntry {
  uint32_t id;
  uint32_t thread_id;
  TagSource source;
  char request_id[128];
  char method[16];
  char path[256];
  uint64_t start_us;
  std::atomic<uint64_t> end_us;  // 0 while open
  std::atomic<uint64_t> bytes_allocated;
};

// Opens a tag; any string may be null. Returns its id, 0 when the arena is
// full (then nothing is tagged for this request).
uint32_t OpenTag(TagSource source, const char* request_id, const char* method, const char* path);
// Closes a tag (idempotent). Returns true if this call closed it.
bool CloseTag(uint32_t id);
// The entry for `id`, or nullptr.
TagEntry* FindTag(uint32_t id);
// Ids handed out so far (the highest id).
uint32_t TagCount();
// Requests closed so far.
uint64_t ClosedTagCount();

// The tag and rule for an allocation by the calling thread now; counts
// `bytes` into the tag's bytes_allocated.
uint32_t AttributeAllocation(uint64_t bytes, Attribution* rule);

// The calling thread's own tag (0: none) and how it got it.
void SetThreadTag(uint32_t id, Attribution rule);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_TAG_TABLE_H_
