// The front door (RETAIN_FRONT_DOOR, shim/src/net/front_door.h) in front of
// raw_http_server (tests/fixtures/raw_http_server.c), a server whose
// sockets bypass libc entirely (raw system calls, as Go, io_uring or a
// static network stack), and a Go net/http server with cgo
// (tests/fixtures/go_http_server, where Go is installed): real loopback
// connections, real snapshots.
//
// What a client sees is what the server sent, byte for byte; each request
// relayed opens a tag (X-Request-Id, method, path) that ends with its
// response (Content-Length, chunked, server-sent events, close-delimited,
// HEAD, 204) or is aborted when the client leaves first; RETAIN_SNAPSHOT_EVERY
// gives, for a sequential keep-alive client, the snapshot after request N
// holding exactly requests 1..N's memory; many concurrent clients, and more
// than the front door takes at once, are all served; a server that is not
// listening yet gets 502 and then works once it listens; the front door
// belongs to the server, not to a wrapper, a fork child or a helper it
// spawns; a non-loopback configuration is refused.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "net/process_lineage.h"
#include "tests/preload/control_helpers.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

using control::ConnectTcp;
using control::FreeLoopbackPort;
using control::ReadAll;
using control::SendAll;
using control::WaitUntil;
using Env = std::map<std::string, std::string>;

// Reads one HTTP/1.1 response from `fd`, framed as a client would (by
// Content-Length, chunked to its last chunk, or to the connection's end),
// into `out` (the bytes exactly as received). `head_request`: the response
// to a HEAD has no body. False on a timeout or a broken connection before
// the response is complete. Bytes after it stay in `*pending`.
bool ReadResponse(int fd, std::string* pending, std::string* out, bool head_request = false,
                  int timeout_ms = 15000) {
  auto fill = [&]() {
    pollfd wait{fd, POLLIN, 0};
    if (poll(&wait, 1, timeout_ms) <= 0) return -1;
    char buffer[16384];
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n > 0) pending->append(buffer, static_cast<size_t>(n));
    return static_cast<int>(n);
  };
  size_t head_end;
  while ((head_end = pending->find("\r\n\r\n")) == std::string::npos) {
    if (fill() <= 0) return false;
  }
  const size_t body_start = head_end + 4;
  std::string head = pending->substr(0, head_end);
  std::string lower = head;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  const int status = std::atoi(head.c_str() + 9);
  size_t end = std::string::npos;
  if (head_request || status == 204 || status == 304) {
    end = body_start;
  } else if (lower.find("transfer-encoding: chunked") != std::string::npos) {
    size_t at = body_start;
    for (;;) {
      size_t line_end;
      while ((line_end = pending->find("\r\n", at)) == std::string::npos) {
        if (fill() <= 0) return false;
      }
      const size_t size = std::stoul(pending->substr(at, line_end - at), nullptr, 16);
      const size_t next = line_end + 2 + size + 2;
      while (pending->size() < next) {
        if (fill() <= 0) return false;
      }
      at = next;
      if (size == 0) break;
    }
    end = at;
  } else if (size_t cl = lower.find("content-length: "); cl != std::string::npos) {
    end = body_start + std::stoul(lower.substr(cl + 16));
    while (pending->size() < end) {
      if (fill() <= 0) return false;
    }
  } else {  // delimited by the close
    int n;
    while ((n = fill()) > 0) {
    }
    if (n < 0) return false;
    end = pending->size();
  }
  *out = pending->substr(0, end);
  pending->erase(0, end);
  return true;
}

std::string Request(const std::string& method, const std::string& target, const std::string& id,
                    const std::string& body = "") {
  std::string request = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!id.empty()) request += "X-Request-Id: " + id + "\r\n";
  if (!body.empty() || method == "POST") {
    request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return request + "\r\n" + body;
}

// raw_http_server under the shim (behind `sh -c` if asked), its front door
// on a free port relaying to `target_port`, by default the port the server
// listens on.
class DoorServer {
 public:
  explicit DoorServer(Env env, int target_port = 0, bool behind_sh = false,
                      const std::string& program = "raw_http_server") {
    program_ = program;
    listen_port_ = FreeLoopbackPort();
    server_port_ = FreeLoopbackPort();
    target_port_ = target_port != 0 ? target_port : server_port_;
    RunOptions options;
    options.argv = {FixturePath(program), std::to_string(server_port_)};
    if (behind_sh) {  // sh -c '"$@"; exit 0' sh PROGRAM PORT: sh forks, then waits
      options.argv.insert(options.argv.begin(), {"/bin/sh", "-c", "\"$@\"; exit 0", "sh"});
    }
    options.env = std::move(env);
    options.env["RETAIN_DIR"] = dir_.path();
    options.env["RETAIN_FRONT_DOOR"] =
        std::to_string(listen_port_) + ":" + std::to_string(target_port_);
    if (options.env.count("RETAIN_LOG") == 0) options.env["RETAIN_LOG"] = log_path();
    options.preload = true;
    child_ = std::make_unique<proc::Child>(options);
    if (!child_->WaitForStdout("listening on 127.0.0.1:", 30000)) {
      ADD_FAILURE() << "the server did not start: " << child_->Stderr();
      return;
    }
    const std::string out = child_->Stdout();
    server_pid_ = std::atoi(out.c_str() + out.find(" pid ") + 5);
    // The front door listens before main() (or, behind a wrapper, once it
    // was handed over): wait until it relays.
    ready_ = WaitUntil([&] { return ListensOn(server_pid_, listen_port_); }, 10000);
    if (!ready_) ADD_FAILURE() << "no front door in pid " << server_pid_ << ": " << Log();
  }
  ~DoorServer() {
    if (child_ != nullptr && !child_->Ended()) {
      if (server_pid_ > 0) kill(server_pid_, SIGTERM);
      child_->Signal(SIGTERM);
      child_->Wait(30);
    }
  }

