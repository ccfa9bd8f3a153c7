// Tests for tools/lib/symbolizer: real programs (tests/fixtures/sym_program.cc
// and its shared library, built with -g -O2) run under the shim, and the
// stacks of their snapshots symbolized: names, files, lines and inlined
// frames; files replaced or gone since the snapshot; a sysroot; separate
// debug files made with objcopy; and that the caches are used (how fast
// they are is bench/symbolizer_bench.cc's).
#include "tools/lib/symbolizer.h"

#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "retain.pb.h"
#include "tests/support/process_modules.h"
#include "tests/support/test_support.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {
namespace {

using test::FixtureLibraryPath;
using test::FixturePath;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::StartsWith;

constexpr uint64_t kNamedSize = 1001;
constexpr uint64_t kInlinedSize = 1002;
constexpr uint64_t kLibrarySize = 1003;
constexpr uint64_t kHiddenSize = 1004;
constexpr uint64_t kLambdaSize = 1005;

std::string Basename(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// "SYM-LINE name" markers of a fixture source file: name -> line number.
std::map<std::string, int> MarkedLines(const std::string& file) {
  std::map<std::string, int> lines;
  std::ifstream in(test::SourceRoot() + "/tests/fixtures/" + file);
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    size_t at = text.find("SYM-LINE ");
    if (at != std::string::npos) lines[text.substr(at + 9)] = number;
  }
  EXPECT_FALSE(lines.empty()) << "no SYM-LINE markers in " << file;
  return lines;
}

void CopyFile(const std::string& from, const std::string& to) {
  std::filesystem::create_directories(std::filesystem::path(to).parent_path());
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

int Shell(const std::string& command) {
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs `program` under the shim and returns the snapshot it wrote at exit.
v1::Snapshot RunUnderShim(const std::string& program) {
  TempDir out;
  test::RunOptions options;
  options.argv = {program};
  options.env = {{"RETAIN_DIR", out.path()}};
  options.preload = true;
  test::RunResult result = test::Run(options);
  EXPECT_EQ(result.exit_code, 0) << result.stderr_data;
  std::vector<std::string> snapshots = test::ListSnapshots(out.path());
  EXPECT_THAT(snapshots, SizeIs(1));
  if (snapshots.empty()) return v1::Snapshot();
  return test::LoadSnapshot(snapshots[0]);
}

// The stack of the heap allocation of `size` bytes.
const v1::Stack* StackOfSize(const v1::Snapshot& snapshot, uint64_t size) {
  for (const Allocation& row : FlattenAllocations(snapshot)) {
    if (row.size == size && row.kind == v1::KIND_HEAP) return FindStack(snapshot, row.stack_id);
  }
  ADD_FAILURE() << "no heap allocation of " << size << " bytes";
  return nullptr;
}

std::vector<const SymbolizedAddress*> SymbolizeStack(Symbolizer& symbolizer,
                                                     const v1::Snapshot& snapshot,
                                                     const v1::Stack& stack) {
  std::vector<const SymbolizedAddress*> result;
  for (int i = 0; i < stack.frames_size(); ++i) {
    result.push_back(&symbolizer.Symbolize(snapshot, stack.frames(i), i));
  }
  return result;
}

std::string Describe(const SymbolizedAddress& address) {
  std::string text = absl::StrCat(address.module, "+0x", absl::Hex(address.module_offset), ":");
  for (const SourceFrame& frame : address.frames) {
    absl::StrAppend(&text, " [", frame.function, " ", frame.file, ":", frame.line,
                    frame.inlined ? " inlined" : "", "]");
  }
  return text;
}

std::string DescribeStack(const std::vector<const SymbolizedAddress*>& stack) {
  std::string text;
  for (const SymbolizedAddress* address : stack) absl::StrAppend(&text, "\n  ", Describe(*address));
  return text;
}

// A copy of `snapshot` whose module at `old_path` is recorded at `new_path`.
v1::Snapshot WithModulePath(v1::Snapshot snapshot, const std::string& old_path,
                            const std::string& new_path) {
  for (v1::Module& module : *snapshot.mutable_modules()) {
    if (module.path() == old_path) module.set_path(new_path);
  }
  return snapshot;
}

const v1::Module* ModuleNamed(const v1::Snapshot& snapshot, const std::string& base) {
  for (const v1::Module& module : snapshot.modules()) {
    if (Basename(module.path()) == base) return &module;
  }
  return nullptr;
}

// One run of sym_program under the shim for the whole suite.
class SymbolizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    snapshot_ = new v1::Snapshot(RunUnderShim(FixturePath("sym_program")));
  }
  static void TearDownTestSuite() {
    delete snapshot_;
    snapshot_ = nullptr;
  }
  static const v1::Snapshot& snapshot() { return *snapshot_; }

  static v1::Snapshot* snapshot_;
};

v1::Snapshot* SymbolizerTest::snapshot_ = nullptr;

TEST_F(SymbolizerTest, NoinlineFunctionHasItsFullNameFileAndLine) {
  const std::map<std::string, int> lines = MarkedLines("sym_program.cc");
  const v1::Stack* stack = StackOfSize(snapshot(), kNamedSize);
  ASSERT_NE(stack, nullptr);
  ASSERT_GE(stack->frames_size(), 2);
  Symbolizer symbolizer;
  std::vector<const SymbolizedAddress*> frames = SymbolizeStack(symbolizer, snapshot(), *stack);
  SCOPED_TRACE(DescribeStack(frames));

  const SymbolizedAddress& site = *frames[0];
  EXPECT_EQ(site.module, FixturePath("sym_program"));
  ASSERT_THAT(site.frames, SizeIs(1));
  EXPECT_EQ(site.frames[0].function, "symfix::NamedAllocate(unsigned long, symfix::Tag const&)");
  EXPECT_EQ(Basename(site.frames[0].file), "sym_program.cc");
  EXPECT_EQ(site.frames[0].line, lines.at("named-malloc"));
  EXPECT_FALSE(site.frames[0].inlined);

  const SymbolizedAddress& caller = *frames[1];
  ASSERT_THAT(caller.frames, SizeIs(1));
  EXPECT_EQ(caller.frames[0].function, "main");
  EXPECT_EQ(Basename(caller.frames[0].file), "sym_program.cc");
  EXPECT_THAT(symbolizer.TakeWarnings(), IsEmpty());
}

TEST_F(SymbolizerTest, InlinedFunctionComesFirstThenItsCaller) {
  const std::map<std::string, int> lines = MarkedLines("sym_program.cc");
  const v1::Stack* stack = StackOfSize(snapshot(), kInlinedSize);
  ASSERT_NE(stack, nullptr);
  Symbolizer symbolizer;
  std::vector<const SymbolizedAddress*> frames = SymbolizeStack(symbolizer, snapshot(), *stack);
  SCOPED_TRACE(DescribeStack(frames));

  const SymbolizedAddress& site = *frames[0];
  ASSERT_THAT(site.frames, SizeIs(2));
  EXPECT_EQ(site.frames[0].function, "symfix::InlinedAllocate(unsigned long)");
  EXPECT_EQ(Basename(site.frames[0].file), "sym_program.cc");
  EXPECT_EQ(site.frames[0].line, lines.at("inlined-malloc"));
  EXPECT_TRUE(site.frames[0].inlined);
  EXPECT_EQ(site.frames[1].function, "symfix::InlineCaller(unsigned long)");
  EXPECT_EQ(Basename(site.frames[1].file), "sym_program.cc");
  EXPECT_EQ(site.frames[1].line, lines.at("inline-call"));
  EXPECT_FALSE(site.frames[1].inlined);
  ASSERT_GE(frames.size(), 2u);
  ASSERT_THAT(frames[1]->frames, SizeIs(1));
  EXPECT_EQ(frames[1]->frames[0].function, "main");
}

// GCC gives functions with internal linkage no DW_AT_linkage_name: the
// containing function is named from the symbol table (qualified, with
// parameters) and keeps its DWARF file and line.
TEST_F(SymbolizerTest, AnonymousNamespaceFunctionHasItsQualifiedName) {
  const std::map<std::string, int> lines = MarkedLines("sym_program.cc");
  const v1::Stack* stack = StackOfSize(snapshot(), kHiddenSize);
  ASSERT_NE(stack, nullptr);
  Symbolizer symbolizer;
  const SymbolizedAddress& site = symbolizer.Symbolize(snapshot(), stack->frames(0), 0);
  SCOPED_TRACE(Describe(site));
  ASSERT_THAT(site.frames, SizeIs(1));
  EXPECT_EQ(site.frames[0].function,
            "symfix::(anonymous namespace)::HiddenAllocate(unsigned long)");
  EXPECT_EQ(site.frames[0].line, lines.at("hidden-malloc"));
}

// An inlined lambda: its frame is named after the enclosing function, then
// the caller's frame at the line that calls the lambda.
TEST_F(SymbolizerTest, InlinedLambdaIsNamedAfterItsEnclosingFunction) {
  const std::map<std::string, int> lines = MarkedLines("sym_program.cc");
  const v1::Stack* stack = StackOfSize(snapshot(), kLambdaSize);
  ASSERT_NE(stack, nullptr);
  Symbolizer symbolizer;
  const SymbolizedAddress& site = symbolizer.Symbolize(snapshot(), stack->frames(0), 0);
  SCOPED_TRACE(Describe(site));
  ASSERT_THAT(site.frames, SizeIs(2));
  EXPECT_THAT(site.frames[0].function, StartsWith("symfix::LambdaCaller(unsigned long)::{lambda"));
  EXPECT_THAT(site.frames[0].function, HasSubstr("operator()"));
  EXPECT_EQ(site.frames[0].line, lines.at("lambda-malloc"));
  EXPECT_TRUE(site.frames[0].inlined);
  EXPECT_EQ(site.frames[1].function, "symfix::LambdaCaller(unsigned long)");
  EXPECT_EQ(site.frames[1].line, lines.at("lambda-call"));
}

TEST_F(SymbolizerTest, SharedLibraryFrameResolvesInItsOwnModule) {
  const std::map<std::string, int> lines = MarkedLines("sym_lib.cc");
  const v1::Stack* stack = StackOfSize(snapshot(), kLibrarySize);
  ASSERT_NE(stack, nullptr);
  Symbolizer symbolizer;
  std::vector<const SymbolizedAddress*> frames = SymbolizeStack(symbolizer, snapshot(), *stack);
  SCOPED_TRACE(DescribeStack(frames));

  const SymbolizedAddress& site = *frames[0];
  EXPECT_EQ(Basename(site.module), "libsym_lib.so");
  ASSERT_THAT(site.frames, SizeIs(1));
  EXPECT_EQ(site.frames[0].function, "symlib::LibraryAllocate(unsigned long)");
  EXPECT_EQ(Basename(site.frames[0].file), "sym_lib.cc");
  EXPECT_EQ(site.frames[0].line, lines.at("library-malloc"));
  EXPECT_THAT(ModuleOffsetString(site, stack->frames(0)), StartsWith("libsym_lib.so+0x"));
  ASSERT_GE(frames.size(), 2u);
  EXPECT_EQ(Basename(frames[1]->module), "sym_program");
  ASSERT_THAT(frames[1]->frames, SizeIs(1));
  EXPECT_EQ(frames[1]->frames[0].function, "main");
}

// libc has no DWARF here (no libc6-dbg): its frames are named from its
// dynamic symbol table, without file or line.
TEST_F(SymbolizerTest, LibraryWithoutDebugInfoGetsSymbolNames) {
  const v1::Module* libc = ModuleNamed(snapshot(), "libc.so.6");
  ASSERT_NE(libc, nullptr);
  std::string hex = absl::BytesToHexString(libc->build_id());
  struct stat st;
  if (hex.size() > 2 &&
      stat(absl::StrCat("/usr/lib/debug/.build-id/", hex.substr(0, 2), "/", hex.substr(2), ".debug")
               .c_str(),
           &st) == 0) {
    GTEST_SKIP() << "libc debug information is installed";
  }
  const v1::Stack* stack = StackOfSize(snapshot(), kNamedSize);
  ASSERT_NE(stack, nullptr);
  Symbolizer symbolizer;
  std::vector<const SymbolizedAddress*> frames = SymbolizeStack(symbolizer, snapshot(), *stack);
  SCOPED_TRACE(DescribeStack(frames));
  bool found = false;
  for (const SymbolizedAddress* address : frames) {
    if (address->module != libc->path() || address->frames.empty()) continue;
    ASSERT_THAT(address->frames, SizeIs(1));
    EXPECT_THAT(address->frames[0].function, HasSubstr("__libc_start_main"));
    EXPECT_EQ(address->frames[0].file, "");
    EXPECT_EQ(address->frames[0].line, 0);
    found = true;
  }
  EXPECT_TRUE(found) << "no libc frame with a symbol";
  EXPECT_THAT(symbolizer.TakeWarnings(), IsEmpty());
}

// A library without DWARF or .symtab (strip --strip-all): its exported
// functions are still named, from .dynsym, without file or line.
TEST_F(SymbolizerTest, StrippedLibraryGetsDynamicSymbolNames) {
  const std::string library = FixtureLibraryPath("sym_lib");
  TempDir root;
  CopyFile(library, root.path() + library);
  ASSERT_EQ(Shell(absl::StrCat("objcopy --strip-all '", root.path(), library, "'")), 0);
  const v1::Stack* stack = StackOfSize(snapshot(), kLibrarySize);
  ASSERT_NE(stack, nullptr);
  SymbolizerOptions options;
  options.sysroot = root.path();
  Symbolizer symbolizer(options);
  const SymbolizedAddress& site = symbolizer.Symbolize(snapshot(), stack->frames(0), 0);
  SCOPED_TRACE(Describe(site));
  ASSERT_THAT(site.frames, SizeIs(1));
  EXPECT_EQ(site.frames[0].function, "symlib::LibraryAllocate(unsigned long)");
  EXPECT_EQ(site.frames[0].file, "");
  EXPECT_EQ(site.frames[0].line, 0);
  EXPECT_FALSE(site.frames[0].inlined);
}

// clang emits no .debug_aranges by default; compilation units are then
// found from their own address ranges.
TEST_F(SymbolizerTest, DwarfWithoutArangesStillResolves) {
  const std::string exe = FixturePath("sym_program");
  TempDir dir;
  const std::string copy = dir.path() + "/sym_program";
  ASSERT_EQ(Shell(absl::StrCat("objcopy --remove-section .debug_aranges '", exe, "' '", copy, "'")),
            0);
  v1::Snapshot moved = WithModulePath(snapshot(), exe, copy);
  const std::map<std::string, int> lines = MarkedLines("sym_program.cc");
  const v1::Stack* stack = StackOfSize(moved, kInlinedSize);
  ASSERT_NE(stack, nullptr);
  Symbolizer symbolizer;
  const SymbolizedAddress& site = symbolizer.Symbolize(moved, stack->frames(0), 0);
  SCOPED_TRACE(Describe(site));
  ASSERT_THAT(site.frames, SizeIs(2));
  EXPECT_EQ(site.frames[0].line, lines.at("inlined-malloc"));
  EXPECT_EQ(site.frames[1].function, "symfix::InlineCaller(unsigned long)");
  EXPECT_EQ(site.frames[1].line, lines.at("inline-call"));
  EXPECT_THAT(symbolizer.TakeWarnings(), IsEmpty());
}

// Split DWARF (-gsplit-dwarf): the executable has skeleton units only; the
// functions and inlined instances are read from the .dwo file.
TEST(SymbolizerSplitDwarfTest, InlinedFramesComeFromTheDwoFile) {
  v1::Snapshot snapshot = RunUnderShim(FixturePath("sym_program_split"));
  const std::map<std::string, int> lines = MarkedLines("sym_program.cc");
  const v1::Stack* stack = StackOfSize(snapshot, kInlinedSize);
  ASSERT_NE(stack, nullptr);
  Symbolizer symbolizer;
  const SymbolizedAddress& site = symbolizer.Symbolize(snapshot, stack->frames(0), 0);
  SCOPED_TRACE(Describe(site));
  ASSERT_THAT(site.frames, SizeIs(2));
  EXPECT_EQ(site.frames[0].function, "symfix::InlinedAllocate(unsigned long)");
  EXPECT_EQ(site.frames[0].line, lines.at("inlined-malloc"));
  EXPECT_TRUE(site.frames[0].inlined);
  EXPECT_EQ(site.frames[1].function, "symfix::InlineCaller(unsigned long)");
  EXPECT_EQ(Basename(site.frames[1].file), "sym_program.cc");
  EXPECT_EQ(site.frames[1].line, lines.at("inline-call"));
}

// Every recorded frame, frames[0] included, is a return address (the shim
// records the instruction after each call), so each is looked up one byte
// earlier, inside the call: frames[0] at its own address would be the
// epilogue after `call malloc`. Results are cached: a repeated call returns
// the same object.
TEST_F(SymbolizerTest, EveryFrameIsLookedUpAsAReturnAddressAndCached) {
  const std::map<std::string, int> lines = MarkedLines("sym_program.cc");
  const v1::Stack* stack = StackOfSize(snapshot(), kNamedSize);
  ASSERT_NE(stack, nullptr);
  Symbolizer symbolizer;
  const SymbolizedAddress& first = symbolizer.Symbolize(snapshot(), stack->frames(0), 0);
  ASSERT_THAT(first.frames, SizeIs(1));
  EXPECT_EQ(first.frames[0].line, lines.at("named-malloc"));
  EXPECT_EQ(&symbolizer.Symbolize(snapshot(), stack->frames(0), 0), &first);
  EXPECT_EQ(&symbolizer.Symbolize(snapshot(), stack->frames(0), 7), &first);
  // A copy of the snapshot (another object, same modules) shares the cache.
  v1::Snapshot copy = snapshot();
  EXPECT_EQ(&symbolizer.Symbolize(copy, stack->frames(0), 0), &first);
}

// The same module loaded elsewhere (another run, ASLR) gives the same
// frames at the same module offset.
TEST_F(SymbolizerTest, ModuleOffsetIsIndependentOfTheLoadBias) {
  const v1::Stack* stack = StackOfSize(snapshot(), kLibrarySize);
  ASSERT_NE(stack, nullptr);
  v1::Snapshot moved = snapshot();
  constexpr uint64_t kShift = 0x100000000;
  for (v1::Module& module : *moved.mutable_modules()) {
    if (Basename(module.path()) != "libsym_lib.so") continue;
    module.set_load_bias(module.load_bias() + kShift);
    for (v1::Segment& segment : *module.mutable_executable_segments()) {
      segment.set_start(segment.start() + kShift);
      segment.set_end(segment.end() + kShift);
    }
  }
  Symbolizer symbolizer;
  const SymbolizedAddress& original = symbolizer.Symbolize(snapshot(), stack->frames(0), 0);
  const SymbolizedAddress& shifted = symbolizer.Symbolize(moved, stack->frames(0) + kShift, 0);
  EXPECT_EQ(original.module_offset, shifted.module_offset);
  ASSERT_THAT(shifted.frames, SizeIs(1));
  EXPECT_EQ(shifted.frames[0].function, "symlib::LibraryAllocate(unsigned long)");
}

// A file rebuilt since the snapshot: its addresses would resolve to
// whatever now sits at those offsets, so they are shown as module+offset.
TEST_F(SymbolizerTest, ReplacedFileWarnsOnceAndShowsModuleOffset) {
  TempDir dir;
  const std::string exe = dir.path() + "/sym_program";
  CopyFile(FixturePath("sym_program"), exe);
  v1::Snapshot snapshot = RunUnderShim(exe);
  const v1::Module* module = ModuleNamed(snapshot, "sym_program");
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->path(), exe);
  CopyFile(FixtureLibraryPath("sym_lib"), exe);  // another build-id

