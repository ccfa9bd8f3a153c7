// control_server: the control endpoint (RETAIN_CONTROL), a tiny HTTP/1.1
// server for scripts, on its own thread (named "retain-ctl").
//
//   POST /snapshot[?label=L]   writes a snapshot; 200 with its path
//   GET  /snapshot[?label=L]   writes one and returns its bytes
//   POST /mark?request=ID      opens a request tag (source CONTROL); it is
//                              nobody's thread tag, so it is the process-latest
//   POST /mark/end             closes the most recent tag opened by /mark
//   GET  /stats                JSON: live bytes/counts per kind, requests,
//                              arena bytes, dropped records
//   GET  /metrics              the same in Prometheus text format
//
// It listens on a Unix socket (created mode 0600) or a loopback TCP port
// only (config.cc refuses anything else). One connection at a time, one
// request per connection (Connection: close), request heads up to 8 KiB;
// a malformed request gets 400 and the server carries on. Labels are
// [A-Za-z0-9._-]{1,64} and never become a path: snapshots land in
// RETAIN_DIR under the writer's own names.
//
// The thread is busy (g_thread.busy) for its whole life, so nothing it does
// is recorded and the shim's socket hooks pass its calls straight through;
// it blocks every signal and never allocates from the host heap. A fork
// child has no control thread (the listening socket is inherited but not
// served).
#ifndef RETAIN_SHIM_SRC_CONTROL_SERVER_H_
#define RETAIN_SHIM_SRC_CONTROL_SERVER_H_

#include <cstddef>

namespace retain::shim {

// From the shim's constructor: binds the endpoint RETAIN_CONTROL names and
// starts the thread serving it. Does nothing when the endpoint is off; a
// failure to bind says why (a warning) and leaves it off.
void StartControlServer();

// True if `label` is a non-empty [A-Za-z0-9._-] string of at most 64 bytes.
// Exposed for tests.
bool IsValidControlLabel(const char* label, size_t length);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_CONTROL_SERVER_H_
