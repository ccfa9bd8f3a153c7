// The control endpoint (RETAIN_CONTROL): a long-running fixture under the
// shim, driven over real sockets (a Unix socket, or a loopback TCP port):
// what each endpoint answers, and the configuration. What no client can do
// is in control_limits_test.cc; whose endpoint it is, and its descriptors,
// in control_owner_test.cc.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "base/config.h"
#include "net/control_server.h"
#include "tests/preload/control_helpers.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::test {
namespace {

using control::AskStats;
using control::ConnectTcp;
using control::ConnectUnix;
using control::ControlProcess;
using control::Exchange;
using control::FreeLoopbackPort;
using control::Response;
using control::Simple;
using control::SocketCount;

class ControlUnixTest : public ::testing::Test {
 protected:
  ControlUnixTest() : socket_path_(), process_(nullptr) {}
  void SetUp() override {
    socket_dir_ = std::make_unique<TempDir>();
    socket_path_ = socket_dir_->path() + "/ctl.sock";
    process_ = std::make_unique<ControlProcess>("unix:" + socket_path_);
    ASSERT_TRUE(process_->ready()) << process_->child().Stderr();
  }
  Response Ask(const std::string& request) { return Exchange(ConnectUnix(socket_path_), request); }

  std::unique_ptr<TempDir> socket_dir_;
  std::string socket_path_;
  std::unique_ptr<ControlProcess> process_;
};

TEST_F(ControlUnixTest, PostSnapshotWritesALabelledControlSnapshot) {
  Response r = Ask(Simple("POST", "/snapshot?label=before-load.1"));
  ASSERT_EQ(r.status, 200) << r.head << r.body;
  std::string path = r.body.substr(0, r.body.find('\n'));
  EXPECT_EQ(path.rfind(process_->dir() + "/", 0), 0u) << path;
  auto snapshot = tool::ReadSnapshotFile(path);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->header().label(), "before-load.1");
  EXPECT_EQ(snapshot->header().trigger(), v1::TRIGGER_CONTROL);
  EXPECT_EQ(proc::SnapshotPaths(process_->dir()).size(), 1u);
}

TEST_F(ControlUnixTest, GetSnapshotStreamsTheSnapshotBytes) {
  Response r = Ask(Simple("GET", "/snapshot?label=streamed"));
  ASSERT_EQ(r.status, 200) << r.head;
  EXPECT_NE(r.head.find("Content-Type: application/octet-stream"), std::string::npos) << r.head;
  auto snapshot = tool::ParseSnapshot(r.body, "response");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->header().label(), "streamed");
  EXPECT_EQ(snapshot->header().trigger(), v1::TRIGGER_CONTROL);
  EXPECT_GE(LiveBytes(*snapshot, v1::KIND_HEAP), 400000u);
  // The same bytes are on disk.
  std::vector<std::string> files = proc::SnapshotPaths(process_->dir());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(LoadSnapshot(files[0]).SerializeAsString(), snapshot->SerializeAsString());
}

TEST_F(ControlUnixTest, MarkAndMarkEndMakeAControlTag) {
  Response open = Ask(Simple("POST", "/mark?request=job-7"));
  ASSERT_EQ(open.status, 200) << open.body;
  EXPECT_EQ(open.body, "1\n");
  Response during = Ask(Simple("POST", "/snapshot?label=during"));
  ASSERT_EQ(during.status, 200);
  Response end = Ask(Simple("POST", "/mark/end"));
  ASSERT_EQ(end.status, 200) << end.body;
  EXPECT_EQ(end.body, "1\n");
  EXPECT_EQ(Ask(Simple("POST", "/mark/end")).status, 409) << "nothing left open";
  Response after = Ask(Simple("POST", "/snapshot?label=after"));
  ASSERT_EQ(after.status, 200);

  v1::Snapshot open_snapshot = LoadSnapshot(during.body.substr(0, during.body.find('\n')));
  ASSERT_EQ(open_snapshot.tags_size(), 1);
  EXPECT_EQ(open_snapshot.tags(0).request_id(), "job-7");
  EXPECT_EQ(open_snapshot.tags(0).source(), v1::TAG_SOURCE_CONTROL);
  EXPECT_EQ(open_snapshot.tags(0).end_time_us(), 0u) << "still open";

  v1::Snapshot closed = LoadSnapshot(after.body.substr(0, after.body.find('\n')));
  ASSERT_EQ(closed.tags_size(), 1);
  EXPECT_EQ(closed.tags(0).id(), 1u);
  EXPECT_EQ(closed.tags(0).request_id(), "job-7");
  EXPECT_EQ(closed.tags(0).source(), v1::TAG_SOURCE_CONTROL);
  EXPECT_GT(closed.tags(0).end_time_us(), 0u);

  Response stats = Ask(Simple("GET", "/stats"));
  EXPECT_NE(stats.body.find("\"requests\":1,"), std::string::npos) << stats.body;
}

