// The control endpoint belongs to the process that was meant to be
// profiled, and its descriptors stay out of the host's way: fork children,
// wrappers (timeout, sh, nice, env), a server's helpers, stale and
// successors' socket files, and hosts that close or replace descriptors
// they never opened (tests/fixtures/control_fds.c). Real processes, a real
// 0600 Unix socket.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/preload/control_helpers.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

using control::AskStats;
using control::ConnectTcp;
using control::ConnectUnix;
using control::ControlOptions;
using control::ControlProcess;
using control::Exchange;
using control::Response;
using control::Simple;
using control::SocketCount;
using control::StatsPid;
using control::WaitUntil;

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// Polls until the endpoint on `path` answers /stats from `pid`.
bool ServedBy(const std::string& path, int pid, int timeout_ms = 10000) {
  return pid > 0 && WaitUntil([&] { return StatsPid(AskStats(path)) == pid; }, timeout_ms);
}

class ControlOwnerTest : public ::testing::Test {
 protected:
  std::string Path() const { return socket_dir_.path() + "/ctl.sock"; }
  TempDir socket_dir_;
};

TEST_F(ControlOwnerTest, AForkChildHoldsNothingAndTheFileGoesWithTheParent) {
  ControlOptions options;
  options.args = {"fork"};
  ControlProcess parent("unix:" + Path(), options);
  ASSERT_TRUE(parent.ready()) << parent.child().Stderr();
  std::string line = proc::LineStartingWith(parent.child().Stdout(), "child ");
  ASSERT_FALSE(line.empty());
  pid_t child = std::atoi(line.c_str() + 6);
  EXPECT_TRUE(WaitUntil([&] { return SocketCount(child) == 0; }, 5000))
      << "the fork child keeps " << SocketCount(child) << " socket(s)";
  EXPECT_EQ(SocketCount(parent.child().pid()), 1) << "the parent's listener";
  EXPECT_TRUE(ServedBy(Path(), parent.FixturePid()));

  parent.child().CloseStdin();
  RunResult result = parent.child().Wait(30);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(kill(child, 0), 0) << "the child outlives its parent";
  EXPECT_FALSE(Exists(Path())) << "the socket file is gone with its process";
  EXPECT_LT(ConnectUnix(Path()), 0);
  kill(child, SIGKILL);
}

TEST_F(ControlOwnerTest, AHandoverToANonDescendantIsRefused) {
  ControlProcess holder("unix:" + Path());
  ASSERT_TRUE(holder.ready());
  // This test process is the holder's parent, not its descendant.
  Response r = Exchange(ConnectUnix(Path()), Simple("POST", "/handover"));
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(r.body.find("is not a descendant of pid " + std::to_string(holder.FixturePid())),
            std::string::npos)
      << r.body;
  EXPECT_EQ(Exchange(ConnectUnix(Path()), Simple("GET", "/handover")).status, 405);
  EXPECT_TRUE(ServedBy(Path(), holder.FixturePid()));
}

