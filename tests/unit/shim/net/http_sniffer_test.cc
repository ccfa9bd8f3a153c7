// The HTTP/1.x sniffer, fed the byte streams a server reads and writes,
// split every way a socket may split them.
#include "net/http_sniffer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace retain::shim {
namespace {

static_assert(std::is_trivially_copyable_v<HttpSniffer>);
static_assert(std::is_trivially_default_constructible_v<HttpSniffer>);

// An event as the tests compare it: "S GET /path id", "F", "A", "I".
std::string Describe(const HttpEvent& event) {
  switch (event.type) {
    case HttpEventType::kRequestStarted:
      return std::string("S ") + event.head.method + " " + event.head.path + " " +
             event.head.request_id;
    case HttpEventType::kResponseFinished:
      return "F";
    case HttpEventType::kRequestAborted:
      return "A";
    case HttpEventType::kConnectionIgnored:
      return "I";
  }
  return "?";
}

class Conn {
 public:
  Conn() { std::memset(static_cast<void*>(&sniffer_), 0, sizeof sniffer_); }

  void In(const std::string& bytes) { sniffer_.OnInbound(bytes.data(), bytes.size(), sink_); }
  void Out(const std::string& bytes) { sniffer_.OnOutbound(bytes.data(), bytes.size(), sink_); }
  void InBytewise(const std::string& bytes) {
    for (char c : bytes) sniffer_.OnInbound(&c, 1, sink_);
  }
  void OutBytewise(const std::string& bytes) {
    for (char c : bytes) sniffer_.OnOutbound(&c, 1, sink_);
  }
  void Close() { sniffer_.OnClose(sink_); }
  void Reset() { sniffer_.OnReset(sink_); }

  // The events since the last call.
  std::vector<std::string> Take() {
    std::vector<std::string> taken;
    taken.swap(events_);
    return taken;
  }
  const HttpRequestHead& last_head() const { return last_head_; }
  HttpSniffer& sniffer() { return sniffer_; }

 private:
  static void OnEvent(void* context, const HttpEvent& event) {
    auto* self = static_cast<Conn*>(context);
    self->events_.push_back(Describe(event));
    if (event.type == HttpEventType::kRequestStarted) {
      self->last_head_ = event.head;
    }
  }

  HttpSniffer sniffer_;
  HttpEventSink sink_{&Conn::OnEvent, this};
  std::vector<std::string> events_;
  HttpRequestHead last_head_{};
};

using Events = std::vector<std::string>;

const std::string kRealRequest =
    "POST /v1/chat/completions HTTP/1.1\r\n"
    "Host: localhost:8080\r\n"
    "User-Agent: curl/8.5.0\r\n"
    "Accept: */*\r\n"
    "Content-Type: application/json\r\n"
    "X-Request-Id: 7f3c9a2e-4b1d-4e8a-9c6f-0123456789ab\r\n"
    "Content-Length: 27\r\n"
    "\r\n"
    "{\"messages\":[],\"n\":\"GET /\"}";
const char kRealRequestStarted[] =
    "S POST /v1/chat/completions 7f3c9a2e-4b1d-4e8a-9c6f-0123456789ab";

const std::string kChunkedResponse =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/event-stream\r\n"
    "Transfer-Encoding: chunked\r\n"
    "\r\n"
    "1b;name=value\r\n"
    "data: {\"x\":\"HTTP/1.1 200\"}\n\r\n"
    "A \r\n"
    "0123456789\r\n"
    "0\r\n"
    "X-Trailer: yes\r\n"
    "\r\n";

TEST(HttpSnifferTest, ZeroFilledIsIdle) {
  Conn conn;
  EXPECT_FALSE(conn.sniffer().ignored());
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{});
}

