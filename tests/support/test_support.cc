// test_support: runs programs for the tests (fork + execve, all three standard
// streams through pipes, a hard timeout) and reads what they leave behind.
//
// Thread rules: Run() blocks SIGPIPE in the calling thread while it feeds the
// child's stdin and consumes the SIGPIPE its own writes may raise, so a child
// that exits without reading its input cannot kill the test. Functions that
// fail report through ADD_FAILURE and return an empty result; none aborts.
#include "tests/support/test_support.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

extern char** environ;

namespace retain::test {
namespace {

// After a timeout kill, how long to keep reading what the child already wrote
// (a grandchild that escaped the process group could hold the pipes forever).
constexpr int64_t kDrainAfterKillMs = 2000;
constexpr size_t kReadChunk = 64 * 1024;

int64_t MonotonicMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string ErrnoMessage(absl::string_view what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// NAME=value strings: the test's own environment, then options.env on top,
// then LD_PRELOAD. LD_PRELOAD is dropped from the inherited environment so a
// test run under some other preload does not leak it into the child; with
// `preload` the shim goes first, before any LD_PRELOAD the test set itself.
std::vector<std::string> BuildEnvironment(const RunOptions& options) {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    absl::string_view text(*entry);
    size_t eq = text.find('=');
    if (eq == absl::string_view::npos) continue;
    // emplace keeps the first of duplicate names, as getenv() would.
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  env.erase("LD_PRELOAD");
  for (const auto& [name, value] : options.env) env[name] = value;
  if (options.preload) {
    auto it = env.find("LD_PRELOAD");
    env["LD_PRELOAD"] = it == env.end() ? ShimPath() : absl::StrCat(ShimPath(), ":", it->second);
  }
  std::vector<std::string> result;
  result.reserve(env.size());
  for (const auto& [name, value] : env) result.push_back(absl::StrCat(name, "=", value));
  return result;
}

// argv[0] as execve needs it: kept when it has a slash, else searched in the
// child's PATH ("sort", "python3"), as a shell would.
std::string ResolveProgram(const std::string& program, const std::vector<std::string>& env) {
  if (program.find('/') != std::string::npos) return program;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& entry : env) {
    if (absl::StartsWith(entry, "PATH=")) path = entry.substr(5);
  }
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return program;  // execve fails with ENOENT; the child reports it
}

// Async-signal-safe pieces for the child between fork and execve: no
// allocation, no locks (another test thread may have held malloc's lock at
// fork time).
void WriteAll(int fd, const char* text, size_t length) {
  while (length > 0) {
    ssize_t n = write(fd, text, length);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text += n;
    length -= static_cast<size_t>(n);
  }
}

void WriteString(int fd, const char* text) { WriteAll(fd, text, std::strlen(text)); }

[[noreturn]] void ChildFail(const char* what, const char* detail, int error) {
  char digits[16];
  int i = sizeof(digits);
  digits[--i] = '\0';
  do {
    digits[--i] = static_cast<char>('0' + error % 10);
    error /= 10;
  } while (error > 0 && i > 0);
  WriteString(STDERR_FILENO, "test_support: ");
  WriteString(STDERR_FILENO, what);
  WriteString(STDERR_FILENO, " ");
  WriteString(STDERR_FILENO, detail);
  WriteString(STDERR_FILENO, " failed, errno ");
  WriteString(STDERR_FILENO, digits + i);
  WriteString(STDERR_FILENO, "\n");
  _exit(127);
}

// dup2 onto itself keeps FD_CLOEXEC, which would close the stream at exec.
void MoveFd(int from, int to) {
  if (from == to) {
    fcntl(to, F_SETFD, 0);
  } else if (dup2(from, to) < 0) {
    ChildFail("dup2", "", errno);
  }
}

// Moves a pipe end that landed on 0, 1 or 2 (the test binary was started with
// a standard stream closed) above them, so the child's dup2 calls cannot
// clobber one pipe end with another.
int AboveStdio(int fd) {
  if (fd > STDERR_FILENO) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (moved < 0) return fd;
  close(fd);
  return moved;
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) {
  if (remove(path) != 0) ADD_FAILURE() << ErrnoMessage(absl::StrCat("cannot remove ", path));
  return 0;  // keep going: remove as much as possible
}

}  // namespace

std::string ShimPath() { return RETAIN_SHIM_PATH; }

std::string FixturePath(const std::string& name) {
  return absl::StrCat(RETAIN_FIXTURE_DIR, "/", name);
}

std::string FixtureLibraryPath(const std::string& name) {
  return absl::StrCat(RETAIN_FIXTURE_DIR, "/lib", name, ".so");
}

std::string SourceRoot() { return RETAIN_SOURCE_ROOT; }

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  if (base == nullptr || *base == '\0') base = "/tmp";
  std::string pattern = absl::StrCat(base, "/retain-test-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    ADD_FAILURE() << ErrnoMessage(absl::StrCat("mkdtemp ", pattern));
    return;
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  // FTW_DEPTH: children before their directory; FTW_PHYS: never follow a
  // symlink out of the directory.
  if (nftw(path_.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    ADD_FAILURE() << ErrnoMessage(absl::StrCat("nftw ", path_));
  }
}

RunResult Run(const RunOptions& options) {
  RunResult result;
  if (options.argv.empty()) {
    ADD_FAILURE() << "Run: argv is empty";
    return result;
  }
  // Everything the child needs is built before fork: the child must not
  // allocate.
  const std::vector<std::string> env_strings = BuildEnvironment(options);
  const std::string program = ResolveProgram(options.argv[0], env_strings);
  std::vector<char*> argv_ptrs;
  for (const std::string& arg : options.argv) argv_ptrs.push_back(const_cast<char*>(arg.c_str()));
  argv_ptrs.push_back(nullptr);
  std::vector<char*> env_ptrs;
  for (const std::string& entry : env_strings) env_ptrs.push_back(const_cast<char*>(entry.c_str()));
  env_ptrs.push_back(nullptr);

  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
      pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << ErrnoMessage("pipe2");
    for (int* fd :
         {&in_pipe[0], &in_pipe[1], &out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1]}) {
      CloseFd(fd);
    }
    return result;
  }
  for (int* fd :
       {&in_pipe[0], &in_pipe[1], &out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1]}) {
    *fd = AboveStdio(*fd);
  }

  sigset_t sigpipe_set, old_mask, pending;
  sigemptyset(&sigpipe_set);
  sigaddset(&sigpipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &sigpipe_set, &old_mask);
  sigpending(&pending);
  const bool sigpipe_was_pending = sigismember(&pending, SIGPIPE) == 1;

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << ErrnoMessage("fork");
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
      close(fd);
    }
    return result;
  }
  if (pid == 0) {
    // Own process group, so a timeout kills the grandchildren too; killed
    // with the test binary, so a crashed test leaves no strays behind.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    MoveFd(in_pipe[0], STDIN_FILENO);
    MoveFd(out_pipe[1], STDOUT_FILENO);
    MoveFd(err_pipe[1], STDERR_FILENO);
    if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) {
      ChildFail("chdir", options.cwd.c_str(), errno);
    }
    // The program gets the signal state a shell would give it.
    signal(SIGPIPE, SIG_DFL);
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    execve(program.c_str(), argv_ptrs.data(), env_ptrs.data());
    ChildFail("execve", program.c_str(), errno);
  }
  setpgid(pid, pid);  // also here: whichever of the two runs first wins the race
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  int stdin_fd = in_pipe[1];
  int stdout_fd = out_pipe[0];
  int stderr_fd = err_pipe[0];
  size_t stdin_written = 0;
  if (options.stdin_data.empty()) {
    CloseFd(&stdin_fd);
  } else {
    fcntl(stdin_fd, F_SETFL, fcntl(stdin_fd, F_GETFL) | O_NONBLOCK);
  }

  const int64_t deadline = MonotonicMs() + static_cast<int64_t>(options.timeout_seconds) * 1000;
  int64_t drain_deadline = 0;
  auto kill_child = [&]() {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    result.timed_out = true;
    drain_deadline = MonotonicMs() + kDrainAfterKillMs;
    CloseFd(&stdin_fd);
  };
  std::vector<char> buffer(kReadChunk);
  // Reads one chunk; closes the descriptor at end of file or on error.
  auto drain = [&](int* fd, std::string* into) {
    ssize_t n = read(*fd, buffer.data(), buffer.size());
    if (n > 0) {
      into->append(buffer.data(), static_cast<size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      CloseFd(fd);
    }
  };

  while (stdin_fd >= 0 || stdout_fd >= 0 || stderr_fd >= 0) {
    const int64_t now = MonotonicMs();
    if (!result.timed_out && now >= deadline) kill_child();
    if (result.timed_out && now >= drain_deadline) break;
    const int64_t wait_ms = (result.timed_out ? drain_deadline : deadline) - now;
    pollfd fds[3];
    int count = 0;
    int stdin_index = -1, stdout_index = -1, stderr_index = -1;
    if (stdin_fd >= 0) {
      stdin_index = count;
      fds[count++] = {stdin_fd, POLLOUT, 0};
    }
    if (stdout_fd >= 0) {
      stdout_index = count;
      fds[count++] = {stdout_fd, POLLIN, 0};
    }
    if (stderr_fd >= 0) {
      stderr_index = count;
      fds[count++] = {stderr_fd, POLLIN, 0};
    }
    int ready = poll(fds, count, static_cast<int>(std::min<int64_t>(wait_ms, 1 << 30)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      ADD_FAILURE() << ErrnoMessage("poll");
      kill_child();
      break;
    }
    if (stdin_index >= 0 && fds[stdin_index].revents != 0) {
      const std::string& data = options.stdin_data;
      ssize_t n = write(stdin_fd, data.data() + stdin_written, data.size() - stdin_written);
      if (n > 0) stdin_written += static_cast<size_t>(n);
      // EPIPE: the child closed its stdin early, which is its right.
      if (stdin_written == data.size() || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        CloseFd(&stdin_fd);
      }
    }
    if (stdout_index >= 0 && fds[stdout_index].revents != 0) drain(&stdout_fd, &result.stdout_data);
    if (stderr_index >= 0 && fds[stderr_index].revents != 0) drain(&stderr_fd, &result.stderr_data);
  }
  CloseFd(&stdin_fd);
  CloseFd(&stdout_fd);
  CloseFd(&stderr_fd);

  // The child may have closed its streams and kept running: the deadline
  // still holds.
  int status = 0;
  while (true) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      ADD_FAILURE() << ErrnoMessage("waitpid");
      break;
    }
    if (!result.timed_out && MonotonicMs() >= deadline) kill_child();
    usleep(5000);
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);

  // Swallow the SIGPIPE our own writes raised, then restore the mask.
  if (!sigpipe_was_pending) {
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1) {
      timespec zero = {0, 0};
      sigtimedwait(&sigpipe_set, nullptr, &zero);
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  return result;
}

