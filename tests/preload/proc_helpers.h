// proc_helpers: what the process-level preload tests (proc_*_test.cc) share
// beyond tests/support: a child process started without waiting for it (so
// a test can signal it, or kill it in the middle of a snapshot write),
// directory polling, and look-ups in snapshots and program output.
//
// Test-thread only: nothing here is thread-safe.
#ifndef RETAIN_TESTS_PRELOAD_PROC_HELPERS_H_
#define RETAIN_TESTS_PRELOAD_PROC_HELPERS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "retain.pb.h"
#include "tests/support/test_support.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::test::proc {

// A program started in the background with fork + execve. Its stdout and
// stderr go to files in a private temporary directory (so a chatty child
// can never block on a full pipe); its stdin is a pipe the test writes to.
// RunOptions::stdin_data and cwd are honoured; timeout_seconds is not (see
// Wait). The destructor SIGKILLs and reaps a child still running.
class Child {
 public:
  explicit Child(const RunOptions& options);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // 0 when the start failed (the constructor then ADD_FAILUREs).
  pid_t pid() const { return pid_; }

  // Polls the child's stdout until it contains `text`. False when the
  // timeout passes or the child ends without printing it.
  bool WaitForStdout(const std::string& text, int timeout_ms);

  std::string Stdout() const;
  std::string Stderr() const;

  // Writes to the child's stdin; false if the child no longer reads it.
  bool WriteStdin(const std::string& data);
  void CloseStdin();

  // kill(pid, signo); false when the child is already reaped.
  bool Signal(int signo);

  // True once the child has ended (reaps it; Wait then returns at once).
  bool Ended();

  // Waits for the child to end, SIGKILLing it after timeout_seconds
  // (timed_out is then set), and returns its status and output.
  RunResult Wait(int timeout_seconds);

 private:
  TempDir output_dir_;
  pid_t pid_ = 0;
  int stdin_fd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

// Snapshot files (full paths) in `dir`, sorted by name: ListSnapshots with
// its names made absolute.
std::vector<std::string> SnapshotPaths(const std::string& dir);

// Every entry name in `dir` (dot files included), sorted.
std::vector<std::string> DirEntries(const std::string& dir);

// The names (comm) of the threads of process `pid` just now, sorted: the
// shim's are "retain", "retain-ctl", "retain-door".
std::vector<std::string> ThreadNames(pid_t pid);

// Polls until `dir` holds at least `count` snapshot files or `timeout_ms`
// passes; returns the snapshot paths seen last.
std::vector<std::string> WaitForSnapshots(const std::string& dir, size_t count, int timeout_ms);

// Loads every snapshot in `dir`, in name order.
std::vector<v1::Snapshot> LoadAll(const std::string& dir);

// The lines of `text` that start with "retain:" (the shim's only voice on
// stderr; a correctly configured run prints none).
std::vector<std::string> RetainLines(const std::string& text);

// The first line of `text` that starts with `prefix`, or "".
std::string LineStartingWith(const std::string& text, const std::string& prefix);

// The value of "key=value" in `line` (value up to the next space, ','
// or end), parsed as an integer in base 0 (so 0x... works).
std::optional<uint64_t> Field(const std::string& line, const std::string& key);

// The live allocation that starts at `address`, if the snapshot has it.
std::optional<tool::Allocation> FindAllocation(const v1::Snapshot& snapshot, uint64_t address);

// All live allocations of exactly `size` bytes.
std::vector<tool::Allocation> AllocationsOfSize(const v1::Snapshot& snapshot, uint64_t size);

// The module whose path names the same file as `path` (compared by
// device and inode, so symlinks and relative spellings match), or nullptr.
const v1::Module* FindModule(const v1::Snapshot& snapshot, const std::string& path);

// True when `address` lies in one of the module's executable segments.
bool InExecutableSegment(const v1::Module& module, uint64_t address);

// The first frame of allocation stack `stack_id`, or nullopt when the
// stack is missing or empty.
std::optional<uint64_t> FirstFrame(const v1::Snapshot& snapshot, uint32_t stack_id);

// Lower-case hex of a byte string (build ids).
std::string Hex(const std::string& bytes);

// Canonical absolute path of `path` (symlinks resolved), or `path` itself.
std::string Canonical(const std::string& path);

// The shim's exit snapshot contract for a program that ran once under the
// shim with RETAIN_DIR=`dir` and exited normally: exactly one snapshot file,
// named <basename of exe>.<pid>.1.pb, trigger EXIT, exe_path the real path
// of `program`, and no temporary left. Non-fatal failures; returns it.
v1::Snapshot ExpectSingleExitSnapshot(const std::string& dir, const std::string& program);

}  // namespace retain::test::proc

#endif  // RETAIN_TESTS_PRELOAD_PROC_HELPERS_H_