  Symbolizer symbolizer;
  for (uint64_t size : {kNamedSize, kInlinedSize, kLibrarySize}) {
    const v1::Stack* stack = StackOfSize(snapshot, size);
    ASSERT_NE(stack, nullptr);
    std::vector<const SymbolizedAddress*> frames = SymbolizeStack(symbolizer, snapshot, *stack);
    SCOPED_TRACE(DescribeStack(frames));
    for (int i = 0; i < stack->frames_size(); ++i) {
      if (frames[i]->module != exe) continue;
      EXPECT_THAT(frames[i]->frames, IsEmpty());
      EXPECT_EQ(ModuleOffsetString(*frames[i], stack->frames(i)),
                absl::StrCat("sym_program+0x", absl::Hex(stack->frames(i) - module->load_bias())));
    }
    if (size == kLibrarySize) {  // the library is still the same file
      ASSERT_THAT(frames[0]->frames, SizeIs(1));
      EXPECT_EQ(frames[0]->frames[0].function, "symlib::LibraryAllocate(unsigned long)");
    }
  }
  std::vector<std::string> warnings = symbolizer.TakeWarnings();
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr(exe));
  EXPECT_THAT(warnings[0], HasSubstr("build-id"));
  EXPECT_THAT(warnings[0], HasSubstr("module+offset"));
  EXPECT_THAT(symbolizer.TakeWarnings(), IsEmpty());
  symbolizer.Symbolize(snapshot, StackOfSize(snapshot, kNamedSize)->frames(0), 0);
  EXPECT_THAT(symbolizer.TakeWarnings(), IsEmpty());
}

