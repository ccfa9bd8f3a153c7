// The control endpoint cannot be held: idle and trickling clients, slow
// readers, floods of snapshots and malformed bytes, over a real Unix socket
// against the control_idle fixture under the shim. The time bounds are
// generous (seconds where the endpoint needs milliseconds) and prove the
// point against what it did before: 17 idle connections delayed /stats by
// 87 s, a client sending a byte a second held it for ever.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "net/control_request.h"
#include "tests/preload/control_helpers.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

using namespace std::string_literals;

using control::ConnectUnix;
using control::ControlOptions;
using control::ControlProcess;
using control::Exchange;
using control::NowMs;
using control::Response;
using control::Simple;

class ControlLimitsTest : public ::testing::Test {
 protected:
  void Start(const ControlOptions& options = {}) {
    path_ = socket_dir_.path() + "/ctl.sock";
    process_ = std::make_unique<ControlProcess>("unix:" + path_, options);
    ASSERT_TRUE(process_->ready()) << process_->child().Stderr();
  }
  Response Ask(const std::string& request) { return Exchange(ConnectUnix(path_), request); }
  // /stats, with the time it took.
  Response TimedStats(int64_t* elapsed_ms) {
    int64_t start = NowMs();
    Response r = Ask(Simple("GET", "/stats"));
    *elapsed_ms = NowMs() - start;
    return r;
  }

  TempDir socket_dir_;
  std::string path_;
  std::unique_ptr<ControlProcess> process_;
};

TEST_F(ControlLimitsTest, TwentyIdleConnectionsDoNotDelayStats) {
  Start();
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) {
    int fd = ConnectUnix(path_);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  int64_t elapsed = 0;
  Response r = TimedStats(&elapsed);
  EXPECT_EQ(r.status, 200) << r.head;
  EXPECT_EQ(control::StatsPid(r), process_->FixturePid()) << r.body;
  EXPECT_LT(elapsed, 3000) << "with 20 idle connections open";
  printf("[measured] /stats with 20 idle connections open: %lld ms\n",
         static_cast<long long>(elapsed));
  for (int fd : idle) close(fd);
}

TEST_F(ControlLimitsTest, ATricklingClientIsCutAtItsDeadlineAndDelaysNoOne) {
  Start();
  const std::string head =
      "GET /stats HTTP/1.1\r\nHost: retain\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
  int slow = ConnectUnix(path_);
  ASSERT_GE(slow, 0);
  int64_t start = NowMs();
  std::string answer;
  int64_t cut_after = -1;
  int64_t stats_elapsed = -1;
  for (size_t sent = 0; sent < head.size() && NowMs() - start < 30000; ++sent) {
    if (send(slow, head.data() + sent, 1, MSG_NOSIGNAL) != 1) break;
    if (sent == 2) {
      Response r = TimedStats(&stats_elapsed);
      EXPECT_EQ(r.status, 200) << "while a client trickles";
    }
    pollfd wait = {slow, POLLIN, 0};
    if (poll(&wait, 1, 1000) > 0) {  // one byte a second, until the server speaks
      cut_after = NowMs() - start;
      answer = control::ReadAll(slow, 5000);
      break;
    }
  }
  close(slow);
  ASSERT_GE(cut_after, 0) << "the trickling client was never cut";
  EXPECT_EQ(answer.rfind("HTTP/1.1 408 ", 0), 0u) << answer;
  // The deadline is 5 s for the whole request.
  EXPECT_GE(cut_after, 3000);
  EXPECT_LT(cut_after, 20000);
  EXPECT_GE(stats_elapsed, 0);
  EXPECT_LT(stats_elapsed, 3000);
  printf("[measured] trickling client cut after %lld ms; /stats meanwhile in %lld ms\n",
         static_cast<long long>(cut_after), static_cast<long long>(stats_elapsed));
  EXPECT_EQ(Ask(Simple("GET", "/stats")).status, 200);
}

TEST_F(ControlLimitsTest, NulBytesAreA400AndTheServerCarriesOn) {
  Start();
  for (const std::string& request :
       {"\0GET /stats HTTP/1.1\r\nHost: retain\r\n\r\n"s, "GET /st\0ats HTTP/1.1\r\n\r\n"s,
        "GET /stats HTTP/1.1\r\nX-A: a\0b\r\n\r\n"s, "\0\r\n\r\n"s}) {
    Response r = Ask(request);
    EXPECT_EQ(r.status, 400) << r.head;
  }
  // 8 KiB of NUL bytes and no end of head: too long, not a scan past it.
  EXPECT_EQ(Ask(std::string(8192, '\0')).status, 431);
  EXPECT_EQ(Ask(std::string(20000, '\0')).status, 431);
  Response ok = Ask(Simple("GET", "/stats"));
  EXPECT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("\"heap\""), std::string::npos);
}

