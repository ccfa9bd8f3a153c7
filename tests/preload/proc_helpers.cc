// proc_helpers: see proc_helpers.h.
#include "tests/preload/proc_helpers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

extern char** environ;

namespace retain::test::proc {
namespace {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

Child::Child(const RunOptions& options) {
  if (options.argv.empty()) {
    ADD_FAILURE() << "Child: empty argv";
    return;
  }
  // Everything the child needs is built before fork: after it, the child
  // only calls async-signal-safe functions.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& [key, value] : options.env) env[key] = value;
  if (options.preload) env["LD_PRELOAD"] = ShimPath();
  std::vector<std::string> env_strings;
  for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string out_path = output_dir_.path() + "/stdout";
  const std::string err_path = output_dir_.path() + "/stderr";

  int stdin_pipe[2];
  if (pipe2(stdin_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return;
  }
  int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out_fd < 0 || err_fd < 0) {
    ADD_FAILURE() << "open output files: " << std::strerror(errno);
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(stdin_pipe[0], 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) _exit(126);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(stdin_pipe[0]);
  close(out_fd);
  close(err_fd);
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    close(stdin_pipe[1]);
    return;
  }
  pid_ = pid;
  stdin_fd_ = stdin_pipe[1];
  if (!options.stdin_data.empty()) WriteStdin(options.stdin_data);
}

Child::~Child() {
  CloseStdin();
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
}

bool Child::WaitForStdout(const std::string& text, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 5) {
    if (Stdout().find(text) != std::string::npos) return true;
    if (Ended()) return Stdout().find(text) != std::string::npos;
    SleepMs(5);
  }
  return false;
}

std::string Child::Stdout() const { return ReadWholeFile(output_dir_.path() + "/stdout"); }
std::string Child::Stderr() const { return ReadWholeFile(output_dir_.path() + "/stderr"); }

bool Child::WriteStdin(const std::string& data) {
  if (stdin_fd_ < 0) return false;
  // A child that stopped reading must fail the write, not kill the test.
  struct sigaction ignore = {}, previous = {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &previous);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(stdin_fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  sigaction(SIGPIPE, &previous, nullptr);
  return done == data.size();
}

void Child::CloseStdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

bool Child::Signal(int signo) {
  if (pid_ <= 0 || reaped_) return false;
  return kill(pid_, signo) == 0;
}

bool Child::Ended() {
  if (pid_ <= 0 || reaped_) return true;
  pid_t done = waitpid(pid_, &status_, WNOHANG);
  if (done == pid_) reaped_ = true;
  return reaped_;
}

RunResult Child::Wait(int timeout_seconds) {
  RunResult result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  while (!Ended()) {
    if (std::chrono::steady_clock::now() > deadline) {
      result.timed_out = true;
      kill(pid_, SIGKILL);
      waitpid(pid_, &status_, 0);
      reaped_ = true;
      break;
    }
    SleepMs(2);
  }
  CloseStdin();
  if (pid_ > 0) {
    if (WIFEXITED(status_)) result.exit_code = WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) result.term_signal = WTERMSIG(status_);
  }
  result.stdout_data = Stdout();
  result.stderr_data = Stderr();
  return result;
}

std::vector<std::string> SnapshotPaths(const std::string& dir) {
  std::vector<std::string> paths;
  for (const std::string& name : ListSnapshots(dir)) {
    paths.push_back(!name.empty() && name[0] == '/' ? name : dir + "/" + name);
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> ThreadNames(pid_t pid) {
  std::vector<std::string> names;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  for (const std::string& tid : DirEntries(task_dir)) {
    std::ifstream comm(task_dir + "/" + tid + "/comm");
    std::string name;
    if (std::getline(comm, name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> WaitForSnapshots(const std::string& dir, size_t count, int timeout_ms) {
  std::vector<std::string> paths;
  for (int waited = 0;; waited += 5) {
    paths = SnapshotPaths(dir);
    if (paths.size() >= count || waited >= timeout_ms) return paths;
    SleepMs(5);
  }
}

std::vector<v1::Snapshot> LoadAll(const std::string& dir) {
  std::vector<v1::Snapshot> snapshots;
  for (const std::string& path : SnapshotPaths(dir)) snapshots.push_back(LoadSnapshot(path));
  return snapshots;
}

std::vector<std::string> RetainLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("retain:", 0) == 0) lines.push_back(line);
  }
  return lines;
}

std::string LineStartingWith(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

std::optional<uint64_t> Field(const std::string& line, const std::string& key) {
  const std::string needle = key + "=";
  size_t at = 0;
  while ((at = line.find(needle, at)) != std::string::npos) {
    if (at == 0 || line[at - 1] == ' ') break;
    at += needle.size();
  }
  if (at == std::string::npos) return std::nullopt;
  const std::string rest = line.substr(at + needle.size());
  const std::string value = rest.substr(0, rest.find_first_of(" ,"));
  if (value.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  unsigned long long parsed = std::strtoull(value.c_str(), &end, 0);
  if (errno != 0 || end == nullptr || *end != '\0') return std::nullopt;
  return parsed;
}

std::optional<tool::Allocation> FindAllocation(const v1::Snapshot& snapshot, uint64_t address) {
  for (const tool::Allocation& row : tool::FlattenAllocations(snapshot)) {
    if (row.address == address) return row;
  }
  return std::nullopt;
}

std::vector<tool::Allocation> AllocationsOfSize(const v1::Snapshot& snapshot, uint64_t size) {
  std::vector<tool::Allocation> rows;
  for (const tool::Allocation& row : tool::FlattenAllocations(snapshot)) {
    if (row.size == size) rows.push_back(row);
  }
  return rows;
}

const v1::Module* FindModule(const v1::Snapshot& snapshot, const std::string& path) {
  struct stat want;
  if (stat(path.c_str(), &want) != 0) return nullptr;
  for (const v1::Module& module : snapshot.modules()) {
    struct stat have;
    if (stat(module.path().c_str(), &have) == 0 && have.st_dev == want.st_dev &&
        have.st_ino == want.st_ino) {
      return &module;
    }
  }
  return nullptr;
}

bool InExecutableSegment(const v1::Module& module, uint64_t address) {
  for (const v1::Segment& segment : module.executable_segments()) {
    if (address >= segment.start() && address < segment.end()) return true;
  }
  return false;
}

std::optional<uint64_t> FirstFrame(const v1::Snapshot& snapshot, uint32_t stack_id) {
  const v1::Stack* stack = tool::FindStack(snapshot, stack_id);
  if (stack == nullptr || stack->frames_size() == 0) return std::nullopt;
  return stack->frames(0);
}

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

std::string Canonical(const std::string& path) {
  std::error_code error;
  std::filesystem::path canonical = std::filesystem::canonical(path, error);
  return error ? path : canonical.string();
}

v1::Snapshot ExpectSingleExitSnapshot(const std::string& dir, const std::string& program) {
  const std::vector<std::string> paths = SnapshotPaths(dir);
  EXPECT_EQ(paths.size(), 1u) << "snapshots of " << program << " in " << dir;
  for (const std::string& name : DirEntries(dir)) {
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << "temporary left behind: " << name;
  }
  if (paths.empty()) return v1::Snapshot();
  v1::Snapshot snapshot = LoadSnapshot(paths.front());
  const v1::Header& header = snapshot.header();
  EXPECT_EQ(header.trigger(), v1::TRIGGER_EXIT);
  EXPECT_EQ(header.sequence(), 1u);
  EXPECT_EQ(header.format_version(), 1u);
  EXPECT_EQ(header.exe_path(), Canonical(program));
  const std::string expected_name = std::filesystem::path(Canonical(program)).filename().string() +
                                    "." + std::to_string(header.pid()) + ".1.pb";
  EXPECT_EQ(std::filesystem::path(paths.front()).filename().string(), expected_name);
  EXPECT_GT(TotalsFor(snapshot, v1::KIND_HEAP).allocated_count(), 0u)
      << "the shim recorded no heap allocation at all for " << program;
  return snapshot;
}

}  // namespace retain::test::proc
