// Tests for tools/lib/dump_format and the retain-dump command line: units,
// JSON escaping, module+offset frames, stack ranking, and the exit codes and
// one-line errors the tool promises.
#include "tools/lib/dump_format.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "retain.pb.h"
#include "tests/support/test_support.h"

namespace retain::tool {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr uint64_t kBias = 0x7f0000000000;

// A snapshot of a pretend server: one library holding a 126 MiB buffer,
// the executable holding two small ones, one allocation without a stack.
v1::Snapshot ServerSnapshot() {
  v1::Snapshot s;
  v1::Header* h = s.mutable_header();
  h->set_format_version(v1::FORMAT_VERSION_CURRENT);
  h->set_pid(4242);
  h->set_ppid(1);
  h->set_exe_path("/usr/bin/llama-server");
  h->set_exe_build_id(std::string("\x01\x02\xab\xcd", 4));
  h->add_command_line("llama-server");
  h->add_command_line("-m");
  h->add_command_line("model \"q4\".gguf");
  h->set_time_unix_ns(1714566896789000000);
  h->set_time_since_start_us(12345678);
  h->set_sequence(3);
  h->set_trigger(v1::TRIGGER_API);
  h->set_label("after-request-10");
  h->set_next_birth_sequence(123456);
  h->set_unwind_method(v1::UNWIND_METHOD_FRAME_POINTER);
  h->set_max_depth(64);

  v1::ProcessMemory* m = s.mutable_memory();
  m->set_vm_rss(1288490188);
  m->set_rss_anon(1073741824);
  m->set_rss_file(209715200);
  m->set_pss(1181116006);
  m->set_has_mallinfo(true);
  m->set_malloc_in_use(943718400);
  m->set_malloc_free_held(12582912);

  v1::Module* exe = s.add_modules();
  exe->set_id(1);
  exe->set_path("/usr/bin/llama-server");
  exe->set_load_bias(0x555500000000);
  v1::Segment* exe_text = exe->add_executable_segments();
  exe_text->set_start(0x555500001000);
  exe_text->set_end(0x555500100000);
  v1::Module* lib = s.add_modules();
  lib->set_id(2);
  lib->set_path("/opt/lib/libfoo.so");
  lib->set_load_bias(kBias);
  v1::Segment* lib_text = lib->add_executable_segments();
  lib_text->set_start(kBias + 0x1000);
  lib_text->set_end(kBias + 0x5000);

  v1::Stack* big = s.add_stacks();
  big->set_id(17);
  big->add_frames(kBias + 0x1234);
  big->add_frames(0x555500005678);
  big->add_frames(0x1234);  // in no module
  big->set_truncated(true);
  v1::Stack* small = s.add_stacks();
  small->set_id(5);
  small->add_frames(0x555500002000);

  v1::AllocationBlock* b = s.add_allocations();
  const uint64_t addresses[] = {0x10000, 0x10100, 0x10200, 0x7f1000000000};
  const uint64_t sizes[] = {100, 200, 7, 126ull << 20};
  const uint32_t stacks[] = {5, 5, 0, 17};
  uint64_t previous = 0;
  for (int i = 0; i < 4; ++i) {
    b->add_address_delta(addresses[i] - previous);
    previous = addresses[i];
    b->add_size(sizes[i]);
    b->add_kind(i == 3 ? v1::KIND_MMAP_ANON : v1::KIND_HEAP);
    b->add_stack_id(stacks[i]);
    b->add_birth_sequence(i + 1);
    b->add_birth_time_us(1000 * i);
    b->add_thread_id(77);
  }

  v1::KindTotals* heap = s.add_totals();
  heap->set_kind(v1::KIND_HEAP);
  heap->set_live_bytes(307);
  heap->set_live_count(3);
  heap->set_allocated_bytes(10 << 20);
  heap->set_allocated_count(5000);
  heap->set_freed_bytes((10 << 20) - 307);
  heap->set_freed_count(4997);
  v1::KindTotals* anon = s.add_totals();
  anon->set_kind(v1::KIND_MMAP_ANON);
  anon->set_live_bytes(126ull << 20);
  anon->set_live_count(1);
  anon->set_allocated_bytes(126ull << 20);
  anon->set_allocated_count(1);

  v1::ShimHealth* health = s.mutable_health();
  health->set_arena_bytes(12 << 20);
  health->set_arena_cap_bytes(1ull << 30);
  health->set_stacks_interned(2);
  return s;
}

TEST(JsonStringTest, EscapesAndKeepsOutputValidUtf8) {
  EXPECT_EQ(JsonString("plain"), "\"plain\"");
  EXPECT_EQ(JsonString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonString("line\nnext\ttab"), "\"line\\nnext\\ttab\"");
  EXPECT_EQ(JsonString(std::string("nul\0bell\x07", 9)), "\"nul\\u0000bell\\u0007\"");
  EXPECT_EQ(JsonString("caf\xc3\xa9 \xe2\x82\xac"), "\"caf\xc3\xa9 \xe2\x82\xac\"");
  EXPECT_EQ(JsonString("bad\xff\xc3"), "\"bad\\ufffd\\ufffd\"");
  EXPECT_EQ(JsonString("\xc0\xaf"), "\"\\ufffd\\ufffd\"");  // overlong '/'
}

TEST(ModuleIndexTest, FormatsFramesAsModulePlusOffset) {
  v1::Snapshot snapshot = ServerSnapshot();
  ModuleIndex modules(snapshot);
  EXPECT_EQ(modules.FormatFrame(kBias + 0x1234), "libfoo.so+0x1234");
  EXPECT_EQ(modules.FormatFrame(0x555500005678), "llama-server+0x5678");
  EXPECT_EQ(modules.FormatFrame(kBias + 0x5000), "0x7f0000005000");  // end is exclusive
  EXPECT_EQ(modules.FormatFrame(0x1234), "0x1234");
}

TEST(ModuleIndexTest, PrefersLoadedModuleOverUnloadedOneAtTheSameAddress) {
  v1::Snapshot snapshot;
  v1::Module* old_module = snapshot.add_modules();
  old_module->set_id(1);
  old_module->set_path("/lib/libold.so");
  old_module->set_unloaded(true);
  old_module->set_load_bias(0x1000);
  old_module->add_executable_segments()->set_start(0x2000);
  old_module->mutable_executable_segments(0)->set_end(0x3000);
  v1::Module* new_module = snapshot.add_modules();
  *new_module = *old_module;
  new_module->set_id(2);
  new_module->set_path("/lib/libnew.so");
  new_module->set_unloaded(false);
  EXPECT_EQ(ModuleIndex(snapshot).FormatFrame(0x2010), "libnew.so+0x1010");
  new_module->set_unloaded(true);
  EXPECT_EQ(ModuleIndex(snapshot).FormatFrame(0x2010), "libold.so+0x1010");
}

TEST(TopStacksTest, RanksByLiveBytesAndCutsAtN) {
  std::vector<StackUsage> top = TopStacks(ServerSnapshot(), 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].stack_id, 17u);
  EXPECT_EQ(top[0].live_bytes, 126ull << 20);
  EXPECT_EQ(top[1].stack_id, 5u);
  EXPECT_EQ(top[1].live_bytes, 300u);
  EXPECT_EQ(top[1].live_count, 2u);
  EXPECT_EQ(TopStacks(ServerSnapshot(), 10).size(), 3u);  // stack 0 included
}