TEST_F(ControlLimitsTest, BodiesAreReadByTheirLength) {
  Start();
  Response with_body = Ask(
      "POST /mark?request=with-body HTTP/1.1\r\nHost: retain\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(with_body.status, 200) << with_body.head;
  // A body announced and never sent is a request cut short.
  EXPECT_EQ(Ask("POST /mark/end HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc").status, 400);
  EXPECT_EQ(Ask("POST /mark/end HTTP/1.1\r\nContent-Length: 5000\r\n\r\n").status, 413);
  EXPECT_EQ(Ask("POST /mark/end HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").status,
            501);
  EXPECT_EQ(Ask("POST /mark/end HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").status,
            400);
  EXPECT_EQ(Ask("POST /mark/end HTTP/1.1\r\nContent-Length: -1\r\n\r\n").status, 400);
  // None of the rejected ones closed the mark.
  Response end = Ask(Simple("POST", "/mark/end"));
  EXPECT_EQ(end.status, 200);
  EXPECT_EQ(end.body, "1\n");
}

TEST_F(ControlLimitsTest, SnapshotsAreLimitedPerSecond) {
  Start();
  constexpr int kRate = 5;  // the documented default of RETAIN_CONTROL_RATE
  int ok = 0;
  int too_many = 0;
  int other = 0;
  int64_t start = NowMs();
  for (int i = 0; i < 300; ++i) {
    Response r = Ask(Simple("POST", "/snapshot"));
    if (r.status == 200) {
      ++ok;
    } else if (r.status == 429) {
      ++too_many;
      EXPECT_NE(r.head.find("\r\nRetry-After: 1\r\n"), std::string::npos) << r.head;
    } else {
      ++other;
    }
  }
  int64_t elapsed = NowMs() - start;
  EXPECT_EQ(other, 0);
  EXPECT_GE(ok, 1);
  // Any one second holds at most kRate; the run spans floor(elapsed) + 1 of them.
  EXPECT_LE(ok, kRate * (elapsed / 1000 + 1)) << "in " << elapsed << " ms";
  EXPECT_EQ(ok + too_many, 300);
  EXPECT_EQ(proc::SnapshotPaths(process_->dir()).size(), static_cast<size_t>(ok));
  printf("[measured] 300 POST /snapshot in %lld ms: %d written, %d answered 429\n",
         static_cast<long long>(elapsed), ok, too_many);
  // A second later there is room again.
  usleep(1100 * 1000);
  EXPECT_EQ(Ask(Simple("POST", "/snapshot")).status, 200);
}

TEST_F(ControlLimitsTest, TheRateIsConfigurable) {
  ControlOptions options;
  options.env["RETAIN_CONTROL_RATE"] = "1";
  Start(options);
  EXPECT_EQ(Ask(Simple("POST", "/snapshot")).status, 200);
  int64_t start = NowMs();
  Response r = Ask(Simple("GET", "/snapshot"));
  if (NowMs() - start < 900) {
    EXPECT_EQ(r.status, 429) << "GET counts too";
  }
  usleep(1100 * 1000);
  EXPECT_EQ(Ask(Simple("GET", "/snapshot")).status, 200);
}

TEST_F(ControlLimitsTest, ASlowSnapshotReaderHoldsNoOneAndIsCut) {
  ControlOptions options;
  options.args = {"many", "100000"};  // a snapshot far larger than the socket's buffers
  Start(options);
  int reader = ConnectUnix(path_);
  ASSERT_GE(reader, 0);
  ASSERT_TRUE(control::SendAll(reader, Simple("GET", "/snapshot")));
  // Read the head only, then nothing more.
  std::string start_of_answer;
  char buffer[256];
  pollfd wait = {reader, POLLIN, 0};
  ASSERT_GT(poll(&wait, 1, 20000), 0);
  ssize_t n = read(reader, buffer, sizeof(buffer));
  ASSERT_GT(n, 0);
  start_of_answer.assign(buffer, static_cast<size_t>(n));
  ASSERT_EQ(start_of_answer.rfind("HTTP/1.1 200 ", 0), 0u) << start_of_answer;
  size_t at = start_of_answer.find("Content-Length: ");
  ASSERT_NE(at, std::string::npos);
  uint64_t length = std::stoull(start_of_answer.substr(at + 16));
  EXPECT_GT(length, 1000000u);

  int64_t elapsed = 0;
  Response stats = TimedStats(&elapsed);
  EXPECT_EQ(stats.status, 200);
  EXPECT_LT(elapsed, 3000) << "while a reader stalls a GET /snapshot";
  printf("[measured] /stats while a snapshot reader stalls: %lld ms\n",
         static_cast<long long>(elapsed));

  // A response must progress every 10 s: the stalled one is cut, and what
  // the reader finds after that ends short of Content-Length.
  sleep(13);
  std::string rest = control::ReadAll(reader, 10000);
  close(reader);
  size_t head_end = start_of_answer.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos);
  uint64_t body = start_of_answer.size() - head_end - 4 + rest.size();
  EXPECT_LT(body, length) << "the stalled stream was not cut";
  EXPECT_EQ(Ask(Simple("GET", "/stats")).status, 200);
}

