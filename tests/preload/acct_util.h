// acct_util: helpers shared by the accounting preload tests (acct_*_test.cc):
// running an acct_* fixture under the shim, reading its line-oriented
// stdout, finding a snapshot by label and selecting allocation rows.
//
// Header-only; every function may fail the current test with ADD_FAILURE
// and then returns an empty value, so callers need no error paths.
#ifndef RETAIN_TESTS_PRELOAD_ACCT_UTIL_H_
#define RETAIN_TESTS_PRELOAD_ACCT_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "retain.pb.h"
#include "tests/support/test_support.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::test::acct {

using tool::Allocation;

// --- running fixtures ------------------------------------------------------

// Runs fixture `name` with `args`; under the shim (RETAIN_DIR=dir) unless
// `preload` is false. `env` is added on top.
inline RunResult RunFixture(const std::string& name, const std::vector<std::string>& args,
                            const std::string& dir, bool preload = true,
                            const std::map<std::string, std::string>& env = {}) {
  RunOptions options;
  options.argv.push_back(FixturePath(name));
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = env;
  if (preload) options.env["RETAIN_DIR"] = dir;
  options.preload = preload;
  options.timeout_seconds = 60;  // the slowest fixture takes a few seconds
  return Run(options);
}

// Everything about a run, for assertion messages.
inline std::string Describe(const RunResult& r) {
  std::ostringstream out;
  out << "exit_code=" << r.exit_code << " term_signal=" << r.term_signal
      << " timed_out=" << r.timed_out << "\n--- stdout ---\n"
      << r.stdout_data << "--- stderr ---\n"
      << r.stderr_data;
  return out.str();
}

// --- reading fixture output ------------------------------------------------

// A fixture's stdout: one fact per line, whitespace-separated words.
class FixtureOutput {
 public:
  explicit FixtureOutput(const std::string& text) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream words(line);
      std::vector<std::string> fields;
      std::string word;
      while (words >> word) fields.push_back(word);
      if (!fields.empty()) lines_.push_back(fields);
    }
  }

  // Every line whose first word is `key`, without that word.
  std::vector<std::vector<std::string>> All(const std::string& key) const {
    std::vector<std::vector<std::string>> found;
    for (const auto& fields : lines_) {
      if (fields[0] == key) found.emplace_back(fields.begin() + 1, fields.end());
    }
    return found;
  }

  // The one line "key name ..." (first two words), without those two words.
  std::vector<std::string> Named(const std::string& key, const std::string& name) const {
    for (const auto& fields : All(key)) {
      if (!fields.empty() && fields[0] == name) return {fields.begin() + 1, fields.end()};
    }
    ADD_FAILURE() << "fixture printed no line '" << key << " " << name << " ...'";
    return {};
  }

  // Word `index` (0 = the word after the key) of the one line "key ...".
  std::string Word(const std::string& key, size_t index = 0) const {
    const auto found = All(key);
    if (found.size() != 1 || found[0].size() <= index) {
      ADD_FAILURE() << "fixture printed " << found.size() << " lines '" << key
                    << " ...' (want one with word " << index << ")";
      return "";
    }
    return found[0][index];
  }

  uint64_t Number(const std::string& key, size_t index = 0) const;

 private:
  std::vector<std::vector<std::string>> lines_;
};

// Parses "123", "0x7f..." (printf %p and %#jx) or "(nil)".
inline uint64_t ParseNumber(const std::string& word) {
  if (word == "(nil)") return 0;
  size_t used = 0;
  uint64_t value = 0;
  try {
    value = std::stoull(word, &used, 0);
  } catch (...) {
    used = 0;
  }
  if (used != word.size() || word.empty()) ADD_FAILURE() << "not a number: '" << word << "'";
  return value;
}

inline uint64_t FixtureOutput::Number(const std::string& key, size_t index) const {
  return ParseNumber(Word(key, index));
}

// A half-open address range [begin, end).
struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool Contains(uint64_t address) const { return begin <= address && address < end; }
};