TEST(FormatDumpTextTest, ShowsHeaderMemoryTotalsHealthAndStacks) {
  DumpOptions options;
  options.source = "server.pb";
  options.top = 2;
  const std::string text = FormatDumpText(ServerSnapshot(), options);
  EXPECT_THAT(text, HasSubstr("/usr/bin/llama-server"));
  EXPECT_THAT(text, HasSubstr("4242"));
  EXPECT_THAT(text, HasSubstr("trigger api"));
  EXPECT_THAT(text, HasSubstr("after-request-10"));
  EXPECT_THAT(text, HasSubstr("2024-05-01T12:34:56.789Z"));
  EXPECT_THAT(text, HasSubstr("123456"));
  EXPECT_THAT(text, HasSubstr("frame-pointer, max depth 64"));
  EXPECT_THAT(text, HasSubstr("VmRSS"));
  EXPECT_THAT(text, HasSubstr("RssAnon"));
  EXPECT_THAT(text, HasSubstr("900.0 MiB"));  // malloc in use
  EXPECT_THAT(text, HasSubstr("mmap-anon"));
  EXPECT_THAT(text, HasSubstr("126.0 MiB"));
  EXPECT_THAT(text, HasSubstr("libfoo.so+0x1234"));
  EXPECT_THAT(text, HasSubstr("llama-server+0x5678"));
  EXPECT_THAT(text, HasSubstr("cut at the depth cap"));
  EXPECT_THAT(text, HasSubstr("Top 2 of 3 stacks"));
  EXPECT_THAT(text, Not(HasSubstr("no stack captured")));  // stack 0 is third: cut by top
  // Stack 17 ranks first.
  EXPECT_LT(text.find("stack 17"), text.find("stack 5"));
}

