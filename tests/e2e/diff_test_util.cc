// diff_test_util: see diff_test_util.h.
#include "tests/e2e/diff_test_util.h"

#include <cmath>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace retain::test {
namespace {

// Flattens a JSON document read from stdin into "path\ttype\tsize\tvalue"
// lines. Strict: NaN/Infinity, duplicate keys and trailing data are errors.
constexpr char kFlattenJson[] = R"PY(
import json, sys
def constant(name):
    raise ValueError("not JSON: " + name)
def pairs(items):
    keys = [k for k, _ in items]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key in " + repr(keys))
    return dict(items)
doc = json.loads(sys.stdin.read(), parse_constant=constant, object_pairs_hook=pairs)
out = []
def walk(path, v):
    join = lambda k: (path + "." + str(k)) if path else str(k)
    if isinstance(v, dict):
        out.append("%s\tobject\t%d\t" % (path, len(v)))
        for k, x in v.items(): walk(join(k), x)
    elif isinstance(v, list):
        out.append("%s\tarray\t%d\t" % (path, len(v)))
        for i, x in enumerate(v): walk(join(i), x)
    else:
        t = ("null" if v is None else "bool" if isinstance(v, bool) else
             "int" if isinstance(v, int) else "float" if isinstance(v, float) else "str")
        out.append("%s\t%s\t0\t%s" % (path, t, json.dumps(v)))
walk("", doc)
sys.stdout.write("\n".join(out) + "\n")
)PY";

