// control_endpoints: the control endpoint's endpoints (net/control_server.h):
// POST/GET /snapshot (rate-limited by the transport's AllowSnapshot),
// POST /trim (malloc_trim, snapshot/trim.h; under the same rate limit),
// POST /mark and /mark/end, GET /stats and /metrics (kinds named by
// proto/kinds.h, totals from the one walk of record/live_tables.h), POST
// /handover (who asks: net/process_lineage.h), and Dispatch, which routes a complete
// request to one of them. The transport (listener, poll loop, connections,
// deadlines) is net/control_server.cc.
//
// Thread and signal contract: control thread only (busy, every signal
// blocked); each endpoint answers through Reply/ReplyMessage and never
// blocks but in WriteSnapshot and short /proc reads. Never allocates from
// the host heap (bodies are built in g_body); logs only diagnostics.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/arena.h"
#include "base/config.h"
#include "base/large_static.h"
#include "base/log.h"
#include "base/own_fds.h"
#include "base/process_info.h"
#include "base/threads.h"
#include "net/control_request.h"
#include "net/control_server.h"
#include "net/control_transport.h"
#include "net/process_lineage.h"
#include "net/socket_table.h"
#include "record/kinds.h"
#include "record/live_table.h"
#include "record/live_tables.h"
#include "record/mmap_table.h"
#include "record/recorder.h"
#include "record/tag_table.h"
#include "snapshot/request_events.h"
#include "snapshot/trim.h"
#include "snapshot/writer.h"

