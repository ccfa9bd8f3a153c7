// tag_table: see tag_table.h.
#include "tag_table.h"

#include <string.h>

#include "arena.h"
#include "process_info.h"
#include "thread_state.h"

namespace retain::shim {
namespace {

constexpr uint32_t kPageEntries = 1024;
constexpr uint32_t kDirectorySize = 16384;  // 16M tags
// How far back the process-latest rule looks for a request still open
// after the latest one closed.
constexpr uint32_t kLatestSearch = 256;

std::atomic<uint32_t> g_next_id{1};
std::atomic<uint64_t> g_closed;
// The most recently opened tag that may still be open (0: none).
std::atomic<uint32_t> g_latest_open;
std::atomic<TagEntry**> g_directory[kDirectorySize];

void CopyField(char* out, size_t size, const char* text) {
  if (text == nullptr) {
    out[0] = '\0';
    return;
  }
  size_t length = strnlen(text, size - 1);
  memcpy(out, text, length);
  out[length] = '\0';
}

bool Publish(TagEntry* entry) {
  uint32_t page_index = entry->id / kPageEntries;
  if (page_index >= kDirectorySize) return false;
  TagEntry** page = g_directory[page_index].load(std::memory_order_acquire);
  if (page == nullptr) {
    page = static_cast<TagEntry**>(MapPages(sizeof(TagEntry*) * kPageEntries));
    if (page == nullptr) return false;
    TagEntry** expected = nullptr;
    if (!g_directory[page_index].compare_exchange_strong(expected, page)) {
      UnmapPages(page, sizeof(TagEntry*) * kPageEntries);
      page = expected;
    }
  }
  __atomic_store_n(&page[entry->id % kPageEntries], entry, __ATOMIC_RELEASE);
  return true;
}

bool IsOpen(const TagEntry* entry) {
  return entry != nullptr && entry->end_us.load(std::memory_order_acquire) == 0;
}

}  // namespace

uint32_t OpenTag(TagSource source, const char* request_id, const char* method, const char* path) {
  auto* entry = static_cast<TagEntry*>(ArenaAllocate(sizeof(TagEntry)));
  if (entry == nullptr) return 0;
  entry->source = source;
  entry->thread_id = CurrentThreadId();
  CopyField(entry->request_id, sizeof(entry->request_id), request_id);
  CopyField(entry->method, sizeof(entry->method), method);
  CopyField(entry->path, sizeof(entry->path), path);
  entry->start_us = MicrosSinceStart();
  entry->id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  if (!Publish(entry)) return 0;
  // The newest request is the one a taskless thread works for.
  uint32_t latest = g_latest_open.load(std::memory_order_relaxed);
  while (latest < entry->id &&
         !g_latest_open.compare_exchange_weak(latest, entry->id, std::memory_order_acq_rel)) {
  }
  return entry->id;
}

bool CloseTag(uint32_t id) {
  TagEntry* entry = FindTag(id);
  if (entry == nullptr) return false;
  uint64_t end = MicrosSinceStart();
  if (end == 0) end = 1;  // 0 means open
  uint64_t expected = 0;
  if (!entry->end_us.compare_exchange_strong(expected, end, std::memory_order_acq_rel)) {
    return false;
  }
  g_closed.fetch_add(1, std::memory_order_relaxed);
  // If this was the latest open request, the latest becomes the newest one
  // still open (looked for once here, not on every allocation).
  uint32_t replacement = 0;
  for (uint32_t candidate = id - 1; candidate != 0 && id - candidate <= kLatestSearch;
       --candidate) {
    if (IsOpen(FindTag(candidate))) {
      replacement = candidate;
      break;
    }
  }
  uint32_t current = id;
  g_latest_open.compare_exchange_strong(current, replacement, std::memory_order_acq_rel);
  return true;
}

TagEntry* FindTag(uint32_t id) {
  if (id == 0 || id / kPageEntries >= kDirectorySize) return nullptr;
  TagEntry** page = g_directory[id / kPageEntries].load(std::memory_order_acquire);
  return page == nullptr ? nullptr : __atomic_load_n(&page[id % kPageEntries], __ATOMIC_ACQUIRE);
}

uint32_t TagCount() { return g_next_id.load(std::memory_order_relaxed) - 1; }
uint64_t ClosedTagCount() { return g_closed.load(std::memory_order_relaxed); }

void SetThreadTag(uint32_t id, Attribution rule) {
  g_thread.tag_id = id;
  g_thread.tag_rule = id == 0 ? 0 : static_cast<uint32_t>(rule);
}

uint32_t AttributeAllocation(uint64_t bytes, Attribution* rule) {
  uint32_t id = g_thread.tag_id;
  if (id != 0) {
    *rule = static_cast<Attribution>(g_thread.tag_rule);
  } else {
    // The most recent request still open (CloseTag keeps it current).
    uint32_t latest = g_latest_open.load(std::memory_order_acquire);
    if (latest != 0 && IsOpen(FindTag(latest))) id = latest;
    *rule = id == 0 ? Attribution::kNone : Attribution::kProcessLatest;
  }
  if (id != 0) {
    if (TagEntry* entry = FindTag(id)) {
      entry->bytes_allocated.fetch_add(bytes, std::memory_order_relaxed);
    }
  }
  return id;
}

}  // namespace retain::shim