// "range NAME START END ST_VALUE" lines (acct_sites): function ranges.
inline std::map<std::string, Range> FunctionRanges(const FixtureOutput& out) {
  std::map<std::string, Range> ranges;
  for (const auto& f : out.All("range")) {
    if (f.size() < 3) {
      ADD_FAILURE() << "short range line";
      continue;
    }
    ranges[f[0]] = Range{ParseNumber(f[1]), ParseNumber(f[2])};
  }
  return ranges;
}

// --- snapshots ---------------------------------------------------------------

// The snapshot in `dir` whose header label is `label` (API trigger). Fails
// the test unless exactly one exists.
inline v1::Snapshot SnapshotLabeled(const std::string& dir, const std::string& label) {
  std::vector<v1::Snapshot> found;
  const std::vector<std::string> files = ListSnapshots(dir);
  for (const std::string& file : files) {
    v1::Snapshot s = LoadSnapshot(file);
    if (s.header().label() == label) found.push_back(std::move(s));
  }
  if (found.size() != 1) {
    ADD_FAILURE() << found.size() << " snapshots labeled '" << label << "' among " << files.size()
                  << " in " << dir;
    return {};
  }
  EXPECT_EQ(found[0].header().trigger(), v1::TRIGGER_API) << label;
  return found[0];
}

// Rows of `kind` (KIND_UNSPECIFIED: all kinds).
inline std::vector<Allocation> Rows(const v1::Snapshot& s, v1::Kind kind = v1::KIND_UNSPECIFIED) {
  std::vector<Allocation> rows;
  for (const Allocation& a : tool::FlattenAllocations(s)) {
    if (kind == v1::KIND_UNSPECIFIED || a.kind == kind) rows.push_back(a);
  }
  return rows;
}

// Rows of `kind` born after `baseline` was taken.
inline std::vector<Allocation> RowsBornAfter(const v1::Snapshot& s, const v1::Snapshot& baseline,
                                             v1::Kind kind) {
  std::vector<Allocation> rows;
  for (const Allocation& a : Rows(s, kind)) {
    if (a.birth_sequence >= baseline.header().next_birth_sequence()) rows.push_back(a);
  }
  return rows;
}

// Rows by address; a second row at the same address fails the test (two
// live allocations cannot share an address).
inline std::map<uint64_t, Allocation> RowsByAddress(const v1::Snapshot& s) {
  std::map<uint64_t, Allocation> by_address;
  for (const Allocation& a : Rows(s)) {
    if (!by_address.emplace(a.address, a).second) {
      ADD_FAILURE() << "two live rows at address 0x" << std::hex << a.address;
    }
  }
  return by_address;
}

// Frames of a row's stack (empty when the stack is missing).
inline std::vector<uint64_t> FramesOf(const v1::Snapshot& s, uint32_t stack_id) {
  const v1::Stack* stack = tool::FindStack(s, stack_id);
  if (stack == nullptr) return {};
  return {stack->frames().begin(), stack->frames().end()};
}

// Sum of sizes and number of rows.
struct Sum {
  uint64_t bytes = 0;
  uint64_t count = 0;
};
inline Sum SumOf(const std::vector<Allocation>& rows) {
  Sum sum;
  for (const Allocation& a : rows) {
    sum.bytes += a.size;
    ++sum.count;
  }
  return sum;
}

// `path` with symlinks resolved (itself when it cannot be resolved).
inline std::string RealPath(const std::string& path) {
  std::error_code error;
  const std::filesystem::path real = std::filesystem::canonical(path, error);
  return error ? path : real.string();
}

// The module whose path is `path` (compared after resolving symlinks), or
// nullptr.
inline const v1::Module* ModuleWithPath(const v1::Snapshot& s, const std::string& path) {
  const std::string want = RealPath(path);
  for (const v1::Module& m : s.modules()) {
    if (RealPath(m.path()) == want) return &m;
  }
  return nullptr;
}

}  // namespace retain::test::acct

#endif  // RETAIN_TESTS_PRELOAD_ACCT_UTIL_H_
