// latency_client: the time an HTTP/1.1 client waits per request, on
// loopback: from the first byte of the request written to the last byte of
// its response read (framed by Content-Length). One request at a time, on one
// kept-alive connection, or (--new-connection) on a new connection each,
// whose connect() is then part of the time. TCP_NODELAY is set, as clients
// of latency-sensitive servers do. For bench/front_door_bench.sh.
//
//   latency_client --port N [--requests 2000] [--warmup 100] [--new-connection]
//                  [--method GET] [--path /health] [--body TEXT]
//
// Prints one line: "requests N median_us M p90_us P p99_us Q max_us X".
// Exit status 0 when every response was a 200, 1 otherwise.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = write(fd, data.data() + sent, data.size() - sent);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads one response framed by Content-Length; false when it is not a 200.
bool ReadResponse(int fd, std::string* pending) {
  char buffer[65536];
  size_t head_end;
  while ((head_end = pending->find("\r\n\r\n")) == std::string::npos) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) return false;
    pending->append(buffer, static_cast<size_t>(n));
  }
  std::string head = pending->substr(0, head_end);
  for (char& c : head) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  size_t at = head.find("content-length:");
  if (at == std::string::npos) return false;
  const size_t end = head_end + 4 + std::strtoul(head.c_str() + at + 15, nullptr, 10);
  while (pending->size() < end) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) return false;
    pending->append(buffer, static_cast<size_t>(n));
  }
  const bool ok = pending->compare(0, 12, "HTTP/1.1 200") == 0;
  pending->erase(0, end);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  int requests = 2000;
  int warmup = 100;
  bool new_connection = false;
  std::string method = "GET";
  std::string path = "/health";
  std::string body;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "latency_client: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--port") {
      port = std::atoi(value());
    } else if (arg == "--requests") {
      requests = std::atoi(value());
    } else if (arg == "--warmup") {
      warmup = std::atoi(value());
    } else if (arg == "--new-connection") {
      new_connection = true;
    } else if (arg == "--method") {
      method = value();
    } else if (arg == "--path") {
      path = value();
    } else if (arg == "--body") {
      body = value();
    } else {
      std::fprintf(stderr, "latency_client: unknown flag %s\n", arg.c_str());
      return 2;
    }
  }
  if (port <= 0 || requests <= 0) {
    std::fprintf(stderr, "latency_client: --port N is required\n");
    return 2;
  }
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!body.empty()) {
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;

  std::vector<double> micros;
  micros.reserve(static_cast<size_t>(requests));
  int fd = -1;
  std::string pending;
  int failed = 0;
  for (int i = 0; i < warmup + requests; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (fd < 0 || new_connection) {
      if (fd >= 0) close(fd);
      pending.clear();
      fd = Connect(port);
      if (fd < 0) {
        ++failed;
        continue;
      }
    }
    const bool ok = SendAll(fd, request) && ReadResponse(fd, &pending);
    const auto end = std::chrono::steady_clock::now();
    if (!ok) {
      ++failed;
      close(fd);
      fd = -1;
      continue;
    }
    if (i >= warmup) {
      micros.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
  }
  if (fd >= 0) close(fd);
  if (micros.empty()) {
    std::fprintf(stderr, "latency_client: no response\n");
    return 1;
  }
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) {
    return micros[std::min(micros.size() - 1, static_cast<size_t>(q * micros.size()))];
  };
  std::printf("requests %zu median_us %.1f p90_us %.1f p99_us %.1f max_us %.1f\n", micros.size(),
              at(0.5), at(0.9), at(0.99), micros.back());
  return failed == 0 ? 0 : 1;
}
