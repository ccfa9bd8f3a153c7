// request_events: see snapshot/request_events.h.
#include "snapshot/request_events.h"

#include <stdio.h>

#include <atomic>

#include "base/config.h"
#include "base/thread_state.h"
#include "snapshot/triggers.h"
#include "snapshot/writer.h"

namespace retain::shim {

namespace {

// The ordinal of the newest request whose every-N snapshot waits for the
// writer (0: none). Later triggers replace earlier ones: one snapshot, the
// newest count.
std::atomic<uint64_t> g_queued_ordinal;

void LabelFor(uint64_t ordinal, char* label, size_t size) {
  snprintf(label, size, "requests-%llu", static_cast<unsigned long long>(ordinal));
}

void QueueRequestSnapshot(uint64_t ordinal) {
  uint64_t queued = g_queued_ordinal.load(std::memory_order_relaxed);
  while (queued < ordinal &&
         !g_queued_ordinal.compare_exchange_weak(queued, ordinal, std::memory_order_acq_rel)) {
  }
  WakeServiceThread();
}

}  // namespace

uint32_t BeginRequest(TagSource source, Attribution rule, const char* request_id,
                      const char* method, const char* path) {
  uint32_t id = OpenTag(source, request_id, method, path);
  if (id != 0) SetThreadTag(id, rule);
  return id;
}

void EndRequest(uint32_t id, RequestEnd how) {
  if (id == 0) return;
  if (g_thread.tag_id == id) SetThreadTag(0, Attribution::kNone);
  const uint64_t ordinal = CloseTag(id, how == RequestEnd::kAborted);
  if (ordinal == 0) return;
  if (TagCompactionDue()) WakeServiceThread();
  const uint64_t every = GetConfig().snapshot_every;
  if (every == 0 || ordinal % every != 0) return;
  char label[64];
  LabelFor(ordinal, label, sizeof(label));
  if (TryWriteSnapshot(Trigger::kEveryNRequests, label, ordinal) == WriteOutcome::kBusy) {
    QueueRequestSnapshot(ordinal);
  }
}

void WriteQueuedRequestSnapshot() {
  const uint64_t ordinal = g_queued_ordinal.exchange(0, std::memory_order_acq_rel);
  if (ordinal == 0) return;
  char label[64];
  LabelFor(ordinal, label, sizeof(label));
  WriteSnapshotAt(Trigger::kEveryNRequests, label, ordinal, nullptr, 0);
}

void DropQueuedRequestSnapshot() { g_queued_ordinal.store(0, std::memory_order_relaxed); }

void RequestEventsResetInChild() { g_queued_ordinal.store(0, std::memory_order_relaxed); }

}  // namespace retain::shim
