// relay: see net/relay.h. Raw system calls (recvfrom, sendto, shutdown,
// getsockopt) on the handles' verified numbers: nothing here goes through
// the shim's hooks, and a number the host took over is never touched (the
// side then counts as broken).
#include "net/relay.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/log.h"
#include "base/own_fds.h"
#include "net/socket_table.h"
#include "record/tag_table.h"
#include "snapshot/request_events.h"

namespace retain::shim {
namespace {

ssize_t Receive(int handle, char* data, size_t size, int* error) {
  ShimFdUse use(handle);
  if (use.fd() < 0) {
    *error = EBADF;
    return -1;
  }
  ssize_t n = syscall(SYS_recvfrom, use.fd(), data, size, MSG_DONTWAIT, nullptr, nullptr);
  *error = n < 0 ? errno : 0;
  return n;
}

ssize_t Send(int handle, const char* data, size_t size, int* error) {
  ShimFdUse use(handle);
  if (use.fd() < 0) {
    *error = EBADF;
    return -1;
  }
  ssize_t n = syscall(SYS_sendto, use.fd(), data, size, MSG_DONTWAIT | MSG_NOSIGNAL, nullptr, 0);
  *error = n < 0 ? errno : 0;
  return n;
}

void ShutWrite(int handle) {
  ShimFdUse use(handle);
  if (use.fd() >= 0) syscall(SYS_shutdown, use.fd(), SHUT_WR);
}

bool WouldBlock(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

// What the sniffer's events do to a relay: tags open and end, snapshots
// become due.
struct SinkContext {
  Relay* relay;
  int64_t now_ms;
  bool ending;  // the connection is ending: nothing to hold
};

void OnEvent(void* context, const HttpEvent& event) {
  auto* sink = static_cast<SinkContext*>(context);
  Relay& r = *sink->relay;
  switch (event.type) {
    case HttpEventType::kRequestStarted: {
      uint32_t id = 0;
      if (HttpPathWanted(event.head.path)) {
        id = OpenTag(TagSource::kFrontDoor, event.head.request_id, event.head.method,
                     event.head.path);
      }
      if (r.pending_count < kMaxPendingRequests) {
        r.pending[(r.pending_head + r.pending_count) % kMaxPendingRequests] = id;
        ++r.pending_count;
      }
      return;
    }
    case HttpEventType::kResponseFinished:
    case HttpEventType::kRequestAborted: {
      if (r.pending_count == 0) return;
      uint32_t id = r.pending[r.pending_head];
      r.pending_head = (r.pending_head + 1) % kMaxPendingRequests;
      --r.pending_count;
      const RequestEnd how = event.type == HttpEventType::kRequestAborted ? RequestEnd::kAborted
                                                                          : RequestEnd::kCompleted;
      const uint64_t ordinal = EndRequestQueued(id, how);
      if (ordinal != 0 && !sink->ending && ordinal > r.hold_ordinal) {
        if (r.hold_ordinal == 0) r.hold_since_ms = sink->now_ms;
        r.hold_ordinal = ordinal;
      }
      return;
    }
    case HttpEventType::kConnectionIgnored:
      return;  // not HTTP/1.x: relayed as bytes, untagged
  }
}

void FeedInbound(Relay& r, const char* data, size_t size, int64_t now_ms) {
  SinkContext context{&r, now_ms, false};
  HttpEventSink sink{OnEvent, &context};
  r.sniffer.OnInbound(data, size, sink);
}

void FeedOutbound(Relay& r, const char* data, size_t size, int64_t now_ms) {
  SinkContext context{&r, now_ms, false};
  HttpEventSink sink{OnEvent, &context};
  r.sniffer.OnOutbound(data, size, sink);
}

// Out of the epoll set first: a fork child may still hold a copy of the
// socket for a moment, and epoll forgets a socket only at its last close.
void Forget(const Relay& r, int handle) {
  if (handle < 0) return;
  int fd = ShimFdNumber(handle);
  int epoll = ShimFdNumber(r.epoll);
  if (fd >= 0 && epoll >= 0) epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nullptr);
  ShimFdClose(handle);
}

void CloseSockets(Relay& r) {
  Forget(r, r.client);
  Forget(r, r.server);
  r.client = -1;
  r.server = -1;
  r.closed = true;
}

// The connection is over: a response delimited by the close is complete,
// requests left unanswered are aborted (`reset`: every open request is).
void Finish(Relay& r, bool reset, int64_t now_ms) {
  if (r.closed) return;
  if (r.phase != RelayPhase::kBadGateway) {
    SinkContext context{&r, now_ms, true};
    HttpEventSink sink{OnEvent, &context};
    if (reset) {
      r.sniffer.OnReset(sink);
    } else {
      r.sniffer.OnClose(sink);
    }
  }
  CloseSockets(r);
}

// A side broke (reset, EPIPE, a number the host took over). What the
// server sent before is still offered to the client, once, without
// waiting.
void Broken(Relay& r, bool server_side, int64_t now_ms) {
  if (server_side && r.down.used() > 0 && r.client_writable) {
    int error = 0;
    ssize_t n = Send(r.client, r.down.data + r.down.start, r.down.used(), &error);
    if (n > 0) {
      if (r.phase == RelayPhase::kRelaying) {
        FeedOutbound(r, r.down.data + r.down.start, static_cast<size_t>(n), now_ms);
      }
      r.down.start += static_cast<uint32_t>(n);
    }
  }
  Finish(r, /*reset=*/true, now_ms);
}

void BadGateway(Relay& r, const char* target, int error) {
  Forget(r, r.server);
  r.server = -1;
  r.phase = RelayPhase::kBadGateway;
  r.server_eof = true;  // as if the server had sent the 502 and closed
  r.server_shut = true;
  char body[192];
  int body_length =
      snprintf(body, sizeof(body), "retain front door: cannot reach the server at %s: %s\n", target,
               strerror(error));
  if (body_length < 0) body_length = 0;
  if (static_cast<size_t>(body_length) >= sizeof(body)) body_length = sizeof(body) - 1;
  int length = snprintf(r.down.data, kRelayPipeBytes,
                        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n"
                        "Content-Length: %d\r\nConnection: close\r\n\r\n%.*s",
                        body_length, body_length, body);
  r.down.start = 0;
  r.down.end = length > 0 ? static_cast<uint32_t>(length) : 0;
}

void Compact(RelayPipe& p) {
  if (p.start == p.end) {
    p.start = p.end = 0;
  } else if (p.room() == 0 && p.start > 0) {
    memmove(p.data, p.data + p.start, p.used());
    p.end -= p.start;
    p.start = 0;
  }
}

// Reads what `side` has into `p`. Returns true on progress; `broken` is
// set on an error.
bool Fill(RelayPipe& p, int handle, bool* readable, bool* eof, size_t* moved, bool* broken) {
  if (*eof || !*readable) return false;
  Compact(p);
  if (p.room() == 0) return false;
  int error = 0;
  ssize_t n = Receive(handle, p.data + p.end, p.room(), &error);
  if (n > 0) {
    p.end += static_cast<uint32_t>(n);
    *moved += static_cast<size_t>(n);
    return true;
  }
  if (n == 0) {
    *eof = true;
    return true;
  }
  if (WouldBlock(error)) {
    *readable = false;
    return false;
  }
  *broken = true;
  return false;
}

// Client -> server.
bool MoveUp(Relay& r, int64_t now_ms, size_t* moved, bool* broken_client, bool* broken_server) {
  bool progress = false;
  RelayPipe& p = r.up;
  if (p.used() > 0) {
    if (r.phase == RelayPhase::kBadGateway) {
      p.start = p.end = 0;  // nobody to give them to: read and dropped
      progress = true;
    } else if (r.phase == RelayPhase::kRelaying && r.server_writable && !RelayHeld(r)) {
      // Fed just before the server can read them: a request's tag is open
      // before the server works on it (the process-latest rule needs it
      // then), and the next request's only now, after any snapshot it was
      // held for.
      if (r.up_fed < p.used()) {
        FeedInbound(r, p.data + p.start + r.up_fed, p.used() - r.up_fed, now_ms);
        r.up_fed = static_cast<uint32_t>(p.used());
      }
      int error = 0;
      ssize_t n = Send(r.server, p.data + p.start, p.used(), &error);
      if (n > 0) {
        p.start += static_cast<uint32_t>(n);
        r.up_fed -= static_cast<uint32_t>(n);
        progress = true;
      } else if (WouldBlock(error)) {
        r.server_writable = false;
      } else {
        *broken_server = true;
        return false;
      }
    }
  }
  progress |= Fill(p, r.client, &r.client_readable, &r.client_eof, moved, broken_client);
  return progress;
}

// Server -> client.
bool MoveDown(Relay& r, int64_t now_ms, size_t* moved, bool* broken_client, bool* broken_server) {
  bool progress = false;
  RelayPipe& p = r.down;
  if (p.used() > 0 && r.client_writable) {
    int error = 0;
    ssize_t n = Send(r.client, p.data + p.start, p.used(), &error);
    if (n > 0) {
      // Fed as delivered: a response ends when the client has all of it.
      if (r.phase == RelayPhase::kRelaying) {
        FeedOutbound(r, p.data + p.start, static_cast<size_t>(n), now_ms);
      }
      p.start += static_cast<uint32_t>(n);
      progress = true;
    } else if (WouldBlock(error)) {
      r.client_writable = false;
    } else {
      *broken_client = true;
      return false;
    }
  }
  if (r.phase == RelayPhase::kRelaying) {
    progress |= Fill(p, r.server, &r.server_readable, &r.server_eof, moved, broken_server);
  }
  return progress;
}

// Half-closes and the end of the connection.
void CheckEnds(Relay& r, int64_t now_ms) {
  if (r.phase == RelayPhase::kRelaying && r.client_eof && r.up.used() == 0 && !r.server_shut) {
    ShutWrite(r.server);  // the client has sent all it will
    r.server_shut = true;
  }
  if (r.server_eof && r.down.used() == 0 && !r.client_shut) {
    if (r.phase == RelayPhase::kRelaying) {
      SinkContext context{&r, now_ms, true};
      HttpEventSink sink{OnEvent, &context};
      r.sniffer.OnClose(sink);  // the server sent all it will
    }
    ShutWrite(r.client);
    r.client_shut = true;
    if (!r.client_eof) r.linger_until_ms = now_ms + kRelayLingerMs;
  }
  if (r.client_shut && r.client_eof && r.up.used() == 0) return Finish(r, false, now_ms);
  if (r.linger_until_ms != 0 && now_ms >= r.linger_until_ms) Finish(r, false, now_ms);
}

}  // namespace

void StartRelay(Relay& r, int epoll, int client, int server, uint16_t local_port, int connect_error,
                const char* target) {
  r.epoll = epoll;
  r.client = client;
  r.server = server;
  r.local_port = local_port;
  r.client_readable = r.client_writable = r.server_readable = r.server_writable = false;
  r.client_eof = r.server_eof = r.client_shut = r.server_shut = false;
  r.closed = r.again = false;
  r.hold_ordinal = 0;
  r.hold_since_ms = 0;
  r.linger_until_ms = 0;
  r.last_active_ms = 0;  // set by the first PumpRelay
  memset(&r.sniffer, 0, sizeof(r.sniffer));
  r.pending_head = r.pending_count = 0;
  r.up.start = r.up.end = 0;
  r.up_fed = 0;
  r.down.start = r.down.end = 0;
  if (connect_error == 0) {
    r.phase = RelayPhase::kRelaying;
  } else if (connect_error == EINPROGRESS) {
    r.phase = RelayPhase::kConnecting;
  } else {
    BadGateway(r, target, connect_error);
  }
}

void NoteRelayEvent(Relay& r, bool server_side, uint32_t events) {
  // An error or hang-up shows on the next call; read and write find it.
  const bool trouble = (events & (EPOLLERR | EPOLLHUP)) != 0;
  const bool in = (events & (EPOLLIN | EPOLLRDHUP)) != 0 || trouble;
  const bool out = (events & EPOLLOUT) != 0 || trouble;
  if (server_side) {
    r.server_readable |= in;
    r.server_writable |= out;
  } else {
    r.client_readable |= in;
    r.client_writable |= out;
  }
}

bool RelayHeld(const Relay& r) {
  return r.hold_ordinal != 0 && SettledRequestSnapshot() < r.hold_ordinal;
}

bool RelayIdle(const Relay& r) {
  return r.phase == RelayPhase::kRelaying && !r.closed && r.pending_count == 0 &&
         r.hold_ordinal == 0 && r.up.used() == 0 && r.down.used() == 0 && !r.client_eof &&
         !r.server_eof && r.linger_until_ms == 0;
}

void PumpRelay(Relay& r, int64_t now_ms, const char* target) {
  r.again = false;
  if (r.closed || r.phase == RelayPhase::kFree) return;
  if (r.hold_ordinal != 0) {
    if (SettledRequestSnapshot() >= r.hold_ordinal) {
      r.hold_ordinal = 0;
    } else if (now_ms - r.hold_since_ms >= kRelayHoldLimitMs) {
      LogDiagnostic(
          "front door: the snapshot of request %llu took over %lld ms; letting the "
          "next request through",
          static_cast<unsigned long long>(r.hold_ordinal),
          static_cast<long long>(kRelayHoldLimitMs));
      r.hold_ordinal = 0;
    }
  }
  if (r.phase == RelayPhase::kConnecting && (r.server_writable || r.server_readable)) {
    int error = 0;
    socklen_t size = sizeof(error);
    {
      ShimFdUse use(r.server);
      if (use.fd() < 0 || getsockopt(use.fd(), SOL_SOCKET, SO_ERROR, &error, &size) != 0) {
        error = EBADF;
      }
    }
    if (error == 0) {
      r.phase = RelayPhase::kRelaying;
    } else if (error != EINPROGRESS) {
      BadGateway(r, target, error);
    }
  }
  size_t moved_up = 0;
  size_t moved_down = 0;
  if (r.last_active_ms == 0) r.last_active_ms = now_ms;
  for (;;) {
    bool broken_client = false;
    bool broken_server = false;
    bool progress = MoveDown(r, now_ms, &moved_down, &broken_client, &broken_server);
    if (!broken_client && !broken_server) {
      progress |= MoveUp(r, now_ms, &moved_up, &broken_client, &broken_server);
    }
    if (broken_client || broken_server) return Broken(r, broken_server && !broken_client, now_ms);
    if (progress) r.last_active_ms = now_ms;
    CheckEnds(r, now_ms);
    if (r.closed || !progress) return;
    if (moved_up >= kRelayBytesPerTurn || moved_down >= kRelayBytesPerTurn) {
      r.again = true;
      return;
    }
  }
}

int64_t RelayDeadline(const Relay& r) {
  int64_t deadline = INT64_MAX;
  if (r.closed) return deadline;
  if (r.linger_until_ms != 0) deadline = r.linger_until_ms;
  if (r.hold_ordinal != 0 && r.hold_since_ms + kRelayHoldLimitMs < deadline) {
    deadline = r.hold_since_ms + kRelayHoldLimitMs;
  }
  return deadline;
}

void AbortRelay(Relay& r) {
  if (r.closed || r.phase == RelayPhase::kFree) return;
  Finish(r, /*reset=*/true, 0);
}

}  // namespace retain::shim
