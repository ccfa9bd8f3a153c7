// Tests for tools/lib/pprof_writer on a real snapshot: fixture pprof_sites
// runs under libretain.so, its snapshot becomes a ProfileSpec (one sample per
// stack and kind, bytes and count, a kind label), and the written file is
// (a) decompressed and decoded here with pprof's schema and checked for the
// format's rules and for the input's totals, and (b) read by an independent
// reader, Go's pprof (`go tool pprof`, Debian package golang-go), whose
// printed samples, functions and mappings must match.
//
// The independent reader is required: when `go` is missing the test fails
// and says what to install.
#include "tools/lib/pprof_writer.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "profile.pb.h"
#include "retain.pb.h"
#include "tests/support/test_support.h"
#include "tools/lib/snapshot_reader.h"
#include "tools/lib/symbolizer.h"

namespace retain::tool {
namespace {

using ::testing::HasSubstr;

// Bytes and count a fixture site must leave live ("expect" lines).
struct Expected {
  int64_t bytes = 0;
  int64_t count = 0;
};

// Everything about a run, for assertion messages.
std::string Describe(const test::RunResult& r) {
  return absl::StrCat("exit_code=", r.exit_code, " term_signal=", r.term_signal,
                      " timed_out=", r.timed_out, "\n--- stdout ---\n", r.stdout_data,
                      "--- stderr ---\n", r.stderr_data);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// gzip or zlib data, inflated; empty (and a test failure) when it is neither.
std::string Gunzip(const std::string& data) {
  z_stream stream;
  std::memset(&stream, 0, sizeof(stream));
  if (inflateInit2(&stream, 15 + 32) != Z_OK) {  // +32: detect gzip or zlib
    ADD_FAILURE() << "inflateInit2 failed";
    return "";
  }
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buffer[1 << 16];
  int result = Z_OK;
  while (result == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof(buffer);
    result = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - stream.avail_out);
  }
  inflateEnd(&stream);
  if (result != Z_STREAM_END) {
    ADD_FAILURE() << "not a complete gzip stream (zlib result " << result << ")";
    return "";
  }
  return out;
}

// The "pprof" snapshot of one run of pprof_sites under the shim, the
// expectations it printed, and the spec built from it.
class PprofFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_dir_ = new test::TempDir();
    test::RunOptions options;
    options.argv = {test::FixturePath("pprof_sites")};
    options.env["RETAIN_DIR"] = run_dir_->path();
    options.preload = true;
    options.timeout_seconds = 60;
    run_ = new test::RunResult(test::Run(options));
    snapshot_ = new v1::Snapshot();
    expected_ = new std::map<std::string, Expected>();
    if (run_->exit_code != 0) return;
    for (const std::string& path : test::ListSnapshots(run_dir_->path())) {
      v1::Snapshot snapshot = test::LoadSnapshot(path);
      if (snapshot.header().label() == "pprof") *snapshot_ = snapshot;
    }
    std::istringstream lines(run_->stdout_data);
    std::string word, function;
    Expected expected;
    while (lines >> word >> function >> expected.bytes >> expected.count) {
      if (word == "expect") (*expected_)[function] = expected;
    }
  }

  static void TearDownTestSuite() {
    delete expected_;
    delete snapshot_;
    delete run_;
    delete run_dir_;
  }

  void SetUp() override {
    ASSERT_EQ(run_->exit_code, 0) << Describe(*run_);
    ASSERT_TRUE(snapshot_->has_header()) << "no snapshot labelled \"pprof\"\n" << Describe(*run_);
    ASSERT_EQ(expected_->size(), 3u) << Describe(*run_);
  }

