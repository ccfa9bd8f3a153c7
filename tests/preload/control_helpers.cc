// control_helpers: see control_helpers.h.
#include "tests/preload/control_helpers.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace retain::test::control {

bool SendAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string ReadAll(int fd, int timeout_ms) {
  std::string all;
  int64_t deadline = NowMs() + timeout_ms;
  char buffer[65536];
  for (;;) {
    int64_t left = deadline - NowMs();
    if (left <= 0) break;
    pollfd wait = {fd, POLLIN, 0};
    if (poll(&wait, 1, static_cast<int>(left)) <= 0) break;
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;
    all.append(buffer, static_cast<size_t>(n));
  }
  return all;
}

Response Exchange(int fd, const std::string& request) {
  Response response;
  if (fd < 0) return response;
  SendAll(fd, request);
  shutdown(fd, SHUT_WR);  // a half request then ends here, not at a timeout
  std::string all = ReadAll(fd, 10000);
  close(fd);
  size_t end = all.find("\r\n\r\n");
  if (end == std::string::npos || all.compare(0, 9, "HTTP/1.1 ") != 0) return response;
  response.status = std::stoi(all.substr(9, 3));
  response.head = all.substr(0, end);
  response.body = all.substr(end + 4);
  return response;
}

int ConnectUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int ConnectTcp(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
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

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

std::string Simple(const std::string& method, const std::string& target) {
  return method + " " + target + " HTTP/1.1\r\nHost: retain\r\nContent-Length: 0\r\n\r\n";
}

int StatsPid(const Response& stats) {
  size_t at = stats.body.find("\"pid\":");
  return stats.status == 200 && at != std::string::npos ? std::atoi(stats.body.c_str() + at + 6)
                                                        : 0;
}

Response AskStats(const std::string& path) {
  return Exchange(ConnectUnix(path), Simple("GET", "/stats"));
}

int SocketCount(pid_t pid) {
  std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  int count = 0;
  DIR* dir = opendir(fd_dir.c_str());
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    char target[256];
    ssize_t n = readlink((fd_dir + "/" + entry->d_name).c_str(), target, sizeof(target) - 1);
    if (n > 0 && std::string(target, n).rfind("socket:", 0) == 0) ++count;
  }
  closedir(dir);
  return count;
}

int64_t NowMs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

bool WaitUntil(const std::function<bool()>& done, int timeout_ms) {
  int64_t deadline = NowMs() + timeout_ms;
  for (;;) {
    if (done()) return true;
    if (NowMs() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ControlProcess::ControlProcess(const std::string& control, const ControlOptions& options)
    : dir_(base_.path() + "/snapshots") {
  RunOptions run;
  run.argv = options.wrapper;
  run.argv.push_back(FixturePath(options.fixture));
  run.argv.insert(run.argv.end(), options.args.begin(), options.args.end());
  run.env = options.env;
  run.env["RETAIN_DIR"] = dir_;
  run.env["RETAIN_CONTROL"] = control;
  run.preload = true;
  child_ = std::make_unique<proc::Child>(run);
  ready_ = !options.wait_ready || child_->WaitForStdout("ready\n", 20000);
}

ControlProcess::~ControlProcess() {
  child_->CloseStdin();
  child_->Wait(30);
}

int ControlProcess::FixturePid() {
  std::string line = proc::LineStartingWith(child_->Stdout(), "pid ");
  return line.empty() ? 0 : std::atoi(line.c_str() + 4);
}

}  // namespace retain::test::control
