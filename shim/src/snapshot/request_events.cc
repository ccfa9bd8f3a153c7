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
// A relay's snapshot, written under its own count while the relay holds
// the connection (0: none): what the sniffer's synchronous write is.
std::atomic<uint64_t> g_exact_ordinal;
// The highest ordinal queued either way: a snapshot is in flight while
// the settled ordinal is below it.
std::atomic<uint64_t> g_requested_ordinal;
// SettledRequestSnapshot(), and who hears of it.
std::atomic<uint64_t> g_settled_ordinal;
std::atomic<void (*)()> g_settle_listener;

void LabelFor(uint64_t ordinal, char* label, size_t size) {
  snprintf(label, size, "requests-%llu", static_cast<unsigned long long>(ordinal));
}

void RaiseTo(std::atomic<uint64_t>& value, uint64_t ordinal) {
  uint64_t current = value.load(std::memory_order_relaxed);
  while (current < ordinal &&
         !value.compare_exchange_weak(current, ordinal, std::memory_order_acq_rel)) {
  }
}

void QueueRequestSnapshot(uint64_t ordinal) {
  RaiseTo(g_requested_ordinal, ordinal);
  RaiseTo(g_queued_ordinal, ordinal);
  WakeServiceThread();
}

void Settle(uint64_t ordinal) {
  uint64_t settled = g_settled_ordinal.load(std::memory_order_relaxed);
  while (settled < ordinal &&
         !g_settled_ordinal.compare_exchange_weak(settled, ordinal, std::memory_order_acq_rel)) {
  }
  if (settled >= ordinal) return;
  if (void (*listener)() = g_settle_listener.load(std::memory_order_acquire)) listener();
}

// Closes the tag; the ordinal whose every-N snapshot is due, or 0.
uint64_t CloseAndCheckDue(uint32_t id, RequestEnd how) {
  if (id == 0) return 0;
  if (g_thread.tag_id == id) SetThreadTag(0, Attribution::kNone);
  const uint64_t ordinal = CloseTag(id, how == RequestEnd::kAborted);
  if (ordinal == 0) return 0;
  if (TagCompactionDue()) WakeServiceThread();
  const uint64_t every = GetConfig().snapshot_every;
  if (every == 0 || ordinal % every != 0) return 0;
  return ordinal;
}

void WriteRequestSnapshot(uint64_t ordinal) {
  if (ordinal == 0) return;
  char label[64];
  LabelFor(ordinal, label, sizeof(label));
  WriteSnapshotAt(Trigger::kEveryNRequests, label, ordinal, nullptr, 0);
  Settle(ordinal);
}

}  // namespace

uint32_t BeginRequest(TagSource source, Attribution rule, const char* request_id,
                      const char* method, const char* path) {
  uint32_t id = OpenTag(source, request_id, method, path);
  if (id != 0) SetThreadTag(id, rule);
  return id;
}

void EndRequest(uint32_t id, RequestEnd how) {
  const uint64_t ordinal = CloseAndCheckDue(id, how);
  if (ordinal == 0) return;
  char label[64];
  LabelFor(ordinal, label, sizeof(label));
  if (TryWriteSnapshot(Trigger::kEveryNRequests, label, ordinal) == WriteOutcome::kBusy) {
    QueueRequestSnapshot(ordinal);
  } else {
    Settle(ordinal);
  }
}

uint64_t EndRequestQueued(uint32_t id, RequestEnd how) {
  const uint64_t ordinal = CloseAndCheckDue(id, how);
  if (ordinal == 0) return 0;
  // As EndRequest: the first due request while no request snapshot is in
  // flight gets one under its own count, and its connection waits for it;
  // those that end meanwhile are coalesced into the next, and go on.
  const bool in_flight = g_settled_ordinal.load(std::memory_order_acquire) <
                         g_requested_ordinal.load(std::memory_order_acquire);
  if (in_flight) {
    QueueRequestSnapshot(ordinal);
  } else {
    RaiseTo(g_requested_ordinal, ordinal);
    RaiseTo(g_exact_ordinal, ordinal);
    WakeServiceThread();
  }
  MaybeRunService();  // an idle server allocates nothing that would start it
  return in_flight ? 0 : ordinal;
}

uint64_t SettledRequestSnapshot() { return g_settled_ordinal.load(std::memory_order_acquire); }

void SetRequestSnapshotListener(void (*listener)()) {
  g_settle_listener.store(listener, std::memory_order_release);
}

void WriteQueuedRequestSnapshot() {
  // The relay's exact one, then the coalesced one, in request order.
  uint64_t exact = g_exact_ordinal.exchange(0, std::memory_order_acq_rel);
  uint64_t queued = g_queued_ordinal.load(std::memory_order_acquire);
  if (queued != 0 && (exact == 0 || queued < exact)) {
    queued = g_queued_ordinal.exchange(0, std::memory_order_acq_rel);
    WriteRequestSnapshot(queued);
  }
  WriteRequestSnapshot(exact);
  WriteRequestSnapshot(g_queued_ordinal.exchange(0, std::memory_order_acq_rel));
}

void DropQueuedRequestSnapshot() {
  Settle(g_exact_ordinal.exchange(0, std::memory_order_acq_rel));
  Settle(g_queued_ordinal.exchange(0, std::memory_order_acq_rel));
}

void RequestEventsResetInChild() {
  g_queued_ordinal.store(0, std::memory_order_relaxed);
  g_exact_ordinal.store(0, std::memory_order_relaxed);
  g_requested_ordinal.store(0, std::memory_order_relaxed);
  g_settled_ordinal.store(0, std::memory_order_relaxed);
  g_settle_listener.store(nullptr, std::memory_order_relaxed);
}

}  // namespace retain::shim