  // One sample per (stack, kind): {bytes, count}, labelled with the kind;
  // `totals` gets the sums over all allocations.
  static ProfileSpec Spec(Expected* totals) {
    std::map<std::pair<uint32_t, v1::Kind>, Expected> groups;
    for (const Allocation& row : FlattenAllocations(*snapshot_)) {
      Expected& group = groups[{row.stack_id, row.kind}];
      group.bytes += static_cast<int64_t>(row.size);
      group.count += 1;
      totals->bytes += static_cast<int64_t>(row.size);
      totals->count += 1;
    }
    ProfileSpec spec;
    spec.sample_types = {{"retained_space", "bytes"}, {"retained_objects", "count"}};
    spec.default_sample_type = 0;
    spec.time_nanos = static_cast<int64_t>(snapshot_->header().time_unix_ns());
    spec.duration_nanos = 1000;
    spec.comments = {"retain test profile"};
    spec.drop_frames = "^(operator new|__libc_malloc)$";
    for (const auto& [key, value] : groups) {
      ProfileSample sample;
      sample.snapshot = snapshot_;
      if (const v1::Stack* stack = FindStack(*snapshot_, key.first)) {
        sample.stack.assign(stack->frames().begin(), stack->frames().end());
      }
      sample.values = {value.bytes, value.count};
      sample.labels = {{"kind", KindName(key.second)}};
      spec.samples.push_back(std::move(sample));
    }
    return spec;
  }

  // The fixture executable's module in the snapshot.
  static const v1::Module* FixtureModule() {
    for (const v1::Module& module : snapshot_->modules()) {
      if (module.path() == test::FixturePath("pprof_sites")) return &module;
    }
    return nullptr;
  }

  static test::TempDir* run_dir_;
  static test::RunResult* run_;
  static v1::Snapshot* snapshot_;
  static std::map<std::string, Expected>* expected_;
};

test::TempDir* PprofFixture::run_dir_ = nullptr;
test::RunResult* PprofFixture::run_ = nullptr;
v1::Snapshot* PprofFixture::snapshot_ = nullptr;
std::map<std::string, Expected>* PprofFixture::expected_ = nullptr;

// Writes the fixture's profile to `dir`/heap.pb.gz and decodes it back.
pprof::Profile WriteAndDecode(const ProfileSpec& spec, const std::string& path) {
  Symbolizer symbolizer;
  const absl::Status status = WritePprofFile(spec, symbolizer, path);
  EXPECT_TRUE(status.ok()) << status;
  const std::string compressed = ReadFile(path);
  EXPECT_GE(compressed.size(), 2u);
  if (compressed.size() >= 2) {
    EXPECT_EQ(static_cast<unsigned char>(compressed[0]), 0x1f) << "no gzip magic";
    EXPECT_EQ(static_cast<unsigned char>(compressed[1]), 0x8b) << "no gzip magic";
  }
  pprof::Profile profile;
  EXPECT_TRUE(profile.ParseFromString(Gunzip(compressed))) << "not a profile.proto message";
  return profile;
}

// The innermost function name of each location, by location id.
std::map<uint64_t, std::vector<std::string>> FunctionsByLocation(const pprof::Profile& profile) {
  std::map<uint64_t, std::vector<std::string>> names;
  for (const pprof::Location& location : profile.location()) {
    for (const pprof::Line& line : location.line()) {
      const pprof::Function& function = profile.function(line.function_id() - 1);
      names[location.id()].push_back(profile.string_table(function.name()));
    }
  }
  return names;
}