  bool ready() const { return ready_; }
  int listen_port() const { return listen_port_; }
  int server_port() const { return server_port_; }
  int server_pid() const { return server_pid_; }
  const std::string& dir() const { return dir_.path(); }
  std::string log_path() const { return log_dir_.path() + "/retain.log"; }
  std::string Log() const {
    std::string text;
    FILE* file = fopen(log_path().c_str(), "r");
    if (file == nullptr) return child_ != nullptr ? child_->Stderr() : "";
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
    fclose(file);
    return text;
  }
  proc::Child& child() { return *child_; }

  // Stops the server with SIGTERM (it exits 0: an exit snapshot; so does
  // a wrapping sh once it has).
  RunResult Stop() {
    EXPECT_EQ(kill(server_pid_, SIGTERM), 0);
    return child_->Wait(60);
  }

  // Snapshots of the server process (not of a wrapper), in write order.
  std::vector<v1::Snapshot> Snapshots() const {
    std::map<uint32_t, v1::Snapshot> by_sequence;
    for (const std::string& file : proc::SnapshotPaths(dir_.path())) {
      if (file.find(program_ + "." + std::to_string(server_pid_) + ".") == std::string::npos) {
        continue;
      }
      v1::Snapshot snapshot = LoadSnapshot(file);
      by_sequence[snapshot.header().sequence()] = snapshot;
    }
    std::vector<v1::Snapshot> result;
    for (auto& [sequence, snapshot] : by_sequence) result.push_back(snapshot);
    return result;
  }

  static bool ListensOn(int pid, int port) {
    const unsigned char loopback[4] = {127, 0, 0, 1};
    return pid > 0 && shim::ListensOnPort(pid, false, loopback, static_cast<uint16_t>(port));
  }

 private:
  std::string program_;
  TempDir dir_;
  TempDir log_dir_;
  std::unique_ptr<proc::Child> child_;
  int listen_port_ = 0;
  int server_port_ = 0;
  int target_port_ = 0;
  int server_pid_ = 0;
  bool ready_ = false;
};

// Each request's response, over one keep-alive connection to `port`.
std::vector<std::string> Converse(int port, const std::vector<std::string>& requests,
                                  const std::vector<bool>& head = {}) {
  std::vector<std::string> responses;
  int fd = ConnectTcp(port);
  EXPECT_GE(fd, 0);
  if (fd < 0) return responses;
  std::string pending;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!SendAll(fd, requests[i])) break;
    std::string response;
    if (!ReadResponse(fd, &pending, &response, i < head.size() && head[i])) break;
    responses.push_back(response);
  }
  close(fd);
  return responses;
}

const v1::Tag* FindTag(const v1::Snapshot& snapshot, const std::string& request_id) {
  for (const v1::Tag& tag : snapshot.tags()) {
    if (tag.request_id() == request_id) return &tag;
  }
  return nullptr;
}

// Live heap rows of the snapshot: size -> request id of their tag.
std::multimap<uint64_t, std::string> HeapRowsBySize(const v1::Snapshot& snapshot) {
  std::map<uint32_t, std::string> ids;
  for (const v1::Tag& tag : snapshot.tags()) ids[tag.id()] = tag.request_id();
  std::multimap<uint64_t, std::string> rows;
  for (const v1::AllocationBlock& block : snapshot.allocations()) {
    for (int i = 0; i < block.size_size(); ++i) {
      if (block.kind(i) != v1::KIND_HEAP) continue;
      const uint32_t tag = i < block.tag_id_size() ? block.tag_id(i) : 0;
      rows.emplace(block.size(i), ids.count(tag) ? ids[tag] : "");
    }
  }
  return rows;
}