std::vector<std::string> ListSnapshots(const std::string& dir) {
  std::vector<std::string> paths;
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return paths;  // no directory: no snapshots
  while (const dirent* entry = readdir(handle)) {
    absl::string_view name = entry->d_name;
    // The shim writes ".name.pb.tmp"-style temporaries and renames them.
    if (name.empty() || name[0] == '.' || !absl::EndsWith(name, ".pb")) continue;
    std::string path = absl::StrCat(dir, "/", name);
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) paths.push_back(std::move(path));
  }
  closedir(handle);
  std::sort(paths.begin(), paths.end());
  return paths;
}

v1::Snapshot LoadSnapshot(const std::string& path) {
  absl::StatusOr<v1::Snapshot> snapshot = tool::ReadSnapshotFile(path);
  if (!snapshot.ok()) {
    ADD_FAILURE() << snapshot.status().message();
    return v1::Snapshot();
  }
  return *std::move(snapshot);
}

std::string ReadFileOrFail(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    ADD_FAILURE() << path << ": " << std::strerror(errno);
    return "";
  }
  std::string contents;
  char buffer[65536];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) contents.append(buffer, n);
  close(fd);
  return contents;
}

bool WriteFile(const std::string& path, const std::string& contents) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size());
  return close(fd) == 0 && ok;
}

uint64_t LiveBytes(const v1::Snapshot& snapshot, v1::Kind kind) {
  uint64_t bytes = 0;
  for (const tool::Allocation& row : tool::FlattenAllocations(snapshot)) {
    if (row.kind == kind) bytes += row.size;
  }
  return bytes;
}

uint64_t LiveCount(const v1::Snapshot& snapshot, v1::Kind kind) {
  uint64_t count = 0;
  for (const tool::Allocation& row : tool::FlattenAllocations(snapshot)) {
    if (row.kind == kind) ++count;
  }
  return count;
}

v1::KindTotals TotalsFor(const v1::Snapshot& snapshot, v1::Kind kind) {
  for (const v1::KindTotals& totals : snapshot.totals()) {
    if (totals.kind() == kind) return totals;
  }
  v1::KindTotals empty;
  empty.set_kind(kind);
  return empty;
}

bool StackContainsRange(const v1::Snapshot& snapshot, uint32_t stack_id, uint64_t begin,
                        uint64_t end) {
  const v1::Stack* stack = tool::FindStack(snapshot, stack_id);
  if (stack == nullptr) return false;
  for (uint64_t frame : stack->frames()) {
    if (frame >= begin && frame < end) return true;
  }
  return false;
}

}  // namespace retain::test