TEST_F(ControlLimitsTest, ANinthConnectionTakesTheOldestIdleOnesSlot) {
  Start();
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(ConnectUnix(path_));
    ASSERT_GE(idle.back(), 0);
    usleep(20 * 1000);
  }
  // All eight accepted: the listener and eight connections in the fixture.
  ASSERT_TRUE(
      control::WaitUntil([&] { return control::SocketCount(process_->child().pid()) == 9; }, 5000))
      << control::SocketCount(process_->child().pid());
  EXPECT_EQ(Ask(Simple("GET", "/stats")).status, 200);
  std::string oldest = control::ReadAll(idle[0], 3000);
  EXPECT_EQ(oldest.rfind("HTTP/1.1 503 ", 0), 0u) << oldest;
  // The other seven were left alone (until their own deadline).
  for (size_t i = 1; i < idle.size(); ++i) {
    pollfd wait = {idle[i], POLLIN, 0};
    EXPECT_EQ(poll(&wait, 1, 0), 0) << "connection " << i;
  }
  for (int fd : idle) close(fd);
}

// The parser on its own: bytes by length, never past them.
class ControlRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    page_ = sysconf(_SC_PAGESIZE);
    pages_ = static_cast<char*>(
        mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(pages_, MAP_FAILED);
    ASSERT_EQ(mprotect(pages_ + page_, page_, PROT_NONE), 0);
  }
  void TearDown() override { munmap(pages_, 2 * page_); }
  // `bytes` copied to end right before an inaccessible page: a read past
  // them faults.
  const char* AtPageEnd(const std::string& bytes) {
    char* at = pages_ + page_ - bytes.size();
    memcpy(at, bytes.data(), bytes.size());
    return at;
  }
  int Parse(const std::string& head, shim::ControlRequest* request) {
    return shim::ParseControlHead(AtPageEnd(head), head.size(), request);
  }

  long page_ = 0;
  char* pages_ = nullptr;
};

TEST_F(ControlRequestTest, ParsesByLengthUpToTheLastByte) {
  shim::ControlRequest r;
  std::string head = "POST /snapshot?label=a&x=1 HTTP/1.1\r\nContent-Length:  7 \r\n\r\n";
  ASSERT_EQ(Parse(head, &r), 0);
  EXPECT_EQ(std::string(r.method, r.method_length), "POST");
  EXPECT_EQ(std::string(r.path, r.path_length), "/snapshot");
  EXPECT_EQ(std::string(r.query, r.query_length), "label=a&x=1");
  EXPECT_EQ(r.content_length, 7u);
  const char* value = nullptr;
  long length = shim::ControlQueryValue(r.query, r.query_length, "x", &value);
  ASSERT_EQ(length, 1);
  EXPECT_EQ(*value, '1');
  EXPECT_EQ(shim::ControlQueryValue(r.query, r.query_length, "label=a", &value), -1);
  // A head cut anywhere is not complete, and is never read past its end.
  for (size_t cut = 0; cut < head.size(); ++cut) {
    EXPECT_EQ(shim::ControlHeadLength(AtPageEnd(head.substr(0, cut)), cut), 0u) << cut;
  }
  EXPECT_EQ(shim::ControlHeadLength(AtPageEnd(head + "body"), head.size() + 4), head.size());
  EXPECT_EQ(shim::ControlHeadLength(AtPageEnd(std::string(4000, '\0')), 4000), 0u);
}

TEST_F(ControlRequestTest, RejectsWhatIsNotAWellFormedHead) {
  shim::ControlRequest r;
  const std::pair<std::string, int> cases[] = {
      {"\0GET / HTTP/1.1\r\n\r\n"s, 400},
      {"GET /\0 HTTP/1.1\r\n\r\n"s, 400},
      {"GET / HTTP/1.1\r\nA: \0\r\n\r\n"s, 400},
      {"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\nc\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n: empty name\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
      {"GET / HTTP/1.2\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\n\r\n", 400},
      {"GET x HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nContent-Length: 12345678901234567890\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nContent-Length: 4097\r\n\r\n", 413},
      {"GET / HTTP/1.1\r\ncontent-length: 4096\r\n\r\n", 0},
      {"GET / HTTP/1.1\r\nTRANSFER-ENCODING: gzip\r\n\r\n", 501},
      {"GET / HTTP/1.0\r\nX: caf\xc3\xa9\t!\r\n\r\n", 0},
  };
  for (const auto& [head, status] : cases) EXPECT_EQ(Parse(head, &r), status) << head;
}

}  // namespace
}  // namespace retain::test