TEST(HttpSnifferTest, RealRequestSplitAtEveryPoint) {
  ASSERT_EQ(kRealRequest.size() - kRealRequest.find("\r\n\r\n") - 4, 27u);
  for (size_t split = 0; split <= kRealRequest.size(); ++split) {
    Conn conn;
    conn.In(kRealRequest.substr(0, split));
    conn.In(kRealRequest.substr(split));
    conn.Out("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
    EXPECT_EQ(conn.Take(), (Events{kRealRequestStarted, "F"})) << split;
  }
}

TEST(HttpSnifferTest, RealRequestSplitInThree) {
  for (size_t a = 0; a <= kRealRequest.size(); a += 3) {
    for (size_t b = a; b <= kRealRequest.size(); b += 5) {
      Conn conn;
      conn.In(kRealRequest.substr(0, a));
      conn.In(kRealRequest.substr(a, b - a));
      conn.In(kRealRequest.substr(b));
      conn.In("GET /next HTTP/1.1\r\n\r\n");
      EXPECT_EQ(conn.Take(), (Events{kRealRequestStarted, "S GET /next "})) << a << " " << b;
    }
  }
}

TEST(HttpSnifferTest, ByteByByte) {
  Conn conn;
  conn.InBytewise(kRealRequest);
  EXPECT_EQ(conn.Take(), Events{kRealRequestStarted});
  conn.OutBytewise(kChunkedResponse);
  EXPECT_EQ(conn.Take(), Events{"F"});
  conn.InBytewise("GET /a HTTP/1.0\r\nx-request-id: q\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{"S GET /a q"});
  conn.OutBytewise("HTTP/1.0 200 OK\r\n\r\nbody until close");
  EXPECT_EQ(conn.Take(), Events{});
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{"F"});
}

TEST(HttpSnifferTest, ThreePipelinedRequestsInOneRead) {
  Conn conn;
  conn.In(
      "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
      "POST /completion HTTP/1.1\r\nX-Request-Id: two\r\n"
      "Content-Length: 19\r\n\r\nGET /x HTTP/1.1\r\n\r\n"
      "POST /embedding HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n"
      "X-Request-Id: three\r\n\r\n"
      "11;ext=1\r\nGET /y HTTP/1.1\r\n\r\n"
      "0\r\nTrailer-A: 1\r\n\r\n");
  EXPECT_EQ(conn.Take(),
            (Events{"S GET /health ", "S POST /completion two", "S POST /embedding three"}));
  EXPECT_FALSE(conn.sniffer().ignored());
  conn.Out(
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
      "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(conn.Take(), (Events{"F", "F"}));
  conn.Out(kChunkedResponse);
  EXPECT_EQ(conn.Take(), (Events{"F"}));
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{});
}

TEST(HttpSnifferTest, KeepAliveSequence) {
  Conn conn;
  for (int i = 0; i < 100; ++i) {
    std::string id = "req-" + std::to_string(i);
    conn.In("GET /slots/" + std::to_string(i) +
            "?fields=all HTTP/1.1\r\n"
            "X-Request-Id: " +
            id + "\r\n\r\n");
    conn.Out("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
    EXPECT_EQ(conn.Take(), (Events{"S GET /slots/" + std::to_string(i) + " " + id, "F"}));
  }
}

TEST(HttpSnifferTest, ChunkedResponseSplitAnywhere) {
  for (size_t split = 0; split < kChunkedResponse.size(); ++split) {
    for (size_t second = split; second < kChunkedResponse.size(); second += 7) {
      Conn conn;
      conn.In("GET /stream HTTP/1.1\r\n\r\n");
      conn.Take();
      conn.Out(kChunkedResponse.substr(0, split));
      conn.Out(kChunkedResponse.substr(split, second - split));
      conn.Out(kChunkedResponse.substr(second, kChunkedResponse.size() - 1 - second));
      EXPECT_EQ(conn.Take(), Events{}) << split << " " << second;
      conn.Out(kChunkedResponse.substr(kChunkedResponse.size() - 1));
      EXPECT_EQ(conn.Take(), Events{"F"}) << split << " " << second;
    }
  }
}

TEST(HttpSnifferTest, ContentLengthResponseEndsAtItsLastByte) {
  const std::string response =
      "HTTP/1.1 200 OK\r\ncontent-length:  11 \r\nConnection: keep-alive\r\n"
      "\r\nhello world";
  for (size_t split = 0; split < response.size(); ++split) {
    Conn conn;
    conn.In("GET / HTTP/1.1\r\n\r\n");
    conn.Take();
    conn.Out(response.substr(0, split));
    conn.Out(response.substr(split, response.size() - 1 - split));
    EXPECT_EQ(conn.Take(), Events{}) << split;
    conn.Out(response.substr(response.size() - 1));
    EXPECT_EQ(conn.Take(), Events{"F"}) << split;
  }
}

TEST(HttpSnifferTest, ResponseWithoutLengthEndsAtClose) {
  Conn conn;
  conn.In("GET /old HTTP/1.0\r\n\r\n");
  conn.Out("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n");
  conn.Out("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");  // just body
  EXPECT_EQ(conn.Take(), Events{"S GET /old "});
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{"F"});
  conn.Close();
  conn.In("GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{});
}

TEST(HttpSnifferTest, HeadResponseHasNoBody) {
  Conn conn;
  conn.In("HEAD /model.gguf HTTP/1.1\r\n\r\nGET /after HTTP/1.1\r\n\r\n");
  EXPECT_EQ(conn.Take(), (Events{"S HEAD /model.gguf ", "S GET /after "}));
  conn.Out("HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{"F"});
  conn.Out("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
  EXPECT_EQ(conn.Take(), Events{});
  conn.Out("0\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{"F"});
}

TEST(HttpSnifferTest, NoContentAndNotModifiedHaveNoBody) {
  Conn conn;
  conn.In(
      "DELETE /slot/1 HTTP/1.1\r\n\r\nGET /cached HTTP/1.1\r\n\r\n"
      "GET /last HTTP/1.1\r\n\r\n");
  conn.Take();
  conn.Out("HTTP/1.1 204 No Content\r\nContent-Length: 12\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{"F"});
  conn.Out("HTTP/1.1 304 Not Modified\r\nContent-Length: 12\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{"F"});
  conn.Out("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx");
  EXPECT_EQ(conn.Take(), Events{"F"});
}

TEST(HttpSnifferTest, ContinueThenOk) {
  Conn conn;
  conn.In(
      "POST /upload HTTP/1.1\r\nExpect: 100-continue\r\n"
      "Content-Length: 5\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{"S POST /upload "});
  conn.Out("HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{});
  conn.In("hello");
  conn.Out("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n");
  conn.Out("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{});
  conn.Out("ok");
  EXPECT_EQ(conn.Take(), Events{"F"});
}

TEST(HttpSnifferTest, SwitchingProtocolsFinishesThenIgnores) {
  Conn conn;
  conn.In("GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
  conn.Out(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"
      "\x81\x05hello");
  EXPECT_EQ(conn.Take(), (Events{"S GET /ws ", "F", "I"}));
  EXPECT_TRUE(conn.sniffer().ignored());
  conn.In("GET / HTTP/1.1\r\n\r\n");
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{});
}

TEST(HttpSnifferTest, HeadAtTheLimitIsReadOverItIgnored) {
  const std::string start = "GET / HTTP/1.1\r\nX-Pad: ";
  const std::string end = "\r\n\r\n";
  std::string at_limit = start + std::string(kMaxHeadBytes - start.size() - end.size(), 'p') + end;
  ASSERT_EQ(at_limit.size(), kMaxHeadBytes);
  {
    Conn conn;
    conn.In(at_limit);
    EXPECT_EQ(conn.Take(), Events{"S GET / "});
  }
  {
    Conn conn;
    conn.In("GET /one HTTP/1.1\r\n\r\n");
    std::string over = start + "q" + at_limit.substr(start.size());
    conn.In(over.substr(0, 1000));
    conn.In(over.substr(1000));
    EXPECT_EQ(conn.Take(), (Events{"S GET /one ", "F", "I"}));
    EXPECT_TRUE(conn.sniffer().ignored());
  }
  {
    Conn conn;  // a head that never ends
    std::string forever = "GET / HTTP/1.1\r\nX-A: " + std::string(70000, 'a');
    conn.In(forever);
    EXPECT_EQ(conn.Take(), Events{"I"});
  }
}

TEST(HttpSnifferTest, GarbageIsIgnoredOnce) {
  Conn conn;
  conn.In(std::string("\x00\x01\x02\xff garbage\r\n", 14));
  conn.In("GET / HTTP/1.1\r\n\r\n");
  conn.Out("HTTP/1.1 200 OK\r\n\r\n");
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{"I"});
  EXPECT_TRUE(conn.sniffer().ignored());
}

TEST(HttpSnifferTest, TlsClientHelloIsIgnored) {
  const unsigned char hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
                                 0x5a, 0x2b, 0x47, 0x45, 0x54, 0x20, 0x2f, 0x20, 0x48, 0x54, 0x54};
  Conn conn;
  conn.In(std::string(reinterpret_cast<const char*>(hello), sizeof hello));
  EXPECT_EQ(conn.Take(), Events{"I"});
}

TEST(HttpSnifferTest, Http2PrefaceIsIgnored) {
  Conn conn;
  conn.In("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{"I"});
}

TEST(HttpSnifferTest, NotARequestLineIsIgnored) {
  for (const char* bytes :
       {"get / HTTP/1.1\r\n\r\n", "GET /\r\n\r\n", "GET / HTTP/1.1 \r\n\r\n",
        "GET  / HTTP/1.1\r\n\r\n", "GET / HTTP/1.x\r\n\r\n", "GET / HTTP/1.1\rX\n\r\n",
        "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
        "VERYLONGMETHODNAME / HTTP/1.1\r\n\r\n", "POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"}) {
    Conn conn;
    conn.In(bytes);
    EXPECT_EQ(conn.Take(), Events{"I"}) << bytes;
  }
  Conn conn;  // a NUL in a header value
  conn.In(std::string("GET / HTTP/1.1\r\nX-Request-Id: a\0b\r\n\r\n", 37));
  EXPECT_EQ(conn.Take(), Events{"I"});
}

TEST(HttpSnifferTest, MalformedChunkSizeIsIgnored) {
  for (const char* body :
       {"zz\r\n", "\r\n", ";x\r\n", "1 2\r\n", "1000000000000000\r\n", "3\r\nabcX"}) {
    Conn conn;
    conn.In("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    conn.In(body);
    EXPECT_EQ(conn.Take(), (Events{"S POST /c ", "F", "I"})) << body;
  }
}

TEST(HttpSnifferTest, LongRequestIdIsTruncated) {
  Conn conn;
  std::string id(300, 'i');
  id[0] = 'A';
  conn.In("GET / HTTP/1.1\r\nX-Request-Id: " + id + "\r\n\r\n");
  EXPECT_EQ(conn.Take().size(), 1u);
  EXPECT_EQ(std::string(conn.last_head().request_id), id.substr(0, kMaxRequestId - 1));
}

TEST(HttpSnifferTest, PathWithoutQueryAndTruncated) {
  Conn conn;
  conn.In("GET /v1/models?limit=10&x=/y HTTP/1.1\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{"S GET /v1/models "});
  std::string path = "/" + std::string(400, 'p');
  conn.In("OPTIONS " + path + "#frag HTTP/1.1\r\n\r\n");
  EXPECT_EQ(conn.Take().size(), 1u);
  EXPECT_EQ(std::string(conn.last_head().path), path.substr(0, kMaxPath - 1));
  EXPECT_STREQ(conn.last_head().method, "OPTIONS");
}

TEST(HttpSnifferTest, RequestIdHeaderNameIsCaseInsensitiveAndValueTrimmed) {
  Conn conn;
  conn.In("GET /a HTTP/1.1\r\nx-request-id: lower\r\n\r\n");
  conn.In("GET /b HTTP/1.1\r\nX-REQUEST-ID:\t  spaced out \t \r\n\r\n");
  conn.In("GET /c HTTP/1.1\r\nX-Request-Ids: not-it\r\nX-Request-I: no\r\n\r\n");
  conn.In("GET /d HTTP/1.1\r\nX-Request-Id:\r\n\r\n");
  EXPECT_EQ(conn.Take(),
            (Events{"S GET /a lower", "S GET /b spaced out", "S GET /c ", "S GET /d "}));
}

TEST(HttpSnifferTest, CloseAbortsEveryOpenRequestInOrder) {
  Conn conn;
  conn.In("GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\nGET /3 HTTP/1.1\r\n\r\n");
  conn.Out("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf");
  conn.Close();
  // The first response was cut after 4 of its 10 bytes; the others never began.
  EXPECT_EQ(conn.Take(), (Events{"S GET /1 ", "S GET /2 ", "S GET /3 ", "A", "A", "A"}));
}

// A chat UI streaming a completion (server-sent events over chunked
// encoding, as llama-server sends them): the request ends at the
// terminating chunk, not at the first event, and the next request on the
// kept-alive connection is a new one.
TEST(HttpSnifferTest, StreamedEventsEndAtTheLastChunk) {
  const std::string request =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 45\r\n\r\n{\"stream\":true,\"messages\":[{\"content\":\"hi\"}]}";
  ASSERT_EQ(request.size() - request.find("\r\n\r\n") - 4, 45u);
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
  auto chunk = [](const std::string& data) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return size + data + "\r\n";
  };
  Conn conn;
  for (int round = 0; round < 2; ++round) {
    conn.In(request);
    conn.Out(head);
    for (int event = 0; event < 5; ++event) {
      conn.Out(chunk("data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n"));
      EXPECT_EQ(conn.Take(), event == 0 ? Events{"S POST /v1/chat/completions "} : Events{})
          << "round " << round << " event " << event;
    }
    conn.Out(chunk("data: [DONE]\n\n"));
    EXPECT_EQ(conn.Take(), Events{});
    conn.Out("0\r\n\r\n");
    EXPECT_EQ(conn.Take(), Events{"F"}) << "round " << round;
  }
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{});
}

// A client that leaves in the middle of a stream: the server's next write
// fails and it closes the socket; the request ends there, aborted.
TEST(HttpSnifferTest, ClientLeavingMidStreamAbortsTheRequest) {
  Conn conn;
  conn.In("POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
  conn.Out(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
      "Transfer-Encoding: chunked\r\n\r\n7\r\ndata: x\r\n");
  EXPECT_EQ(conn.Take(), Events{"S POST /v1/chat/completions "});
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{"A"});
}

// A stream without chunked encoding or a length (HTTP/1.0 style, or a
// server that closes to end it): the close completes it.
TEST(HttpSnifferTest, StreamDelimitedByTheCloseFinishesAtTheClose) {
  Conn conn;
  conn.In("GET /events HTTP/1.1\r\n\r\n");
  conn.Out("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
  conn.Out("data: 1\n\n");
  conn.Out("data: 2\n\n");
  EXPECT_EQ(conn.Take(), Events{"S GET /events "});
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{"F"});
}

// A connection that broke (the front door could not deliver the rest):
// even a response delimited by the close is cut, so aborted; then silence.
TEST(HttpSnifferTest, ResetAbortsEveryOpenRequestEvenOneDelimitedByTheClose) {
  Conn conn;
  conn.In("GET /events HTTP/1.1\r\n\r\nGET /next HTTP/1.1\r\n\r\n");
  conn.Out("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n");
  EXPECT_EQ(conn.Take(), (Events{"S GET /events ", "S GET /next "}));
  EXPECT_EQ(conn.sniffer().pending(), 2);
  conn.Reset();
  EXPECT_EQ(conn.Take(), (Events{"A", "A"}));
  EXPECT_EQ(conn.sniffer().pending(), 0);
  conn.Close();
  conn.In("GET /more HTTP/1.1\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{});
}

// Connection: close after a whole response: finished by its length, the
// close adds nothing.
TEST(HttpSnifferTest, ConnectionCloseAfterAWholeResponseIsNotAnAbort) {
  Conn conn;
  conn.In("POST /completion HTTP/1.1\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}");
  conn.Out("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(conn.Take(), (Events{"S POST /completion ", "F"}));
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{});
}

// Back-to-back requests on a kept-alive connection, the second sent before
// the first's response (pipelined) and the third after: each ends with its
// own response, in order, and one cut by the close is aborted.
TEST(HttpSnifferTest, PipelinedAndBackToBackEndInOrder) {
  Conn conn;
  conn.In(
      "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcPOST /b HTTP/1.1\r\n"
      "Transfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n");
  EXPECT_EQ(conn.Take(), (Events{"S POST /a ", "S POST /b "}));
  conn.Out("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1");
  EXPECT_EQ(conn.Take(), Events{"F"});
  conn.Out("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2");
  EXPECT_EQ(conn.Take(), Events{"F"});
  conn.In("GET /c HTTP/1.1\r\n\r\n");
  conn.Out("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n3\r\n");
  EXPECT_EQ(conn.Take(), Events{"S GET /c "});
  conn.Close();
  EXPECT_EQ(conn.Take(), Events{"A"});
}

TEST(HttpSnifferTest, TooManyPipelinedRequestsIsIgnored) {
  Conn conn;
  std::string many;
  for (int i = 0; i <= kMaxPendingRequests; ++i) many += "GET / HTTP/1.1\r\n\r\n";
  conn.In(many);
  Events events = conn.Take();
  ASSERT_EQ(events.size(), 2u * kMaxPendingRequests + 1);
  EXPECT_EQ(events.back(), "I");
}

TEST(HttpSnifferTest, TolerantWhereNothingDependsOnIt) {
  Conn conn;
  // An empty line before a request, a folded header, bare LF line ends, a
  // status line without a reason phrase, a trailer after a chunked body.
  conn.In("\r\nGET /a HTTP/1.1\r\nX-Long: a\r\n  folded\r\n\r\n");
  conn.In("GET /b HTTP/1.0\nX-Request-Id: lf\n\n");
  EXPECT_EQ(conn.Take(), (Events{"S GET /a ", "S GET /b lf"}));
  conn.Out("HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx");
  conn.Out(
      "HTTP/1.1 500 Internal Server Error\nTransfer-Encoding: chunked\n\n"
      "1\nx\n0\nX-Checksum: 1\n\n");
  EXPECT_EQ(conn.Take(), (Events{"F", "F"}));
  // A header name longer than any the sniffer reads; blanks after a chunk
  // size.
  conn.In(
      "POST /c HTTP/1.1\r\nX-Request-Id-Of-The-Upstream-Proxy: no\r\n"
      "Transfer-Encoding: chunked\r\n\r\n2 \r\nab\r\n0  ;x\r\n\r\n"
      "GET /d HTTP/1.1\r\n\r\n");
  EXPECT_EQ(conn.Take(), (Events{"S POST /c ", "S GET /d "}));
  EXPECT_FALSE(conn.sniffer().ignored());
}

TEST(HttpSnifferTest, UnaskedResponseFinishesNothing) {
  Conn conn;
  conn.Out("HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(conn.Take(), Events{});
  conn.In("GET / HTTP/1.1\r\n\r\n");
  conn.Out("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(conn.Take(), (Events{"S GET / ", "F"}));
}

TEST(HttpSnifferTest, CopyMidStreamContinuesTheSame) {
  Conn a;
  a.In("POST /x HTTP/1.1\r\nContent-Le");
  Conn b;
  std::memcpy(static_cast<void*>(&b.sniffer()), &a.sniffer(), sizeof(HttpSniffer));
  for (Conn* conn : {&a, &b}) {
    conn->In("ngth: 3\r\nX-Request-Id: id\r\n\r\nabcGET /y HTTP/1.1\r\n\r\n");
    EXPECT_EQ(conn->Take(), (Events{"S POST /x id", "S GET /y "}));
  }
}

TEST(HttpSnifferTest, SizeIsSmall) {
  EXPECT_LE(sizeof(HttpSniffer), 1024u);
  std::printf("sizeof(HttpSniffer) = %zu\n", sizeof(HttpSniffer));
}

}  // namespace
}  // namespace retain::shim
