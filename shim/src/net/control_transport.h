// control_transport: what the control endpoint's two halves share: its
// transport (net/control_server.cc: listener, poll loop, connections,
// deadlines, rate limit) and its endpoints (net/control_endpoints.cc:
// /snapshot, /mark, /stats, /metrics, /handover). Internal to the endpoint;
// the rest of the shim uses net/control_server.h.
//
// Thread and signal contract: everything here belongs to the control
// thread (busy for its whole life, every signal blocked) unless said
// otherwise; g_state is atomic and read by the exit and fork handlers.
// Nothing allocates from the host heap; nothing logs but diagnostics.
#ifndef RETAIN_SHIM_SRC_NET_CONTROL_TRANSPORT_H_
#define RETAIN_SHIM_SRC_NET_CONTROL_TRANSPORT_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "net/control_request.h"

namespace retain::shim::control_internal {

inline constexpr int kMaxConnections = 8;
inline constexpr size_t kBufferSize = 16384;  // a request head, then the response
inline constexpr int64_t kRequestDeadlineMs = 5000;
inline constexpr int64_t kWriteIdleMs = 10000;
inline constexpr int64_t kResponseLimitMs = 120000;
inline constexpr int64_t kDrainMs = 1000;
inline constexpr int64_t kHandoverWaitMs = 3000;
inline constexpr int64_t kRelistenIntervalMs = 1000;
inline constexpr int64_t kAcceptPauseMs = 100;
inline constexpr int kAcceptsPerTurn = 16;
inline constexpr int kBacklog = 64;
inline constexpr size_t kMaxLabel = 64;
inline constexpr size_t kMaxRequestId = 127;
inline constexpr int kMarkDepth = 256;

// The endpoint's life in this process.
enum State : int {
  kNone,      // no endpoint (off, failed, refused, a fork child)
  kAsking,    // the address is held: asking its holder for it (TakeOver)
  kServing,   // listening
  kReleased,  // handed over (or lost to another process): serving what
              // was accepted, then the thread ends
  kStopping,  // the process exits
};
extern std::atomic<int> g_state;

enum class Phase { kFree, kReading, kWriting, kDraining };

struct Connection {
  Phase phase;
  int handle;  // own_fds handle of the socket
  int64_t opened_ms;
  int64_t deadline_ms;
  int64_t response_end_ms;
  size_t used;         // request bytes in buffer
  size_t head_length;  // 0 until the head is complete
  uint64_t body_left;  // body bytes still to read
  ControlRequest request;
  size_t out_length;  // response bytes in buffer
  size_t out_sent;
  int file;  // own_fds handle of the snapshot streamed after them, or -1
  uint64_t file_offset;
  uint64_t file_size;
  char buffer[kBufferSize];
};

// Scratch for reads whose bytes are dropped (request bodies, /proc files).
extern char g_scratch[4096];

// Milliseconds of CLOCK_MONOTONIC.
int64_t NowMs();
// [A-Za-z0-9._-]: the alphabet of labels and request ids.
bool IsLabelChar(char c);
// The endpoint's address for messages: the Unix path, or "the TCP port".
const char* Where();
// Closes the listener and gives up the socket file (ReleasePath: removed if
// the path still names the socket this process bound).
void ReleaseListener();

// Puts a response head announcing `length` body bytes in c->buffer.
// `extra` is more header lines ("Name: value\r\n"), or "".
size_t PutHead(Connection* c, int status, const char* content_type, uint64_t length,
               const char* extra);
// Starts writing c->buffer's first c->out_length bytes (then c->file, if
// any) to the client.
void StartWriting(Connection* c, int64_t now);
// A complete response; `body` must not point into c->buffer.
void Reply(Connection* c, int64_t now, int status, const char* content_type, const char* body,
           size_t length, const char* extra = "");
void ReplyMessage(Connection* c, int64_t now, int status, const char* message,
                  const char* extra = "");

// At most GetConfig().control_rate snapshots in any one second: the oldest
// of the last `rate` must be a second old. Otherwise sets the seconds to
// wait.
bool AllowSnapshot(int64_t now, int64_t* retry_after_s);

// Answers the complete request in `c` (net/control_endpoints.cc).
void Dispatch(Connection* c, int64_t now);

}  // namespace retain::shim::control_internal

#endif  // RETAIN_SHIM_SRC_NET_CONTROL_TRANSPORT_H_