// Proves (the format's rules, the spec's contents): string 0 is "", ids
// count from 1 and every reference resolves; values add up to the
// snapshot's totals; every sample carries its kind label; the fixture's
// mapping has its path, build-id and executable range; the sites' functions
// carry their bytes, the inlined helper comes before the function it was
// inlined into (found only when the leaf, a return address too, is looked up
// minus one); every frame is written minus one.
TEST_F(PprofFixture, DecodesBackToTheSnapshotsTotals) {
  test::TempDir out;
  Expected totals;
  const ProfileSpec spec = Spec(&totals);
  const pprof::Profile profile = WriteAndDecode(spec, out.path() + "/heap.pb.gz");
  if (HasFailure()) return;

  const int strings = profile.string_table_size();
  ASSERT_GE(strings, 1);
  EXPECT_EQ(profile.string_table(0), "");
  std::set<std::string> unique(profile.string_table().begin(), profile.string_table().end());
  EXPECT_EQ(unique.size(), static_cast<size_t>(strings)) << "strings are interned once";
  auto valid_string = [&](int64_t index) { return index >= 0 && index < strings; };

  ASSERT_EQ(profile.sample_type_size(), 2);
  EXPECT_EQ(profile.string_table(profile.sample_type(0).type()), "retained_space");
  EXPECT_EQ(profile.string_table(profile.sample_type(0).unit()), "bytes");
  EXPECT_EQ(profile.string_table(profile.sample_type(1).type()), "retained_objects");
  EXPECT_EQ(profile.string_table(profile.sample_type(1).unit()), "count");
  EXPECT_EQ(profile.default_sample_type(), profile.sample_type(0).type());
  EXPECT_EQ(profile.time_nanos(), spec.time_nanos);
  EXPECT_EQ(profile.duration_nanos(), 1000);
  ASSERT_EQ(profile.comment_size(), 1);
  EXPECT_EQ(profile.string_table(profile.comment(0)), "retain test profile");
  EXPECT_EQ(profile.string_table(profile.drop_frames()), spec.drop_frames);

  for (int i = 0; i < profile.mapping_size(); ++i) {
    const pprof::Mapping& mapping = profile.mapping(i);
    EXPECT_EQ(mapping.id(), static_cast<uint64_t>(i + 1));
    EXPECT_TRUE(valid_string(mapping.filename()));
    EXPECT_TRUE(valid_string(mapping.build_id()));
    EXPECT_LT(mapping.memory_start(), mapping.memory_limit());
  }
  for (int i = 0; i < profile.function_size(); ++i) {
    const pprof::Function& function = profile.function(i);
    EXPECT_EQ(function.id(), static_cast<uint64_t>(i + 1));
    EXPECT_TRUE(valid_string(function.name()));
    EXPECT_TRUE(valid_string(function.filename()));
    EXPECT_NE(function.name(), 0) << "functions have names";
  }
  std::set<std::tuple<uint64_t, uint64_t>> location_keys;
  for (int i = 0; i < profile.location_size(); ++i) {
    const pprof::Location& location = profile.location(i);
    EXPECT_EQ(location.id(), static_cast<uint64_t>(i + 1));
    EXPECT_LE(location.mapping_id(), static_cast<uint64_t>(profile.mapping_size()));
    EXPECT_TRUE(location_keys.insert({location.mapping_id(), location.address()}).second)
        << "location " << location.id() << " duplicates another";
    if (location.mapping_id() != 0) {
      const pprof::Mapping& mapping = profile.mapping(location.mapping_id() - 1);
      EXPECT_GE(location.address(), mapping.memory_start());
      EXPECT_LT(location.address(), mapping.memory_limit());
    }
    for (const pprof::Line& line : location.line()) {
      EXPECT_GE(line.function_id(), 1u);
      EXPECT_LE(line.function_id(), static_cast<uint64_t>(profile.function_size()));
    }
  }

  ASSERT_EQ(profile.sample_size(), static_cast<int>(spec.samples.size()));
  Expected sums;
  std::set<std::string> kinds;
  for (int i = 0; i < profile.sample_size(); ++i) {
    const pprof::Sample& sample = profile.sample(i);
    ASSERT_EQ(sample.value_size(), 2);
    sums.bytes += sample.value(0);
    sums.count += sample.value(1);
    ASSERT_EQ(sample.location_id_size(), static_cast<int>(spec.samples[i].stack.size()));
    for (int j = 0; j < sample.location_id_size(); ++j) {
      ASSERT_GE(sample.location_id(j), 1u);
      ASSERT_LE(sample.location_id(j), static_cast<uint64_t>(profile.location_size()));
      // Every frame is a return address, the leaf too (where malloc returns
      // to): written minus one, the call instruction.
      const uint64_t frame = spec.samples[i].stack[j];
      EXPECT_EQ(profile.location(sample.location_id(j) - 1).address(), frame - 1);
    }
    ASSERT_EQ(sample.label_size(), 1);
    EXPECT_EQ(profile.string_table(sample.label(0).key()), "kind");
    ASSERT_TRUE(valid_string(sample.label(0).str()));
    kinds.insert(profile.string_table(sample.label(0).str()));
  }
  EXPECT_EQ(sums.bytes, totals.bytes);
  EXPECT_EQ(sums.count, totals.count);
  EXPECT_TRUE(kinds.count("heap")) << "a heap sample";
  EXPECT_TRUE(kinds.count("mmap-anon")) << "a mmap-anon sample";

  // The fixture's own mapping: path, build-id in lowercase hex, its range.
  const v1::Module* module = FixtureModule();
  ASSERT_NE(module, nullptr) << "the fixture is not in the module table";
  ASSERT_GE(module->executable_segments_size(), 1);
  int fixture_mappings = 0;
  for (const pprof::Mapping& mapping : profile.mapping()) {
    if (profile.string_table(mapping.filename()) != module->path()) continue;
    ++fixture_mappings;
    EXPECT_EQ(profile.string_table(mapping.build_id()), absl::BytesToHexString(module->build_id()));
    EXPECT_EQ(mapping.memory_start(), module->executable_segments(0).start());
    EXPECT_EQ(mapping.file_offset(), module->executable_segments(0).file_offset());
    // Every location in it has a function (but _start has no source file).
    EXPECT_TRUE(mapping.has_functions()) << "the fixture has debug information";
  }
  EXPECT_EQ(fixture_mappings, 1);
  // The executable's mapping comes first: pprof takes it for the main binary.
  ASSERT_GE(profile.mapping_size(), 1);
  EXPECT_EQ(profile.string_table(profile.mapping(0).filename()), module->path());

  // Bytes and counts by leaf function (innermost line of the first location).
  const auto functions = FunctionsByLocation(profile);
  std::map<std::string, Expected> by_leaf;
  bool saw_inline = false;
  for (const pprof::Sample& sample : profile.sample()) {
    if (sample.location_id_size() == 0) continue;
    auto it = functions.find(sample.location_id(0));
    if (it == functions.end()) continue;
    by_leaf[it->second[0]].bytes += sample.value(0);
    by_leaf[it->second[0]].count += sample.value(1);
    if (it->second[0] == "pprof_inlined_fill") {
      ASSERT_GE(it->second.size(), 2u) << "the inlined helper has its caller as a second line";
      EXPECT_EQ(it->second[1], "pprof_site_cache");
      saw_inline = true;
    }
  }
  EXPECT_TRUE(saw_inline);
  for (const auto& [function, expected] : *expected_) {
    EXPECT_EQ(by_leaf[function].bytes, expected.bytes) << function;
    EXPECT_EQ(by_leaf[function].count, expected.count) << function;
  }
}

