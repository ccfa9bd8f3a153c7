// exporter_http: see exporter_http.h.
#include "tools/lib/exporter_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace retain::tool {
namespace {

constexpr size_t kMaxHead = 8192;

bool SendAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t sent = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    data.remove_prefix(static_cast<size_t>(sent));
  }
  return true;
}

std::string Response(absl::string_view status, absl::string_view type, absl::string_view body,
                     bool head_only) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n",
                      head_only ? "" : body);
}

}  // namespace

absl::StatusOr<MetricsServer> MetricsServer::Listen(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 16) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on 127.0.0.1:", port, ": ", strerror(error)));
  }
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return MetricsServer(fd, ntohs(address.sin_port));
}

MetricsServer::MetricsServer(MetricsServer&& other) noexcept : fd_(other.fd_), port_(other.port_) {
  other.fd_ = -1;
}

MetricsServer::~MetricsServer() {
  if (fd_ >= 0) close(fd_);
}

void MetricsServer::Serve(absl::Time deadline, const std::function<std::string()>& metrics,
                          const std::function<bool()>& stop) {
  for (;;) {
    if (stop()) return;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return;
    pollfd listening = {fd_, POLLIN, 0};
    const int timeout_ms =
        static_cast<int>(std::min<int64_t>(100, absl::ToInt64Milliseconds(left) + 1));
    if (poll(&listening, 1, timeout_ms) <= 0) continue;
    int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    timeval timeout = {kRequestSeconds, 0};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    Answer(client, metrics);
    close(client);
  }
}

void MetricsServer::Answer(int client, const std::function<std::string()>& metrics) {
  std::string head;
  const absl::Time until = absl::Now() + absl::Seconds(kRequestSeconds);
  char buffer[2048];
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > kMaxHead || absl::Now() > until) return;
    ssize_t got = recv(client, buffer, sizeof(buffer), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    head.append(buffer, static_cast<size_t>(got));
  }
  const absl::string_view line = absl::string_view(head).substr(0, head.find("\r\n"));
  const size_t space = line.find(' ');
  const absl::string_view method = line.substr(0, space);
  absl::string_view target = space == absl::string_view::npos
                                 ? ""
                                 : line.substr(space + 1, line.find(' ', space + 1) - space - 1);
  target = target.substr(0, target.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    SendAll(client, Response("405 Method Not Allowed", "text/plain", "GET only\n", false));
  } else if (target == "/metrics") {
    SendAll(client,
            Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics(), head_only));
  } else if (target == "/") {
    SendAll(client, Response("200 OK", "text/plain", "retain-exporter: see /metrics\n", head_only));
  } else {
    SendAll(client,
            Response("404 Not Found", "text/plain", "not found: see /metrics\n", head_only));
  }
}

}  // namespace retain::tool
