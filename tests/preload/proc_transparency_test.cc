// Transparency: real programs (python3, git, sort) and small fixtures run
// with and without libretain.so print exactly the same, end exactly the same
// way (exit code or signal), and under the shim each leaves one parseable
// exit snapshot and no line of its own on stderr.
#include <signal.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test::proc {
namespace {

// Runs `options` twice, without and with the shim (RETAIN_DIR = `retain_dir`),
// and expects the same stdout, exit code and terminating signal, and no
// "retain:" line on the shim run's stderr. Returns the shim run.
RunResult ExpectSameBehaviour(RunOptions options, const std::string& retain_dir) {
  options.preload = false;
  const RunResult plain = test::Run(options);
  options.preload = true;
  options.env["RETAIN_DIR"] = retain_dir;
  const RunResult traced = test::Run(options);

  EXPECT_FALSE(plain.timed_out) << options.argv[0];
  EXPECT_FALSE(traced.timed_out) << options.argv[0] << " under the shim";
  EXPECT_EQ(plain.exit_code, traced.exit_code) << traced.stderr_data;
  EXPECT_EQ(plain.term_signal, traced.term_signal);
  EXPECT_EQ(plain.stdout_data.size(), traced.stdout_data.size());
  EXPECT_TRUE(plain.stdout_data == traced.stdout_data)
      << "stdout differs under the shim (first 300 bytes of each)\nplain:  "
      << plain.stdout_data.substr(0, 300) << "\ntraced: " << traced.stdout_data.substr(0, 300);
  EXPECT_EQ(plain.stderr_data, traced.stderr_data);
  EXPECT_TRUE(RetainLines(traced.stderr_data).empty()) << traced.stderr_data;
  return traced;
}

std::string Python() {
  // The real interpreter, not a wrapper script (pyenv shims are bash).
  if (std::filesystem::exists("/usr/bin/python3")) return Canonical("/usr/bin/python3");
  RunOptions which;
  which.argv = {"/usr/bin/env", "python3", "-c", "import sys; print(sys.executable)"};
  std::string path = test::Run(which).stdout_data;
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  return Canonical(path);
}

// A churn of a few hundred MB through dicts, lists, strings and bytes,
// ending in a checksum that depends on all of it.
constexpr char kPythonScript[] = R"PY(
import hashlib
import sys
digest = hashlib.sha256()
total = 0
for round_ in range(int(sys.argv[1])):
    table = {}
    for i in range(120000):
        key = "k%d-%d" % (round_, i)
        table[key] = [key * 3, i, str(i * 7), {"n": i}]
    ordered = sorted(table.items(), key=lambda kv: (kv[1][1] * 7919) % 1000003)
    digest.update("".join(v[0] for _, v in ordered[:2000]).encode())
    chunks = [bytes(range(256)) * (j % 64 + 4) for j in range(6000)]
    digest.update(b"".join(chunks[::97]))
    text = " ".join(str(x) for x in range(200000)).split(" ")
    total += len(table) + len(chunks) + len(text)
    del table, ordered, chunks, text
print(total, digest.hexdigest())
)PY";

// Runs the churn script for `rounds` rounds with and without the shim.
v1::Snapshot ExpectPythonTransparent(int rounds, const std::map<std::string, std::string>& env) {
  TempDir work, retain_dir;
  const std::string script = work.path() + "/churn.py";
  std::ofstream(script) << kPythonScript;
  RunOptions options;
  options.argv = {Python(), "-B", script, std::to_string(rounds)};
  options.env = env;
  options.env["PYTHONHASHSEED"] = "0";
  const RunResult traced = ExpectSameBehaviour(options, retain_dir.path());
  EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
  // 326,000 table entries, chunks and words per round.
  EXPECT_EQ(traced.stdout_data.rfind(std::to_string(rounds * 326000) + " ", 0), 0u)
      << traced.stdout_data;
  return ExpectSingleExitSnapshot(retain_dir.path(), Python());
}

// python3 under the shim: same output as without it. Its small objects
// live in pymalloc's arenas (mmap), its big ones (dict tables, long
// strings, bytes) come from malloc: several hundred MB of churn.
TEST(ProcTransparency, PythonAllocatingHeavily) {
  const v1::Snapshot snapshot = ExpectPythonTransparent(6, {});
  // The churn went through the shim's hooks (not just a header written).
  EXPECT_GT(TotalsFor(snapshot, v1::KIND_HEAP).allocated_bytes(), 200u << 20);
  EXPECT_GT(TotalsFor(snapshot, v1::KIND_MMAP_ANON).allocated_bytes(), 100u << 20);
}

// The same with PYTHONMALLOC=malloc: every Python object is a malloc call
// (millions of them, from deep interpreter stacks), so the hot path runs
// in a real program as often as it ever will. One round keeps it short.
TEST(ProcTransparency, PythonWithEveryObjectFromMalloc) {
  const v1::Snapshot snapshot = ExpectPythonTransparent(1, {{"PYTHONMALLOC", "malloc"}});
  EXPECT_GT(TotalsFor(snapshot, v1::KIND_HEAP).allocated_count(), 2000000u);
}

// A repository with history: the project's own when it has commits, else a
// small one made here. Returns the repository and a fixed commit.
struct Repository {
  std::string path;
  std::string commit;
};

