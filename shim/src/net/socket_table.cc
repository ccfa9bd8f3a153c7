// socket_table: see net/socket_table.h.
#include "net/socket_table.h"

#include <string.h>

#include <atomic>

#include "base/arena.h"
#include "base/config.h"
#include "base/large_static.h"
#include "base/spin_lock.h"
#include "net/front_door.h"
#include "net/http_sniffer.h"
#include "record/tag_table.h"
#include "snapshot/request_events.h"

namespace retain::shim {
namespace {

constexpr int kPageBits = 8;
constexpr int kPageSize = 1 << kPageBits;
constexpr int kMaxFd = 1 << 20;
constexpr int kDirectorySize = kMaxFd >> kPageBits;

struct Connection {
  SpinLock lock;
  bool tracked;
  bool check_peer;  // the front door is on: is the peer its port? (first bytes)
  HttpSniffer sniffer;
  // Tags of the requests read and not yet answered, oldest first (0 for a
  // request on a path RETAIN_HTTP_PATHS leaves out).
  uint32_t pending[kMaxPendingRequests];
  int pending_head;
  int pending_count;
};

RETAIN_LARGE_STATIC std::atomic<Connection*> g_pages[kDirectorySize];
std::atomic<uint64_t> g_host_accepts;

Connection* Find(int fd, bool create) {
  if (fd < 0 || fd >= kMaxFd) return nullptr;
  std::atomic<Connection*>& slot = g_pages[fd >> kPageBits];
  Connection* page = slot.load(std::memory_order_acquire);
  if (page == nullptr) {
    if (!create) return nullptr;
    page = static_cast<Connection*>(MapPages(sizeof(Connection) * kPageSize));
    if (page == nullptr) return nullptr;
    Connection* expected = nullptr;
    if (!slot.compare_exchange_strong(expected, page)) {
      UnmapPages(page, sizeof(Connection) * kPageSize);
      page = expected;
    }
  }
  return &page[fd & (kPageSize - 1)];
}

}  // namespace

bool HttpPathWanted(const char* path) {
  const char* list = GetConfig().http_paths;
  if (list[0] == '\0') return true;
  size_t length = strlen(path);
  for (const char* item = list; *item != '\0';) {
    const char* end = strchr(item, ',');
    size_t item_length = end == nullptr ? strlen(item) : static_cast<size_t>(end - item);
    if (item_length == length && memcmp(item, path, length) == 0) return true;
    if (end == nullptr) break;
    item = end + 1;
  }
  return false;
}

namespace {

// Requests to end once the connection's lock is released.
struct Ended {
  uint32_t ids[kMaxPendingRequests + 1];
  RequestEnd how[kMaxPendingRequests + 1];
  int count;
};

struct SinkContext {
  Connection* connection;
  Ended* ended;
};

void OnEvent(void* context, const HttpEvent& event) {
  auto* sink = static_cast<SinkContext*>(context);
  Connection& c = *sink->connection;
  switch (event.type) {
    case HttpEventType::kRequestStarted: {
      uint32_t id = 0;
      if (HttpPathWanted(event.head.path)) {
        id = BeginRequest(TagSource::kHttp, Attribution::kHttpThread, event.head.request_id,
                          event.head.method, event.head.path);
      }
      if (c.pending_count < kMaxPendingRequests) {
        c.pending[(c.pending_head + c.pending_count) % kMaxPendingRequests] = id;
        ++c.pending_count;
      }
      break;
    }
    case HttpEventType::kResponseFinished:
    case HttpEventType::kRequestAborted:
      if (c.pending_count > 0) {
        uint32_t id = c.pending[c.pending_head];
        c.pending_head = (c.pending_head + 1) % kMaxPendingRequests;
        --c.pending_count;
        Ended& ended = *sink->ended;
        if (id != 0 && ended.count < kMaxPendingRequests + 1) {
          ended.how[ended.count] = event.type == HttpEventType::kRequestAborted
                                       ? RequestEnd::kAborted
                                       : RequestEnd::kCompleted;
          ended.ids[ended.count++] = id;
        }
      }
      break;
    case HttpEventType::kConnectionIgnored:
      c.tracked = false;
      break;
  }
}

template <typename Feed>
void WithConnection(int fd, Feed feed) {
  Connection* c = Find(fd, false);
  if (c == nullptr) return;
  Ended ended{{}, {}, 0};
  {
    SpinLockHolder hold(c->lock);
    if (!c->tracked) return;
    if (c->check_peer) {
      c->check_peer = false;
      if (IsFromFrontDoor(fd)) {
        c->tracked = false;  // the front door tags these requests
        return;
      }
    }
    SinkContext context{c, &ended};
    HttpEventSink sink{OnEvent, &context};
    feed(*c, sink);
  }
  for (int i = 0; i < ended.count; ++i) EndRequest(ended.ids[i], ended.how[i]);
}

}  // namespace

void TrackAcceptedSocket(int fd) {
  if (!GetConfig().http) return;
  Connection* c = Find(fd, true);
  if (c == nullptr) return;
  SpinLockHolder hold(c->lock);
  memset(&c->sniffer, 0, sizeof(c->sniffer));
  c->pending_head = 0;
  c->pending_count = 0;
  c->check_peer = GetConfig().front_door;
  c->tracked = true;
}

bool IsTrackedSocket(int fd) {
  Connection* c = Find(fd, false);
  return c != nullptr && __atomic_load_n(&c->tracked, __ATOMIC_RELAXED);
}

void SocketClosed(int fd) {
  WithConnection(fd, [](Connection& c, HttpEventSink& sink) {
    c.sniffer.OnClose(sink);
    c.tracked = false;
  });
}

void SocketInbound(int fd, const char* data, size_t size) {
  WithConnection(
      fd, [&](Connection& c, HttpEventSink& sink) { c.sniffer.OnInbound(data, size, sink); });
}

void SocketOutbound(int fd, const char* data, size_t size) {
  WithConnection(
      fd, [&](Connection& c, HttpEventSink& sink) { c.sniffer.OnOutbound(data, size, sink); });
}

void SocketInboundVector(int fd, const struct iovec* iov, int count, size_t total) {
  WithConnection(fd, [&](Connection& c, HttpEventSink& sink) {
    for (int i = 0; i < count && total > 0; ++i) {
      size_t n = iov[i].iov_len < total ? iov[i].iov_len : total;
      c.sniffer.OnInbound(static_cast<const char*>(iov[i].iov_base), n, sink);
      total -= n;
    }
  });
}

void SocketOutboundVector(int fd, const struct iovec* iov, int count, size_t total) {
  WithConnection(fd, [&](Connection& c, HttpEventSink& sink) {
    for (int i = 0; i < count && total > 0; ++i) {
      size_t n = iov[i].iov_len < total ? iov[i].iov_len : total;
      c.sniffer.OnOutbound(static_cast<const char*>(iov[i].iov_base), n, sink);
      total -= n;
    }
  });
}

void CountHostAccept() { g_host_accepts.fetch_add(1, std::memory_order_relaxed); }
uint64_t HostAcceptCount() { return g_host_accepts.load(std::memory_order_relaxed); }

}  // namespace retain::shim