TEST_F(SymbolizerTest, MissingFileWarnsOnceAndShowsModuleOffset) {
  TempDir dir;
  const std::string exe = dir.path() + "/sym_program";
  CopyFile(FixturePath("sym_program"), exe);
  v1::Snapshot snapshot = RunUnderShim(exe);
  ASSERT_EQ(unlink(exe.c_str()), 0);

  Symbolizer symbolizer;
  for (uint64_t size : {kNamedSize, kInlinedSize}) {
    const v1::Stack* stack = StackOfSize(snapshot, size);
    ASSERT_NE(stack, nullptr);
    const SymbolizedAddress& site = symbolizer.Symbolize(snapshot, stack->frames(0), 0);
    EXPECT_EQ(site.module, exe);
    EXPECT_THAT(site.frames, IsEmpty());
    EXPECT_THAT(ModuleOffsetString(site, stack->frames(0)), StartsWith("sym_program+0x"));
  }
  std::vector<std::string> warnings = symbolizer.TakeWarnings();
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr(exe));
  EXPECT_THAT(warnings[0], HasSubstr("cannot open"));
}

// A module path can name anything on the reading machine. Before, a FIFO
// there blocked retain-diff in open() forever (the alarm turns a hang into a
// failure) and /dev/zero was handed to libelf.
TEST_F(SymbolizerTest, ModuleThatIsNotARegularFileIsSkippedWithoutBlocking) {
  const std::string library = FixtureLibraryPath("sym_lib");
  TempDir dir;
  const std::string fifo = dir.path() + "/libsym_lib.so";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [path, what] : {std::pair<std::string, std::string>{fifo, "a FIFO (named pipe)"},
                                   {"/dev/zero", "a character device"},
                                   {dir.path(), "a directory"}}) {
    SCOPED_TRACE(path);
    v1::Snapshot moved = WithModulePath(snapshot(), library, path);
    const v1::Stack* stack = StackOfSize(moved, kLibrarySize);
    ASSERT_NE(stack, nullptr);
    Symbolizer symbolizer;
    alarm(60);
    const SymbolizedAddress& site = symbolizer.Symbolize(moved, stack->frames(0), 0);
    alarm(0);
    EXPECT_EQ(site.module, path);
    EXPECT_THAT(site.frames, IsEmpty());
    std::vector<std::string> warnings = symbolizer.TakeWarnings();
    ASSERT_THAT(warnings, SizeIs(1));
    EXPECT_EQ(warnings[0],
              absl::StrCat(path, ": is ", what, ", not a regular file; showing module+offset"));
  }
}