TEST(FrontDoorTest, ClientsGetExactlyTheServersBytes) {
  DoorServer server(Env{});
  ASSERT_TRUE(server.ready());
  const std::vector<std::string> requests = {
      Request("GET", "/hello", "a1"),
      Request("HEAD", "/hello", "a2"),
      Request("GET", "/chunked?n=7", "a3"),
      Request("GET", "/sse?n=5&ms=5", "a4"),
      Request("GET", "/nocontent", "a5"),
      Request("POST", "/keep?kib=4", "a6", "{\"prompt\": \"some body bytes\"}"),
      Request("GET", "/id", "an-id-of-the-client's"),
      Request("GET", "/missing", "a8"),
      Request("GET", "/close?n=4", "a9"),
  };
  const std::vector<bool> head = {false, true};
  std::vector<std::string> direct = Converse(server.server_port(), requests, head);
  std::vector<std::string> relayed = Converse(server.listen_port(), requests, head);
  ASSERT_EQ(direct.size(), requests.size());
  ASSERT_EQ(relayed.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(relayed[i], direct[i]) << "request " << i << ": " << requests[i];
  }
  EXPECT_NE(relayed[6].find("id=an-id-of-the-client's"), std::string::npos) << relayed[6];
  // A large body both ways, in pieces far over the relay's buffers.
  std::string big(1 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 997) big[i] = static_cast<char>('a' + i % 26);
  const std::string upload = Request("POST", "/hello", "big", big);
  std::vector<std::string> big_direct = Converse(server.server_port(), {upload});
  std::vector<std::string> big_relayed = Converse(server.listen_port(), {upload});
  ASSERT_EQ(big_relayed.size(), 1u);
  EXPECT_EQ(big_relayed, big_direct);
  std::vector<std::string> long_stream =
      Converse(server.listen_port(), {Request("GET", "/chunked?n=20000", "long")});
  ASSERT_EQ(long_stream.size(), 1u);
  EXPECT_EQ(long_stream, Converse(server.server_port(), {Request("GET", "/chunked?n=20000", "")}));
  EXPECT_GT(long_stream[0].size(), 200000u);
}

// Bytes that are not HTTP pass as they are, untagged, and do no harm; a
// client that half-closes after its request still gets the whole response.
TEST(FrontDoorTest, GarbageAndHalfClosesPassThrough) {
  DoorServer server(Env{});
  ASSERT_TRUE(server.ready());
  std::string garbage(70 * 1024, '\0');
  uint32_t state = 12345;
  for (char& c : garbage) {
    state = state * 1103515245u + 12345u;
    c = static_cast<char>(state >> 24);
  }
  garbage[0] = 0x16;  // as a TLS ClientHello starts
  for (int port : {server.server_port(), server.listen_port()}) {
    int fd = ConnectTcp(port);
    ASSERT_GE(fd, 0);
    SendAll(fd, garbage);
    EXPECT_EQ(ReadAll(fd, 10000), "") << "the server drops what it cannot read, either way";
    close(fd);
  }
  control::Response whole =
      control::Exchange(ConnectTcp(server.listen_port()), Request("GET", "/chunked?n=50", "half"));
  EXPECT_EQ(whole.status, 200);
  EXPECT_NE(whole.body.find("chunk 49\n\r\n0\r\n\r\n"), std::string::npos) << whole.body;
  RunResult stopped = server.Stop();
  EXPECT_EQ(stopped.exit_code, 0);
  const v1::Snapshot exit_snapshot = server.Snapshots().back();
  EXPECT_EQ(exit_snapshot.header().requests_closed(), 1u) << "only the HTTP request";
  const v1::Tag* tag = FindTag(exit_snapshot, "half");
  ASSERT_NE(tag, nullptr);
  EXPECT_FALSE(tag->aborted());
}

// Requests sent together (pipelined) reach the server in order, come back
// in order, byte for byte, and each is tagged and ended by its own response.
TEST(FrontDoorTest, PipelinedRequestsEndInOrder) {
  DoorServer server(Env{});
  ASSERT_TRUE(server.ready());
  const std::string together = Request("GET", "/chunked?n=3", "p1") +
                               Request("POST", "/keep?kib=3", "p2", "xyz") +
                               Request("GET", "/id", "p3");
  auto exchange = [&](int port) {
    std::vector<std::string> responses;
    int fd = ConnectTcp(port);
    EXPECT_GE(fd, 0);
    EXPECT_TRUE(SendAll(fd, together));
    std::string pending;
    for (int i = 0; i < 3; ++i) {
      std::string response;
      if (!ReadResponse(fd, &pending, &response)) break;
      responses.push_back(response);
    }
    close(fd);
    return responses;
  };
  std::vector<std::string> direct = exchange(server.server_port());
  std::vector<std::string> relayed = exchange(server.listen_port());
  ASSERT_EQ(relayed.size(), 3u);
  EXPECT_EQ(relayed, direct);
  EXPECT_NE(relayed[2].find("id=p3"), std::string::npos);
  RunResult stopped = server.Stop();
  EXPECT_EQ(stopped.exit_code, 0);
  const v1::Snapshot exit_snapshot = server.Snapshots().back();
  EXPECT_EQ(exit_snapshot.header().requests_closed(), 3u);
  EXPECT_EQ(exit_snapshot.header().requests_aborted(), 0u);
  uint32_t previous = 0;
  for (const char* id : {"p1", "p2", "p3"}) {
    const v1::Tag* tag = FindTag(exit_snapshot, id);
    ASSERT_NE(tag, nullptr) << id;
    EXPECT_GT(tag->id(), previous) << id << " opened after the one before it";
    EXPECT_GT(tag->end_time_us(), 0u);
    previous = tag->id();
  }
}

