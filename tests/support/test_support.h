// test_support: what preload and end-to-end tests share: running a program
// (optionally under libretain.so) and reading the snapshots it leaves.
#ifndef RETAIN_TESTS_SUPPORT_TEST_SUPPORT_H_
#define RETAIN_TESTS_SUPPORT_TEST_SUPPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "retain.pb.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::test {

// Absolute path of build/libretain.so (compiled in by CMake).
std::string ShimPath();
// Absolute path of a test fixture program built from tests/fixtures/NAME.*
std::string FixturePath(const std::string& name);
// Absolute path of a test fixture shared library (tests/fixtures/NAME.*),
// built as lib<NAME>.so.
std::string FixtureLibraryPath(const std::string& name);
// Absolute path of the source tree root (for data files, git history...).
std::string SourceRoot();

// A fresh empty directory under $TMPDIR, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct RunOptions {
  std::vector<std::string> argv;           // argv[0] is the program path
  std::map<std::string, std::string> env;  // set on top of the test's environment
  bool preload = false;                    // add LD_PRELOAD=ShimPath()
  std::string stdin_data;                  // written to the child's stdin
  std::string cwd;                         // empty: inherit
  int timeout_seconds = 120;               // the child is killed (SIGKILL) after this
};

struct RunResult {
  int exit_code = -1;   // exit status when the child exited normally, else -1
  int term_signal = 0;  // signal that killed the child, else 0
  bool timed_out = false;
  std::string stdout_data;
  std::string stderr_data;
};

// Runs a program to completion (fork + execve, pipes for stdin/stdout/stderr).
RunResult Run(const RunOptions& options);

// Snapshot files (*.pb, not temporaries) in `dir`, sorted by name.
std::vector<std::string> ListSnapshots(const std::string& dir);

// Reads a snapshot; fails the current test (ADD_FAILURE) and returns an
// empty snapshot if it cannot be read.
v1::Snapshot LoadSnapshot(const std::string& path);

// The whole contents of a file; fails the current test (ADD_FAILURE) and
// returns "" if it cannot be read.
std::string ReadFileOrFail(const std::string& path);

// Creates or replaces `path` with `contents`; false on error.
bool WriteFile(const std::string& path, const std::string& contents);

// Sum of live allocation sizes / counts of one kind, from the allocation rows.
uint64_t LiveBytes(const v1::Snapshot& snapshot, v1::Kind kind);
uint64_t LiveCount(const v1::Snapshot& snapshot, v1::Kind kind);

// The KindTotals entry of `kind` (all zero if absent).
v1::KindTotals TotalsFor(const v1::Snapshot& snapshot, v1::Kind kind);

// True if any frame of stack `stack_id` lies in [begin, end).
bool StackContainsRange(const v1::Snapshot& snapshot, uint32_t stack_id, uint64_t begin,
                        uint64_t end);

}  // namespace retain::test

#endif  // RETAIN_TESTS_SUPPORT_TEST_SUPPORT_H_
