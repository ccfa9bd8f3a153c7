// request_events: what happens when a request begins or ends, whoever
// noticed it (the marker API, the HTTP sniffer, the control endpoint).
//
// Ending a request may write a snapshot (RETAIN_SNAPSHOT_EVERY=N, after
// every Nth request ends), synchronously, on the thread that ended it, so
// the series `retain-diff --trend` reads has exactly one snapshot per N
// requests, taken before the next request's work. Call from normal
// context, outside the shim's locks.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_REQUEST_EVENTS_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_REQUEST_EVENTS_H_

#include <cstdint>

#include "record/tag_table.h"

namespace retain::shim {

// Opens a tag and makes it the calling thread's (rule `rule`).
uint32_t BeginRequest(TagSource source, Attribution rule, const char* request_id,
                      const char* method, const char* path);

// Closes the tag, detaches it from the calling thread if it is the
// thread's, and writes the every-N snapshot when one is due.
void EndRequest(uint32_t id);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_REQUEST_EVENTS_H_