// One keep-alive client, one request after another, every framing, and a
// snapshot after each: snapshot N is labelled requests-N, shows request N
// ended (not aborted) with its id, method and path, and holds
// exactly the memory requests 1..N kept, each block tagged with its request.
TEST(FrontDoorTest, SequentialKeepAliveSnapshotsAreExact) {
  DoorServer server(Env{{"RETAIN_SNAPSHOT_EVERY", "1"}});
  ASSERT_TRUE(server.ready());
  struct Step {
    std::string method, target, path;
    int kept_kib;  // 0: keeps nothing
  };
  const std::vector<Step> steps = {
      {"POST", "/keep?kib=5", "/keep", 5},    {"GET", "/chunked?n=3", "/chunked", 0},
      {"POST", "/keep?kib=6", "/keep", 6},    {"GET", "/sse?n=4&ms=10", "/sse", 0},
      {"HEAD", "/hello", "/hello", 0},        {"POST", "/keep?kib=7", "/keep", 7},
      {"GET", "/nocontent", "/nocontent", 0}, {"POST", "/keep?kib=8", "/keep", 8},
      {"POST", "/keep?kib=9", "/keep", 9},    {"GET", "/close?n=2", "/close", 0},
  };
  std::vector<std::string> requests;
  std::vector<bool> head;
  for (size_t i = 0; i < steps.size(); ++i) {
    requests.push_back(Request(steps[i].method, steps[i].target, "seq-" + std::to_string(i + 1)));
    head.push_back(steps[i].method == "HEAD");
  }
  std::vector<std::string> responses = Converse(server.listen_port(), requests, head);
  ASSERT_EQ(responses.size(), steps.size());
  // The last response ends with the connection: its snapshot follows it.
  EXPECT_TRUE(WaitUntil([&] { return server.Snapshots().size() >= steps.size(); }, 10000));
  RunResult stopped = server.Stop();
  EXPECT_EQ(stopped.exit_code, 0) << stopped.stderr_data;

  std::vector<v1::Snapshot> snapshots;
  for (const v1::Snapshot& s : server.Snapshots()) {
    if (s.header().trigger() == v1::TRIGGER_EVERY_N_REQUESTS) snapshots.push_back(s);
  }
  ASSERT_EQ(snapshots.size(), steps.size()) << server.Log();
  for (size_t n = 1; n <= steps.size(); ++n) {
    SCOPED_TRACE("snapshot after request " + std::to_string(n));
    const v1::Snapshot& snapshot = snapshots[n - 1];
    EXPECT_EQ(snapshot.header().label(), "requests-" + std::to_string(n));
    EXPECT_EQ(snapshot.header().requests_at_trigger(), n);
    EXPECT_EQ(snapshot.header().requests_closed(), n);
    EXPECT_EQ(snapshot.header().requests_aborted(), 0u);
    for (size_t i = 1; i <= steps.size(); ++i) {
      const v1::Tag* tag = FindTag(snapshot, "seq-" + std::to_string(i));
      if (i > n) {
        EXPECT_EQ(tag, nullptr) << "request " << i << " is not begun before snapshot " << n;
        continue;
      }
      // A snapshot shows the requests that ended since the last one, and
      // those whose memory is still live.
      if (i < n && steps[i - 1].kept_kib == 0) continue;
      ASSERT_NE(tag, nullptr) << "request " << i;
      EXPECT_EQ(tag->source(), v1::TAG_SOURCE_FRONT_DOOR);
      EXPECT_EQ(tag->method(), steps[i - 1].method);
      EXPECT_EQ(tag->path(), steps[i - 1].path) << "the path without its query";
      EXPECT_GT(tag->end_time_us(), 0u) << "request " << i << " ended";
      EXPECT_FALSE(tag->aborted());
    }
    // Exactly the blocks of the /keep requests among 1..n, each tagged
    // with its own request (the process-latest rule: the relay is not the
    // server's thread).
    std::multimap<uint64_t, std::string> rows = HeapRowsBySize(snapshot);
    for (size_t i = 1; i <= steps.size(); ++i) {
      if (steps[i - 1].kept_kib == 0) continue;
      const uint64_t size = static_cast<uint64_t>(steps[i - 1].kept_kib) * 1024;
      auto [first, last] = rows.equal_range(size);
      const size_t count = static_cast<size_t>(std::distance(first, last));
      EXPECT_EQ(count, i <= n ? 1u : 0u) << steps[i - 1].target << " kept in snapshot " << n;
      if (count == 1) {
        EXPECT_EQ(first->second, "seq-" + std::to_string(i)) << steps[i - 1].target;
      }
    }
  }
}

