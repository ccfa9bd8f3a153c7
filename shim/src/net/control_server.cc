// control_server: see net/control_server.h. This file is the endpoint's
// transport: the listener (Unix path ownership, TCP, re-listening), the
// poll() loop, the connections and their deadlines, reading requests and
// writing responses, the snapshot rate limit, the control thread, and asking
// a holder for the address (TakeOver). The endpoints themselves (/snapshot,
// /mark, /stats, /metrics, /handover) are in net/control_endpoints.cc.
//
// Thread and signal contract: net/control_server.h's. Everything in
// control_internal runs on the control thread, busy for its whole life,
// unless said otherwise (StartControlServer, StopControlServer and
// ControlServerResetInChild, and the path lock they share); it blocks every
// signal, never allocates from the host heap, and only logs diagnostics.
#include "net/control_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>

#include "base/arena.h"
#include "base/config.h"
#include "base/hook_table.h"
#include "base/large_static.h"
#include "base/log.h"
#include "base/own_fds.h"
#include "base/process_info.h"
#include "base/spin_lock.h"
#include "base/thread_state.h"
#include "base/threads.h"
#include "net/control_request.h"
#include "net/control_transport.h"
#include "net/socket_table.h"
#include "record/gpu_recorder.h"
#include "record/kinds.h"
#include "record/live_table.h"
#include "record/live_tables.h"
#include "record/mmap_table.h"
#include "record/recorder.h"
#include "record/tag_table.h"
#include "snapshot/request_events.h"
#include "snapshot/writer.h"

namespace retain::shim {
namespace control_internal {

std::atomic<int> g_state;

// Control thread only, unless said otherwise.
RETAIN_LARGE_STATIC Connection g_connections[kMaxConnections];
// Whether the control thread ever ran (and used g_connections): a fork
// child resets them only then, so that one of a process without an
// endpoint writes none of their 130 KiB.
bool g_connections_used;
int g_listener = -1;  // own_fds handle
int64_t g_relisten_after_ms;
int64_t g_accept_pause_until_ms;
int64_t g_snapshot_times[kMaxControlRate];  // ring: the last `rate` snapshots
int g_snapshot_next;
int g_snapshot_count;
RETAIN_LARGE_STATIC char g_scratch[4096];
RETAIN_LARGE_STATIC char g_io[65536];

// The socket file this process bound (Unix endpoint), by device and inode:
// removed at exit or handover only while the path still names it. Guarded
// by g_path_lock (the control thread, the exit, a fork child).
SpinLock g_path_lock;
bool g_path_owned;
dev_t g_path_dev;
ino_t g_path_ino;

int64_t NowMs() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

// The real libc calls: the thread is busy, so the hooks would pass them
// through anyway, but each pass-through counts as a re-entry.
ssize_t RealRead(int fd, void* buffer, size_t size) {
  return RealFunctionsReady() && g_real.read != nullptr ? g_real.read(fd, buffer, size)
                                                        : syscall(SYS_read, fd, buffer, size);
}
ssize_t RealSend(int fd, const void* buffer, size_t size) {
  return RealFunctionsReady() && g_real.send != nullptr
             ? g_real.send(fd, buffer, size, MSG_NOSIGNAL | MSG_DONTWAIT)
             : syscall(SYS_sendto, fd, buffer, size, MSG_NOSIGNAL | MSG_DONTWAIT, nullptr, 0);
}

const char* ReasonFor(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    default:
      return "Internal Server Error";
  }
}

bool IsLabelChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// ---- Unix socket path ownership -------------------------------------------

void ClaimPath(const char* path) {
  struct stat st;
  SpinLockHolder hold(g_path_lock);
  g_path_owned = lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
  g_path_dev = st.st_dev;
  g_path_ino = st.st_ino;
}

// Removes the socket file if it is still the one this process bound.
void ReleasePath() {
  const Config& config = GetConfig();
  if (config.control != ControlKind::kUnix) return;
  SpinLockHolder hold(g_path_lock);
  if (!g_path_owned) return;
  g_path_owned = false;
  struct stat st;
  if (lstat(config.control_path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == g_path_dev &&
      st.st_ino == g_path_ino) {
    unlink(config.control_path);
  }
}

// ---- Listening -------------------------------------------------------------

void FillUnixAddress(const char* path, struct sockaddr_un* address) {
  memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  memcpy(address->sun_path, path, strnlen(path, sizeof(address->sun_path) - 1));
}

enum class PathState { kFree, kStale, kLive, kNotSocket };

// What is at the Unix path: nothing, a socket nobody accepts on (a crashed
// or exec'd process left it), one somebody does (or whose backlog is full),
// or something else.
PathState ProbeUnix(const char* path) {
  struct stat st;
  if (lstat(path, &st) != 0) return PathState::kFree;
  if (!S_ISSOCK(st.st_mode)) return PathState::kNotSocket;
  int probe = ShimSocket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK);
  if (probe < 0) return PathState::kLive;  // cannot tell: leave it be
  struct sockaddr_un address;
  FillUnixAddress(path, &address);
  int result;
  int error;
  {
    ShimFdUse use(probe);
    result = use.fd() < 0
                 ? -1
                 : connect(use.fd(), reinterpret_cast<struct sockaddr*>(&address), sizeof(address));
    error = use.fd() < 0 ? EBADF : errno;
  }
  ShimFdClose(probe);
  if (result == 0) return PathState::kLive;
  if (error == ECONNREFUSED) return PathState::kStale;
  if (error == ENOENT) return PathState::kFree;
  return PathState::kLive;
}

// Binds and listens on the Unix path (which must be free). Returns the
// handle, or -1 with errno set.
int ListenUnix(const char* path) {
  int handle = ShimSocket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK);
  if (handle < 0) return -1;
  struct sockaddr_un address;
  FillUnixAddress(path, &address);
  int result;
  int error;
  {
    ShimFdUse use(handle);
    // Linux creates the socket file with the socket's own mode masked by
    // the umask: 0600 from the start, and the process-wide umask (the
    // host's) is never touched.
    result = use.fd() < 0 ? -1 : fchmod(use.fd(), 0600);
    if (result == 0) {
      result = bind(use.fd(), reinterpret_cast<struct sockaddr*>(&address), sizeof(address));
    }
    if (result == 0) result = listen(use.fd(), kBacklog);
    error = use.fd() < 0 ? EBADF : errno;
  }
  if (result != 0) {
    ShimFdClose(handle);
    errno = error;
    return -1;
  }
  ClaimPath(path);
  chmod(path, 0600);
  return handle;
}