TEST_F(ControlOwnerTest, ExitLeavesASuccessorsSocketFileAlone) {
  ControlProcess first("unix:" + Path());
  ASSERT_TRUE(first.ready());
  ASSERT_TRUE(ServedBy(Path(), first.FixturePid()));
  // Someone else's socket now at the path.
  ASSERT_EQ(unlink(Path().c_str()), 0);
  int mine = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, Path().c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(mine, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  struct stat before;
  ASSERT_EQ(lstat(Path().c_str(), &before), 0);
  first.child().CloseStdin();
  first.child().Wait(30);
  struct stat after;
  ASSERT_EQ(lstat(Path().c_str(), &after), 0) << "the successor's file was removed";
  EXPECT_EQ(after.st_ino, before.st_ino);
  close(mine);
}

TEST_F(ControlOwnerTest, ASocketLeftByAKilledProcessIsTakenOver) {
  ControlProcess crashed("unix:" + Path());
  ASSERT_TRUE(crashed.ready());
  ASSERT_TRUE(ServedBy(Path(), crashed.FixturePid()));
  crashed.child().Signal(SIGKILL);
  crashed.child().Wait(30);
  ASSERT_TRUE(Exists(Path())) << "a killed process cannot remove it";
  ControlProcess next("unix:" + Path());
  ASSERT_TRUE(next.ready());
  EXPECT_TRUE(ServedBy(Path(), next.FixturePid()));
  EXPECT_EQ(next.child().Stderr(), "");
}

// The program a wrapper runs serves the endpoint, not the wrapper: timeout
// and sh fork it (the wrapper hands the endpoint over), nice and env exec it
// in place (their socket file is stale once they exec).
TEST_F(ControlOwnerTest, TheProgramUnderAWrapperServesNotTheWrapper) {
  const std::vector<std::vector<std::string>> wrappers = {
      {"/usr/bin/timeout", "30"},
      {"/bin/sh", "-c", "\"$0\" \"$@\"; exit $?"},
      {"/usr/bin/nice", "-n", "1"},
      {"/usr/bin/env", "RETAIN_TEST_WRAPPED=1"},
  };
  for (const std::vector<std::string>& wrapper : wrappers) {
    SCOPED_TRACE(wrapper[0]);
    if (access(wrapper[0].c_str(), X_OK) != 0) {
      ADD_FAILURE() << wrapper[0] << " is missing";
      continue;
    }
    ControlOptions options;
    options.wrapper = wrapper;
    ControlProcess process("unix:" + Path(), options);
    ASSERT_TRUE(process.ready()) << process.child().Stderr();
    int fixture = process.FixturePid();
    ASSERT_GT(fixture, 0);
    EXPECT_TRUE(ServedBy(Path(), fixture))
        << "pid " << StatsPid(AskStats(Path())) << " serves, not the fixture " << fixture;
    if (wrapper[0] == "/usr/bin/timeout" || wrapper[0] == "/bin/sh") {
      EXPECT_NE(fixture, process.child().pid()) << "the wrapper forks it";
      // Its listener went before its answer; the handover's own
      // connection closes once the answer is written, which may be just
      // after the fixture began to serve.
      const int wrapper_pid = process.child().pid();
      EXPECT_TRUE(WaitUntil([&] { return SocketCount(wrapper_pid) == 0; }, 5000))
          << "the wrapper keeps " << SocketCount(wrapper_pid) << " socket(s)";
    }
    process.child().CloseStdin();
    RunResult result = process.child().Wait(30);
    EXPECT_EQ(result.exit_code, 0);
    EXPECT_TRUE(proc::RetainLines(result.stderr_data).empty()) << result.stderr_data;
    EXPECT_FALSE(Exists(Path()));
  }
}

// Over TCP the asker names its pid, and the holder finds the connection's
// socket among that process's descriptors before it believes it.
TEST_F(ControlOwnerTest, OverTcpTooTheProgramUnderAWrapperServes) {
  int port = control::FreeLoopbackPort();
  ControlOptions options;
  options.wrapper = {"/usr/bin/timeout", "30"};
  ControlProcess process("tcp:127.0.0.1:" + std::to_string(port), options);
  ASSERT_TRUE(process.ready()) << process.child().Stderr();
  int fixture = process.FixturePid();
  ASSERT_GT(fixture, 0);
  ASSERT_NE(fixture, process.child().pid());
  EXPECT_TRUE(WaitUntil(
      [&] { return StatsPid(Exchange(ConnectTcp(port), Simple("GET", "/stats"))) == fixture; },
      10000))
      << StatsPid(Exchange(ConnectTcp(port), Simple("GET", "/stats")));
  // A claim the holder cannot verify is refused: this test process is
  // nobody's descendant, and the pid it names does not hold its connection.
  Response forged =
      Exchange(ConnectTcp(port), Simple("POST", "/handover?pid=" + std::to_string(fixture)));
  EXPECT_EQ(forged.status, 403) << forged.body;
  EXPECT_EQ(StatsPid(Exchange(ConnectTcp(port), Simple("GET", "/stats"))), fixture);
}

// control_idle in `mode` spawns a helper (LD_PRELOAD inherited, its
// descendant) that asks for the endpoint: it is refused for `reason`, says
// so in its log, and the program keeps serving.
void ExpectTheHelperIsRefused(const std::string& path, const std::string& mode,
                              const std::string& reason) {
  ControlOptions options;
  options.args = {mode};
  options.env["RETAIN_LOG"] = "1";
  ControlProcess server("unix:" + path, options);
  ASSERT_TRUE(server.ready()) << server.child().Stderr();
  ASSERT_TRUE(server.child().WaitForStdout("helper up ", 20000));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return server.child().Stderr().find("is kept by the process holding it") !=
               std::string::npos;
      },
      10000))
      << server.child().Stderr();
  EXPECT_NE(server.child().Stderr().find(reason), std::string::npos) << server.child().Stderr();
  EXPECT_TRUE(ServedBy(path, server.FixturePid()));
}