// The snapshot names /retain-sysroot-test/lib/libsym_lib.so, which exists
// only under the sysroot.
TEST_F(SymbolizerTest, SysrootPrefixesEveryModulePath) {
  const std::string library = FixtureLibraryPath("sym_lib");
  const std::string recorded = "/retain-sysroot-test/lib/libsym_lib.so";
  ASSERT_FALSE(std::filesystem::exists(recorded));
  v1::Snapshot moved = WithModulePath(snapshot(), library, recorded);
  TempDir root;
  CopyFile(library, root.path() + recorded);
  const v1::Stack* stack = StackOfSize(moved, kLibrarySize);
  ASSERT_NE(stack, nullptr);

  SymbolizerOptions options;
  options.sysroot = root.path() + "/";
  Symbolizer with_root(options);
  const SymbolizedAddress& site = with_root.Symbolize(moved, stack->frames(0), 0);
  EXPECT_EQ(site.module, recorded);
  ASSERT_THAT(site.frames, SizeIs(1));
  EXPECT_EQ(site.frames[0].function, "symlib::LibraryAllocate(unsigned long)");
  for (const std::string& warning : with_root.TakeWarnings()) {
    EXPECT_THAT(warning, Not(HasSubstr("libsym_lib")));
  }

  Symbolizer without_root;
  EXPECT_THAT(without_root.Symbolize(moved, stack->frames(0), 0).frames, IsEmpty());
  std::vector<std::string> warnings = without_root.TakeWarnings();
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr(recorded));
}