TEST_F(ControlUnixTest, MarkNeedsAValidRequestId) {
  EXPECT_EQ(Ask(Simple("POST", "/mark")).status, 400);
  EXPECT_EQ(Ask(Simple("POST", "/mark?request=")).status, 400);
  EXPECT_EQ(Ask(Simple("POST", "/mark?request=a%20b")).status, 400);
  EXPECT_EQ(Ask(Simple("GET", "/mark?request=x")).status, 405);
}

TEST_F(ControlUnixTest, StatsReportTheHeapLiveBytes) {
  Response r = Ask(Simple("GET", "/stats"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.head.find("Content-Type: application/json"), std::string::npos);
  size_t at = r.body.find("\"heap\":{\"bytes\":");
  ASSERT_NE(at, std::string::npos) << r.body;
  uint64_t heap = std::stoull(r.body.substr(at + 16));
  EXPECT_GE(heap, 400000u) << r.body;  // the fixture's four 100000-byte blocks
  EXPECT_LT(heap, 400000u + (1u << 20)) << r.body;
  for (const char* key : {"\"mmap-anon\":{\"bytes\":", "\"mmap-file\":{\"bytes\":",
                          "\"requests\":0", "\"arena_bytes\":", "\"dropped_records\":0"}) {
    EXPECT_NE(r.body.find(key), std::string::npos) << key << " in " << r.body;
  }
}

TEST_F(ControlUnixTest, MetricsAreInPrometheusTextFormat) {
  Response r = Ask(Simple("GET", "/metrics"));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string heap_line = "\nretain_live_bytes{kind=\"heap\"} ";
  size_t at = r.body.find(heap_line);
  ASSERT_NE(at, std::string::npos) << r.body;
  EXPECT_GE(std::stoull(r.body.substr(at + heap_line.size())), 400000u) << r.body;
  // Kind names are the tools' (proto/kinds.h): mmap-anon, not mmap_anon.
  for (const char* line : {"# TYPE retain_live_bytes gauge\n", "\nretain_requests_total 0\n",
                           "\nretain_live_bytes{kind=\"mmap-anon\"} ",
                           "\nretain_live_allocations{kind=\"mmap-file\"} ",
                           "\nretain_arena_bytes ", "\nretain_dropped_records_total 0\n"}) {
    EXPECT_NE(r.body.find(line), std::string::npos) << line << " in " << r.body;
  }
}

TEST_F(ControlUnixTest, SocketFileIsOwnerOnly) {
  struct stat st;
  ASSERT_EQ(lstat(socket_path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(ControlUnixTest, PathLikeLabelsAreRejectedAndWriteNothing) {
  for (const char* target :
       {"/snapshot?label=../x", "/snapshot?label=..%2Fx", "/snapshot?label=a/b",
        "/snapshot?label=..", "/snapshot?label=", "/snapshot?label=x%00y",
        "/snapshot?label=0123456789012345678901234567890123456789012345678901234567890123456789"}) {
    EXPECT_EQ(Ask(Simple("POST", target)).status, 400) << target;
    EXPECT_EQ(Ask(Simple("GET", target)).status, 400) << target;
  }
  EXPECT_TRUE(proc::SnapshotPaths(process_->dir()).empty());
  EXPECT_TRUE(proc::DirEntries(process_->dir()).empty());
  // Nothing named after the label next to the snapshot directory either.
  std::string parent = process_->dir().substr(0, process_->dir().rfind('/'));
  for (const std::string& name : proc::DirEntries(parent)) EXPECT_NE(name, "x");
}

TEST_F(ControlUnixTest, MalformedRequestsGet400AndTheServerCarriesOn) {
  for (const std::string& garbage :
       {std::string("garbage\r\n\r\n"), std::string("\x01\x02\xff\xfe\r\n\r\n", 8),
        std::string("GET /stats\r\n\r\n"), std::string("GET stats HTTP/1.1\r\n\r\n"),
        std::string("GET /stats HTTP/2.0\r\n\r\n"), std::string("half a request")}) {
    Response r = Ask(garbage);
    EXPECT_EQ(r.status, 400) << garbage;
  }
  // An over-long head, then a client that connects and says nothing.
  EXPECT_EQ(Ask("GET /stats HTTP/1.1\r\nX-Long: " + std::string(9000, 'a') + "\r\n\r\n").status,
            431);
  close(ConnectUnix(socket_path_));
  EXPECT_EQ(Ask(Simple("GET", "/nowhere")).status, 404);
  EXPECT_EQ(Ask(Simple("DELETE", "/stats")).status, 405);
  Response ok = Ask(Simple("GET", "/stats"));
  EXPECT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("\"heap\""), std::string::npos);
}

TEST(ControlUnixPathTest, NeverReplacesAFileThatIsNotASocket) {
  TempDir dir;
  std::string path = dir.path() + "/not-a-socket";
  {
    FILE* f = fopen(path.c_str(), "w");
    fputs("keep me", f);
    fclose(f);
  }
  ControlProcess process("unix:" + path);
  ASSERT_TRUE(process.ready());
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  process.child().CloseStdin();
  RunResult result = process.child().Wait(30);
  EXPECT_NE(result.stderr_data.find("is not a socket"), std::string::npos) << result.stderr_data;
}

TEST(ControlUnixPathTest, ReplacesAStaleSocketButNotALiveOne) {
  TempDir dir;
  std::string path = dir.path() + "/ctl.sock";
  {
    // A stale socket: bound, then its process gone.
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    close(fd);
  }
  ControlProcess first("unix:" + path);
  ASSERT_TRUE(first.ready());
  EXPECT_EQ(Exchange(ConnectUnix(path), Simple("GET", "/stats")).status, 200);
  // A second process, not the first one's descendant, asks for it, is
  // refused and leaves it be, quietly (no RETAIN_LOG): it ends up holding no
  // socket at all.
  ControlProcess second("unix:" + path);
  ASSERT_TRUE(second.ready());
  EXPECT_TRUE(control::WaitUntil([&] { return SocketCount(second.child().pid()) == 0; }, 10000))
      << SocketCount(second.child().pid());
  EXPECT_EQ(control::StatsPid(AskStats(path)), first.FixturePid());
  second.child().CloseStdin();
  RunResult result = second.child().Wait(30);
  EXPECT_EQ(result.stderr_data, "");
  Response r = Exchange(ConnectUnix(path), Simple("POST", "/snapshot?label=first"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body.rfind(first.dir() + "/", 0), 0u) << r.body;
}

TEST(ControlTcpTest, ServesOnALoopbackPort) {
  int port = FreeLoopbackPort();
  ControlProcess process("tcp:127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(process.ready()) << process.child().Stderr();
  Response r = Exchange(ConnectTcp(port), Simple("POST", "/snapshot?label=tcp"));
  ASSERT_EQ(r.status, 200) << process.child().Stderr();
  EXPECT_EQ(LoadSnapshot(r.body.substr(0, r.body.find('\n'))).header().label(), "tcp");
}

TEST(ControlConfigTest, NonLoopbackAddressesAreRefused) {
  for (const char* control : {"tcp:10.0.0.1:1234", "tcp:0.0.0.0:1234", "tcp:[::]:1234",
                              "tcp:127.0.0.1:99999", "udp:127.0.0.1:1", "unix:"}) {
    ControlProcess process(control);
    ASSERT_TRUE(process.ready()) << control;
    EXPECT_EQ(SocketCount(process.child().pid()), 0) << control << ": no listener";
    process.child().CloseStdin();
    RunResult result = process.child().Wait(30);
    EXPECT_EQ(result.exit_code, 0);
    EXPECT_NE(result.stderr_data.find("retain: RETAIN_CONTROL='"), std::string::npos)
        << control << ": " << result.stderr_data;
    if (std::strncmp(control, "tcp:10.", 7) == 0) {
      EXPECT_NE(result.stderr_data.find("not a loopback address"), std::string::npos)
          << result.stderr_data;
    }
  }
}

TEST(ControlConfigTest, OffByDefault) {
  RunOptions options;
  options.argv = {FixturePath("control_idle")};
  TempDir dir;
  options.env["RETAIN_DIR"] = dir.path();
  options.preload = true;
  proc::Child child(options);
  ASSERT_TRUE(child.WaitForStdout("ready\n", 20000));
  EXPECT_EQ(SocketCount(child.pid()), 0);
  child.CloseStdin();
  RunResult result = child.Wait(30);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.stderr_data, "");
}

TEST(ControlConfigTest, ParsesUnixAndLoopbackTcpOnly) {
  using shim::Config;
  using shim::ControlKind;
  const char* why = nullptr;
  Config config{};
  ASSERT_TRUE(shim::ParseControl("unix:/tmp/r.sock", &config, &why));
  EXPECT_EQ(config.control, ControlKind::kUnix);
  EXPECT_STREQ(config.control_path, "/tmp/r.sock");
  ASSERT_TRUE(shim::ParseControl("tcp:127.0.0.1:8123", &config, &why));
  EXPECT_EQ(config.control, ControlKind::kTcp);
  EXPECT_FALSE(config.control_ipv6);
  EXPECT_EQ(config.control_port, 8123);
  ASSERT_TRUE(shim::ParseControl("tcp:127.3.4.5:1", &config, &why));
  ASSERT_TRUE(shim::ParseControl("tcp:[::1]:9000", &config, &why));
  EXPECT_TRUE(config.control_ipv6);
  ASSERT_TRUE(shim::ParseControl("tcp:::1:9000", &config, &why));
  EXPECT_EQ(config.control_port, 9000);
  for (const char* bad : {"tcp:10.0.0.1:1234", "tcp:0.0.0.0:80", "tcp:[::]:80",
                          "tcp:[::ffff:10.0.0.1]:80", "tcp:192.168.1.1:80"}) {
    EXPECT_FALSE(shim::ParseControl(bad, &config, &why)) << bad;
    EXPECT_EQ(config.control, ControlKind::kOff) << bad;
    EXPECT_NE(std::string(why).find("loopback"), std::string::npos) << bad;
  }
  for (const char* bad :
       {"", "unix:", "tcp:", "tcp:127.0.0.1", "tcp:127.0.0.1:0", "tcp:127.0.0.1:65536",
        "tcp:127.0.0.1:8x", "tcp:localhost:80", "tcp::80", "http://127.0.0.1:80", "unix"}) {
    EXPECT_FALSE(shim::ParseControl(bad, &config, &why)) << bad;
    EXPECT_EQ(config.control, ControlKind::kOff) << bad;
  }
  EXPECT_FALSE(shim::ParseControl(("unix:/" + std::string(120, 'a')).c_str(), &config, &why));
}

TEST(ControlConfigTest, LabelsAreASafeAlphabet) {
  EXPECT_TRUE(shim::IsValidControlLabel("before-load_2.x", 15));
  EXPECT_TRUE(shim::IsValidControlLabel(std::string(64, 'a').c_str(), 64));
  EXPECT_FALSE(shim::IsValidControlLabel(std::string(65, 'a').c_str(), 65));
  EXPECT_FALSE(shim::IsValidControlLabel("", 0));
  for (const char* bad : {"../x", "a/b", "..", ".", "a b", "a%2F", "a\\b", "\xc3\xa9"}) {
    EXPECT_FALSE(shim::IsValidControlLabel(bad, strlen(bad))) << bad;
  }
}

}  // namespace
}  // namespace retain::test
