// retain-exporter's HTTP server (tools/lib/exporter_http.h) over real
// loopback sockets: GET /metrics answers the text format, HEAD its head
// only, other paths 404, other methods 405, and a client that sends nothing
// is cut at the request deadline; a port already taken is refused.
#include "tools/lib/exporter_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace retain::tool {
namespace {

int Connect(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  return fd;
}

std::string Ask(uint16_t port, const std::string& request) {
  int fd = Connect(port);
  EXPECT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string answer;
  char buffer[4096];
  ssize_t got;
  while ((got = recv(fd, buffer, sizeof(buffer), 0)) > 0) answer.append(buffer, got);
  close(fd);
  return answer;
}

class ExporterHttpTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<MetricsServer> server = MetricsServer::Listen(0);
    ASSERT_TRUE(server.ok()) << server.status();
    port_ = server->port();
    ASSERT_NE(port_, 0);
    thread_ = std::thread([this, server = std::move(*server)]() mutable {
      server.Serve(
          absl::InfiniteFuture(), [] { return std::string("retain_exporter_processes 0\n"); },
          [this] { return stop_.load(); });
    });
  }
  void TearDown() override {
    stop_.store(true);
    thread_.join();
  }
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_F(ExporterHttpTest, AnswersMetricsAndRefusesTheRest) {
  const std::string metrics = Ask(port_, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(metrics,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: 28\r\nConnection: close\r\n\r\nretain_exporter_processes 0\n");
  const std::string head = Ask(port_, "HEAD /metrics?x=1 HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.find("HTTP/1.1 200 OK\r\n"), 0u) << head;
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << head;
  EXPECT_EQ(Ask(port_, "GET /other HTTP/1.1\r\n\r\n").find("HTTP/1.1 404 Not Found\r\n"), 0u);
  EXPECT_EQ(Ask(port_, "POST /metrics HTTP/1.1\r\n\r\n").find("HTTP/1.1 405"), 0u);
}

TEST_F(ExporterHttpTest, ASilentClientIsCutAtTheDeadline) {
  int silent = Connect(port_);
  const auto start = std::chrono::steady_clock::now();
  // Served after the silent one is given up on (kRequestSeconds).
  const std::string metrics = Ask(port_, "GET /metrics HTTP/1.1\r\n\r\n");
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(metrics.find("HTTP/1.1 200 OK\r\n"), 0u);
  EXPECT_LT(waited, kRequestSeconds + 2.0);
  char byte;
  EXPECT_EQ(recv(silent, &byte, 1, 0), 0);  // closed by the server
  close(silent);
}

TEST(ExporterHttpListenTest, ATakenPortIsRefusedNamingIt) {
  absl::StatusOr<MetricsServer> server = MetricsServer::Listen(0);
  ASSERT_TRUE(server.ok());
  absl::StatusOr<MetricsServer> same = MetricsServer::Listen(server->port());
  EXPECT_FALSE(same.ok());
  EXPECT_NE(same.status().message().find("127.0.0.1:"), absl::string_view::npos);
}

}  // namespace
}  // namespace retain::tool
