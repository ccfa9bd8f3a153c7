// control_server: see control_server.h.
#include "control_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "file_util.h"
#include "gpu_recorder.h"
#include "hook_table.h"
#include "kinds.h"
#include "live_table.h"
#include "log.h"
#include "mmap_table.h"
#include "recorder.h"
#include "request_events.h"
#include "shim_thread.h"
#include "snapshot_writer.h"
#include "tag_table.h"
#include "thread_state.h"

namespace retain::shim {
namespace {

constexpr size_t kHeadLimit = 8192;
constexpr size_t kMaxLabel = 64;
constexpr size_t kMaxRequestId = 127;
constexpr int kMarkDepth = 256;

int g_listen_fd = -1;
// Tags opened by /mark, newest last (control thread only).
uint32_t g_marks[kMarkDepth];
int g_mark_count;
// Buffers of the control thread (one connection at a time).
char g_head[kHeadLimit + 1];
char g_body[16384];
char g_io[65536];

// The real libc calls: the thread is busy, so the hooks would pass them
// through anyway, but each pass-through counts as a re-entry.
ssize_t RealRead(int fd, void* buffer, size_t size) {
  return RealFunctionsReady() && g_real.read != nullptr ? g_real.read(fd, buffer, size)
                                                        : read(fd, buffer, size);
}
ssize_t RealWrite(int fd, const void* buffer, size_t size) {
  return RealFunctionsReady() && g_real.write != nullptr ? g_real.write(fd, buffer, size)
                                                         : write(fd, buffer, size);
}
int RealClose(int fd) {
  return RealFunctionsReady() && g_real.close != nullptr ? g_real.close(fd) : close(fd);
}
int RealAccept(int fd) {
  return RealFunctionsReady() && g_real.accept4 != nullptr
             ? g_real.accept4(fd, nullptr, nullptr, SOCK_CLOEXEC)
             : accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
}

bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = RealWrite(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

const char* ReasonFor(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Internal Server Error";
  }
}

void SendHead(int fd, int status, const char* content_type, unsigned long long length) {
  char head[256];
  int n = snprintf(head, sizeof(head),
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %llu\r\n"
                   "Connection: close\r\n\r\n",
                   status, ReasonFor(status), content_type, length);
  if (n > 0) SendAll(fd, head, static_cast<size_t>(n) < sizeof(head) ? n : sizeof(head) - 1);
}

void SendText(int fd, int status, const char* content_type, const char* body, size_t length) {
  SendHead(fd, status, content_type, length);
  SendAll(fd, body, length);
}

void SendMessage(int fd, int status, const char* message) {
  SendText(fd, status, "text/plain; charset=utf-8", message, strlen(message));
}

bool IsLabelChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// Finds `name`=value in the query string [query, query_end); copies the
// value into `out` (NUL-terminated). Returns -1 when absent, else its length
// (which may exceed out_size - 1: then `out` is truncated).
long QueryValue(const char* query, const char* query_end, const char* name, char* out,
                size_t out_size) {
  size_t name_length = strlen(name);
  const char* p = query;
  while (p != nullptr && p < query_end) {
    const char* amp = static_cast<const char*>(memchr(p, '&', query_end - p));
    const char* end = amp != nullptr ? amp : query_end;
    if (static_cast<size_t>(end - p) >= name_length + 1 && memcmp(p, name, name_length) == 0 &&
        p[name_length] == '=') {
      const char* value = p + name_length + 1;
      size_t length = static_cast<size_t>(end - value);
      size_t copy = length < out_size - 1 ? length : out_size - 1;
      memcpy(out, value, copy);
      out[copy] = '\0';
      return static_cast<long>(length);
    }
    p = amp != nullptr ? amp + 1 : nullptr;
  }
  return -1;
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kHeap:
      return "heap";
    case Kind::kMmapAnon:
      return "mmap_anon";
    case Kind::kMmapFile:
      return "mmap_file";
    case Kind::kGpuDriverHost:
      return "gpu_driver_host";
    case Kind::kHipDevice:
      return "hip_device";
    case Kind::kHipHost:
      return "hip_host";
    case Kind::kHipManaged:
      return "hip_managed";
    case Kind::kVulkanDevice:
      return "vulkan_device";
    case Kind::kCudaDevice:
      return "cuda_device";
    case Kind::kCudaHost:
      return "cuda_host";
    case Kind::kCudaManaged:
      return "cuda_managed";
    case Kind::kMetal:
      return "metal";
    default:
      return "unspecified";
  }
}

struct Stats {
  KindCounters counters[kKindCount];
  uint64_t requests;
  uint64_t requests_closed;
  uint64_t arena_bytes;
  uint64_t dropped;
};

void GatherStats(Stats* stats) {
  memset(stats, 0, sizeof(*stats));
  HeapTable().SumCounters(stats->counters);
  MmapTable& maps = ProgramMappings();
  maps.Lock();
  for (int k = 0; k < kKindCount; ++k) stats->counters[k].Add(maps.counters(k));
  stats->dropped = maps.dropped();
  maps.Unlock();
  stats->dropped += HeapTable().dropped();
  for (int i = 0; i < kGpuApiCount; ++i) {
    LiveTable& table = GpuTable(static_cast<GpuApi>(i));
    table.SumCounters(stats->counters);
    stats->dropped += table.dropped();
  }
  stats->requests = TagCount();
  stats->requests_closed = ClosedTagCount();
  stats->arena_bytes = ArenaBytes();
}

// Appends to g_body; returns false when it is full.
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

void ServeStats(int fd) {
  Stats stats;
  GatherStats(&stats);
  BodyWriter out;
  out.Add("{\"live\":{");
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
  if (!out.ok) return SendMessage(fd, 500, "stats do not fit\n");
  SendText(fd, 200, "application/json", g_body, out.length);
}

void ServeMetrics(int fd) {
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
  if (!out.ok) return SendMessage(fd, 500, "metrics do not fit\n");
  SendText(fd, 200, "text/plain; version=0.0.4; charset=utf-8", g_body, out.length);
}

void ServeSnapshot(int fd, bool stream, const char* query, const char* query_end) {
  char label[kMaxLabel + 1];
  long length = query != nullptr ? QueryValue(query, query_end, "label", label, sizeof(label)) : -1;
  if (length >= 0 && !IsValidControlLabel(label, static_cast<size_t>(length))) {
    return SendMessage(fd, 400, "label must be 1-64 characters of [A-Za-z0-9._-]\n");
  }
  char path[1200];
  if (!WriteSnapshot(Trigger::kControl, length >= 0 ? label : nullptr, path, sizeof(path))) {
    return SendMessage(fd, 500, "snapshot failed\n");
  }
  if (!stream) {
    size_t n = strlen(path);
    if (n + 1 < sizeof(path)) path[n++] = '\n';
    return SendText(fd, 200, "text/plain; charset=utf-8", path, n);
  }
  int file = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (file < 0 || fstat(file, &st) != 0) {
    if (file >= 0) RealClose(file);
    return SendMessage(fd, 500, "cannot read the snapshot back\n");
  }
  SendHead(fd, 200, "application/octet-stream", static_cast<unsigned long long>(st.st_size));
  for (;;) {
    ssize_t n = RealRead(file, g_io, sizeof(g_io));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || !SendAll(fd, g_io, static_cast<size_t>(n))) break;
  }
  RealClose(file);
}