// A stripped program whose DWARF lives in a separate file (objcopy
// --only-keep-debug), found in a debug directory by build-id or by path.
class SeparateDebugFileTest : public SymbolizerTest, public ::testing::WithParamInterface<bool> {};

TEST_P(SeparateDebugFileTest, DebugDirSuppliesTheDwarf) {
  const bool by_build_id = GetParam();
  TempDir dir;
  const std::string exe = dir.path() + "/bin/sym_program";
  const std::string debug = dir.path() + "/sym_program.debug";
  CopyFile(FixturePath("sym_program"), exe);
  ASSERT_EQ(Shell(absl::StrCat("objcopy --only-keep-debug '", exe, "' '", debug, "'")), 0);
  ASSERT_EQ(Shell(absl::StrCat("objcopy --strip-debug '", exe, "'")), 0);
  v1::Snapshot snapshot = RunUnderShim(exe);
  const v1::Module* module = ModuleNamed(snapshot, "sym_program");
  ASSERT_NE(module, nullptr);
  ASSERT_FALSE(module->build_id().empty());

  const std::string debug_dir = dir.path() + "/debug";
  if (by_build_id) {
    std::string hex = absl::BytesToHexString(module->build_id());
    CopyFile(debug, absl::StrCat(debug_dir, "/.build-id/", hex.substr(0, 2), "/", hex.substr(2),
                                 ".debug"));
  } else {
    CopyFile(debug, absl::StrCat(debug_dir, exe, ".debug"));
  }
  const std::map<std::string, int> lines = MarkedLines("sym_program.cc");
  const v1::Stack* stack = StackOfSize(snapshot, kInlinedSize);
  ASSERT_NE(stack, nullptr);

  // Without the debug directory: the symbol table only (strip-debug keeps it).
  Symbolizer plain;
  const SymbolizedAddress& bare = plain.Symbolize(snapshot, stack->frames(0), 0);
  ASSERT_THAT(bare.frames, SizeIs(1)) << Describe(bare);
  EXPECT_EQ(bare.frames[0].function, "symfix::InlineCaller(unsigned long)");
  EXPECT_EQ(bare.frames[0].file, "");

  SymbolizerOptions options;
  options.debug_dirs = {debug_dir};
  Symbolizer symbolizer(options);
  const SymbolizedAddress& site = symbolizer.Symbolize(snapshot, stack->frames(0), 0);
  SCOPED_TRACE(Describe(site));
  ASSERT_THAT(site.frames, SizeIs(2));
  EXPECT_EQ(site.frames[0].function, "symfix::InlinedAllocate(unsigned long)");
  EXPECT_EQ(site.frames[0].line, lines.at("inlined-malloc"));
  EXPECT_EQ(site.frames[1].function, "symfix::InlineCaller(unsigned long)");
  EXPECT_EQ(site.frames[1].line, lines.at("inline-call"));
  EXPECT_THAT(symbolizer.TakeWarnings(), IsEmpty());
}

