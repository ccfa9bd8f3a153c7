// front_door: see net/front_door.h. This file is the listener, its
// ownership (the handover between a wrapper and the program it runs), the
// relay thread and its epoll loop, and the connections' slots; one
// connection's relaying is net/relay.cc.
//
// Thread and signal contract: everything runs on the relay thread unless
// said otherwise: StartFrontDoor (the constructor's thread), StopFrontDoor
// (the destructor's), FrontDoorResetInChild (the fork child), IsFromFrontDoor
// (a host thread in the read hook) and OnSettled (whichever thread settled a
// snapshot). Those touch only atomics and own_fds handles that live as long
// as the process (the epoll set and the eventfd are never closed once made).
#include "net/front_door.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "base/arena.h"
#include "base/config.h"
#include "base/large_static.h"
#include "base/log.h"
#include "base/own_fds.h"
#include "base/thread_state.h"
#include "base/threads.h"
#include "net/process_lineage.h"
#include "net/relay.h"
#include "snapshot/request_events.h"
#include "snapshot/triggers.h"

namespace retain::shim {
namespace {

constexpr int kBacklog = 511;
constexpr int kAcceptsPerTurn = 16;
constexpr int64_t kAcceptPauseMs = 100;
// At the connection limit, a kept-alive connection idle this long between two
// requests is closed to admit a new client (CloseLongestIdle).
constexpr int64_t kIdleBeforeCloseMs = 1000;
constexpr int64_t kHandoverWaitMs = 3000;
constexpr int kMaxEvents = 64;
// epoll data: slot | side << 16 | generation << 32; these are not slots.
constexpr uint64_t kListenerTag = 0xffff0001u;
constexpr uint64_t kHandoverTag = 0xffff0002u;
constexpr uint64_t kWakeTag = 0xffff0003u;

// The front door's life in this process.
enum State : int {
  kNone,      // off, failed, refused, or a fork child
  kAsking,    // LISTEN is held by a wrapper under the shim: asking it
  kServing,   // listening
  kReleased,  // handed over: the connections open are relayed to their end
  kStopping,  // the process exits
};
std::atomic<int> g_state;

// Handles (own_fds). g_epoll and g_wake, once made, live as long as the
// process (OnSettled and StopFrontDoor write to g_wake from other threads).
// Both are anon-inode descriptors, which own_fds' identity check (device
// and inode) cannot tell from another epoll set or eventfd at the same
// number; they sit high in the shim's range, which the host reaches only
// by dup2 (the hooks move them first) or a raw system call.
std::atomic<int> g_epoll{-1};
std::atomic<int> g_wake{-1};
int g_listener = -1;  // relay thread (and StartFrontDoor before it starts)
int g_handover = -1;  // the abstract socket a descendant asks on
int g_ask = -1;       // kAsking: the connection to the holder

// "127.0.0.1:8080", for messages and the 502's body.
char g_listen_text[64];
char g_target_text[64];

// The server connections' own ports, one bit each, while they are open:
// read by host threads (IsFromFrontDoor).
RETAIN_LARGE_STATIC std::atomic<uint64_t> g_ports[65536 / 64];

// Relay thread only.
Relay* g_slots[kMaxFrontDoorConnections];  // mapped on first use, reused
uint32_t g_generation[kMaxFrontDoorConnections];
bool g_due[kMaxFrontDoorConnections];
int g_active;
bool g_listening;  // the listener is in the epoll set's interest
int64_t g_accept_pause_until_ms;
int64_t g_last_full_log_ms;
uint64_t g_idle_closed;  // idle connections closed to admit new ones

int64_t NowMs() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

socklen_t FillAddress(const LoopbackPort& where, struct sockaddr_storage* storage) {
  memset(storage, 0, sizeof(*storage));
  if (where.ipv6) {
    auto* address = reinterpret_cast<struct sockaddr_in6*>(storage);
    address->sin6_family = AF_INET6;
    address->sin6_port = htons(where.port);
    memcpy(&address->sin6_addr, where.addr, 16);
    return sizeof(*address);
  }
  auto* address = reinterpret_cast<struct sockaddr_in*>(storage);
  address->sin_family = AF_INET;
  address->sin_port = htons(where.port);
  memcpy(&address->sin_addr, where.addr, 4);
  return sizeof(*address);
}

void FormatAddress(const LoopbackPort& where, char* out, size_t size) {
  char host[INET6_ADDRSTRLEN];
  inet_ntop(where.ipv6 ? AF_INET6 : AF_INET, where.addr, host, sizeof(host));
  snprintf(out, size, where.ipv6 ? "[%s]:%u" : "%s:%u", host, where.port);
}

// The abstract Unix socket a holder of LISTEN is asked on.
socklen_t HandoverAddress(struct sockaddr_un* address) {
  memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  int length = snprintf(address->sun_path + 1, sizeof(address->sun_path) - 1,
                        "retain-front-door/%u/%s", static_cast<unsigned>(geteuid()), g_listen_text);
  if (length < 0) length = 0;
  return static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + 1 + length);
}

void SetPortBit(uint16_t port, bool on) {
  const uint64_t bit = uint64_t{1} << (port % 64);
  if (on) {
    g_ports[port / 64].fetch_or(bit, std::memory_order_release);
  } else {
    g_ports[port / 64].fetch_and(~bit, std::memory_order_release);
  }
}

void Wake() {
  const int wake = g_wake.load(std::memory_order_acquire);
  if (wake < 0) return;
  int saved = errno;
  uint64_t one = 1;
  {
    // Inside the shim while the registry's lock is held (a host thread
    // may get here): a stop signal landing now does not wait for a snapshot.
    BusyScope busy;
    ShimFdUse use(wake);
    if (use.fd() >= 0) syscall(SYS_write, use.fd(), &one, sizeof(one));
  }
  errno = saved;
}

// A snapshot a held connection may wait for was settled.
void OnSettled() {
  if (g_state.load(std::memory_order_acquire) != kNone) Wake();
}

// ---- Listening and its ownership --------------------------------------------

int ListenTcp() {
  const LoopbackPort& where = GetConfig().front_door_listen;
  int handle = ShimSocket(where.ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
  if (handle < 0) return -1;
  struct sockaddr_storage address;
  socklen_t length = FillAddress(where, &address);
  int result;
  int error;
  {
    ShimFdUse use(handle);
    int fd = use.fd();
    int one = 1;
    result = fd < 0 ? -1 : setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (result == 0) result = bind(fd, reinterpret_cast<struct sockaddr*>(&address), length);
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

int ListenHandover() {
  int handle = ShimSocket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK);
  if (handle < 0) return -1;
  struct sockaddr_un address;
  socklen_t length = HandoverAddress(&address);
  int result;
  {
    ShimFdUse use(handle);
    result =
        use.fd() < 0 ? -1 : bind(use.fd(), reinterpret_cast<struct sockaddr*>(&address), length);
    if (result == 0) result = listen(use.fd(), 8);
  }
  if (result != 0) {
    ShimFdClose(handle);
    return -1;
  }
  return handle;
}

// Connects to the holder's handover socket: connecting is asking. -1 when
// nobody under the shim holds LISTEN (no such socket).
int ConnectHandover() {
  int handle = ShimSocket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK);
  if (handle < 0) return -1;
  struct sockaddr_un address;
  socklen_t length = HandoverAddress(&address);
  int result;
  {
    ShimFdUse use(handle);
    result =
        use.fd() < 0 ? -1 : connect(use.fd(), reinterpret_cast<struct sockaddr*>(&address), length);
  }
  if (result != 0 && errno != EINPROGRESS && errno != EAGAIN) {
    ShimFdClose(handle);
    return -1;
  }
  return handle;
}

void EpollAdd(int handle, uint32_t events, uint64_t data) {
  int fd = ShimFdNumber(handle);
  int epoll = ShimFdNumber(g_epoll.load(std::memory_order_relaxed));
  if (fd < 0 || epoll < 0) return;
  struct epoll_event event;
  event.events = events;
  event.data.u64 = data;
  epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event);
}

void EpollForget(int handle) {
  int fd = ShimFdNumber(handle);
  int epoll = ShimFdNumber(g_epoll.load(std::memory_order_relaxed));
  if (fd >= 0 && epoll >= 0) epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nullptr);
}

