// request_events: what happens when a request begins or ends, whoever
// noticed it (the marker API, the HTTP sniffer, the control endpoint).
//
// Ending a request may write a snapshot (RETAIN_SNAPSHOT_EVERY=N, after
// every Nth request ends). When no other snapshot is being written, it is
// written synchronously, on the thread that ended the request, so a server
// that answers one request at a time gets exactly one snapshot per N
// requests, taken before the next request's work. When another snapshot is
// being written (concurrent requests, a signal or control snapshot), the
// ending thread does not wait: the snapshot is coalesced into one the
// service thread writes as soon as the writer is free, labelled and counted
// (Header.requests_at_trigger) for the newest request whose end asked for
// it. A snapshot is never labelled with a count other than its trigger's.
// Call from normal context, outside the shim's locks.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_REQUEST_EVENTS_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_REQUEST_EVENTS_H_

#include <cstdint>

#include "record/tag_table.h"

namespace retain::shim {

// Opens a tag and makes it the calling thread's (rule `rule`).
uint32_t BeginRequest(TagSource source, Attribution rule, const char* request_id,
                      const char* method, const char* path);

enum class RequestEnd : uint8_t {
  kCompleted,  // its response was sent whole (or the API/control said so)
  kAborted,    // the connection closed before its response was complete
};

// Closes the tag, detaches it from the calling thread if it is the
// thread's, and writes (or queues) the every-N snapshot when one is due.
void EndRequest(uint32_t id, RequestEnd how = RequestEnd::kCompleted);

// For a relay that must not write snapshots on its thread: closes the tag
// like EndRequest, and mirrors it without writing: when a snapshot is due
// and no request snapshot is in flight, one is queued for the service
// thread under this request's count, and the return value is that ordinal:
// the relay holds the connection's next request back from the server until
// it is settled (as EndRequest holds the thread that writes). A due
// request that ends while one is in flight is coalesced into the next, and
// 0 is returned (no hold), as EndRequest does when the writer is busy. 0
// too when none is due. The service thread is started if it is not running
// (the caller must be a shim thread).
uint64_t EndRequestQueued(uint32_t id, RequestEnd how);

// The highest ordinal whose every-N snapshot is settled: written, failed,
// dropped at exit, or replaced by a newer one that was written.
uint64_t SettledRequestSnapshot();

// Called, on the thread that settled it, each time SettledRequestSnapshot
// advances; nullptr for none. It must be cheap, async with respect to the
// caller (it may be a host thread ending a sniffed request) and must not
// end requests itself.
void SetRequestSnapshotListener(void (*listener)());

// From the service thread: writes the every-N snapshot that EndRequest
// queued because the writer was busy, if there is one. At exit it is
// dropped instead (the program is tearing down; the exit snapshot follows).
void WriteQueuedRequestSnapshot();
void DropQueuedRequestSnapshot();

// fork(): the parent's queued snapshot is not the child's.
void RequestEventsResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_REQUEST_EVENTS_H_
