// control_helpers: what the control-endpoint tests (control_*_test.cc)
// share: clients over real sockets (a Unix socket, a loopback TCP port) and
// a fixture process under the shim with RETAIN_CONTROL set.
//
// Test-thread only: nothing here is thread-safe.
#ifndef RETAIN_TESTS_PRELOAD_CONTROL_HELPERS_H_
#define RETAIN_TESTS_PRELOAD_CONTROL_HELPERS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::control {

struct Response {
  int status = 0;  // 0: no HTTP response at all
  std::string head;
  std::string body;
};

// Sends `request`, half-closes, reads until EOF (10 s receive timeout),
// closes `fd`. A negative fd gives an empty Response.
Response Exchange(int fd, const std::string& request);
// A connected socket, or -1.
int ConnectUnix(const std::string& path);
int ConnectTcp(int port);
int FreeLoopbackPort();
bool SendAll(int fd, const std::string& data);
// Reads until EOF, error or `timeout_ms`.
std::string ReadAll(int fd, int timeout_ms);

// "METHOD TARGET HTTP/1.1" with Host and Content-Length: 0.
std::string Simple(const std::string& method, const std::string& target);
// The "pid" of a /stats body, or 0.
int StatsPid(const Response& stats);
// GET /stats on the Unix path.
Response AskStats(const std::string& path);

// Sockets among /proc/PID/fd, or -1 when the process is gone.
int SocketCount(pid_t pid);
// Polls `done` every 20 ms until it is true (returns true) or `timeout_ms`.
bool WaitUntil(const std::function<bool()>& done, int timeout_ms);
// Milliseconds on a monotonic clock.
int64_t NowMs();

struct ControlOptions {
  std::vector<std::string> wrapper;  // argv before the fixture: timeout 30, nice, sh -c ...
  std::string fixture = "control_idle";
  std::vector<std::string> args;           // after the fixture path
  std::map<std::string, std::string> env;  // on top of RETAIN_DIR and RETAIN_CONTROL
  bool wait_ready = true;                  // wait for "ready\n" on stdout
};

// A fixture under the shim with RETAIN_CONTROL=`control` and RETAIN_DIR a
// fresh directory (one level below a private one, so nothing else shares
// its parent). Waits for "ready"; the destructor closes its stdin and
// waits for it to end.
class ControlProcess {
 public:
  explicit ControlProcess(const std::string& control, const ControlOptions& options = {});
  ~ControlProcess();
  bool ready() const { return ready_; }
  proc::Child& child() { return *child_; }
  // The snapshot directory.
  const std::string& dir() const { return dir_; }
  // The pid the fixture printed ("pid N"), or 0.
  int FixturePid();

 private:
  TempDir base_;
  std::string dir_;
  std::unique_ptr<proc::Child> child_;
  bool ready_ = false;
};

}  // namespace retain::test::control

#endif  // RETAIN_TESTS_PRELOAD_CONTROL_HELPERS_H_
