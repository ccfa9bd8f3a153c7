// relay: one connection through the front door (net/front_door.h): the
// client's socket, the socket to the server, a bounded buffer each way, and
// the HTTP conversation read from the bytes as they pass
// (net/http_sniffer.h), which opens and ends the requests' tags.
//
// Bytes pass unchanged, in order, both ways. Each direction has one
// kRelayPipeBytes buffer: a side is read only while its buffer has room, so
// a slow reader slows its writer (back-pressure), and a connection costs
// sizeof(Relay) whatever the traffic. A side that ends its sending
// (read returns 0) has the other side's writing shut once its buffer is
// delivered (half-close), and the connection ends when both directions
// have: then the sniffer's OnClose ends a close-delimited response and
// aborts requests left unanswered. A broken side (a reset, EPIPE) ends the
// connection at once, its open requests aborted.
//
// Tags: a request opens one (source kFrontDoor, with X-Request-Id, method
// and path, honouring RETAIN_HTTP_PATHS) just before its head is written to
// the server (the server may work on it before the relay's write returns),
// and it ends when its response has been written to the
// client in full (or is aborted when the connection ends first). Nobody's
// thread gets the tag: the relay is not the server's thread, so the
// server's allocations fall to the process-latest rule. When a request's
// end makes an every-N snapshot due and none is in flight, it is queued for
// the service thread under the request's count
// (snapshot/request_events.h: EndRequestQueued) and the client's next bytes
// are held from the server until that snapshot is settled (or
// kRelayHoldLimitMs passed): a sequential client's snapshot after request N
// shows requests 1..N exactly, and the other connections keep flowing. A
// due request that ends while one is in flight is coalesced into the next
// and not held, as with the sniffer.
//
// Relay thread only. Sockets are own_fds handles (non-blocking, TCP_NODELAY),
// watched edge-triggered: the readable/writable flags below remember what
// the last event said until a call returns EAGAIN. Never allocates from the
// host heap, never blocks, never throws.
#ifndef RETAIN_SHIM_SRC_NET_RELAY_H_
#define RETAIN_SHIM_SRC_NET_RELAY_H_

#include <cstddef>
#include <cstdint>

#include "net/http_sniffer.h"

namespace retain::shim {

inline constexpr size_t kRelayPipeBytes = 16 * 1024;
// The most one direction moves in one turn, so that one busy connection
// cannot starve the others; a connection with more to do gets another turn
// before the loop waits.
inline constexpr size_t kRelayBytesPerTurn = 64 * 1024;
// A side that has ended (its sending done and the other's delivered)
// waits this long for the other side to end before the connection is
// closed: a client that keeps its end open after the server closed.
inline constexpr int64_t kRelayLingerMs = 5000;
// The longest a connection's next request waits for the every-N snapshot
// the previous one made due.
inline constexpr int64_t kRelayHoldLimitMs = 60000;

struct RelayPipe {
  uint32_t start;  // first byte not yet written
  uint32_t end;    // one past the last byte read
  char data[kRelayPipeBytes];

  size_t used() const { return end - start; }
  size_t room() const { return kRelayPipeBytes - end; }
};

enum class RelayPhase : uint8_t {
  kFree = 0,
  kConnecting,  // connect() to the server in progress
  kRelaying,
  kBadGateway,  // the server refused: a 502 goes to the client, then the end
};

struct Relay {
  RelayPhase phase;
  int epoll;            // own_fds handles: the front door's epoll set,
  int client;           // the client's socket,
  int server;           // the server's (-1 once closed: bad gateway)
  uint16_t local_port;  // the server connection's own port (net/front_door.h)
  bool client_readable, client_writable, server_readable, server_writable;
  bool client_eof, server_eof;    // the side ended its sending
  bool client_shut, server_shut;  // we shut our sending to the side
  bool closed;                    // ended: the front door frees it
  bool again;                     // PumpRelay stopped at its turn's limit
  uint64_t hold_ordinal;          // every-N snapshot to wait for (0: none)
  int64_t hold_since_ms;
  int64_t linger_until_ms;  // 0: not lingering
  int64_t last_active_ms;   // when a byte last moved (or the connection began)
  HttpSniffer sniffer;
  // Tags of the requests written to the server and not yet answered, oldest
  // first (0 for a path RETAIN_HTTP_PATHS leaves out).
  uint32_t pending[kMaxPendingRequests];
  int pending_head;
  int pending_count;
  uint32_t up_fed;  // bytes at the head of `up` the sniffer has seen
  RelayPipe up;     // client -> server
  RelayPipe down;   // server -> client
};

// Starts a relay for `client` and the `server` socket whose connect()
// returned `connect_error` (0, EINPROGRESS, or the refusal: then a 502
// whose body names `target`, "127.0.0.1:8080"). Both sockets are in the
// `epoll` set, or are added by the caller after this returns (the server's
// only while r.server >= 0).
void StartRelay(Relay& r, int epoll, int client, int server, uint16_t local_port, int connect_error,
                const char* target);

// After an event: what epoll said about one side.
void NoteRelayEvent(Relay& r, bool server_side, uint32_t events);

// Moves what it can both ways (at most kRelayBytesPerTurn each), ends the
// connection when it is over (r.closed), holds and releases the client's
// next request around due snapshots. Sets r.again when it stopped at the
// turn's limit. `target` as for StartRelay.
void PumpRelay(Relay& r, int64_t now_ms, const char* target);

// The earliest time PumpRelay must run again without an event (a linger
// or hold deadline), or INT64_MAX.
int64_t RelayDeadline(const Relay& r);

// True while the client's next bytes wait for a snapshot.
bool RelayHeld(const Relay& r);

// True for a kept-alive connection between two requests: relaying, no
// request in flight or held, nothing buffered either way. Closing it then is
// what a server does to an idle keep-alive connection (the client retries on
// a new one).
bool RelayIdle(const Relay& r);

// Ends the connection now (the process exits, or the front door is
// released): its open requests are aborted, both sockets closed.
void AbortRelay(Relay& r);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_NET_RELAY_H_