void ServeMark(int fd, const char* query, const char* query_end) {
  char request[kMaxRequestId + 1];
  long length =
      query != nullptr ? QueryValue(query, query_end, "request", request, sizeof(request)) : -1;
  // The label alphabet (ids are quoted into snapshots and logs), longer.
  bool valid = length >= 1 && length <= static_cast<long>(kMaxRequestId);
  for (long i = 0; valid && i < length; ++i) valid = IsLabelChar(request[i]);
  if (!valid) return SendMessage(fd, 400, "request must be 1-127 characters of [A-Za-z0-9._-]\n");
  if (g_mark_count == kMarkDepth) return SendMessage(fd, 409, "too many open marks\n");
  // Not BeginRequest: the tag must not become this thread's; left
  // unattached it is the process-latest request for every thread without
  // one of its own.
  uint32_t id = OpenTag(TagSource::kControl, request, "POST", "/mark");
  if (id == 0) return SendMessage(fd, 500, "no room for another tag\n");
  g_marks[g_mark_count++] = id;
  char body[32];
  int n = snprintf(body, sizeof(body), "%u\n", id);
  SendText(fd, 200, "text/plain; charset=utf-8", body, static_cast<size_t>(n));
}

void ServeMarkEnd(int fd) {
  if (g_mark_count == 0) return SendMessage(fd, 409, "no open mark\n");
  uint32_t id = g_marks[--g_mark_count];
  EndRequest(id);
  char body[32];
  int n = snprintf(body, sizeof(body), "%u\n", id);
  SendText(fd, 200, "text/plain; charset=utf-8", body, static_cast<size_t>(n));
}