// A FIFO where the debug file is looked for (by build-id) is passed over
// like a missing file, without blocking: the symbol table is what is left.
TEST(SeparateDebugFileFifoTest, FifoInTheDebugDirectoryIsSkippedWithoutBlocking) {
  TempDir dir;
  const std::string exe = dir.path() + "/bin/sym_program";
  CopyFile(FixturePath("sym_program"), exe);
  ASSERT_EQ(Shell(absl::StrCat("objcopy --strip-debug '", exe, "'")), 0);
  v1::Snapshot snapshot = RunUnderShim(exe);
  const v1::Module* module = ModuleNamed(snapshot, "sym_program");
  ASSERT_NE(module, nullptr);
  ASSERT_FALSE(module->build_id().empty());
  const std::string hex = absl::BytesToHexString(module->build_id());
  const std::string debug_dir = dir.path() + "/debug";
  const std::string fifo =
      absl::StrCat(debug_dir, "/.build-id/", hex.substr(0, 2), "/", hex.substr(2), ".debug");
  std::filesystem::create_directories(std::filesystem::path(fifo).parent_path());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // And one where the debug file named after the module would be.
  std::filesystem::create_directories(debug_dir + dir.path() + "/bin");
  ASSERT_EQ(mkfifo(absl::StrCat(debug_dir, exe, ".debug").c_str(), 0600), 0);
  const v1::Stack* stack = StackOfSize(snapshot, kInlinedSize);
  ASSERT_NE(stack, nullptr);

  SymbolizerOptions options;
  options.debug_dirs = {debug_dir};
  Symbolizer symbolizer(options);
  alarm(60);
  const SymbolizedAddress& site = symbolizer.Symbolize(snapshot, stack->frames(0), 0);
  alarm(0);
  ASSERT_THAT(site.frames, SizeIs(1)) << Describe(site);
  EXPECT_EQ(site.frames[0].function, "symfix::InlineCaller(unsigned long)");
  EXPECT_EQ(site.frames[0].file, "");
}