// --- the independent reader -------------------------------------------------

// Go's `go` command: from PATH, else where Debian's golang-go puts it.
std::string FindGo() {
  const char* path = std::getenv("PATH");
  std::vector<std::string> dirs = absl::StrSplit(path ? path : "", ':', absl::SkipEmpty());
  dirs.push_back("/usr/lib/go/bin");
  for (const std::string& dir : dirs) {
    const std::string candidate = dir + "/go";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// `go tool pprof ARGS...`, offline: no symbolization, no network, its
// caches and settings in `home`.
test::RunResult GoPprof(const std::string& go, const test::TempDir& home,
                        const std::vector<std::string>& args) {
  test::RunOptions options;
  options.argv = {go, "tool", "pprof"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = {{"HOME", home.path()},
                 {"GOCACHE", home.path() + "/gocache"},
                 {"GOPATH", home.path() + "/gopath"},
                 {"GOFLAGS", "-mod=mod"},
                 {"GOPROXY", "off"},
                 {"GOTOOLCHAIN", "local"},
                 {"PPROF_TMPDIR", home.path()},
                 {"PPROF_BINARY_PATH", home.path() + "/no-binaries"}};
  options.timeout_seconds = 60;
  return test::Run(options);
}

// A profile as `pprof -raw` prints it (the Go profile package's String()).
struct RawProfile {
  struct Sample {
    std::vector<int64_t> values;
    std::vector<uint64_t> location_ids;
    std::vector<std::string> labels;
  };
  struct Mapping {
    uint64_t start = 0, limit = 0, offset = 0;
    std::string file, build_id;
  };
  std::vector<std::string> sample_types;
  std::vector<Sample> samples;
  std::map<uint64_t, std::vector<std::string>> functions;  // by location id, innermost first
  std::map<uint64_t, uint64_t> addresses;                  // by location id
  std::map<uint64_t, Mapping> mappings;                    // by id
};

// The function name of a -raw location line's "NAME FILE:LINE s=START".
std::string RawFunctionName(std::string text) {
  static const std::regex kStart(" s=-?[0-9]+$");
  text = std::regex_replace(text, kStart, "");
  const size_t space = text.rfind(' ');  // before FILE:LINE
  return space == std::string::npos ? text : text.substr(0, space);
}

RawProfile ParseRaw(const std::string& text) {
  static const std::regex kSample(R"(^\s*((?:-?[0-9]+\s+)*-?[0-9]+):\s*([0-9 ]*)$)");
  static const std::regex kLocation(R"(^\s*([0-9]+): (0x[0-9a-f]+) M=([0-9]+) ?(.*)$)");
  static const std::regex kMapping(
      R"(^([0-9]+): (0x[0-9a-f]+)/(0x[0-9a-f]+)/(0x[0-9a-f]+) (\S*) ?(\S*).*$)");
  RawProfile raw;
  enum { kHeader, kSampleTypes, kSamples, kLocations, kMappings } section = kHeader;
  uint64_t location = 0;
  std::istringstream lines(text);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (line == "Samples:") {
      section = kSampleTypes;
    } else if (line == "Locations") {
      section = kLocations;
    } else if (line == "Mappings") {
      section = kMappings;
    } else if (section == kSampleTypes) {
      raw.sample_types = absl::StrSplit(line, ' ', absl::SkipEmpty());
      section = kSamples;
    } else if (section == kSamples && std::regex_match(line, m, kSample)) {
      RawProfile::Sample sample;
      for (absl::string_view v : absl::StrSplit(m[1].str(), ' ', absl::SkipEmpty())) {
        sample.values.push_back(std::strtoll(std::string(v).c_str(), nullptr, 10));
      }
      for (absl::string_view id : absl::StrSplit(m[2].str(), ' ', absl::SkipEmpty())) {
        sample.location_ids.push_back(std::strtoull(std::string(id).c_str(), nullptr, 10));
      }
      raw.samples.push_back(std::move(sample));
    } else if (section == kSamples && !raw.samples.empty()) {
      const size_t first = line.find_first_not_of(' ');
      if (first != std::string::npos) raw.samples.back().labels.push_back(line.substr(first));
    } else if (section == kLocations && std::regex_match(line, m, kLocation)) {
      location = std::stoull(m[1].str());
      raw.addresses[location] = std::stoull(m[2].str(), nullptr, 16);
      raw.functions[location];  // present even when not symbolized
      if (m[4].str() != "???" && !m[4].str().empty()) {
        raw.functions[location].push_back(RawFunctionName(m[4].str()));
      }
    } else if (section == kLocations && location != 0) {
      const size_t first = line.find_first_not_of(' ');
      if (first != std::string::npos) {
        raw.functions[location].push_back(RawFunctionName(line.substr(first)));
      }
    } else if (section == kMappings && std::regex_match(line, m, kMapping)) {
      RawProfile::Mapping& mapping = raw.mappings[std::stoull(m[1].str())];
      mapping.start = std::stoull(m[2].str(), nullptr, 16);
      mapping.limit = std::stoull(m[3].str(), nullptr, 16);
      mapping.offset = std::stoull(m[4].str(), nullptr, 16);
      mapping.file = m[5].str();
      mapping.build_id = m[6].str();
    }
  }
  return raw;
}

// Proves (against an independent decoder, Go's pprof): the file opens; the
// sample types, the samples and their values (summing to the snapshot's
// totals), the kind labels, every site function with its exact bytes and
// count, the inlined helper with its caller, and the fixture's mapping with
// path and build-id are what pprof reads. `-traces` shows the same call
// paths by name.
TEST_F(PprofFixture, GoPprofReadsTheSameProfile) {
  const std::string go = FindGo();
  ASSERT_FALSE(go.empty())
      << "Go's pprof, the independent reader of this test, is not installed: "
         "install it with `apt-get install -y golang-go` (it provides `go tool pprof`)";
  test::TempDir home;
  Expected totals;
  const ProfileSpec spec = Spec(&totals);
  const std::string path = home.path() + "/heap.pb.gz";
  Symbolizer symbolizer;
  ASSERT_TRUE(WritePprofFile(spec, symbolizer, path).ok());

  const test::RunResult raw_run = GoPprof(go, home, {"-raw", "-symbolize=none", path});
  ASSERT_EQ(raw_run.exit_code, 0) << Describe(raw_run);
  const RawProfile raw = ParseRaw(raw_run.stdout_data);
  const std::string context = "\n--- go tool pprof -raw ---\n" + raw_run.stdout_data;

  ASSERT_EQ(raw.sample_types.size(), 2u) << context;
  EXPECT_EQ(raw.sample_types[0], "retained_space/bytes[dflt]") << context;
  EXPECT_EQ(raw.sample_types[1], "retained_objects/count") << context;
  ASSERT_EQ(raw.samples.size(), spec.samples.size()) << context;
  Expected sums;
  std::map<std::string, Expected> by_leaf;
  bool saw_inline = false;
  for (const RawProfile::Sample& sample : raw.samples) {
    ASSERT_EQ(sample.values.size(), 2u) << context;
    sums.bytes += sample.values[0];
    sums.count += sample.values[1];
    EXPECT_EQ(sample.labels.size(), 1u) << context;
    if (!sample.labels.empty()) {
      EXPECT_THAT(sample.labels[0], ::testing::MatchesRegex(R"(kind:\[(heap|mmap-anon)\])"));
    }
    if (sample.location_ids.empty()) continue;
    const std::vector<std::string>& leaf = raw.functions.at(sample.location_ids[0]);
    if (leaf.empty()) continue;
    by_leaf[leaf[0]].bytes += sample.values[0];
    by_leaf[leaf[0]].count += sample.values[1];
    if (leaf[0] == "pprof_inlined_fill") {
      ASSERT_GE(leaf.size(), 2u) << context;
      EXPECT_EQ(leaf[1], "pprof_site_cache") << context;
      saw_inline = true;
    }
  }
  EXPECT_EQ(sums.bytes, totals.bytes) << context;
  EXPECT_EQ(sums.count, totals.count) << context;
  EXPECT_TRUE(saw_inline) << context;
  ASSERT_EQ(expected_->size(), 3u);
  for (const auto& [function, expected] : *expected_) {
    EXPECT_EQ(by_leaf[function].bytes, expected.bytes) << function << context;
    EXPECT_EQ(by_leaf[function].count, expected.count) << function << context;
  }

  const v1::Module* module = FixtureModule();
  ASSERT_NE(module, nullptr);
  int fixture_mappings = 0;
  for (const auto& [id, mapping] : raw.mappings) {
    if (mapping.file != module->path()) continue;
    ++fixture_mappings;
    EXPECT_EQ(mapping.build_id, absl::BytesToHexString(module->build_id())) << context;
    EXPECT_EQ(mapping.start, module->executable_segments(0).start()) << context;
  }
  EXPECT_EQ(fixture_mappings, 1) << context;

  // -traces: one block per sample, leaf first, names as pprof shows them.
  const test::RunResult traces =
      GoPprof(go, home, {"-traces", "-symbolize=none", "-sample_index=retained_objects", path});
  ASSERT_EQ(traces.exit_code, 0) << Describe(traces);
  const std::string& out = traces.stdout_data;
  EXPECT_THAT(out, HasSubstr("Type: retained_objects")) << out;
  for (const auto& [function, expected] : *expected_) {
    // "<count>   <leaf function>" opens the site's block.
    const std::regex opens(
        absl::StrCat(R"((^|\n)\s*)", expected.count, R"(\s+)", function, R"((\s+\(inline\))?\n)"));
    EXPECT_TRUE(std::regex_search(out, opens))
        << function << " with " << expected.count << " objects\n--- go tool pprof -traces ---\n"
        << out;
  }
  EXPECT_THAT(out, HasSubstr("pprof_site_cache")) << out;
  EXPECT_THAT(out, HasSubstr("main")) << out;
}

// --- invalid input ---------------------------------------------------------

// Proves: a spec the format cannot express is refused with InvalidArgument
// and a message that says why; a file that cannot be written names its path.
TEST(PprofWriterTest, RefusesInvalidSpecsAndUnwritablePaths) {
  Symbolizer symbolizer;
  v1::Snapshot snapshot;
  ProfileSpec spec;
  EXPECT_EQ(EncodePprof(spec, symbolizer).status().code(), absl::StatusCode::kInvalidArgument);

  spec.sample_types = {{"space", "bytes"}};
  spec.default_sample_type = 1;
  EXPECT_THAT(std::string(EncodePprof(spec, symbolizer).status().message()),
              HasSubstr("default_sample_type"));
  spec.default_sample_type = 0;

  ProfileSample sample;
  sample.values = {1};
  spec.samples = {sample};
  EXPECT_THAT(std::string(EncodePprof(spec, symbolizer).status().message()),
              HasSubstr("no snapshot"));
  spec.samples[0].snapshot = &snapshot;
  spec.samples[0].values = {1, 2};
  EXPECT_THAT(std::string(EncodePprof(spec, symbolizer).status().message()),
              HasSubstr("2 values for 1 sample types"));
  spec.samples[0].values = {1};
  EXPECT_TRUE(EncodePprof(spec, symbolizer).ok());

  const absl::Status status = WritePprofFile(spec, symbolizer, "/nonexistent-dir/x.pb.gz");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("/nonexistent-dir/x.pb.gz"));
}

// Proves (on snapshots built in memory, modules whose files do not exist so
// nothing is symbolized): unsymbolized addresses still get a Location with
// their mapping and address; an address outside every module gets mapping
// 0; two snapshots with the same module at the same place share one Mapping
// and one Location per address; a mapping spans all executable segments;
// every frame is written minus one (the call instruction).
TEST(PprofWriterTest, MappingsAndLocationsWithoutSymbols) {
  v1::Snapshot a;
  v1::Module* module = a.add_modules();
  module->set_id(1);
  module->set_path("/nonexistent/libgone.so");
  module->set_build_id(std::string("\xab\x01\xcd", 3));
  module->set_load_bias(0x7f0000000000);
  v1::Segment* text = module->add_executable_segments();
  text->set_start(0x7f0000001000);
  text->set_end(0x7f0000002000);
  text->set_file_offset(0x1000);
  v1::Segment* more = module->add_executable_segments();
  more->set_start(0x7f0000003000);
  more->set_end(0x7f0000004000);
  more->set_file_offset(0x3000);
  const v1::Snapshot b = a;

  ProfileSpec spec;
  spec.sample_types = {{"space", "bytes"}};
  spec.samples.resize(3);
  spec.samples[0] = {&a, {0x7f0000001101, 0x7f0000003201, 0x10}, {5}, {}};
  spec.samples[1] = {&b, {0x7f0000001101, 0x7f0000003201}, {7}, {}};
  // The same return addresses in the other order: the same two locations.
  spec.samples[2] = {&b, {0x7f0000003201, 0x7f0000001101}, {9}, {}};
  Symbolizer symbolizer;
  absl::StatusOr<std::string> bytes = EncodePprof(spec, symbolizer);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  pprof::Profile profile;
  ASSERT_TRUE(profile.ParseFromString(*bytes));

  ASSERT_EQ(profile.mapping_size(), 1);
  const pprof::Mapping& mapping = profile.mapping(0);
  EXPECT_EQ(mapping.memory_start(), 0x7f0000001000u);
  EXPECT_EQ(mapping.memory_limit(), 0x7f0000004000u);
  EXPECT_EQ(mapping.file_offset(), 0x1000u);
  EXPECT_EQ(profile.string_table(mapping.filename()), "/nonexistent/libgone.so");
  EXPECT_EQ(profile.string_table(mapping.build_id()), "ab01cd");
  EXPECT_FALSE(mapping.has_functions());

  // Call instructions (return address - 1); 0x10 - 1 lies in no module.
  ASSERT_EQ(profile.location_size(), 3) << profile.DebugString();
  std::map<uint64_t, uint64_t> mapping_of;
  for (const pprof::Location& location : profile.location()) {
    EXPECT_EQ(location.line_size(), 0);
    mapping_of[location.address()] = location.mapping_id();
  }
  EXPECT_EQ(mapping_of.at(0x7f0000001100), 1u);
  EXPECT_EQ(mapping_of.at(0x7f0000003200), 1u);
  EXPECT_EQ(mapping_of.at(0xf), 0u);
  ASSERT_EQ(profile.sample_size(), 3);
  EXPECT_EQ(profile.sample(0).location_id(0), profile.sample(1).location_id(0));
  EXPECT_EQ(profile.sample(0).location_id(1), profile.sample(1).location_id(1));
  EXPECT_EQ(profile.sample(2).location_id(0), profile.sample(0).location_id(1));
  EXPECT_EQ(profile.sample(2).location_id(1), profile.sample(0).location_id(0));
  EXPECT_EQ(profile.function_size(), 0);
}

}  // namespace
}  // namespace retain::tool