// A Go net/http server (cgo, so it takes LD_PRELOAD), whose sockets the
// shim never sees: through the front door each request is tagged, and the
// snapshot after request N holds exactly the C memory requests 1..N kept,
// each block tagged with its request. (Go stops on SIGTERM without running
// the shim's exit path, the subject of other work: the test stops it with
// SIGKILL and reads the every-N snapshots.)
TEST(FrontDoorTest, AGoServerIsTaggedAndItsSnapshotsAreExact) {
  if (access(FixturePath("go_http_server").c_str(), X_OK) != 0) {
    GTEST_SKIP() << "go_http_server not built (no Go toolchain)";
  }
  DoorServer server(Env{{"RETAIN_SNAPSHOT_EVERY", "1"}, {"RETAIN_SIGNAL", "none"}}, 0, false,
                    "go_http_server");
  ASSERT_TRUE(server.ready()) << server.Log();
  const std::vector<std::string> targets = {"/keep?kib=5", "/id",         "/keep?kib=6",
                                            "/stream?n=4", "/keep?kib=7", "/keep?kib=8"};
  const std::vector<int> kept_kib = {5, 0, 6, 0, 7, 8};
  std::vector<std::string> requests;
  for (size_t i = 0; i < targets.size(); ++i) {
    const bool keep = kept_kib[i] != 0;
    requests.push_back(Request(keep ? "POST" : "GET", targets[i], "go-" + std::to_string(i + 1)));
  }
  std::vector<std::string> responses = Converse(server.listen_port(), requests);
  ASSERT_EQ(responses.size(), requests.size());
  EXPECT_NE(responses[1].find("id=go-2"), std::string::npos) << responses[1];
  EXPECT_NE(responses[3].find("data: [DONE]"), std::string::npos) << responses[3];
  ASSERT_TRUE(WaitUntil([&] { return server.Snapshots().size() >= requests.size(); }, 10000))
      << server.Log();
  server.child().Signal(SIGKILL);
  server.child().Wait(10);
  std::vector<v1::Snapshot> snapshots = server.Snapshots();
  ASSERT_EQ(snapshots.size(), requests.size());
  for (size_t n = 1; n <= requests.size(); ++n) {
    SCOPED_TRACE("snapshot after request " + std::to_string(n));
    const v1::Snapshot& snapshot = snapshots[n - 1];
    EXPECT_EQ(snapshot.header().label(), "requests-" + std::to_string(n));
    EXPECT_EQ(snapshot.header().requests_closed(), n);
    const v1::Tag* tag = FindTag(snapshot, "go-" + std::to_string(n));
    ASSERT_NE(tag, nullptr);
    EXPECT_EQ(tag->source(), v1::TAG_SOURCE_FRONT_DOOR);
    EXPECT_GT(tag->end_time_us(), 0u);
    std::multimap<uint64_t, std::string> rows = HeapRowsBySize(snapshot);
    for (size_t i = 1; i <= requests.size(); ++i) {
      if (kept_kib[i - 1] == 0) continue;
      auto [first, last] = rows.equal_range(static_cast<uint64_t>(kept_kib[i - 1]) * 1024);
      const size_t count = static_cast<size_t>(std::distance(first, last));
      EXPECT_EQ(count, i <= n ? 1u : 0u) << targets[i - 1];
      if (count == 1) {
        EXPECT_EQ(first->second, "go-" + std::to_string(i)) << targets[i - 1];
      }
    }
  }
}

