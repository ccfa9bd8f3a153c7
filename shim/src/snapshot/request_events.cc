// request_events: see snapshot/request_events.h.
#include "snapshot/request_events.h"

#include <stdio.h>

#include "base/config.h"
#include "snapshot/triggers.h"
#include "snapshot/writer.h"
#include "base/thread_state.h"

namespace retain::shim {

uint32_t BeginRequest(TagSource source, Attribution rule, const char* request_id,
                      const char* method, const char* path) {
  uint32_t id = OpenTag(source, request_id, method, path);
  if (id != 0) SetThreadTag(id, rule);
  return id;
}

void EndRequest(uint32_t id) {
  if (id == 0) return;
  if (g_thread.tag_id == id) SetThreadTag(0, Attribution::kNone);
  if (!CloseTag(id)) return;
  if (TagCompactionDue()) WakeServiceThread();
  const uint64_t every = GetConfig().snapshot_every;
  const uint64_t closed = ClosedTagCount();
  if (every != 0 && closed % every == 0) {
    char label[64];
    snprintf(label, sizeof(label), "requests-%llu", static_cast<unsigned long long>(closed));
    WriteSnapshot(Trigger::kEveryNRequests, label, nullptr, 0);
  }
}

}  // namespace retain::shim