// Reads one request head into g_head. Returns its length (through the blank
// line), 0 on a closed/failed connection, -1 when it exceeds the limit.
long ReadHead(int fd, size_t* received) {
  size_t used = 0;
  for (;;) {
    if (used == kHeadLimit) return -1;
    ssize_t n = RealRead(fd, g_head + used, kHeadLimit - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *received = used;
      return 0;
    }
    size_t search_from = used >= 3 ? used - 3 : 0;
    used += static_cast<size_t>(n);
    g_head[used] = '\0';
    for (size_t i = search_from; i + 4 <= used; ++i) {
      if (memcmp(g_head + i, "\r\n\r\n", 4) == 0) {
        *received = used;
        return static_cast<long>(i + 4);
      }
    }
  }
}

bool HasToken(const char* begin, const char* end, const char* token) {
  size_t length = strlen(token);
  return static_cast<size_t>(end - begin) == length && memcmp(begin, token, length) == 0;
}

void ServeConnection(int fd) {
  struct timeval timeout = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  size_t received = 0;
  long head_length = ReadHead(fd, &received);
  if (head_length < 0) return SendMessage(fd, 431, "request head over 8 KiB\n");
  if (head_length == 0) {
    if (received > 0) SendMessage(fd, 400, "malformed request\n");
    return;
  }
  // Request line: METHOD SP TARGET SP HTTP/1.x CRLF
  const char* line_end = strstr(g_head, "\r\n");
  const char* method = g_head;
  const char* sp1 = static_cast<const char*>(memchr(method, ' ', line_end - method));
  const char* target = sp1 != nullptr ? sp1 + 1 : nullptr;
  const char* sp2 = target != nullptr
                        ? static_cast<const char*>(memchr(target, ' ', line_end - target))
                        : nullptr;
  if (sp1 == nullptr || sp2 == nullptr || sp1 == method || sp2 == target || target[0] != '/' ||
      line_end - (sp2 + 1) != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0 ||
      (sp2[8] != '0' && sp2[8] != '1')) {
    return SendMessage(fd, 400, "malformed request\n");
  }
  for (const char* p = g_head; p < line_end; ++p) {
    if (static_cast<unsigned char>(*p) < 0x20 || static_cast<unsigned char>(*p) > 0x7e) {
      return SendMessage(fd, 400, "malformed request\n");
    }
  }
  const char* question = static_cast<const char*>(memchr(target, '?', sp2 - target));
  const char* path_end = question != nullptr ? question : sp2;
  const char* query = question != nullptr ? question + 1 : nullptr;
  const bool get = HasToken(method, sp1, "GET");
  const bool post = HasToken(method, sp1, "POST");
  if (HasToken(target, path_end, "/snapshot")) {
    if (!get && !post) return SendMessage(fd, 405, "use GET or POST\n");
    return ServeSnapshot(fd, get, query, sp2);
  }
  if (HasToken(target, path_end, "/mark")) {
    if (!post) return SendMessage(fd, 405, "use POST\n");
    return ServeMark(fd, query, sp2);
  }
  if (HasToken(target, path_end, "/mark/end")) {
    if (!post) return SendMessage(fd, 405, "use POST\n");
    return ServeMarkEnd(fd);
  }
  if (HasToken(target, path_end, "/stats")) {
    if (!get) return SendMessage(fd, 405, "use GET\n");
    return ServeStats(fd);
  }
  if (HasToken(target, path_end, "/metrics")) {
    if (!get) return SendMessage(fd, 405, "use GET\n");
    return ServeMetrics(fd);
  }
  SendMessage(fd, 404, "not found\n");
}