RunResult Git(const std::string& repo, std::vector<std::string> args) {
  RunOptions options;
  options.argv = {"/usr/bin/git", "-C", repo};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = {{"GIT_CONFIG_NOSYSTEM", "1"},
                 {"GIT_CONFIG_GLOBAL", "/dev/null"},
                 {"LC_ALL", "C"},
                 {"TZ", "UTC"}};
  return test::Run(options);
}

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

Repository FindOrMakeRepository(const TempDir& scratch) {
  const RunResult head = Git(SourceRoot(), {"rev-parse", "--verify", "HEAD^{commit}"});
  if (head.exit_code == 0) return {SourceRoot(), Trimmed(head.stdout_data)};
  const std::string repo = scratch.path() + "/repo";
  std::filesystem::create_directories(repo);
  EXPECT_EQ(Git(repo, {"init", "-q"}).exit_code, 0);
  for (int i = 0; i < 5; ++i) {
    std::ofstream(repo + "/file" + std::to_string(i % 3) + ".txt", std::ios::app)
        << "line " << i << " of the history\n"
        << std::string(100 * (i + 1), 'a' + i) << "\n";
    EXPECT_EQ(Git(repo, {"add", "-A"}).exit_code, 0);
    const std::string date = "2024-01-0" + std::to_string(i + 1) + "T12:00:00Z";
    const RunResult commit =
        Git(repo, {"-c", "user.name=Retain Test", "-c", "user.email=retain@example.com", "commit",
                   "-q", "-m", "commit " + std::to_string(i), "--date", date});
    EXPECT_EQ(commit.exit_code, 0) << commit.stderr_data;
  }
  return {repo, Trimmed(Git(repo, {"rev-parse", "HEAD"}).stdout_data)};
}

// git log --stat and git rev-list --count under the shim: same output.
// A fixed commit, not HEAD, so a commit landing meanwhile changes nothing.
TEST(ProcTransparency, GitLogAndRevList) {
  TempDir scratch;
  const Repository repo = FindOrMakeRepository(scratch);
  ASSERT_FALSE(repo.commit.empty());
  const std::vector<std::string> base = {"/usr/bin/git", "-C", repo.path};
  RunOptions options;
  options.env = {{"GIT_CONFIG_NOSYSTEM", "1"},
                 {"GIT_CONFIG_GLOBAL", "/dev/null"},
                 {"LC_ALL", "C"},
                 {"TZ", "UTC"}};
  {
    TempDir retain_dir;
    options.argv = base;
    options.argv.insert(options.argv.end(), {"--no-pager", "log", "--stat", repo.commit});
    const RunResult traced = ExpectSameBehaviour(options, retain_dir.path());
    EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
    EXPECT_NE(traced.stdout_data.find("commit " + repo.commit), std::string::npos);
    ExpectSingleExitSnapshot(retain_dir.path(), "/usr/bin/git");
  }
  {
    TempDir retain_dir;
    options.argv = base;
    options.argv.insert(options.argv.end(), {"rev-list", "--count", repo.commit});
    const RunResult traced = ExpectSameBehaviour(options, retain_dir.path());
    EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
    EXPECT_GE(std::stoi("0" + Trimmed(traced.stdout_data)), 1) << traced.stdout_data;
    ExpectSingleExitSnapshot(retain_dir.path(), "/usr/bin/git");
  }
}

// sort of 2 million generated lines (about 30 MB) under the shim: same bytes.
TEST(ProcTransparency, SortLargeFile) {
  TempDir work, retain_dir;
  const std::string input = work.path() + "/lines.txt";
  {
    std::ofstream out(input);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    std::string line;
    for (int i = 0; i < 2000000; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      line.clear();
      for (int c = 0; c < 8; ++c) line += static_cast<char>('a' + ((state >> (8 + 5 * c)) % 26));
      line += ' ';
      line += std::to_string(state >> 44);
      line += '\n';
      out << line;
    }
  }
  RunOptions options;
  options.argv = {Canonical("/usr/bin/sort"), input};
  options.env = {{"LC_ALL", "C"}};
  const RunResult traced = ExpectSameBehaviour(options, retain_dir.path());
  EXPECT_EQ(traced.exit_code, 0) << traced.stderr_data;
  EXPECT_EQ(traced.stdout_data.size(), std::filesystem::file_size(input));
  ExpectSingleExitSnapshot(retain_dir.path(), "/usr/bin/sort");
}

// exit(3) stays exit code 3, and the exit snapshot is still written.
TEST(ProcTransparency, ExitCodeKept) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_status"), "exit3"};
  const RunResult traced = ExpectSameBehaviour(options, retain_dir.path());
  EXPECT_EQ(traced.exit_code, 3);
  EXPECT_EQ(traced.stdout_data, "exiting with 3\n");
  ExpectSingleExitSnapshot(retain_dir.path(), FixturePath("proc_status"));
}

// Death by SIGTERM stays death by SIGTERM, and (by contract) a process that
// dies by a signal writes no exit snapshot.
TEST(ProcTransparency, DeathBySignalKept) {
  TempDir retain_dir;
  RunOptions options;
  options.argv = {FixturePath("proc_status"), "term"};
  const RunResult traced = ExpectSameBehaviour(options, retain_dir.path());
  EXPECT_EQ(traced.term_signal, SIGTERM);
  EXPECT_EQ(traced.exit_code, -1);
  EXPECT_EQ(traced.stdout_data, "raising SIGTERM\n");
  EXPECT_TRUE(SnapshotPaths(retain_dir.path()).empty());
}

}  // namespace
}  // namespace retain::test::proc