std::string Unquote(const std::string& text) {
  if (text.size() < 2 || text.front() != '"' || text.back() != '"') return "";
  std::string out;
  for (size_t i = 1; i + 1 < text.size(); ++i) {
    if (text[i] == '\\' && i + 2 < text.size()) {
      const char c = text[++i];
      out.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

std::string ServerRun::Snapshot(int iteration) const {
  const std::string label = absl::StrFormat("iter-%02d", iteration);
  auto it = by_label.find(label);
  if (it == by_label.end()) {
    ADD_FAILURE() << "no snapshot labelled " << label << "\n" << Describe();
    return "";
  }
  return it->second;
}

std::vector<std::string> ServerRun::Series() const {
  std::vector<std::string> paths;
  for (int i = 0; i <= kIterations; ++i) paths.push_back(Snapshot(i));
  return paths;
}

std::string ServerRun::Site(const std::string& function) const {
  auto it = site_lines.find(function);
  if (it == site_lines.end()) {
    ADD_FAILURE() << "the fixture printed no site line for " << function << "\n" << Describe();
    return function;
  }
  return absl::StrCat(function, " (diff_server.c:", it->second, ")");
}

std::string ServerRun::Describe() const {
  std::string labels;
  for (const auto& [label, path] : by_label) absl::StrAppend(&labels, " ", label, "=", path);
  return absl::StrCat(test::Describe(run), "--- snapshots ---\n", labels, "\n");
}

ServerRun RunServer(const std::string& fixture) {
  ServerRun server;
  server.dir = std::make_unique<TempDir>();
  RunOptions options;
  options.argv = {FixturePath(fixture)};
  options.env["RETAIN_DIR"] = server.dir->path();
  options.preload = true;
  options.timeout_seconds = 60;
  server.run = Run(options);
  for (const std::string& path : ListSnapshots(server.dir->path())) {
    v1::Snapshot snapshot = LoadSnapshot(path);
    const std::string& label = snapshot.header().label();
    if (absl::StartsWith(label, "iter-")) {
      EXPECT_TRUE(server.by_label.emplace(label, path).second) << "two snapshots " << label;
    }
  }
  std::istringstream lines(server.run.stdout_data);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    int number = 0;
    if (words.size() == 3 && words[0] == "site" && absl::SimpleAtoi(words[2], &number)) {
      server.site_lines[words[1]] = number;
    } else if (words.size() == 2 && words[0] == "site_offset") {
      server.site_offset = std::strtoull(words[1].c_str(), nullptr, 16);
    } else if (words.size() >= 2 && words[0] == "diff_server") {
      (void)absl::SimpleAtoi(absl::StripPrefix(words[1], "leak_kb="), &server.leak_kb);
    }
  }
  return server;
}

bool RunComplete(const ServerRun& run) {
  return run.run.exit_code == 0 && run.by_label.size() == kIterations + 1 &&
         run.site_lines.size() == 3 && run.site_offset != 0 && run.leak_kb > 0;
}

RunResult RunDiff(const std::vector<std::string>& args) {
  RunOptions options;
  options.argv = {RETAIN_DIFF_PATH};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.timeout_seconds = 60;
  return Run(options);
}

std::string Describe(const RunResult& r) {
  return absl::StrCat("exit_code=", r.exit_code, " term_signal=", r.term_signal,
                      " timed_out=", r.timed_out, "\n--- stdout ---\n", r.stdout_data,
                      "--- stderr ---\n", r.stderr_data);
}

std::string Json::Type(const std::string& path) const {
  auto it = nodes.find(path);
  return it == nodes.end() ? "(absent)" : it->second.type;
}

std::string Json::Str(const std::string& path) const {
  auto it = nodes.find(path);
  if (it == nodes.end() || it->second.type != "str") {
    ADD_FAILURE() << path << " is not a string but " << Type(path);
    return "";
  }
  return Unquote(it->second.text);
}

int64_t Json::Int(const std::string& path) const {
  auto it = nodes.find(path);
  int64_t value = 0;
  if (it == nodes.end() || it->second.type != "int" || !absl::SimpleAtoi(it->second.text, &value)) {
    ADD_FAILURE() << path << " is not an integer but " << Type(path) << " "
                  << (it == nodes.end() ? "" : it->second.text);
    return -1;
  }
  return value;
}

double Json::Number(const std::string& path) const {
  auto it = nodes.find(path);
  double value = 0;
  if (it == nodes.end() || (it->second.type != "int" && it->second.type != "float") ||
      !absl::SimpleAtod(it->second.text, &value)) {
    ADD_FAILURE() << path << " is not a number but " << Type(path);
    return -1;
  }
  return value;
}

int64_t Json::Integral(const std::string& path) const {
  const double value = Number(path);
  if (value != std::trunc(value)) {
    ADD_FAILURE() << path << " is not integral: " << nodes.at(path).text;
    return -1;
  }
  return static_cast<int64_t>(value);
}

bool Json::Bool(const std::string& path) const {
  auto it = nodes.find(path);
  if (it == nodes.end() || it->second.type != "bool") {
    ADD_FAILURE() << path << " is not a bool but " << Type(path);
    return false;
  }
  return it->second.text == "true";
}

size_t Json::Size(const std::string& path) const {
  auto it = nodes.find(path);
  if (it == nodes.end() || (it->second.type != "array" && it->second.type != "object")) {
    ADD_FAILURE() << path << " is not an array or object but " << Type(path);
    return 0;
  }
  return it->second.size;
}

int Json::FindRow(const std::string& list, const std::string& field,
                  const std::string& value) const {
  auto it = nodes.find(list);
  if (it == nodes.end() || it->second.type != "array") return -1;
  for (size_t i = 0; i < it->second.size; ++i) {
    auto node = nodes.find(absl::StrCat(list, ".", i, ".", field));
    if (node != nodes.end() && node->second.type == "str" && Unquote(node->second.text) == value) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

Json ParseJson(const std::string& text) {
  Json json;
  RunOptions options;
  options.argv = {"python3", "-c", kFlattenJson};
  options.stdin_data = text;
  options.timeout_seconds = 60;
  const RunResult result = Run(options);
  if (result.exit_code != 0) {
    json.error = absl::StrCat("python3's json module rejects the output: ", result.stderr_data,
                              "\n--- the output ---\n", text);
    return json;
  }
  for (absl::string_view line : absl::StrSplit(result.stdout_data, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits('\t', 3));
    if (parts.size() != 4) {
      json.error = absl::StrCat("bad flattened line: ", line);
      return json;
    }
    Json::Node node{parts[1], parts[3], 0};
    (void)absl::SimpleAtoi(parts[2], &node.size);
    json.nodes[parts[0]] = node;
  }
  json.ok = true;
  return json;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

Table ParseDiffTable(const std::string& text) {
  // Sizes are "12 B", "3.0 MiB"; a resident measure adds an allocated column.
  static const std::string kSize = "([0-9.]+ (?:B|KiB|MiB|GiB))";
  static const std::regex kRow("^ *" + kSize + " +(?:" + kSize + " +)?([0-9]+) +([0-9.]+%) +" +
                               kSize + "  (.+)$");
  static const std::regex kTotal("^ *" + kSize + " +(?:" + kSize + " +)?([0-9]+) +" + kSize +
                                 "  total$");
  Table table;
  std::smatch m;
  for (const std::string& line : Lines(text)) {
    if (absl::StartsWith(line, "  mode        ")) {
      table.mode_line = line.substr(14);
    } else if (std::regex_match(line, m, kTotal)) {
      table.total_line = line;
      table.total_retained = m[1].str();
      table.total_allocated = m[2].matched ? m[2].str() : m[1].str();
    } else if (std::regex_match(line, m, kRow)) {
      TableRow row;
      row.retained = m[1].str();
      row.allocated = m[2].matched ? m[2].str() : m[1].str();
      row.count = std::strtoll(m[3].str().c_str(), nullptr, 10);
      row.share = m[4].str();
      row.released = m[5].str();
      row.owner = m[6].str();
      table.rows.push_back(row);
    } else if (absl::StrContains(line, "<- ") && !table.rows.empty()) {
      table.rows.back().chain.push_back(line.substr(line.find("<- ") + 3));
    } else if (absl::StartsWith(line, "  ... ")) {
      table.more_line = line;
    }
  }
  return table;
}

std::vector<FoldedLine> ParseFolded(const std::string& text) {
  std::vector<FoldedLine> folded;
  for (const std::string& line : Lines(text)) {
    const size_t space = line.rfind(' ');
    FoldedLine entry;
    if (space == std::string::npos || !absl::SimpleAtoi(line.substr(space + 1), &entry.bytes)) {
      ADD_FAILURE() << "not a folded line (\"frames bytes\"): " << line;
      continue;
    }
    EXPECT_EQ(line.find(' '), space) << "a frame contains a space: " << line;
    entry.frames = absl::StrSplit(line.substr(0, space), ';');
    folded.push_back(entry);
  }
  return folded;
}

}  // namespace retain::test