// Many clients at once, each keeping its connection for several requests,
// with a snapshot after every request: every response is right, no
// request is counted twice or lost, the snapshots (coalesced when they
// overlap) are labelled in increasing order, never beyond the requests
// they saw end.
TEST(FrontDoorTest, ConcurrentClientsAreEachTaggedOnce) {
  DoorServer server(Env{{"RETAIN_SNAPSHOT_EVERY", "1"}});
  ASSERT_TRUE(server.ready());
  constexpr int kClients = 24;
  constexpr int kPerClient = 6;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::vector<std::string> requests;
      for (int i = 0; i < kPerClient; ++i) {
        const std::string id = "c" + std::to_string(c) + "-" + std::to_string(i);
        requests.push_back(i % 2 == 0 ? Request("GET", "/id", id)
                                      : Request("GET", "/sse?n=3&ms=2", id));
      }
      std::vector<std::string> responses = Converse(server.listen_port(), requests);
      for (size_t i = 0; i < responses.size(); ++i) {
        const std::string id = "c" + std::to_string(c) + "-" + std::to_string(i);
        const bool right = i % 2 == 0 ? responses[i].find("id=" + id + "\n") != std::string::npos
                                      : responses[i].find("data: [DONE]") != std::string::npos;
        if (right && responses[i].compare(0, 15, "HTTP/1.1 200 OK") == 0) ++ok;
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(ok.load(), kClients * kPerClient);
  constexpr uint64_t kTotal = kClients * kPerClient;
  const std::string last_label = "requests-" + std::to_string(kTotal);
  EXPECT_TRUE(WaitUntil(
      [&] {
        for (const v1::Snapshot& s : server.Snapshots()) {
          if (s.header().label() == last_label) return true;
        }
        return false;
      },
      15000))
      << last_label << " never written";
  RunResult stopped = server.Stop();
  EXPECT_EQ(stopped.exit_code, 0);
  uint64_t previous = 0;
  std::map<std::string, std::set<uint32_t>> tag_ids_by_request;
  size_t every_n = 0;
  for (const v1::Snapshot& snapshot : server.Snapshots()) {
    for (const v1::Tag& tag : snapshot.tags()) {
      EXPECT_EQ(tag.source(), v1::TAG_SOURCE_FRONT_DOOR);
      tag_ids_by_request[tag.request_id()].insert(tag.id());
    }
    if (snapshot.header().trigger() != v1::TRIGGER_EVERY_N_REQUESTS) {
      EXPECT_EQ(snapshot.header().requests_closed(), kTotal);  // the exit snapshot
      EXPECT_EQ(snapshot.header().requests_aborted(), 0u);
      continue;
    }
    ++every_n;
    const uint64_t at = snapshot.header().requests_at_trigger();
    EXPECT_EQ(snapshot.header().label(), "requests-" + std::to_string(at));
    EXPECT_GT(at, previous) << "written in request order";
    EXPECT_LE(at, snapshot.header().requests_closed());
    previous = at;
  }
  EXPECT_EQ(previous, kTotal);
  EXPECT_GE(every_n, 4u);
  EXPECT_EQ(tag_ids_by_request.size(), kTotal) << "every request tagged";
  for (const auto& [id, tags] : tag_ids_by_request) {
    EXPECT_EQ(tags.size(), 1u) << id << " tagged once";
  }
}

TEST(FrontDoorTest, AClientLeavingMidStreamEndsItsRequestAborted) {
  DoorServer server(Env{});
  ASSERT_TRUE(server.ready());
  {
    int fd = ConnectTcp(server.listen_port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, Request("GET", "/sse?n=500&ms=10", "leaver")));
    std::string seen;
    char buffer[4096];
    while (seen.find("data: ") == std::string::npos) {
      ssize_t n = read(fd, buffer, sizeof(buffer));
      ASSERT_GT(n, 0);
      seen.append(buffer, static_cast<size_t>(n));
    }
    close(fd);  // 499 events and the terminator never read
  }
  std::vector<std::string> after =
      Converse(server.listen_port(), {Request("GET", "/hello", "stayer")});
  ASSERT_EQ(after.size(), 1u);
  // The server writes its next event into a closed connection, the relay
  // finds the client gone: the stream's request ends aborted.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  RunResult stopped = server.Stop();
  EXPECT_EQ(stopped.exit_code, 0);
  std::vector<v1::Snapshot> snapshots = server.Snapshots();
  ASSERT_FALSE(snapshots.empty());
  const v1::Snapshot& exit_snapshot = snapshots.back();
  EXPECT_EQ(exit_snapshot.header().trigger(), v1::TRIGGER_EXIT);
  EXPECT_EQ(exit_snapshot.header().requests_closed(), 2u);
  EXPECT_EQ(exit_snapshot.header().requests_aborted(), 1u);
  const v1::Tag* leaver = FindTag(exit_snapshot, "leaver");
  ASSERT_NE(leaver, nullptr);
  EXPECT_TRUE(leaver->aborted());
  EXPECT_GT(leaver->end_time_us(), 0u);
  const v1::Tag* stayer = FindTag(exit_snapshot, "stayer");
  ASSERT_NE(stayer, nullptr);
  EXPECT_FALSE(stayer->aborted());
}

// The front door starts with the process; the server it relays to may
// listen later. Until then each connection gets a 502 and is closed; then
// the same front door relays.
TEST(FrontDoorTest, AServerNotListeningYetGets502ThenIsReached) {
  const int late_port = FreeLoopbackPort();
  DoorServer server(Env{}, late_port);
  ASSERT_TRUE(server.ready());
  control::Response refused =
      control::Exchange(ConnectTcp(server.listen_port()), Request("GET", "/hello", "too-early"));
  EXPECT_EQ(refused.status, 502) << refused.head;
  EXPECT_NE(refused.head.find("Connection: close"), std::string::npos);
  EXPECT_NE(refused.body.find("127.0.0.1:" + std::to_string(late_port)), std::string::npos)
      << refused.body;

  RunOptions late;
  late.argv = {FixturePath("raw_http_server"), std::to_string(late_port)};
  proc::Child late_server(late);  // without the shim
  ASSERT_TRUE(late_server.WaitForStdout("listening on", 10000));
  std::vector<std::string> reached =
      Converse(server.listen_port(), {Request("GET", "/id", "in-time")});
  ASSERT_EQ(reached.size(), 1u);
  EXPECT_NE(reached[0].find("id=in-time"), std::string::npos) << reached[0];
  late_server.Signal(SIGTERM);
  late_server.Wait(10);
  RunResult stopped = server.Stop();
  EXPECT_EQ(stopped.exit_code, 0);
  const v1::Snapshot exit_snapshot = server.Snapshots().back();
  EXPECT_EQ(FindTag(exit_snapshot, "too-early"), nullptr) << "a 502 is no request of the server's";
  ASSERT_NE(FindTag(exit_snapshot, "in-time"), nullptr);
}