// A server that accepted a connection of its own keeps its endpoint.
TEST_F(ControlOwnerTest, AServerKeepsItsEndpointFromTheHelpersItSpawns) {
  ExpectTheHelperIsRefused(Path(), "spawn", "serves connections of its own");
}

// A program with threads of its own is a server, not a wrapper (timeout, sh,
// env run on one thread): it keeps its endpoint when a helper it spawns
// asks, even before its first request. A JVM lost it to the first
// subprocess it started (jspawnhelper, then the program that ran), and had
// none once that ended.
TEST_F(ControlOwnerTest, AThreadedProgramKeepsItsEndpointFromTheHelpersItSpawns) {
  ExpectTheHelperIsRefused(Path(), "threaded-spawn", "runs threads of its own");
}

TEST_F(ControlOwnerTest, TheListenerLivesHighAndIsCloseOnExec) {
  ControlProcess process("unix:" + Path());
  ASSERT_TRUE(process.ready());
  ASSERT_TRUE(ServedBy(Path(), process.FixturePid()));
  struct rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);  // the child's, inherited
  rlim_t top = limit.rlim_cur < 1024 ? limit.rlim_cur : 1024;
  std::string fd_dir = "/proc/" + std::to_string(process.child().pid()) + "/fd";
  // Every socket of the shim's: the listener, and any connection still
  // being closed after ServedBy's probe (one may vanish between the two
  // reads below: it is skipped, not misread).
  int checked = 0;
  for (int fd = 0; fd < 1200; ++fd) {
    char target[256];
    ssize_t n = readlink((fd_dir + "/" + std::to_string(fd)).c_str(), target, sizeof(target) - 1);
    if (n <= 0 || std::string(target, n).rfind("socket:", 0) != 0) continue;
    std::ifstream info("/proc/" + std::to_string(process.child().pid()) + "/fdinfo/" +
                       std::to_string(fd));
    std::string key;
    std::string flags;
    while (info >> key >> flags && key != "flags:") {
    }
    if (key != "flags:") continue;  // closed meanwhile
    ++checked;
    EXPECT_GE(static_cast<rlim_t>(fd), top - 64) << "fd " << fd;
    EXPECT_NE(std::stoul(flags, nullptr, 8) & O_CLOEXEC, 0u) << "fd " << fd << " " << flags;
  }
  EXPECT_GE(checked, 1) << "the listener";
}

// What a control_fds run prints between "ready" and "done", after "go".
std::string Transcript(bool preload, const std::string& mode, const std::string& socket_path,
                       int* served_by_pid) {
  TempDir dir;
  RunOptions options;
  options.argv = {FixturePath("control_fds"), mode};
  options.preload = preload;
  options.env["RETAIN_DIR"] = dir.path();
  if (preload) options.env["RETAIN_CONTROL"] = "unix:" + socket_path;
  proc::Child child(options);
  if (!child.WaitForStdout("ready\n", 20000)) return "not ready: " + child.Stderr();
  if (preload && !ServedBy(socket_path, child.pid())) return "not served before";
  child.WriteStdin("go\n");
  if (!child.WaitForStdout("done\n", 20000)) return "not done: " + child.Stdout();
  // Still served, by the same process, after the host's calls (a listener
  // the host took is bound again within a second or so).
  if (preload && served_by_pid != nullptr) {
    *served_by_pid = ServedBy(socket_path, child.pid(), 5000) ? child.pid() : 0;
  }
  std::string out = child.Stdout();
  child.CloseStdin();
  RunResult result = child.Wait(30);
  if (result.exit_code != 0) return "exit " + std::to_string(result.exit_code);
  size_t from = out.find("ready\n") + 6;
  return out.substr(from, out.find("done\n") - from);
}

