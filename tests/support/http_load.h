// http_load: drives an HTTP/1.1 server on loopback the way real clients do:
// several connections at once, each kept alive for many requests, responses
// read by their Content-Length (or to the end of a chunked body). For the
// end-to-end tests of request tagging and of the shim's memory under load.
//
// Test-thread API; the requests themselves run on one thread per
// connection.
#ifndef RETAIN_TESTS_SUPPORT_HTTP_LOAD_H_
#define RETAIN_TESTS_SUPPORT_HTTP_LOAD_H_

#include <cstdint>
#include <functional>
#include <string>

namespace retain::test {

struct LoadOptions {
  int port = 0;
  int connections = 4;   // concurrent keep-alive connections
  int64_t requests = 0;  // in all, shared out across the connections
  std::string method = "POST";
  std::string path = "/completion";
  // The body of request n (0-based, across all connections).
  std::function<std::string(int64_t n)> body;
  int timeout_ms = 30000;  // per response
};

struct LoadResult {
  int64_t ok = 0;      // responses with status 200
  int64_t failed = 0;  // other statuses, broken connections (each reconnects)
  std::string first_error;
};

LoadResult DriveLoad(const LoadOptions& options);

}  // namespace retain::test

#endif  // RETAIN_TESTS_SUPPORT_HTTP_LOAD_H_
