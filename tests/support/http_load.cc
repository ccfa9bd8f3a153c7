// http_load: see http_load.h.
#include "tests/support/http_load.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace retain::test {
namespace {

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads more into `buffer`; false on a closed connection or the timeout.
// Acknowledges at once: a server that writes its head and body separately
// with Nagle on (cpp-httplib) would otherwise wait for the delayed ACK, 40 ms
// a response.
bool ReadMore(int fd, std::string& buffer, int timeout_ms) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
  pollfd waiting{fd, POLLIN, 0};
  if (poll(&waiting, 1, timeout_ms) <= 0) return false;
  char chunk[16384];
  ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
  if (n <= 0) return false;
  buffer.append(chunk, static_cast<size_t>(n));
  return true;
}

// One response off the connection: its status, or -1 when the connection
// broke. `buffer` keeps what was read beyond it; *closing is set when the
// server said it closes the connection after this response.
int ReadResponse(int fd, std::string& buffer, int timeout_ms, bool* closing) {
  size_t head_end;
  while ((head_end = buffer.find("\r\n\r\n")) == std::string::npos) {
    if (!ReadMore(fd, buffer, timeout_ms)) return -1;
  }
  const std::string head = absl::AsciiStrToLower(buffer.substr(0, head_end));
  *closing = absl::StrContains(head, "\r\nconnection: close");
  int status = -1;
  if (head.size() > 12) status = std::atoi(head.c_str() + 9);
  size_t body_start = head_end + 4;
  const size_t length_at = head.find("\r\ncontent-length:");
  if (length_at != std::string::npos) {
    uint64_t length = 0;
    const size_t value = length_at + 17;
    std::string digits = head.substr(value, head.find("\r\n", value) - value);
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(digits), &length)) return -1;
    while (buffer.size() < body_start + length) {
      if (!ReadMore(fd, buffer, timeout_ms)) return -1;
    }
    buffer.erase(0, body_start + length);
    return status;
  }
  if (absl::StrContains(head, "\r\ntransfer-encoding: chunked")) {
    // Chunks until the zero-length one and its blank line.
    size_t at = body_start;
    for (;;) {
      size_t line_end;
      while ((line_end = buffer.find("\r\n", at)) == std::string::npos) {
        if (!ReadMore(fd, buffer, timeout_ms)) return -1;
      }
      const uint64_t size = std::strtoull(buffer.c_str() + at, nullptr, 16);
      const size_t next = line_end + 2 + size + 2;
      while (buffer.size() < next) {
        if (!ReadMore(fd, buffer, timeout_ms)) return -1;
      }
      at = next;
      if (size == 0) break;
    }
    buffer.erase(0, at);
    return status;
  }
  return -1;  // no length: this client does not read to the end of the connection
}

}  // namespace

LoadResult DriveLoad(const LoadOptions& options) {
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> ok{0};
  std::atomic<int64_t> failed{0};
  std::mutex error_mutex;
  std::string first_error;
  auto note_error = [&](const std::string& error) {
    std::lock_guard<std::mutex> hold(error_mutex);
    if (first_error.empty()) first_error = error;
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < options.connections; ++c) {
    threads.emplace_back([&] {
      int fd = -1;
      std::string buffer;
      for (int64_t n; (n = next.fetch_add(1)) < options.requests;) {
        if (fd < 0) {
          fd = Connect(options.port);
          buffer.clear();
          if (fd < 0) {
            failed.fetch_add(1);
            note_error(absl::StrCat("connect: ", std::strerror(errno)));
            continue;
          }
        }
        const std::string body = options.body ? options.body(n) : std::string();
        const std::string request =
            absl::StrCat(options.method, " ", options.path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                         "Content-Type: application/json\r\nContent-Length: ", body.size(),
                         "\r\nX-Request-Id: load-", n, "\r\n\r\n", body);
        bool closing = false;
        int status =
            SendAll(fd, request) ? ReadResponse(fd, buffer, options.timeout_ms, &closing) : -1;
        if (status == 200) {
          ok.fetch_add(1);
          if (closing) {  // the server's keep-alive limit: a new connection
            close(fd);
            fd = -1;
          }
        } else {
          failed.fetch_add(1);
          note_error(absl::StrCat("request ", n, ": status ", status));
          close(fd);
          fd = -1;
        }
      }
      if (fd >= 0) close(fd);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return LoadResult{ok.load(), failed.load(), first_error};
}

}  // namespace retain::test