INSTANTIATE_TEST_SUITE_P(Layouts, SeparateDebugFileTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "BuildIdPath" : "ModulePath";
                         });

TEST(SymbolizerUnitTest, ModuleOffsetString) {
  SymbolizedAddress address;
  address.module = "/usr/lib/libfoo.so";
  address.module_offset = 0x1234;
  EXPECT_EQ(ModuleOffsetString(address, 0x7f0000001234), "libfoo.so+0x1234");
  EXPECT_EQ(ModuleOffsetString(SymbolizedAddress(), 0x7f00deadbeef), "0x7f00deadbeef");
}

TEST(SymbolizerUnitTest, AddressOutsideEveryModuleHasNoModule) {
  v1::Snapshot snapshot;
  v1::Module* module = snapshot.add_modules();
  module->set_path("/nonexistent/libx.so");
  v1::Segment* segment = module->add_executable_segments();
  segment->set_start(0x10000);
  segment->set_end(0x20000);
  Symbolizer symbolizer;
  const SymbolizedAddress& address = symbolizer.Symbolize(snapshot, 0x30000, 1);
  EXPECT_EQ(address.module, "");
  EXPECT_THAT(address.frames, IsEmpty());
  EXPECT_EQ(ModuleOffsetString(address, 0x30000), "0x30000");
  EXPECT_THAT(symbolizer.TakeWarnings(), IsEmpty());  // the module was never needed
}

TEST(SymbolizerUnitTest, VdsoIsModuleOffsetWithoutWarning) {
  v1::Snapshot snapshot;
  v1::Module* module = snapshot.add_modules();
  module->set_path("linux-vdso.so.1");
  module->set_build_id("\x01\x02\x03\x04");
  module->set_load_bias(0x7ffd0000);
  v1::Segment* segment = module->add_executable_segments();
  segment->set_start(0x7ffd0000);
  segment->set_end(0x7ffd2000);
  Symbolizer symbolizer;
  const SymbolizedAddress& address = symbolizer.Symbolize(snapshot, 0x7ffd0100, 0);
  EXPECT_EQ(address.module, "linux-vdso.so.1");
  EXPECT_EQ(address.module_offset, 0x100u);
  EXPECT_THAT(address.frames, IsEmpty());
  EXPECT_EQ(ModuleOffsetString(address, 0x7ffd0100), "linux-vdso.so.1+0x100");
  EXPECT_THAT(symbolizer.TakeWarnings(), IsEmpty());
}