TEST(FormatDumpJsonTest, CarriesExactNumbers) {
  DumpOptions options;
  options.source = "server.pb";
  const std::string json = FormatDumpJson(ServerSnapshot(), options);
  EXPECT_THAT(json, StartsWith("{\"source\":\"server.pb\""));
  EXPECT_EQ(json.back(), '\n');
  EXPECT_THAT(json, HasSubstr("\"live_bytes\":132120576"));
  EXPECT_THAT(json, HasSubstr("\"vm_rss\":1288490188"));
  EXPECT_THAT(json, HasSubstr("\"model \\\"q4\\\".gguf\""));
  EXPECT_THAT(json, HasSubstr("\"exe_build_id\":\"0102abcd\""));
  EXPECT_THAT(json, HasSubstr("\"frame\":\"libfoo.so+0x1234\""));
  EXPECT_THAT(json, HasSubstr("\"module\":null"));
}

// retain-dump itself, run as a program.
class RetainDumpTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    std::string path = dir_.path() + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  test::RunResult Dump(std::vector<std::string> args) {
    test::RunOptions options;
    options.argv = {RETAIN_DUMP_PATH};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.timeout_seconds = 60;
    return test::Run(options);
  }
  // Exit 2 and exactly one line "retain-dump: ..." on stderr.
  void ExpectUsageError(const test::RunResult& result, const std::string& problem) {
    EXPECT_EQ(result.exit_code, 2);
    EXPECT_TRUE(result.stdout_data.empty());
    EXPECT_THAT(result.stderr_data, StartsWith("retain-dump: "));
    EXPECT_THAT(result.stderr_data, HasSubstr(problem));
    EXPECT_EQ(std::count(result.stderr_data.begin(), result.stderr_data.end(), '\n'), 1)
        << result.stderr_data;
  }
  test::TempDir dir_;
};

TEST_F(RetainDumpTest, PrintsSummary) {
  const std::string path = Write("s.pb", ServerSnapshot().SerializeAsString());
  test::RunResult result = Dump({"--top", "1", path});
  EXPECT_EQ(result.exit_code, 0) << result.stderr_data;
  EXPECT_TRUE(result.stderr_data.empty()) << result.stderr_data;
  EXPECT_THAT(result.stdout_data, HasSubstr("libfoo.so+0x1234"));
  EXPECT_THAT(result.stdout_data, Not(HasSubstr("stack 5 ")));
}

TEST_F(RetainDumpTest, PrintsJsonThatParses) {
  const std::string path = Write("s.pb", ServerSnapshot().SerializeAsString());
  test::RunResult result = Dump({"--json", path});
  ASSERT_EQ(result.exit_code, 0) << result.stderr_data;
  // Check with a real JSON parser when the machine has one.
  test::RunOptions check;
  check.argv = {"python3", "-c",
                "import json,sys; d=json.load(sys.stdin); "
                "print(d['top_stacks'][0]['frames'][0]['frame'], d['header']['command_line'][2])"};
  check.stdin_data = result.stdout_data;
  test::RunResult parsed = test::Run(check);
  if (parsed.exit_code == 127) GTEST_SKIP() << "no python3 to parse the JSON";
  EXPECT_EQ(parsed.exit_code, 0) << parsed.stderr_data;
  EXPECT_EQ(parsed.stdout_data, "libfoo.so+0x1234 model \"q4\".gguf\n");
}

TEST_F(RetainDumpTest, BadInputIsOneLineAndExitTwo) {
  ExpectUsageError(Dump({dir_.path() + "/absent.pb"}), "absent.pb");
  ExpectUsageError(Dump({Write("empty.pb", "")}), "empty file");
  ExpectUsageError(Dump({Write("text.pb", "just some text\n")}), "not a retain snapshot");
  v1::Snapshot newer = ServerSnapshot();
  newer.mutable_header()->set_format_version(99);
  ExpectUsageError(Dump({Write("newer.pb", newer.SerializeAsString())}),
                   "written by a newer retain (format 99");
  std::string bytes = ServerSnapshot().SerializeAsString();
  ExpectUsageError(Dump({Write("cut.pb", bytes.substr(0, bytes.size() - 3))}),
                   absl::StrCat("cut.pb: truncated snapshot (", bytes.size() - 3, " of at least "));
  ExpectUsageError(Dump({dir_.path()}), "directory");
  ExpectUsageError(Dump({"/dev/zero"}), "/dev/zero: is a character device, not a regular file");
  const std::string fifo = dir_.path() + "/fifo.pb";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ExpectUsageError(Dump({fifo}), "fifo.pb: is a FIFO (named pipe), not a regular file");
}