int ListenTcp(const Config& config) {
  int handle = ShimSocket(config.control_ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
  if (handle < 0) return -1;
  int result;
  int error;
  {
    ShimFdUse use(handle);
    int fd = use.fd();
    int one = 1;
    result = fd < 0 ? -1 : setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (result == 0 && config.control_ipv6) {
      struct sockaddr_in6 address;
      memset(&address, 0, sizeof(address));
      address.sin6_family = AF_INET6;
      address.sin6_port = htons(config.control_port);
      memcpy(&address.sin6_addr, config.control_addr, 16);
      result = bind(fd, reinterpret_cast<struct sockaddr*>(&address), sizeof(address));
    } else if (result == 0) {
      struct sockaddr_in address;
      memset(&address, 0, sizeof(address));
      address.sin_family = AF_INET;
      address.sin_port = htons(config.control_port);
      memcpy(&address.sin_addr, config.control_addr, 4);
      result = bind(fd, reinterpret_cast<struct sockaddr*>(&address), sizeof(address));
    }
    if (result == 0) result = listen(fd, kBacklog);
    error = fd < 0 ? EBADF : errno;
  }
  if (result != 0) {
    ShimFdClose(handle);
    errno = error;
    return -1;
  }
  return handle;
}

int Listen() {
  const Config& config = GetConfig();
  return config.control == ControlKind::kUnix ? ListenUnix(config.control_path) : ListenTcp(config);
}

const char* Where() {
  const Config& config = GetConfig();
  return config.control == ControlKind::kUnix ? config.control_path : "the TCP port";
}

void ReleaseListener() {
  ShimFdClose(g_listener);
  g_listener = -1;
  ReleasePath();
}

// ---- Connections -------------------------------------------------------------

void CloseConnection(Connection* c) {
  ShimFdClose(c->handle);
  ShimFdClose(c->file);
  c->phase = Phase::kFree;
  c->handle = -1;
  c->file = -1;
}

// One non-blocking send of a short response (eviction, expiry).
void SendNow(int handle, int status, const char* message) {
  char text[256];
  int n = snprintf(text, sizeof(text),
                   "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                   status, ReasonFor(status), strlen(message), message);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(text)) return;
  ShimFdUse use(handle);
  if (use.fd() >= 0) {
    RealSend(use.fd(), text, static_cast<size_t>(n));
    shutdown(use.fd(), SHUT_WR);
  }
}

void WriteResponse(Connection* c, int64_t now);

void StartWriting(Connection* c, int64_t now) {
  c->phase = Phase::kWriting;
  c->out_sent = 0;
  c->response_end_ms = now + kResponseLimitMs;
  c->deadline_ms = now + kWriteIdleMs;
  WriteResponse(c, now);
}

// Puts a response head announcing `length` body bytes in c->buffer.
// `extra` is more header lines ("Name: value\r\n"), or "".
size_t PutHead(Connection* c, int status, const char* content_type, uint64_t length,
               const char* extra) {
  int n = snprintf(c->buffer, sizeof(c->buffer),
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %llu\r\n%s"
                   "Connection: close\r\n\r\n",
                   status, ReasonFor(status), content_type, static_cast<unsigned long long>(length),
                   extra);
  return n > 0 && static_cast<size_t>(n) < sizeof(c->buffer) ? static_cast<size_t>(n) : 0;
}

constexpr char kTooBig[] = "response does not fit\n";

// `body` must not point into c->buffer.
void Reply(Connection* c, int64_t now, int status, const char* content_type, const char* body,
           size_t length, const char* extra) {
  size_t head = PutHead(c, status, content_type, length, extra);
  if (head == 0 || head + length > sizeof(c->buffer)) {
    head = PutHead(c, 500, "text/plain; charset=utf-8", sizeof(kTooBig) - 1, "");
    body = kTooBig;
    length = sizeof(kTooBig) - 1;
  }
  memcpy(c->buffer + head, body, length);
  c->out_length = head + length;
  StartWriting(c, now);
}

void ReplyMessage(Connection* c, int64_t now, int status, const char* message, const char* extra) {
  Reply(c, now, status, "text/plain; charset=utf-8", message, strlen(message), extra);
}

// The response is out: no more writes; read what the client still sends
// until it closes (so a close with unread input never resets the
// connection under the response), for kDrainMs at most.
void Finish(Connection* c, int64_t now) {
  ShimFdClose(c->file);
  c->file = -1;
  {
    ShimFdUse use(c->handle);
    if (use.fd() >= 0) shutdown(use.fd(), SHUT_WR);
  }
  c->phase = Phase::kDraining;
  c->deadline_ms = now + kDrainMs;
}

void WriteResponse(Connection* c, int64_t now) {
  for (int turn = 0; turn < 4; ++turn) {
    const char* data;
    size_t size;
    bool from_file = false;
    if (c->out_sent < c->out_length) {
      data = c->buffer + c->out_sent;
      size = c->out_length - c->out_sent;
    } else if (c->file >= 0 && c->file_offset < c->file_size) {
      uint64_t left = c->file_size - c->file_offset;
      ssize_t n;
      {
        ShimFdUse use(c->file);
        n = use.fd() < 0 ? -1
                         : pread(use.fd(), g_io, left < sizeof(g_io) ? left : sizeof(g_io),
                                 static_cast<off_t>(c->file_offset));
      }
      if (n <= 0) return CloseConnection(c);  // the body is cut short: the client can tell
      data = g_io;
      size = static_cast<size_t>(n);
      from_file = true;
    } else {
      return Finish(c, now);
    }
    ssize_t sent;
    int error;
    {
      ShimFdUse use(c->handle);
      sent = use.fd() < 0 ? -1 : RealSend(use.fd(), data, size);
      error = use.fd() < 0 ? EBADF : errno;
    }
    if (sent < 0) {
      if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR) return;
      return CloseConnection(c);
    }
    if (from_file) {
      c->file_offset += static_cast<uint64_t>(sent);
    } else {
      c->out_sent += static_cast<size_t>(sent);
    }
    // Progress: the reader has kWriteIdleMs for the next, within the
    // response's overall limit.
    c->deadline_ms =
        now + kWriteIdleMs < c->response_end_ms ? now + kWriteIdleMs : c->response_end_ms;
    if (static_cast<size_t>(sent) < size) return;
  }
}

void Drain(Connection* c) {
  ssize_t n;
  int error;
  {
    ShimFdUse use(c->handle);
    n = use.fd() < 0 ? 0 : RealRead(use.fd(), g_scratch, sizeof(g_scratch));
    error = errno;
  }
  if (n > 0 || (n < 0 && (error == EAGAIN || error == EWOULDBLOCK || error == EINTR))) return;
  CloseConnection(c);
}

// At most GetConfig().control_rate snapshots in any one second: the oldest
// of the last `rate` must be a second old. Otherwise sets the seconds to
// wait.
bool AllowSnapshot(int64_t now, int64_t* retry_after_s) {
  int rate = GetConfig().control_rate;
  if (rate < 1 || rate > kMaxControlRate) rate = kDefaultControlRate;
  if (g_snapshot_next >= rate) g_snapshot_next = 0;
  if (g_snapshot_count >= rate) {
    int64_t oldest = g_snapshot_times[g_snapshot_next];
    if (now - oldest < 1000) {
      *retry_after_s = (oldest + 1000 - now + 999) / 1000;
      return false;
    }
  }
  g_snapshot_times[g_snapshot_next] = now;
  g_snapshot_next = (g_snapshot_next + 1) % rate;
  if (g_snapshot_count < rate) ++g_snapshot_count;
  return true;
}

// Reads what the client sent; answers once the request is complete.
void ReadRequest(Connection* c, int64_t now) {
  char* into;
  size_t room;
  if (c->head_length == 0) {
    into = c->buffer + c->used;
    room = kControlHeadLimit - c->used;
  } else {
    into = g_scratch;
    room = c->body_left < sizeof(g_scratch) ? static_cast<size_t>(c->body_left) : sizeof(g_scratch);
  }
  ssize_t n;
  int error;
  {
    ShimFdUse use(c->handle);
    n = use.fd() < 0 ? -1 : RealRead(use.fd(), into, room);
    error = use.fd() < 0 ? EBADF : errno;
  }
  if (n < 0) {
    if (error == EAGAIN || error == EWOULDBLOCK || error == EINTR) return;
    return CloseConnection(c);
  }
  if (n == 0) {
    // The client stopped sending: nothing at all is a probe; anything
    // else is a request cut short.
    if (c->used == 0) return CloseConnection(c);
    return ReplyMessage(c, now, 400, "malformed request\n");
  }
  if (c->head_length == 0) {
    c->used += static_cast<size_t>(n);
    size_t head = ControlHeadLength(c->buffer, c->used);
    if (head == 0) {
      if (c->used == kControlHeadLimit) {
        return ReplyMessage(c, now, 431, "request head over 8 KiB\n");
      }
      return;
    }
    int status = ParseControlHead(c->buffer, head, &c->request);
    if (status == 413) return ReplyMessage(c, now, 413, "request body over 4 KiB\n");
    if (status == 501) return ReplyMessage(c, now, 501, "only Content-Length bodies\n");
    if (status != 0) return ReplyMessage(c, now, 400, "malformed request\n");
    c->head_length = head;
    uint64_t extra = c->used - head;
    c->body_left = c->request.content_length > extra ? c->request.content_length - extra : 0;
  } else {
    c->body_left -= static_cast<uint64_t>(n);
  }
  if (c->body_left == 0) Dispatch(c, now);
}

void Step(Connection* c, int64_t now) {
  switch (c->phase) {
    case Phase::kReading:
      return ReadRequest(c, now);
    case Phase::kWriting:
      return WriteResponse(c, now);
    case Phase::kDraining:
      return Drain(c);
    case Phase::kFree:
      return;
  }
}

int ActiveConnections() {
  int count = 0;
  for (const Connection& c : g_connections) count += c.phase != Phase::kFree;
  return count;
}

// A slot for a new connection: a free one; else that of the oldest
// connection whose response is out (draining), or that has still not sent
// its whole request (it had the longest to do so); else none (every slot is
// writing a response).
Connection* SlotForNew() {
  Connection* victim = nullptr;
  for (Connection& c : g_connections) {
    if (c.phase == Phase::kFree) return &c;
  }
  for (Phase phase : {Phase::kDraining, Phase::kReading}) {
    for (Connection& c : g_connections) {
      if (c.phase == phase && (victim == nullptr || c.opened_ms < victim->opened_ms)) victim = &c;
    }
    if (victim != nullptr) break;
  }
  if (victim == nullptr) return nullptr;
  if (victim->phase == Phase::kReading) {
    SendNow(victim->handle, 503, "too many connections; this one was the oldest\n");
  }
  CloseConnection(victim);
  return victim;
}

void AcceptSome(int64_t now) {
  for (int i = 0; i < kAcceptsPerTurn; ++i) {
    int handle = ShimAccept(g_listener, SOCK_NONBLOCK);
    if (handle < 0) {
      int error = errno;
      if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
      if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
        g_accept_pause_until_ms = now + kAcceptPauseMs;
      }
      return;  // EAGAIN: none left; EBADF: the listener is lost (the loop sees it)
    }
    Connection* c = SlotForNew();
    if (c == nullptr) {
      SendNow(handle, 503, "every connection is busy answering; try again\n");
      ShimFdClose(handle);
      continue;
    }
    memset(c, 0, offsetof(Connection, buffer));
    c->phase = Phase::kReading;
    c->handle = handle;
    c->file = -1;
    c->opened_ms = now;
    c->deadline_ms = now + kRequestDeadlineMs;
  }
}