namespace retain::shim::control_internal {
namespace {

uint32_t g_marks[kMarkDepth];  // tags opened by /mark, newest last
int g_mark_count;
RETAIN_LARGE_STATIC char g_body[12288];

struct Stats {
  KindCounters counters[kKindCount];
  uint64_t requests;
  uint64_t requests_closed;
  uint64_t arena_bytes;
  uint64_t dropped;
};

void GatherStats(Stats* stats) {
  memset(stats, 0, sizeof(*stats));
  MmapTable& maps = ProgramMappings();
  maps.Lock();
  for (int k = 0; k < kKindCount; ++k) stats->counters[k].Add(maps.counters(k));
  stats->dropped = maps.dropped();
  maps.Unlock();
  ForEachLiveTable([&](LiveTable& table) {
    table.SumCounters(stats->counters);
    stats->dropped += table.dropped();
  });
  stats->requests = TagCount();
  stats->requests_closed = ClosedTagCount();
  stats->arena_bytes = ArenaBytes();
}

// Appends to g_body; `ok` turns false when it is full.
struct BodyWriter {
  size_t length = 0;
  bool ok = true;
  void Add(const char* format, ...) __attribute__((format(printf, 2, 3)));
};

void BodyWriter::Add(const char* format, ...) {
  if (!ok) return;
  va_list args;
  va_start(args, format);
  int n = vsnprintf(g_body + length, sizeof(g_body) - length, format, args);
  va_end(args);
  if (n < 0 || static_cast<size_t>(n) >= sizeof(g_body) - length) {
    ok = false;
    return;
  }
  length += static_cast<size_t>(n);
}

// Kinds worth listing: the three the shim always records, and any other
// one that has seen an allocation.
bool ShowKind(const Stats& stats, int k) { return k < 3 || stats.counters[k].allocated_count != 0; }

void ServeStats(Connection* c, int64_t now) {
  Stats stats;
  GatherStats(&stats);
  BodyWriter out;
  out.Add("{\"pid\":%u,\"live\":{", Pid());
  bool first = true;
  for (int k = 0; k < kKindCount; ++k) {
    if (!ShowKind(stats, k)) continue;
    out.Add("%s\"%s\":{\"bytes\":%llu,\"count\":%llu}", first ? "" : ",", KindName(kAllKinds[k]),
            static_cast<unsigned long long>(stats.counters[k].live_bytes),
            static_cast<unsigned long long>(stats.counters[k].live_count));
    first = false;
  }
  out.Add(
      "},\"requests\":%llu,\"requests_closed\":%llu,\"arena_bytes\":%llu,"
      "\"dropped_records\":%llu}\n",
      static_cast<unsigned long long>(stats.requests),
      static_cast<unsigned long long>(stats.requests_closed),
      static_cast<unsigned long long>(stats.arena_bytes),
      static_cast<unsigned long long>(stats.dropped));
  if (!out.ok) return ReplyMessage(c, now, 500, "stats do not fit\n");
  Reply(c, now, 200, "application/json", g_body, out.length);
}

void ServeMetrics(Connection* c, int64_t now) {
  Stats stats;
  GatherStats(&stats);
  BodyWriter out;
  out.Add(
      "# HELP retain_live_bytes Bytes live now, by memory kind.\n"
      "# TYPE retain_live_bytes gauge\n");
  for (int k = 0; k < kKindCount; ++k) {
    if (!ShowKind(stats, k)) continue;
    out.Add("retain_live_bytes{kind=\"%s\"} %llu\n", KindName(kAllKinds[k]),
            static_cast<unsigned long long>(stats.counters[k].live_bytes));
  }
  out.Add(
      "# HELP retain_live_allocations Allocations live now, by memory kind.\n"
      "# TYPE retain_live_allocations gauge\n");
  for (int k = 0; k < kKindCount; ++k) {
    if (!ShowKind(stats, k)) continue;
    out.Add("retain_live_allocations{kind=\"%s\"} %llu\n", KindName(kAllKinds[k]),
            static_cast<unsigned long long>(stats.counters[k].live_count));
  }
  out.Add(
      "# HELP retain_requests_total Request tags opened.\n"
      "# TYPE retain_requests_total counter\n"
      "retain_requests_total %llu\n"
      "# HELP retain_arena_bytes Bytes of the shim's own memory.\n"
      "# TYPE retain_arena_bytes gauge\n"
      "retain_arena_bytes %llu\n"
      "# HELP retain_dropped_records_total Allocations not recorded (arena full).\n"
      "# TYPE retain_dropped_records_total counter\n"
      "retain_dropped_records_total %llu\n",
      static_cast<unsigned long long>(stats.requests),
      static_cast<unsigned long long>(stats.arena_bytes),
      static_cast<unsigned long long>(stats.dropped));
  if (!out.ok) return ReplyMessage(c, now, 500, "metrics do not fit\n");
  Reply(c, now, 200, "text/plain; version=0.0.4; charset=utf-8", g_body, out.length);
}

void ServeSnapshot(Connection* c, int64_t now, bool stream) {
  const ControlRequest& r = c->request;
  const char* value = nullptr;
  long length = ControlQueryValue(r.query, r.query_length, "label", &value);
  char label[kMaxLabel + 1];
  if (length >= 0) {
    if (!IsValidControlLabel(value, static_cast<size_t>(length))) {
      return ReplyMessage(c, now, 400, "label must be 1-64 characters of [A-Za-z0-9._-]\n");
    }
    memcpy(label, value, static_cast<size_t>(length));
    label[length] = '\0';
  }
  int64_t retry_after = 1;
  if (!AllowSnapshot(now, &retry_after)) {
    char extra[48];
    snprintf(extra, sizeof(extra), "Retry-After: %lld\r\n", static_cast<long long>(retry_after));
    char message[96];
    snprintf(message, sizeof(message), "at most %d snapshots a second (RETAIN_CONTROL_RATE)\n",
             GetConfig().control_rate);
    return ReplyMessage(c, now, 429, message, extra);
  }
  char path[1200];
  if (!WriteSnapshot(Trigger::kControl, length >= 0 ? label : nullptr, path, sizeof(path))) {
    return ReplyMessage(c, NowMs(), 500, "snapshot failed\n");
  }
  now = NowMs();  // writing it took time
  if (!stream) {
    size_t n = strlen(path);
    if (n + 1 < sizeof(path)) path[n++] = '\n';
    return Reply(c, now, 200, "text/plain; charset=utf-8", path, n);
  }
  int file = ShimOpen(path, O_RDONLY);
  struct stat st;
  bool ok;
  {
    ShimFdUse use(file);
    ok = use.fd() >= 0 && fstat(use.fd(), &st) == 0;
  }
  if (!ok) {
    ShimFdClose(file);
    return ReplyMessage(c, now, 500, "cannot read the snapshot back\n");
  }
  c->out_length =
      PutHead(c, 200, "application/octet-stream", static_cast<uint64_t>(st.st_size), "");
  c->file = file;
  c->file_offset = 0;
  c->file_size = static_cast<uint64_t>(st.st_size);
  StartWriting(c, now);
}

// POST /trim: malloc_trim(0), answered with RSS before and after. Counted
// with the snapshots against RETAIN_CONTROL_RATE (a trim walks every arena).
void ServeTrim(Connection* c, int64_t now) {
  int64_t retry_after = 1;
  if (!AllowSnapshot(now, &retry_after)) {
    char extra[48];
    snprintf(extra, sizeof(extra), "Retry-After: %lld\r\n", static_cast<long long>(retry_after));
    char message[112];
    snprintf(message, sizeof(message),
             "at most %d snapshots and trims a second (RETAIN_CONTROL_RATE)\n",
             GetConfig().control_rate);
    return ReplyMessage(c, now, 429, message, extra);
  }
  const TrimResult trim = TrimMalloc();
  const TrimHistory history = GetTrimHistory();
  BodyWriter out;
  out.Add(
      "{\"pid\":%u,\"vm_rss_before\":%llu,\"vm_rss_after\":%llu,\"rss_anon_before\":%llu,"
      "\"rss_anon_after\":%llu,\"returned_bytes\":%llu,\"released\":%s,\"duration_us\":%llu,"
      "\"trims\":%llu}\n",
      Pid(), static_cast<unsigned long long>(trim.vm_rss_before),
      static_cast<unsigned long long>(trim.vm_rss_after),
      static_cast<unsigned long long>(trim.rss_anon_before),
      static_cast<unsigned long long>(trim.rss_anon_after),
      static_cast<unsigned long long>(trim.returned), trim.released ? "true" : "false",
      static_cast<unsigned long long>(trim.duration_us),
      static_cast<unsigned long long>(history.trims));
  if (!out.ok) return ReplyMessage(c, NowMs(), 500, "trim result does not fit\n");
  Reply(c, NowMs(), 200, "application/json", g_body, out.length);
}

void ServeMark(Connection* c, int64_t now) {
  const ControlRequest& r = c->request;
  const char* value = nullptr;
  long length = ControlQueryValue(r.query, r.query_length, "request", &value);
  // The label alphabet (ids are quoted into snapshots and logs), longer.
  bool valid = length >= 1 && length <= static_cast<long>(kMaxRequestId);
  for (long i = 0; valid && i < length; ++i) valid = IsLabelChar(value[i]);
  if (!valid) {
    return ReplyMessage(c, now, 400, "request must be 1-127 characters of [A-Za-z0-9._-]\n");
  }
  if (g_mark_count == kMarkDepth) return ReplyMessage(c, now, 409, "too many open marks\n");
  char request[kMaxRequestId + 1];
  memcpy(request, value, static_cast<size_t>(length));
  request[length] = '\0';
  // Not BeginRequest: the tag must not become this thread's; left
  // unattached it is the process-latest request for every thread without
  // one of its own.
  uint32_t id = OpenTag(TagSource::kControl, request, "POST", "/mark");
  if (id == 0) return ReplyMessage(c, now, 500, "no room for another tag\n");
  g_marks[g_mark_count++] = id;
  char body[32];
  int n = snprintf(body, sizeof(body), "%u\n", id);
  Reply(c, now, 200, "text/plain; charset=utf-8", body, static_cast<size_t>(n));
}

void ServeMarkEnd(Connection* c, int64_t now) {
  if (g_mark_count == 0) return ReplyMessage(c, now, 409, "no open mark\n");
  uint32_t id = g_marks[--g_mark_count];
  EndRequest(id);
  char body[32];
  int n = snprintf(body, sizeof(body), "%u\n", id);
  Reply(c, now, 200, "text/plain; charset=utf-8", body, static_cast<size_t>(n));
}

// Who asks, over TCP: the pid the request names (?pid=N), believed only if
// that process holds the connection's other end (its socket inode, found in
// /proc/net/tcp, is among /proc/N/fd) and it is this user's. -1 otherwise;
// `why` says why.
int TcpAsker(Connection* c, const char** why) {
  const ControlRequest& r = c->request;
  const char* value = nullptr;
  long length = ControlQueryValue(r.query, r.query_length, "pid", &value);
  bool ok = false;
  uint64_t pid = length > 0 ? ParseProcDecimal(value, static_cast<size_t>(length), &ok) : 0;
  if (!ok || pid < 2 || pid > (1u << 22)) {
    *why = "say who asks: ?pid=N";
    return -1;
  }
  struct sockaddr_storage peer;
  struct sockaddr_storage local;
  socklen_t peer_size = sizeof(peer);
  socklen_t local_size = sizeof(local);
  {
    ShimFdUse use(c->handle);
    ok = use.fd() >= 0 &&
         getpeername(use.fd(), reinterpret_cast<struct sockaddr*>(&peer), &peer_size) == 0 &&
         getsockname(use.fd(), reinterpret_cast<struct sockaddr*>(&local), &local_size) == 0;
  }
  uint64_t inode = 0;
  uint64_t uid = 0;
  if (!ok || !FindTcpSocket(peer, local, &inode, &uid) ||
      !HoldsSocket(static_cast<int>(pid), inode)) {
    *why = "the connection is not that process's";
    return -1;
  }
  if (uid != geteuid()) {
    *why = "that process is another user's";
    return -1;
  }
  return static_cast<int>(pid);
}

// POST /handover: another process of this program's lineage asks for the
// endpoint (net/control_server.h says when it gets it).
void ServeHandover(Connection* c, int64_t now) {
  char message[160];
  uint32_t self = Pid();
  int asker = -1;
  if (GetConfig().control == ControlKind::kUnix) {
    struct ucred peer;
    socklen_t size = sizeof(peer);
    bool known;
    {
      ShimFdUse use(c->handle);
      known = use.fd() >= 0 && getsockopt(use.fd(), SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0;
    }
    if (!known) return ReplyMessage(c, now, 500, "cannot tell who asks\n");
    if (peer.uid != geteuid()) {
      snprintf(message, sizeof(message), "pid %d is another user's; pid %u keeps the endpoint\n",
               peer.pid, self);
      return ReplyMessage(c, now, 403, message);
    }
    asker = peer.pid;
  }
  if (uint64_t accepted = HostAcceptCount(); accepted != 0) {
    snprintf(message, sizeof(message),
             "pid %u serves connections of its own (%llu accepted) and keeps the endpoint\n", self,
             static_cast<unsigned long long>(accepted));
    LogDiagnostic("control endpoint: pid %d asked for it; refused: %.100s", asker, message);
    return ReplyMessage(c, now, 403, message);
  }
  if (ProgramIsThreaded()) {
    // Wrappers (timeout, sh, env, nice) run on one thread; a program with
    // threads of its own that spawns a helper before its first request (a
    // JVM's ProcessBuilder) is the server.
    snprintf(message, sizeof(message),
             "pid %u runs threads of its own (a server, not a wrapper) and keeps the endpoint\n",
             self);
    LogDiagnostic("control endpoint: pid %d asked for it; refused: %.100s", asker, message);
    return ReplyMessage(c, now, 403, message);
  }
  if (asker < 0) {
    const char* why = "";
    asker = TcpAsker(c, &why);
    if (asker < 0) {
      snprintf(message, sizeof(message), "%s; pid %u keeps the endpoint\n", why, self);
      LogDiagnostic("control endpoint: asked for it; refused: %.100s", message);
      return ReplyMessage(c, now, 403, message);
    }
  }
  if (!IsDescendant(asker)) {
    snprintf(message, sizeof(message), "pid %d is not a descendant of pid %u, which keeps it\n",
             asker, self);
    LogDiagnostic("control endpoint: pid %d asked for it; refused: %.100s", asker, message);
    return ReplyMessage(c, now, 403, message);
  }
  if (g_state.load() != kServing) return ReplyMessage(c, now, 409, "not held here any more\n");
  // Released before the answer: the asker binds as soon as it reads it.
  ReleaseListener();
  int expected = kServing;
  g_state.compare_exchange_strong(expected, kReleased);
  LogDiagnostic("control endpoint: %s handed over to pid %d", Where(), asker);
  snprintf(message, sizeof(message), "handed over to pid %d\n", asker);
  ReplyMessage(c, now, 200, message);
}

}  // namespace

void Dispatch(Connection* c, int64_t now) {
  const ControlRequest& r = c->request;
  const bool get = ControlTokenIs(r.method, r.method_length, "GET");
  const bool post = ControlTokenIs(r.method, r.method_length, "POST");
  auto path_is = [&r](const char* path) { return ControlTokenIs(r.path, r.path_length, path); };
  if (path_is("/snapshot")) {
    if (!get && !post) return ReplyMessage(c, now, 405, "use GET or POST\n");
    return ServeSnapshot(c, now, get);
  }
  if (path_is("/trim")) {
    if (!post) return ReplyMessage(c, now, 405, "use POST\n");
    return ServeTrim(c, now);
  }
  if (path_is("/mark")) {
    if (!post) return ReplyMessage(c, now, 405, "use POST\n");
    return ServeMark(c, now);
  }
  if (path_is("/mark/end")) {
    if (!post) return ReplyMessage(c, now, 405, "use POST\n");
    return ServeMarkEnd(c, now);
  }
  if (path_is("/stats")) {
    if (!get) return ReplyMessage(c, now, 405, "use GET\n");
    return ServeStats(c, now);
  }
  if (path_is("/metrics")) {
    if (!get) return ReplyMessage(c, now, 405, "use GET\n");
    return ServeMetrics(c, now);
  }
  if (path_is("/handover")) {
    if (!post) return ReplyMessage(c, now, 405, "use POST\n");
    return ServeHandover(c, now);
  }
  ReplyMessage(c, now, 404, "not found\n");
}

}  // namespace retain::shim::control_internal