// Whether the listener is watched: not while every slot is taken, nor
// during an accept pause.
void SetListening(bool on) {
  if (g_listener < 0 || on == g_listening) return;
  int fd = ShimFdNumber(g_listener);
  int epoll = ShimFdNumber(g_epoll.load(std::memory_order_relaxed));
  if (fd < 0 || epoll < 0) return;
  struct epoll_event event;
  event.events = on ? static_cast<uint32_t>(EPOLLIN) : 0u;
  event.data.u64 = kListenerTag;
  if (epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event) == 0) g_listening = on;
}

void CloseListeners() {
  if (g_listener >= 0) {
    EpollForget(g_listener);
    ShimFdClose(g_listener);
    g_listener = -1;
    g_listening = false;
  }
  if (g_handover >= 0) {
    EpollForget(g_handover);
    ShimFdClose(g_handover);
    g_handover = -1;
  }
}

// A process asks for LISTEN on the handover socket: the kernel names it.
// It gets it if it descends from this process, is of this user, and this
// process does not listen on TARGET itself (then this is the server, and
// the asker one of its helpers).
void ServeHandover() {
  for (int i = 0; i < 4; ++i) {
    int asker = ShimAccept(g_handover, SOCK_NONBLOCK);
    if (asker < 0) return;
    struct ucred peer;
    socklen_t size = sizeof(peer);
    bool known;
    {
      ShimFdUse use(asker);
      known = use.fd() >= 0 && getsockopt(use.fd(), SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0;
    }
    char answer[200];
    const int self = static_cast<int>(syscall(SYS_getpid));
    const LoopbackPort& target = GetConfig().front_door_target;
    bool yes = false;
    if (!known) {
      snprintf(answer, sizeof(answer), "no: cannot tell who asks\n");
    } else if (peer.uid != geteuid()) {
      snprintf(answer, sizeof(answer), "no: pid %d is another user's\n", peer.pid);
    } else if (g_state.load() != kServing) {
      snprintf(answer, sizeof(answer), "no: not held here any more\n");
    } else if (ListensOnPort(self, target.ipv6, target.addr, target.port)) {
      snprintf(answer, sizeof(answer), "no: pid %d listens on %s itself and keeps its front door\n",
               self, g_target_text);
    } else if (!IsDescendant(peer.pid)) {
      snprintf(answer, sizeof(answer), "no: pid %d is not a descendant of pid %d\n", peer.pid,
               self);
    } else {
      yes = true;
      snprintf(answer, sizeof(answer), "yes: handed over to pid %d\n", peer.pid);
    }
    if (yes) {
      // Let go before answering: the asker binds as soon as it reads it.
      CloseListeners();
      g_state.store(kReleased);
    }
    if (known) {
      LogDiagnostic("front door: pid %d asked for %s: %.120s", peer.pid, g_listen_text, answer);
    }
    {
      ShimFdUse use(asker);
      if (use.fd() >= 0) {
        syscall(SYS_sendto, use.fd(), answer, strlen(answer), MSG_DONTWAIT | MSG_NOSIGNAL, nullptr,
                0);
      }
    }
    ShimFdClose(asker);
    if (yes) return;
  }
}

// kAsking, on the relay thread: waits for the holder's answer to the
// connection StartFrontDoor made, then listens if it let go.
bool TakeOver() {
  char answer[200];
  size_t used = 0;
  const int64_t deadline = NowMs() + kHandoverWaitMs;
  bool holder_trusted = false;
  {
    struct ucred peer;
    socklen_t size = sizeof(peer);
    ShimFdUse use(g_ask);
    holder_trusted = use.fd() >= 0 &&
                     getsockopt(use.fd(), SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0 &&
                     peer.uid == geteuid();
  }
  while (holder_trusted && used < sizeof(answer) - 1) {
    const int64_t left = deadline - NowMs();
    if (left <= 0) break;
    struct pollfd wait = {ShimFdNumber(g_ask), POLLIN, 0};
    if (wait.fd < 0 || poll(&wait, 1, static_cast<int>(left)) < 0) break;
    ssize_t n;
    int error;
    {
      ShimFdUse use(g_ask);
      n = use.fd() < 0 ? 0
                       : syscall(SYS_recvfrom, use.fd(), answer + used, sizeof(answer) - 1 - used,
                                 MSG_DONTWAIT, nullptr, nullptr);
      error = errno;
    }
    if (n == 0) break;
    if (n < 0) {
      if (error == EAGAIN || error == EINTR) continue;
      break;
    }
    used += static_cast<size_t>(n);
  }
  ShimFdClose(g_ask);
  g_ask = -1;
  answer[used] = '\0';
  while (used > 0 && answer[used - 1] == '\n') answer[--used] = '\0';
  if (strncmp(answer, "yes", 3) != 0) {
    LogDiagnostic("front door: %s is kept by the process holding it (%s); no front door",
                  g_listen_text, used > 0 ? answer : "no answer");
    return false;
  }
  for (int attempt = 0; attempt < 20; ++attempt) {
    int handle = ListenTcp();
    if (handle >= 0) {
      g_listener = handle;
      g_handover = ListenHandover();
      int expected = kAsking;
      if (!g_state.compare_exchange_strong(expected, kServing)) {  // exiting meanwhile
        CloseListeners();
        return false;
      }
      LogDiagnostic("front door: %s taken over (%s), relaying to %s", g_listen_text, answer,
                    g_target_text);
      return true;
    }
    if (errno != EADDRINUSE) break;
    usleep(50 * 1000);
  }
  LogDiagnostic("front door: %s was handed over but cannot be bound: %s; no front door",
                g_listen_text, strerror(errno));
  return false;
}

// ---- Connections ----------------------------------------------------------------

uint64_t SlotTag(int slot, bool server_side) {
  return static_cast<uint64_t>(slot) | (server_side ? uint64_t{1} << 16 : 0) |
         static_cast<uint64_t>(g_generation[slot]) << 32;
}

// A free slot with its memory, or -1.
int TakeSlot() {
  for (int slot = 0; slot < kMaxFrontDoorConnections; ++slot) {
    if (g_slots[slot] != nullptr && g_slots[slot]->phase != RelayPhase::kFree) continue;
    if (g_slots[slot] == nullptr) {
      g_slots[slot] = static_cast<Relay*>(MapPages(sizeof(Relay)));
      if (g_slots[slot] == nullptr) return -1;
    }
    return slot;
  }
  return -1;
}

void FreeSlot(int slot) {
  Relay& r = *g_slots[slot];
  if (r.local_port != 0) SetPortBit(r.local_port, false);
  r.phase = RelayPhase::kFree;
  ++g_generation[slot];
  g_due[slot] = false;
  --g_active;
}

void PauseAccepting(int64_t now, const char* why) {
  g_accept_pause_until_ms = now + kAcceptPauseMs;
  SetListening(false);
  if (now - g_last_full_log_ms >= 10000) {
    g_last_full_log_ms = now;
    LogDiagnostic("front door: %s; new connections wait", why);
  }
}

void SetNoDelay(int handle) {
  ShimFdUse use(handle);
  int one = 1;
  if (use.fd() >= 0) setsockopt(use.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// At the connection limit, a new client must not wait behind kept-alive
// connections nobody uses: closes the one idle longest (at least
// kIdleBeforeCloseMs between two requests, as servers close idle keep-alive
// connections), making room. False when none is idle.
bool CloseLongestIdle(int64_t now) {
  int oldest = -1;
  for (int slot = 0; slot < kMaxFrontDoorConnections; ++slot) {
    const Relay* r = g_slots[slot];
    if (r == nullptr || r->phase == RelayPhase::kFree || !RelayIdle(*r)) continue;
    if (now - r->last_active_ms < kIdleBeforeCloseMs) continue;
    if (oldest < 0 || r->last_active_ms < g_slots[oldest]->last_active_ms) oldest = slot;
  }
  if (oldest < 0) return false;
  AbortRelay(*g_slots[oldest]);
  FreeSlot(oldest);
  ++g_idle_closed;
  if (now - g_last_full_log_ms >= 10000) {
    g_last_full_log_ms = now;
    LogDiagnostic(
        "front door: all %d connections in use; closed the one idle longest (%llu so far)",
        kMaxFrontDoorConnections, static_cast<unsigned long long>(g_idle_closed));
  }
  return true;
}

// Accepts one connection and connects it to the server. False when there
// is nothing (more) to accept now.
bool AcceptOne(int64_t now) {
  if (g_active >= kMaxFrontDoorConnections && !CloseLongestIdle(now)) {
    // Until a connection ends, or one has been idle long enough to close.
    PauseAccepting(now, "every connection is in use");
    return false;
  }
  const int client = ShimAccept(g_listener, SOCK_NONBLOCK, ShimFdPlace::kHighOnly);
  if (client < 0) {
    const int error = errno;
    if (error == EINTR || error == ECONNABORTED || error == EPROTO) return true;
    if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
      PauseAccepting(now, "no descriptor for another connection");
    }
    return false;  // EAGAIN: none left
  }
  const int slot = TakeSlot();
  const LoopbackPort& target = GetConfig().front_door_target;
  const int server = slot < 0 ? -1
                              : ShimSocket(target.ipv6 ? AF_INET6 : AF_INET,
                                           SOCK_STREAM | SOCK_NONBLOCK, ShimFdPlace::kHighOnly);
  if (server < 0) {
    ShimFdClose(client);
    PauseAccepting(now, slot < 0 ? "no memory for another connection"
                                 : "no descriptor for another connection");
    return false;
  }
  SetNoDelay(client);
  SetNoDelay(server);
  struct sockaddr_storage address;
  socklen_t length = FillAddress(target, &address);
  int connect_error = 0;
  uint16_t local_port = 0;
  {
    ShimFdUse use(server);
    if (use.fd() < 0) {
      connect_error = EBADF;
    } else if (connect(use.fd(), reinterpret_cast<struct sockaddr*>(&address), length) != 0) {
      connect_error = errno;
    }
    struct sockaddr_storage local;
    socklen_t local_length = sizeof(local);
    if (use.fd() >= 0 && (connect_error == 0 || connect_error == EINPROGRESS) &&
        getsockname(use.fd(), reinterpret_cast<struct sockaddr*>(&local), &local_length) == 0) {
      local_port = ntohs(local.ss_family == AF_INET6
                             ? reinterpret_cast<struct sockaddr_in6*>(&local)->sin6_port
                             : reinterpret_cast<struct sockaddr_in*>(&local)->sin_port);
    }
  }
  Relay& r = *g_slots[slot];
  // Noted before any byte goes to the server: the sniffer looks at its
  // connection's first bytes (net/socket_table.h).
  if (local_port != 0) SetPortBit(local_port, true);
  StartRelay(r, g_epoll.load(std::memory_order_relaxed), client, server, local_port, connect_error,
             g_target_text);
  if (r.server < 0 && local_port != 0) {
    SetPortBit(local_port, false);
    r.local_port = 0;
  }
  ++g_active;
  constexpr uint32_t kEvents = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  EpollAdd(client, kEvents, SlotTag(slot, false));
  if (r.server >= 0) EpollAdd(r.server, kEvents, SlotTag(slot, true));
  g_due[slot] = true;
  return true;
}

void DrainWake() {
  uint64_t count;
  ShimFdUse use(g_wake.load(std::memory_order_relaxed));
  if (use.fd() >= 0) syscall(SYS_read, use.fd(), &count, sizeof(count));
}

void Dispatch(const struct epoll_event& event, int64_t now) {
  const uint64_t tag = event.data.u64;
  if (tag == kListenerTag) {
    for (int i = 0; i < kAcceptsPerTurn && g_listener >= 0 && AcceptOne(now); ++i) {
    }
    return;
  }
  if (tag == kHandoverTag) return ServeHandover();
  if (tag == kWakeTag) {
    // A snapshot was settled, or the process exits: held connections may
    // go on.
    DrainWake();
    for (int slot = 0; slot < kMaxFrontDoorConnections; ++slot) {
      if (g_slots[slot] != nullptr && g_slots[slot]->hold_ordinal != 0) g_due[slot] = true;
    }
    return;
  }
  const int slot = static_cast<int>(tag & 0xffff);
  if (slot >= kMaxFrontDoorConnections || g_slots[slot] == nullptr) return;
  if (static_cast<uint32_t>(tag >> 32) != g_generation[slot]) return;  // an earlier connection's
  NoteRelayEvent(*g_slots[slot], ((tag >> 16) & 1) != 0, event.events);
  g_due[slot] = true;
}

// Ends the front door: every connection aborted, the listeners closed.
void StopRelaying(const char* why) {
  LogDiagnostic("front door: %s; it stops", why);
  for (int slot = 0; slot < kMaxFrontDoorConnections; ++slot) {
    if (g_slots[slot] != nullptr && g_slots[slot]->phase != RelayPhase::kFree) {
      AbortRelay(*g_slots[slot]);
      FreeSlot(slot);
    }
  }
  CloseListeners();
  g_state.store(kNone);
}

void ServeLoop() {
  int64_t next_thread_check_ms = 0;
  struct epoll_event events[kMaxEvents];
  for (;;) {
    int64_t now = NowMs();
    if (now >= next_thread_check_ms) {
      next_thread_check_ms = now + 1000;
      ExitIfOnlyShimThreadsRemain();  // a shim thread never keeps a process alive
    }
    const int state = g_state.load();
    if (state != kServing && (g_listener >= 0 || g_handover >= 0)) CloseListeners();
    // At the limit too: AcceptOne then closes an idle connection to make
    // room, or pauses again (kAcceptPauseMs).
    if (state == kServing && g_listener >= 0 && !g_listening && now >= g_accept_pause_until_ms) {
      SetListening(true);
    }
    // Work left from the last turn, deadlines, the accept pause, the
    // once-a-second check.
    int64_t wake_at = next_thread_check_ms;
    bool ready = false;
    for (int slot = 0; slot < kMaxFrontDoorConnections; ++slot) {
      Relay* r = g_slots[slot];
      if (r == nullptr || r->phase == RelayPhase::kFree) continue;
      if (r->again) ready = true;
      const int64_t deadline = RelayDeadline(*r);
      if (deadline < wake_at) wake_at = deadline;
    }
    if (g_accept_pause_until_ms > now && g_accept_pause_until_ms < wake_at) {
      wake_at = g_accept_pause_until_ms;
    }
    const int64_t wait = ready ? 0 : (wake_at > now ? wake_at - now : 0);
    const int epoll = ShimFdNumber(g_epoll.load(std::memory_order_relaxed));
    if (epoll < 0) {
      StopRelaying("its epoll descriptor was closed by the program");
      return;
    }
    const int count = epoll_wait(epoll, events, kMaxEvents, static_cast<int>(wait));
    if (count < 0 && errno != EINTR) {
      // The descriptor was closed or replaced behind the hooks (a raw
      // system call): waiting again would fail again, at once, forever.
      StopRelaying(strerror(errno));
      return;
    }
    now = NowMs();
    for (int i = 0; i < count; ++i) Dispatch(events[i], now);
    for (int slot = 0; slot < kMaxFrontDoorConnections; ++slot) {
      Relay* r = g_slots[slot];
      if (r == nullptr || r->phase == RelayPhase::kFree) continue;
      if (g_due[slot] || r->again || RelayDeadline(*r) <= now) {
        g_due[slot] = false;
        PumpRelay(*r, now, g_target_text);
      }
      if (r->closed) FreeSlot(slot);
    }
  }
}

void* FrontDoorThreadMain(void*) {
  g_thread.busy = 1;  // everything this thread does is the shim's own work
  if (g_state.load() == kAsking && !TakeOver()) {
    int expected = kAsking;
    g_state.compare_exchange_strong(expected, kNone);
    return nullptr;
  }
  const int epoll = ShimEpoll();
  const int wake = ShimEventFd();
  if (epoll < 0 || wake < 0) {
    LogDiagnostic("front door: cannot make its epoll set: %s; no front door", strerror(errno));
    ShimFdClose(epoll);
    ShimFdClose(wake);
    CloseListeners();
    g_state.store(kNone);
    return nullptr;
  }
  g_epoll.store(epoll, std::memory_order_release);
  g_wake.store(wake, std::memory_order_release);
  EpollAdd(wake, EPOLLIN, kWakeTag);
  EpollAdd(g_listener, EPOLLIN, kListenerTag);
  g_listening = true;
  if (g_handover >= 0) EpollAdd(g_handover, EPOLLIN, kHandoverTag);
  SetRequestSnapshotListener(OnSettled);
  LogDiagnostic("front door: %s relays to %s", g_listen_text, g_target_text);
  ServeLoop();
  return nullptr;
}

}  // namespace

void StartFrontDoor() {
  const Config& config = GetConfig();
  if (!config.front_door || g_state.load() != kNone) return;
  int saved = errno;
  FormatAddress(config.front_door_listen, g_listen_text, sizeof(g_listen_text));
  FormatAddress(config.front_door_target, g_target_text, sizeof(g_target_text));
  // Its connections' descriptors go high too (base/own_fds.h).
  ReserveShimFdSpan(kFrontDoorFds);
  int handle = ListenTcp();
  if (handle >= 0) {
    g_listener = handle;
    g_handover = ListenHandover();
    if (g_handover < 0) {
      LogDiagnostic("front door: cannot make its handover socket: %s", strerror(errno));
    }
    g_state.store(kServing);
  } else if (errno == EADDRINUSE) {
    // Held: most often by the wrapper this program runs under (sh,
    // timeout), under the shim too. Connecting asks it; the thread reads
    // the answer (start-up does not wait).
    g_ask = ConnectHandover();
    if (g_ask < 0) {
      LogConfigError("RETAIN_FRONT_DOOR: %s is in use by a program without the shim; no front door",
                     g_listen_text);
      errno = saved;
      return;
    }
    g_state.store(kAsking);
  } else {
    LogConfigError("RETAIN_FRONT_DOOR: cannot listen on %s: %s; no front door", g_listen_text,
                   strerror(errno));
    errno = saved;
    return;
  }
  int error = StartShimThread("retain-door", FrontDoorThreadMain);
  if (error != 0) {
    LogWarning("front door: cannot start its thread: %s", strerror(error));
    CloseListeners();
    ShimFdClose(g_ask);
    g_ask = -1;
    g_state.store(kNone);
  } else if (config.snapshot_every != 0) {
    // The every-N snapshots of relayed requests are the service thread's to
    // write (net/relay.h): started now (a shim thread runs, so it may), so
    // the relay thread never starts a thread (pthread_create may allocate
    // from the host's heap).
    WakeServiceThread();
    RunService();
  }
  errno = saved;
}

void StopFrontDoor() {
  int state = g_state.load();
  if (state == kNone) return;
  g_state.store(kStopping);
  Wake();  // the thread closes the listeners
}

void FrontDoorResetInChild() {
  // The child's copies of the descriptors are closed already
  // (ShimFdsResetInChild); nothing here is the child's.
  g_state.store(kNone);
  g_epoll.store(-1);
  g_wake.store(-1);
  g_listener = -1;
  g_handover = -1;
  g_ask = -1;
  g_listening = false;
  g_active = 0;
  for (int slot = 0; slot < kMaxFrontDoorConnections; ++slot) {
    if (g_slots[slot] != nullptr) g_slots[slot]->phase = RelayPhase::kFree;
    g_due[slot] = false;
  }
  // Written only by a front door (8 KiB): a child of a process without one
  // writes none of it.
  if (!GetConfig().front_door) return;
  for (std::atomic<uint64_t>& word : g_ports) word.store(0, std::memory_order_relaxed);
}

bool IsFromFrontDoor(int fd) {
  if (g_state.load(std::memory_order_relaxed) == kNone) return false;
  int saved = errno;
  struct sockaddr_storage peer;
  struct sockaddr_storage local;
  socklen_t peer_length = sizeof(peer);
  socklen_t local_length = sizeof(local);
  bool ok = getpeername(fd, reinterpret_cast<struct sockaddr*>(&peer), &peer_length) == 0 &&
            getsockname(fd, reinterpret_cast<struct sockaddr*>(&local), &local_length) == 0;
  errno = saved;
  if (!ok || peer.ss_family != local.ss_family) return false;
  uint16_t peer_port;
  uint16_t local_port;
  bool loopback;
  if (peer.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const struct sockaddr_in*>(&peer);
    peer_port = ntohs(in->sin_port);
    local_port = ntohs(reinterpret_cast<const struct sockaddr_in*>(&local)->sin_port);
    loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  } else if (peer.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const struct sockaddr_in6*>(&peer);
    peer_port = ntohs(in6->sin6_port);
    local_port = ntohs(reinterpret_cast<const struct sockaddr_in6*>(&local)->sin6_port);
    loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
               (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127);
  } else {
    return false;
  }
  if (!loopback || local_port != GetConfig().front_door_target.port) return false;
  return (g_ports[peer_port / 64].load(std::memory_order_acquire) >> (peer_port % 64)) & 1;
}

}  // namespace retain::shim