// More connections at once than the front door takes (192): the rest wait
// in the kernel's backlog until connections end, and every one is served.
TEST(FrontDoorTest, ConnectionsBeyondItsLimitWaitTheirTurn) {
  DoorServer server(Env{});
  ASSERT_TRUE(server.ready());
  constexpr int kConnections = 230;
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) {
    int fd = ConnectTcp(server.listen_port());
    ASSERT_GE(fd, 0) << i;
    fds.push_back(fd);
  }
  const std::string request =
      "GET /sse?n=2&ms=300 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  for (int fd : fds) ASSERT_TRUE(SendAll(fd, request));
  int served = 0;
  for (int fd : fds) {
    std::string all = ReadAll(fd, 20000);
    if (all.compare(0, 15, "HTTP/1.1 200 OK") == 0 &&
        all.find("data: [DONE]") != std::string::npos) {
      ++served;
    }
    close(fd);
  }
  EXPECT_EQ(served, kConnections);
  RunResult stopped = server.Stop();
  EXPECT_EQ(stopped.exit_code, 0);
  EXPECT_EQ(server.Snapshots().back().header().requests_closed(), kConnections);
}

// At the limit, kept-alive connections nobody uses do not lock new clients
// out: the one idle longest (over a second between two requests) is closed,
// as a server closes idle keep-alive connections, and the newcomer is served.
TEST(FrontDoorTest, IdleKeptAliveConnectionsMakeRoomAtTheLimit) {
  DoorServer server(Env{});
  ASSERT_TRUE(server.ready());
  constexpr int kIdle = 192;  // the front door's limit
  const std::string request = "GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    int fd = ConnectTcp(server.listen_port());
    ASSERT_GE(fd, 0) << i;
    ASSERT_TRUE(SendAll(fd, request)) << i;
    std::string pending, response;
    ASSERT_TRUE(ReadResponse(fd, &pending, &response)) << i;
    idle.push_back(fd);  // kept alive, unused from now on
  }
  int newcomer = ConnectTcp(server.listen_port());
  ASSERT_GE(newcomer, 0);
  ASSERT_TRUE(SendAll(newcomer, request));
  std::string pending, response;
  ASSERT_TRUE(ReadResponse(newcomer, &pending, &response));
  EXPECT_EQ(response.compare(0, 15, "HTTP/1.1 200 OK"), 0) << response;
  // The first connection, idle longest, was the one closed: its end is
  // there to read at once (not a timeout).
  struct pollfd wait = {idle[0], POLLIN, 0};
  ASSERT_EQ(poll(&wait, 1, 5000), 1);
  char byte;
  EXPECT_EQ(read(idle[0], &byte, 1), 0);
  close(newcomer);
  for (int fd : idle) close(fd);
  EXPECT_EQ(server.Stop().exit_code, 0);
}

// sh runs the server (sh -c 'server; exit 0', both under the shim): sh's
// shim binds the front door first, the server asks for it and gets it (sh
// does not listen on the target port, and the server is its child). A fork
// child of the server holds none of it; a helper it spawns with LD_PRELOAD
// asks and is refused (the server listens on the target: it is the
// server).
TEST(FrontDoorTest, BelongsToTheServerNotToItsWrapperOrItsChildren) {
  DoorServer server(Env{}, 0, /*behind_sh=*/true);
  ASSERT_TRUE(server.ready()) << server.Log();
  const int sh_pid = server.child().pid();
  ASSERT_NE(sh_pid, server.server_pid());
  EXPECT_TRUE(WaitUntil([&] { return !DoorServer::ListensOn(sh_pid, server.listen_port()); }, 5000))
      << "the wrapper let go";
  EXPECT_NE(server.Log().find("handed over to pid " + std::to_string(server.server_pid())),
            std::string::npos)
      << server.Log();

  std::vector<std::string> forked =
      Converse(server.listen_port(), {Request("POST", "/fork", "forker")});
  ASSERT_EQ(forked.size(), 1u);
  const int fork_child = std::atoi(forked[0].c_str() + forked[0].find("child ") + 6);
  std::vector<std::string> spawned =
      Converse(server.listen_port(), {Request("POST", "/spawn", "spawner")});
  ASSERT_EQ(spawned.size(), 1u);
  const int spawn_child = std::atoi(spawned[0].c_str() + spawned[0].find("child ") + 6);
  ASSERT_GT(fork_child, 0);
  ASSERT_GT(spawn_child, 0);
  // The helper's shim asks the server, which keeps its front door.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return server.Log().find("pid " + std::to_string(spawn_child) + " asked") !=
               std::string::npos;
      },
      5000))
      << server.Log();
  EXPECT_NE(
      server.Log().find("listens on 127.0.0.1:" + std::to_string(server.server_port()) + " itself"),
      std::string::npos)
      << server.Log();
  EXPECT_FALSE(DoorServer::ListensOn(fork_child, server.listen_port()));
  EXPECT_FALSE(DoorServer::ListensOn(spawn_child, server.listen_port()));
  EXPECT_TRUE(DoorServer::ListensOn(server.server_pid(), server.listen_port()));
  std::vector<std::string> after =
      Converse(server.listen_port(), {Request("GET", "/hello", "after-children")});
  ASSERT_EQ(after.size(), 1u);
  kill(fork_child, SIGKILL);
  kill(spawn_child, SIGKILL);

  RunResult stopped = server.Stop();
  EXPECT_EQ(stopped.exit_code, 0) << stopped.stderr_data;
  std::vector<v1::Snapshot> snapshots = server.Snapshots();
  ASSERT_FALSE(snapshots.empty());
  for (const char* id : {"forker", "spawner", "after-children"}) {
    const v1::Tag* tag = FindTag(snapshots.back(), id);
    ASSERT_NE(tag, nullptr) << id << " is tagged in the server";
    EXPECT_EQ(tag->source(), v1::TAG_SOURCE_FRONT_DOOR);
  }
}