void Expire(int64_t now) {
  for (Connection& c : g_connections) {
    if (c.phase == Phase::kFree || now < c.deadline_ms) continue;
    if (c.phase == Phase::kReading) {
      // What arrived while the thread was busy counts.
      ReadRequest(&c, now);
      if (c.phase != Phase::kReading) continue;
      SendNow(c.handle, 408, "the request took too long\n");
    }
    CloseConnection(&c);
  }
}

void CloseAllConnections() {
  for (Connection& c : g_connections) {
    if (c.phase != Phase::kFree) CloseConnection(&c);
  }
}

// The listener was lost (the host closed or replaced its number behind the
// hooks): listen again, at most once a second. Another process holding
// the address by now keeps it.
void Relisten(int64_t now) {
  if (now < g_relisten_after_ms) return;
  g_relisten_after_ms = now + kRelistenIntervalMs;
  ReleaseListener();  // the handle (its number is the host's now) and our file
  const Config& config = GetConfig();
  if (config.control == ControlKind::kUnix) {
    PathState state = ProbeUnix(config.control_path);
    if (state == PathState::kStale) unlink(config.control_path);
    if (state == PathState::kLive || state == PathState::kNotSocket) {
      LogDiagnostic("control endpoint: lost its socket, and %s is someone else's now", Where());
      g_state.store(kReleased);
      return;
    }
  }
  int handle = Listen();
  if (handle >= 0) {
    g_listener = handle;
    LogDiagnostic("control endpoint: its socket was closed by the program; listening again");
  } else if (errno == EADDRINUSE) {
    LogDiagnostic("control endpoint: lost its socket, and %s is someone else's now", Where());
    g_state.store(kReleased);
  }
}