// After a dlclose another module can take the same range; the loaded one
// is the better guess for the address.
TEST(SymbolizerUnitTest, LoadedModuleWinsOverAnUnloadedOneAtTheSameRange) {
  v1::Snapshot snapshot;
  for (const char* path : {"/nonexistent/old.so", "/nonexistent/new.so"}) {
    v1::Module* module = snapshot.add_modules();
    module->set_path(path);
    module->set_unloaded(absl::StrContains(path, "old"));
    v1::Segment* segment = module->add_executable_segments();
    segment->set_start(0x10000);
    segment->set_end(0x20000);
  }
  Symbolizer symbolizer;
  EXPECT_EQ(symbolizer.Symbolize(snapshot, 0x10010, 0).module, "/nonexistent/new.so");
  std::vector<std::string> warnings = symbolizer.TakeWarnings();
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("/nonexistent/new.so"));
}

// ---------------------------------------------------------------------------
// Caches: this test process's own modules (DWARF for this file, the tools'
// library and protobuf's generated code; symbol tables only for gtest and
// the shared libraries), stacks over random code addresses in them.

// The caches, counted rather than timed (bench/symbolizer_bench.cc times
// them): every module file is opened once, every distinct address looked up
// in DWARF once, and asking again for the same frames opens and looks up
// nothing more.
TEST(SymbolizerCacheTest, OpensEachModuleOnceAndLooksUpEachAddressOnce) {
  constexpr int kStacks = 1000;
  constexpr int kDepth = 20;
  constexpr int kAllocations = 20000;
  constexpr int kDistinctAddresses = 2000;
  v1::Snapshot snapshot;
  retain::test::AddProcessModules(&snapshot);
  // Half the addresses in this executable (DWARF), half in the libraries.
  std::vector<std::pair<uint64_t, uint64_t>> own, others;
  for (const v1::Module& module : snapshot.modules()) {
    for (const v1::Segment& segment : module.executable_segments()) {
      (&module == &snapshot.modules(0) ? own : others).emplace_back(segment.start(), segment.end());
    }
  }
  ASSERT_FALSE(own.empty());
  ASSERT_FALSE(others.empty());
  std::mt19937_64 random(42);
  auto pick = [&](const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
    const auto& [start, end] = ranges[random() % ranges.size()];
    return start + 1 + random() % (end - start - 1);
  };
  std::vector<uint64_t> pool;
  for (int i = 0; i < kDistinctAddresses; ++i) pool.push_back(pick(i % 2 == 0 ? own : others));
  std::vector<std::vector<uint64_t>> stacks(kStacks);
  for (auto& stack : stacks) {
    for (int i = 0; i < kDepth; ++i) stack.push_back(pool[random() % pool.size()]);
  }
  std::vector<uint32_t> allocations(kAllocations);
  for (uint32_t& stack : allocations) stack = static_cast<uint32_t>(random() % kStacks);

  Symbolizer symbolizer;
  size_t with_lines = 0;
  for (const auto& stack : stacks) {
    for (int i = 0; i < kDepth; ++i) {
      const SymbolizedAddress& address = symbolizer.Symbolize(snapshot, stack[i], i);
      if (!address.frames.empty() && address.frames[0].line > 0) ++with_lines;
    }
  }
  const SymbolizerStats cold = symbolizer.Stats();
  EXPECT_GT(with_lines, 0u);
  EXPECT_EQ(cold.lookups, static_cast<uint64_t>(kStacks * kDepth));
  EXPECT_LE(cold.address_misses, static_cast<uint64_t>(kDistinctAddresses));
  EXPECT_GT(cold.dwarf_lookups, 0u);
  EXPECT_LE(cold.dwarf_lookups, cold.address_misses);
  EXPECT_GT(cold.module_files_opened, 0u);
  EXPECT_LE(cold.module_files_opened, static_cast<uint64_t>(snapshot.modules_size()));

  size_t frames = 0;
  for (uint32_t id : allocations) {
    const auto& stack = stacks[id];
    for (int i = 0; i < kDepth; ++i)
      frames += symbolizer.Symbolize(snapshot, stack[i], i).frames.size();
  }
  EXPECT_GT(frames, 0u);
  const SymbolizerStats warm = symbolizer.Stats();
  EXPECT_EQ(warm.lookups, cold.lookups + static_cast<uint64_t>(kAllocations * kDepth));
  EXPECT_EQ(warm.address_misses, cold.address_misses);
  EXPECT_EQ(warm.dwarf_lookups, cold.dwarf_lookups);
  EXPECT_EQ(warm.module_files_opened, cold.module_files_opened);

  // A second snapshot of the same process (a copy: another address, the
  // same module table) shares the results: nothing is opened or looked up.
  v1::Snapshot later = snapshot;
  later.mutable_header()->set_sequence(2);
  for (const auto& stack : stacks) {
    for (int i = 0; i < kDepth; ++i) symbolizer.Symbolize(later, stack[i], i);
  }
  EXPECT_EQ(symbolizer.Stats().dwarf_lookups, cold.dwarf_lookups);
  EXPECT_EQ(symbolizer.Stats().module_files_opened, cold.module_files_opened);
}

}  // namespace
}  // namespace retain::tool