// retain-run sets it up with one flag, and refuses a side that is not
// loopback before anything runs.
TEST(FrontDoorTest, RetainRunSetsItUpWithOneFlag) {
  TempDir dir;
  const int door = FreeLoopbackPort();
  const int port = FreeLoopbackPort();
  RunOptions options;
  options.argv = {"/bin/bash",
                  SourceRoot() + "/scripts/retain-run",
                  "-o",
                  dir.path(),
                  "--front-door",
                  std::to_string(door) + ":" + std::to_string(port),
                  FixturePath("raw_http_server"),
                  std::to_string(port)};
  options.env["RETAIN_LIB"] = ShimPath();
  proc::Child child(options);
  ASSERT_TRUE(child.WaitForStdout("listening on", 10000)) << child.Stderr();
  std::vector<std::string> responses = Converse(door, {Request("GET", "/id", "via-retain-run")});
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_NE(responses[0].find("id=via-retain-run"), std::string::npos);
  child.Signal(SIGTERM);  // retain-run execs: the server itself
  EXPECT_EQ(child.Wait(30).exit_code, 0);
  std::vector<v1::Snapshot> snapshots = proc::LoadAll(dir.path());
  ASSERT_FALSE(snapshots.empty());
  const v1::Tag* tag = FindTag(snapshots.back(), "via-retain-run");
  ASSERT_NE(tag, nullptr);
  EXPECT_EQ(tag->source(), v1::TAG_SOURCE_FRONT_DOOR);

  RunOptions refused = options;
  refused.argv[5] = "0.0.0.0:" + std::to_string(door) + ":" + std::to_string(port);
  RunResult result = retain::test::Run(refused);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.stderr_data.find("--front-door must be LISTEN:TARGET"), std::string::npos)
      << result.stderr_data;
}

TEST(FrontDoorTest, AnythingButLoopbackIsRefusedAtStart) {
  const int port = FreeLoopbackPort();
  const int target = FreeLoopbackPort();
  const std::string p = std::to_string(port);
  const std::string t = std::to_string(target);
  for (const std::string& value :
       {"0.0.0.0:" + p + ":" + t, "192.168.1.5:" + p + ":" + t, p + ":10.0.0.1:" + t,
        "[::]:" + p + ":" + t, p, p + ":" + p, "localhost:" + p + ":" + t}) {
    SCOPED_TRACE(value);
    RunOptions options;
    options.argv = {FixturePath("raw_http_server"), "0"};
    options.env["RETAIN_FRONT_DOOR"] = value;
    options.preload = true;
    proc::Child child(options);
    ASSERT_TRUE(child.WaitForStdout("listening on", 10000));
    EXPECT_NE(child.Stderr().find("RETAIN_FRONT_DOOR='" + value + "'"), std::string::npos)
        << child.Stderr();
    EXPECT_NE(child.Stderr().find("no front door"), std::string::npos) << child.Stderr();
    EXPECT_LT(ConnectTcp(port), 0) << "nothing listens on " << port;
    child.Signal(SIGTERM);
    child.Wait(10);
  }
  // A port held by a program without the shim.
  RunOptions holder;
  holder.argv = {FixturePath("raw_http_server"), p};
  proc::Child plain(holder);
  ASSERT_TRUE(plain.WaitForStdout("listening on", 10000));
  RunOptions options;
  options.argv = {FixturePath("raw_http_server"), "0"};
  options.env["RETAIN_FRONT_DOOR"] = p + ":" + t;
  options.preload = true;
  proc::Child child(options);
  ASSERT_TRUE(child.WaitForStdout("listening on", 10000));
  EXPECT_NE(child.Stderr().find("in use by a program without the shim"), std::string::npos)
      << child.Stderr();
  child.Signal(SIGTERM);
  child.Wait(10);
  plain.Signal(SIGTERM);
  plain.Wait(10);
}

}  // namespace
}  // namespace retain::test