void ServeLoop() {
  int64_t next_thread_check_ms = 0;
  for (;;) {
    int state = g_state.load();
    int64_t now = NowMs();
    if (now >= next_thread_check_ms) {
      next_thread_check_ms = now + 1000;
      // The program's last thread ended: do what glibc does then.
      ExitIfOnlyShimThreadsRemain();
    }
    if (state == kStopping) return CloseAllConnections();
    if (state == kServing) {
      bool lost;
      {
        ShimFdUse use(g_listener);
        lost = use.fd() < 0;
      }
      if (lost) Relisten(now);
    }
    if (g_state.load() == kReleased && g_listener >= 0) ReleaseListener();
    if (g_state.load() != kServing && ActiveConnections() == 0) return;

    struct pollfd fds[1 + kMaxConnections];
    Connection* owners[1 + kMaxConnections];
    int count = 0;
    int listener_fd =
        g_listener >= 0 && now >= g_accept_pause_until_ms ? ShimFdNumber(g_listener) : -1;
    if (listener_fd >= 0) {
      fds[count] = {listener_fd, POLLIN, 0};
      owners[count++] = nullptr;
    }
    int64_t wait = 1000;
    for (Connection& c : g_connections) {
      if (c.phase == Phase::kFree) continue;
      int fd = ShimFdNumber(c.handle);
      if (fd < 0) {
        CloseConnection(&c);
        continue;
      }
      fds[count] = {fd, static_cast<short>(c.phase == Phase::kWriting ? POLLOUT : POLLIN), 0};
      owners[count++] = &c;
      int64_t left = c.deadline_ms - now;
      if (left < wait) wait = left < 0 ? 0 : left;
    }
    if (g_accept_pause_until_ms > now && g_accept_pause_until_ms - now < wait) {
      wait = g_accept_pause_until_ms - now;
    }
    int ready = poll(fds, static_cast<nfds_t>(count), static_cast<int>(wait));
    if (ready < 0 && errno != EINTR) {
      LogDiagnostic("control endpoint: poll failed: %s; the endpoint stops", strerror(errno));
      ReleaseListener();
      CloseAllConnections();
      g_state.store(kNone);
      return;
    }
    now = NowMs();
    bool accept = false;
    for (int i = 0; ready > 0 && i < count; ++i) {
      if (fds[i].revents == 0) continue;
      if (owners[i] == nullptr) {
        accept = (fds[i].revents & POLLIN) != 0;
      } else if (owners[i]->phase != Phase::kFree) {
        Step(owners[i], now);
      }
    }
    if (accept && g_listener >= 0) AcceptSome(NowMs());
    Expire(NowMs());
  }
}