void* ControlThreadMain(void*) {
  g_thread.busy = 1;  // everything this thread does is the shim's own work
  for (;;) {
    int fd = RealAccept(g_listen_fd);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        usleep(100 * 1000);
        continue;
      }
      LogWarning("control endpoint: accept failed: %s; the endpoint stops", strerror(errno));
      return nullptr;
    }
    ServeConnection(fd);
    shutdown(fd, SHUT_WR);
    RealClose(fd);
  }
}

int ListenUnix(const char* path) {
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      LogWarning("control endpoint: %s exists and is not a socket; no control endpoint", path);
      return -1;
    }
    // A socket someone still accepts on (this program's parent, whose
    // RETAIN_CONTROL a child inherited) is not ours to take over; only a
    // stale one, left by an earlier run, is removed.
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un peer;
    memset(&peer, 0, sizeof(peer));
    peer.sun_family = AF_UNIX;
    memcpy(peer.sun_path, path, strnlen(path, sizeof(peer.sun_path) - 1));
    bool live =
        probe >= 0 && connect(probe, reinterpret_cast<struct sockaddr*>(&peer), sizeof(peer)) == 0;
    if (probe >= 0) RealClose(probe);
    if (live) {
      errno = EADDRINUSE;
      return -1;
    }
    unlink(path);
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_un address;
  memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  memcpy(address.sun_path, path, strnlen(path, sizeof(address.sun_path) - 1));
  // The socket file is created by bind with mode 0777 & ~umask: make it
  // 0600 from the start, then check.
  fchmod(fd, 0600);
  mode_t previous = umask(0177);
  int bound = bind(fd, reinterpret_cast<struct sockaddr*>(&address), sizeof(address));
  umask(previous);
  if (bound != 0 || chmod(path, 0600) != 0 || listen(fd, 16) != 0) {
    int error = errno;
    RealClose(fd);
    errno = error;
    return -1;
  }
  return fd;
}

int ListenTcp(const Config& config) {
  int fd = socket(config.control_ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int bound;
  if (config.control_ipv6) {
    struct sockaddr_in6 address;
    memset(&address, 0, sizeof(address));
    address.sin6_family = AF_INET6;
    address.sin6_port = htons(config.control_port);
    memcpy(&address.sin6_addr, config.control_addr, 16);
    bound = bind(fd, reinterpret_cast<struct sockaddr*>(&address), sizeof(address));
  } else {
    struct sockaddr_in address;
    memset(&address, 0, sizeof(address));
    address.sin_family = AF_INET;
    address.sin_port = htons(config.control_port);
    memcpy(&address.sin_addr, config.control_addr, 4);
    bound = bind(fd, reinterpret_cast<struct sockaddr*>(&address), sizeof(address));
  }
  if (bound != 0 || listen(fd, 16) != 0) {
    int error = errno;
    RealClose(fd);
    errno = error;
    return -1;
  }
  return fd;
}

}  // namespace

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
  if (config.control == ControlKind::kOff || g_listen_fd >= 0) return;
  int saved = errno;
  int fd =
      config.control == ControlKind::kUnix ? ListenUnix(config.control_path) : ListenTcp(config);
  if (fd < 0) {
    const char* where = config.control == ControlKind::kUnix ? config.control_path : "the TCP port";
    if (errno == EADDRINUSE) {
      // Most often a child that inherited RETAIN_CONTROL from the process
      // serving it: quietly without an endpoint (its stderr is the host's).
      LogDiagnostic("control endpoint: %s is in use; no control endpoint", where);
    } else {
      LogWarning("control endpoint: cannot listen on %s: %s; no control endpoint", where,
                 strerror(errno));
    }
    errno = saved;
    return;
  }
  g_listen_fd = fd;
  int error = StartShimThread("retain-ctl", ControlThreadMain);
  if (error != 0) {
    LogWarning("control endpoint: cannot start its thread: %s", strerror(error));
    RealClose(fd);
    g_listen_fd = -1;
  } else {
    LogDiagnostic("control endpoint listening (fd %d)", fd);
  }
  errno = saved;
}

}  // namespace retain::shim
