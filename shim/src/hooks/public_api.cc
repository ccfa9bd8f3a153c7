// public_api: the functions shim/include/retain/retain.h declares.
//
// Each is callable from any thread, at any time after the shim started;
// before that (or when the shim is not loaded at all: the header declares
// them weak) they do nothing.
#include "base/init_state.h"
#include "base/thread_state.h"
#include "record/tag_table.h"
#include "retain/retain.h"
#include "snapshot/request_events.h"
#include "snapshot/writer.h"

using namespace retain::shim;

extern "C" __attribute__((visibility("default"))) int retain_snapshot(const char* label) {
  if (!ShimReady() || g_thread.busy) return -1;
  return WriteSnapshot(Trigger::kApi, label, nullptr, 0) ? 0 : -1;
}

extern "C" __attribute__((visibility("default"))) retain_request_t retain_request_begin(
    const char* id) {
  if (!ShimReady() || g_thread.busy) return 0;
  BusyScope busy;
  return BeginRequest(TagSource::kApi, Attribution::kExplicit, id, nullptr, nullptr);
}

extern "C" __attribute__((visibility("default"))) void retain_request_end(
    retain_request_t request) {
  if (!ShimReady() || g_thread.busy) return;
  // Not busy across EndRequest: a snapshot it writes takes the guard itself.
  EndRequest(request);
}

extern "C" __attribute__((visibility("default"))) void retain_request_adopt(
    retain_request_t request) {
  if (!ShimReady()) return;
  SetThreadTag(FindTag(request) != nullptr ? request : 0, Attribution::kExplicit);
}

extern "C" __attribute__((visibility("default"))) void retain_request_release(void) {
  if (!ShimReady()) return;
  SetThreadTag(0, Attribution::kNone);
}