// ---- Taking the endpoint over from its holder --------------------------------

// The endpoint's address, for connecting to its holder.
socklen_t EndpointAddress(struct sockaddr_storage* storage) {
  const Config& config = GetConfig();
  memset(storage, 0, sizeof(*storage));
  if (config.control == ControlKind::kUnix) {
    FillUnixAddress(config.control_path, reinterpret_cast<struct sockaddr_un*>(storage));
    return sizeof(struct sockaddr_un);
  }
  if (config.control_ipv6) {
    auto* address = reinterpret_cast<struct sockaddr_in6*>(storage);
    address->sin6_family = AF_INET6;
    address->sin6_port = htons(config.control_port);
    memcpy(&address->sin6_addr, config.control_addr, 16);
    return sizeof(*address);
  }
  auto* address = reinterpret_cast<struct sockaddr_in*>(storage);
  address->sin_family = AF_INET;
  address->sin_port = htons(config.control_port);
  memcpy(&address->sin_addr, config.control_addr, 4);
  return sizeof(*address);
}

// Connects `handle` (non-blocking) to the endpoint's address and sends
// `request`, by `deadline`. Returns 0 or an errno value.
int ConnectAndSend(int handle, const char* request, size_t length, int64_t deadline) {
  struct sockaddr_storage address;
  socklen_t address_length = EndpointAddress(&address);
  bool connecting = false;
  for (;;) {
    int error = 0;
    bool sent = false;
    {
      ShimFdUse use(handle);
      if (use.fd() < 0) return EBADF;
      int result = 0;
      if (connecting) {
        socklen_t size = sizeof(error);
        if (getsockopt(use.fd(), SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
      } else {
        result = connect(use.fd(), reinterpret_cast<struct sockaddr*>(&address), address_length);
        if (result != 0) error = errno;
      }
      if (error == 0) {
        sent = RealSend(use.fd(), request, length) == static_cast<ssize_t>(length);
        if (!sent) error = errno;
      }
    }
    if (sent) return 0;
    if (error == EINPROGRESS && !connecting) {  // TCP: wait until it is connected
      struct pollfd wait = {ShimFdNumber(handle), POLLOUT, 0};
      int64_t left = deadline - NowMs();
      if (left <= 0 || wait.fd < 0 || poll(&wait, 1, static_cast<int>(left)) <= 0) {
        return ETIMEDOUT;
      }
      connecting = true;
      continue;
    }
    // EAGAIN: a Unix listener whose backlog is full (busy); try again.
    if (error != EAGAIN || NowMs() >= deadline) return error == EAGAIN ? ETIMEDOUT : error;
    usleep(20 * 1000);
  }
}

// Asks the process listening on the endpoint's address for it. Returns the
// status of its answer (200: it let go), or 0 when there was none; `reason`
// gets the answer's text.
int AskHandover(char* reason, size_t reason_size) {
  snprintf(reason, reason_size, "no answer");
  const Config& config = GetConfig();
  int domain = config.control == ControlKind::kUnix ? AF_UNIX
               : config.control_ipv6                ? AF_INET6
                                                    : AF_INET;
  int handle = ShimSocket(domain, SOCK_STREAM | SOCK_NONBLOCK);
  if (handle < 0) return 0;
  // Over TCP the asker says who it is; the holder checks it (ServeHandover).
  char request[160];
  int length = snprintf(request, sizeof(request),
                        "POST /handover?pid=%u HTTP/1.1\r\nHost: retain\r\n"
                        "Content-Length: 0\r\n\r\n",
                        static_cast<unsigned>(syscall(SYS_getpid)));
  int64_t deadline = NowMs() + kHandoverWaitMs;
  int error = ConnectAndSend(handle, request, static_cast<size_t>(length), deadline);
  if (error != 0) {
    snprintf(reason, reason_size, "cannot reach it: %s", strerror(error));
    ShimFdClose(handle);
    return 0;
  }
  char answer[1024];
  size_t used = 0;
  while (used < sizeof(answer) - 1) {
    int64_t left = deadline - NowMs();
    if (left <= 0) break;
    struct pollfd wait = {ShimFdNumber(handle), POLLIN, 0};
    if (wait.fd < 0 || poll(&wait, 1, static_cast<int>(left)) < 0) break;
    ssize_t n;
    {
      ShimFdUse use(handle);
      n = use.fd() < 0 ? 0 : RealRead(use.fd(), answer + used, sizeof(answer) - 1 - used);
      error = errno;
    }
    if (n == 0) break;
    if (n < 0) {
      if (error == EAGAIN || error == EINTR) continue;
      break;
    }
    used += static_cast<size_t>(n);
  }
  ShimFdClose(handle);
  if (used < 12 || memcmp(answer, "HTTP/1.1 ", 9) != 0) return 0;
  int status = (answer[9] - '0') * 100 + (answer[10] - '0') * 10 + (answer[11] - '0');
  size_t body = ControlHeadLength(answer, used);
  if (body != 0) {
    size_t text = used - body;
    while (text > 0 && (answer[body + text - 1] == '\n' || answer[body + text - 1] == '\r')) {
      --text;
    }
    snprintf(reason, reason_size, "%.*s", static_cast<int>(text), answer + body);
    for (char* p = reason; *p != '\0'; ++p) {
      if (static_cast<unsigned char>(*p) < 0x20) *p = ' ';
    }
  }
  return status;
}

// In the thread of a process that found the endpoint's address held: asks
// the holder for it and listens once it let go. False when it keeps it.
bool TakeOver() {
  const Config& config = GetConfig();
  const bool unix_socket = config.control == ControlKind::kUnix;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (g_state.load() != kAsking) return false;
    bool held = true;
    if (unix_socket) {
      PathState state = ProbeUnix(config.control_path);
      if (state == PathState::kNotSocket) {
        LogDiagnostic("control endpoint: %s is not a socket any more; no control endpoint",
                      Where());
        return false;
      }
      if (state == PathState::kStale) unlink(config.control_path);
      held = state == PathState::kLive;
    }
    if (!held || !unix_socket) {
      int handle = Listen();
      if (handle >= 0) {
        g_listener = handle;
        int expected = kAsking;
        if (!g_state.compare_exchange_strong(expected, kServing)) {  // exiting meanwhile
          ReleaseListener();
          return false;
        }
        LogDiagnostic("control endpoint: %s taken over, listening", Where());
        return true;
      }
      if (errno != EADDRINUSE) {
        LogDiagnostic("control endpoint: cannot listen on %s: %s", Where(), strerror(errno));
        return false;
      }
    }
    char reason[200];
    int status = AskHandover(reason, sizeof(reason));
    if (status != 200) {
      LogDiagnostic("control endpoint: %s is kept by the process holding it (%d: %s)", Where(),
                    status, reason);
      return false;
    }
  }
  LogDiagnostic("control endpoint: %s changed hands meanwhile; no control endpoint", Where());
  return false;
}

void* ControlThreadMain(void*) {
  g_thread.busy = 1;  // everything this thread does is the shim's own work
  if (g_state.load() == kAsking && !TakeOver()) {
    int expected = kAsking;
    g_state.compare_exchange_strong(expected, kNone);
    return nullptr;
  }
  ServeLoop();
  return nullptr;
}

}  // namespace control_internal

