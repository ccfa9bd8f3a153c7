// exporter_http: retain-exporter's HTTP server: GET /metrics on a loopback
// port (127.0.0.1 only: the metrics name the host's code and paths), one
// connection at a time from a poll() loop on the exporter's one thread.
//
// No client can hold it for long: a request head must arrive within
// kRequestSeconds, at most 8 KiB; the answer is written with a send
// timeout of the same; then the connection is closed (Connection: close).
// GET /metrics answers the text format; / a short page naming /metrics;
// anything else 404, a method other than GET or HEAD 405.
//
// Thread-compatible: one thread calls Serve.
#ifndef RETAIN_TOOLS_LIB_EXPORTER_HTTP_H_
#define RETAIN_TOOLS_LIB_EXPORTER_HTTP_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace retain::tool {

inline constexpr int kRequestSeconds = 5;

class MetricsServer {
 public:
  // Listens on 127.0.0.1:`port` (0: a free port, see port()).
  static absl::StatusOr<MetricsServer> Listen(uint16_t port);
  MetricsServer(MetricsServer&& other) noexcept;
  MetricsServer& operator=(MetricsServer&&) = delete;
  ~MetricsServer();

  uint16_t port() const { return port_; }
  // Answers connections until `deadline` or until `stop` returns true (polled
  // at least every 100 ms); `metrics` makes each /metrics body.
  void Serve(absl::Time deadline, const std::function<std::string()>& metrics,
             const std::function<bool()>& stop);

 private:
  MetricsServer(int fd, uint16_t port) : fd_(fd), port_(port) {}
  void Answer(int client, const std::function<std::string()>& metrics);

  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_EXPORTER_HTTP_H_