// A real snapshot (tests/fuzz/corpus-snapshot) says its footer was checked;
// one written before footers existed says it has none.
TEST_F(RetainDumpTest, SaysWhetherTheFooterWasVerified) {
  const std::string corpus = test::SourceRoot() + "/tests/fuzz/corpus-snapshot/";
  test::RunResult result = Dump({corpus + "new-proc_true.pb"});
  ASSERT_EQ(result.exit_code, 0) << result.stderr_data;
  EXPECT_THAT(result.stdout_data,
              HasSubstr("\nfooter              1004 bytes, CRC-32 69986cf2 verified\n"));
  result = Dump({"--json", corpus + "new-proc_true.pb"});
  ASSERT_EQ(result.exit_code, 0) << result.stderr_data;
  EXPECT_THAT(result.stdout_data, HasSubstr("\"footer\":{\"length\":1004,\"crc32\":1771597042}"));
  result = Dump({corpus + "old-proc_true.pb"});
  ASSERT_EQ(result.exit_code, 0) << result.stderr_data;
  EXPECT_THAT(result.stdout_data,
              HasSubstr("\nfooter              none (an older shim's snapshot: not checked)\n"));
}

// "-" reads standard input, a pipe here, bounded like a file.
TEST_F(RetainDumpTest, ReadsStandardInputWhenGivenADash) {
  test::RunOptions options;
  options.argv = {RETAIN_DUMP_PATH, "-"};
  options.stdin_data = ServerSnapshot().SerializeAsString();
  options.timeout_seconds = 60;
  test::RunResult result = test::Run(options);
  ASSERT_EQ(result.exit_code, 0) << result.stderr_data;
  EXPECT_THAT(result.stdout_data, StartsWith("snapshot            stdin (format 1)\n"));
  EXPECT_THAT(result.stdout_data, HasSubstr("libfoo.so+0x1234"));

  options.argv = {RETAIN_DUMP_PATH, "--max-snapshot-size=100", "-"};
  result = test::Run(options);
  ExpectUsageError(result,
                   "retain-dump: stdin: more than the largest snapshot read (100 B; "
                   "--max-snapshot-size raises it)\n");
  ExpectUsageError(Dump({"--max-snapshot-size=3GiB", "x.pb"}),
                   "--max-snapshot-size: '3GiB' is not between 1 B and 2 GiB - 1 B");
}

TEST_F(RetainDumpTest, UsageErrorsExitTwo) {
  const std::string path = Write("s.pb", ServerSnapshot().SerializeAsString());
  ExpectUsageError(Dump({}), "no snapshot given");
  ExpectUsageError(Dump({path, path}), "one snapshot at a time");
  ExpectUsageError(Dump({"--bogus", path}), "unknown flag --bogus");
  ExpectUsageError(Dump({"--top=-1", path}), "--top must be 0 or more");
  ExpectUsageError(Dump({"--top=many", path}), "--top");
  ExpectUsageError(Dump({path, "--top"}), "--top needs a value");
  ExpectUsageError(Dump({"--json=maybe", path}), "--json");
}

TEST_F(RetainDumpTest, HelpGoesToStdoutAndExitsZero) {
  test::RunResult result = Dump({"--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.stdout_data, StartsWith("usage: retain-dump"));
  EXPECT_THAT(result.stdout_data, HasSubstr("--json"));
}

TEST_F(RetainDumpTest, AcceptsNegatedBooleanFlag) {
  const std::string path = Write("s.pb", ServerSnapshot().SerializeAsString());
  test::RunResult result = Dump({"--nojson", "--top=0", path});
  EXPECT_EQ(result.exit_code, 0) << result.stderr_data;
  EXPECT_THAT(result.stdout_data, HasSubstr("Shim health"));
  EXPECT_THAT(result.stdout_data, Not(HasSubstr("Top ")));
}

}  // namespace
}  // namespace retain::tool