using namespace control_internal;  // NOLINT: this file is the transport

bool IsValidControlLabel(const char* label, size_t length) {
  if (length == 0 || length > kMaxLabel) return false;
  for (size_t i = 0; i < length; ++i) {
    if (label[i] == '\0' || !IsLabelChar(label[i])) return false;
  }
  // "." and ".." are in the alphabet; they never become a path, but keep
  // them out all the same.
  if ((length == 1 && label[0] == '.') || (length == 2 && label[0] == '.' && label[1] == '.')) {
    return false;
  }
  return true;
}

void StartControlServer() {
  const Config& config = GetConfig();
  if (config.control == ControlKind::kOff || g_state.load() != kNone) return;
  int saved = errno;
  int handle = -1;
  if (config.control == ControlKind::kUnix) {
    switch (ProbeUnix(config.control_path)) {
      case PathState::kNotSocket:
        LogConfigError("control endpoint: %s exists and is not a socket; no control endpoint",
                       config.control_path);
        errno = saved;
        return;
      case PathState::kLive:
        // Held by a live process: most often the wrapper this program runs
        // under (timeout, sh), or the server that spawned it. The thread
        // asks the holder; start-up does not wait.
        g_state.store(kAsking);
        break;
      case PathState::kStale:
        unlink(config.control_path);
        [[fallthrough]];
      case PathState::kFree:
        handle = ListenUnix(config.control_path);
        break;
    }
  } else {
    handle = ListenTcp(config);
    if (handle < 0 && errno == EADDRINUSE) g_state.store(kAsking);  // as above
  }
  if (g_state.load() != kAsking) {
    if (handle < 0) {
      if (errno == EADDRINUSE) {
        // Another process bound it between the probe and the bind:
        // quietly without one (its stderr is the host's).
        LogDiagnostic("control endpoint: %s is in use; no control endpoint", Where());
      } else {
        LogConfigError("control endpoint: cannot listen on %s: %s; no control endpoint", Where(),
                       strerror(errno));
      }
      errno = saved;
      return;
    }
    g_listener = handle;
    g_state.store(kServing);
  }
  int fd = g_listener >= 0 ? ShimFdNumber(g_listener) : -1;  // before the thread owns it
  g_connections_used = true;
  int error = StartShimThread("retain-ctl", ControlThreadMain);
  if (error != 0) {
    LogWarning("control endpoint: cannot start its thread: %s", strerror(error));
    ReleaseListener();
    g_state.store(kNone);
  } else if (fd >= 0) {
    LogDiagnostic("control endpoint listening on %s (fd %d)", Where(), fd);
  }
  errno = saved;
}

void StopControlServer() {
  int state = g_state.exchange(kStopping);
  if (state == kNone) {
    g_state.store(kNone);
    return;
  }
  int saved = errno;
  ReleasePath();
  errno = saved;
}

void ControlServerResetInChild() {
  // The child has no control thread; its copies of the shim's descriptors
  // are closed by ShimFdsResetInChild. Nothing here is the child's: it
  // never serves, and never removes the parent's socket file.
  g_path_lock.ResetInChild();
  g_path_owned = false;
  g_state.store(kNone);
  g_listener = -1;
  if (!g_connections_used) return;
  for (Connection& c : g_connections) {
    c.phase = Phase::kFree;
    c.handle = -1;
    c.file = -1;
  }
}

}  // namespace retain::shim