TEST_F(ControlOwnerTest, TheHostsCloseCallsReturnWhatTheyWouldAndTheEndpointSurvives) {
  for (const char* mode : {"closefrom", "close_range", "close-each", "dup2-all", "fcntl-each"}) {
    SCOPED_TRACE(mode);
    std::string without = Transcript(false, mode, "", nullptr);
    int served_by = -1;
    std::string with = Transcript(true, mode, Path(), &served_by);
    EXPECT_EQ(with, without);
    EXPECT_GT(served_by, 0) << "the endpoint did not survive";
    if (std::string(mode) != "dup2-all" && std::string(mode) != "fcntl-each") {
      EXPECT_NE(without.find("closed 1 1\n"), std::string::npos) << without;
    }
  }
}

// A real shell that takes the number the endpoint's socket sits on: bash asks
// fcntl(F_GETFD) whether the number is free before `exec N>file`. The shim's
// descriptors answer EBADF to the host, as without the shim, so bash takes
// the number (the shim's socket moves) and its writes reach its file. Before,
// bash saw the number open, kept a copy of the socket and later put it back
// over the file: "write error: Transport endpoint is not connected", or
// death by SIGPIPE with a TCP endpoint.
TEST_F(ControlOwnerTest, AShellThatTakesTheEndpointsNumberWritesToItsOwnFile) {
  struct rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  const rlim_t top = limit.rlim_cur < 1024 ? limit.rlim_cur : 1024;
  ASSERT_GT(top, rlim_t{128});
  const std::string number = std::to_string(top - 64);  // base/own_fds.h: the span's first
  TempDir work;
  const std::string file = work.path() + "/out.txt";
  RunOptions options;
  options.argv = {"/bin/bash", "-c",
                  "exec " + number + ">" + file + "; echo hello >&" + number +
                      "; /bin/echo from-a-child >&" + number + "; echo \"[$(cat " + file + ")]\""};
  const RunResult plain = test::Run(options);
  ASSERT_EQ(plain.exit_code, 0) << plain.stderr_data;
  ASSERT_EQ(plain.stdout_data, "[hello\nfrom-a-child]\n");
  for (const std::string& endpoint :
       {"unix:" + Path(), "tcp:127.0.0.1:" + std::to_string(control::FreeLoopbackPort())}) {
    SCOPED_TRACE(endpoint);
    TempDir retain_dir;
    options.preload = true;
    options.env["RETAIN_DIR"] = retain_dir.path();
    options.env["RETAIN_CONTROL"] = endpoint;
    const RunResult traced = test::Run(options);
    EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
    EXPECT_EQ(traced.stdout_data, plain.stdout_data);
    EXPECT_EQ(traced.stderr_data, "");
  }
}

TEST_F(ControlOwnerTest, AHostThatClosesBehindTheHooksKeepsItsOwnSocket) {
  ControlOptions options;
  options.fixture = "control_fds";
  options.args = {"raw"};
  ControlProcess host("unix:" + Path(), options);
  ASSERT_TRUE(host.ready());
  int pid = host.child().pid();
  ASSERT_TRUE(ServedBy(Path(), pid));
  // The host closes everything with a raw close_range (no hook sees it),
  // and copies a listener of its own onto every number the shim's could
  // have been on.
  host.child().WriteStdin("go\n");
  ASSERT_TRUE(host.child().WaitForStdout("port ", 20000));
  int port = std::atoi(proc::LineStartingWith(host.child().Stdout(), "port ").c_str() + 5);
  auto host_answers = [&] {
    for (int i = 0; i < 5; ++i) {
      int fd = ConnectTcp(port);
      if (fd < 0) return false;
      std::string answer = control::ReadAll(fd, 10000);
      close(fd);
      if (answer != "host\n") {
        ADD_FAILURE() << "the host's connection got '" << answer << "'";
        return false;
      }
    }
    return true;
  };
  EXPECT_TRUE(host_answers());
  // The shim noticed its listener was gone and listens again.
  EXPECT_TRUE(ServedBy(Path(), pid, 10000));
  EXPECT_TRUE(host_answers());
  host.child().CloseStdin();
  RunResult result = host.child().Wait(30);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.stdout_data.find("accepted 10\n"), std::string::npos)
      << "the host accepted every connection to its socket: " << result.stdout_data;
}

}  // namespace
}  // namespace retain::test
