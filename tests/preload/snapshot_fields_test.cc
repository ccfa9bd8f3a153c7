// Runs a real program under the shim and checks every field of the snapshot
// it writes, parsed with the classes protoc generates: the proof that the
// shim's hand-written encoder and proto/retain.proto agree, and that each
// field holds the truth (compared with what the program itself printed, the
// kernel, and the ELF file).
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "tests/support/test_support.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::test {
namespace {

using tool::Allocation;

// "name value..." lines printed by the fixture.
std::map<std::string, std::vector<uint64_t>> ParseFacts(const std::string& text) {
  std::map<std::string, std::vector<uint64_t>> facts;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    uint64_t value;
    while (words >> value) facts[name].push_back(value);
  }
  return facts;
}

// The GNU build-id of an ELF file as raw bytes, from readelf.
std::string BuildIdOf(const std::string& path) {
  std::string command = "readelf -n '" + path + "' 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  char line[512];
  std::string hex;
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    const char* found = strstr(line, "Build ID: ");
    if (found != nullptr) {
      for (const char* p = found + 10; isxdigit(static_cast<unsigned char>(*p)); ++p) hex += *p;
    }
  }
  pclose(pipe);
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return bytes;
}

uint64_t NowUnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class SnapshotFieldsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    started_ns_ = NowUnixNs();
    RunOptions options;
    options.argv = {FixturePath("snapshot_fields"), "an-argument", ""};
    options.env = {{"RETAIN_DIR", dir_.path()}};
    options.preload = true;
    result_ = retain::test::Run(options);
    ended_ns_ = NowUnixNs();
    ASSERT_EQ(result_.exit_code, 0) << result_.stderr_data;
    facts_ = ParseFacts(result_.stdout_data);
    std::vector<std::string> files = ListSnapshots(dir_.path());
    // The API snapshot (sequence 1) and the exit snapshot (sequence 2).
    ASSERT_EQ(files.size(), 2u);
    for (const std::string& file : files) {
      v1::Snapshot snapshot = LoadSnapshot(file);
      if (snapshot.header().sequence() == 1) {
        snapshot_ = snapshot;
        std::ifstream in(file, std::ios::binary);
        file_bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
    }
    ASSERT_EQ(snapshot_.header().sequence(), 1u);
    rows_ = tool::FlattenAllocations(snapshot_);
  }

  TempDir dir_;
  RunResult result_;
  uint64_t started_ns_ = 0;
  uint64_t ended_ns_ = 0;
  std::map<std::string, std::vector<uint64_t>> facts_;
  v1::Snapshot snapshot_;
  std::string file_bytes_;  // the file of snapshot_, as written
  std::vector<Allocation> rows_;
};

TEST_F(SnapshotFieldsTest, Header) {
  const v1::Header& h = snapshot_.header();
  EXPECT_EQ(h.format_version(), static_cast<uint32_t>(v1::FORMAT_VERSION_CURRENT));
  EXPECT_GT(h.pid(), 0u);
  EXPECT_EQ(h.ppid(), static_cast<uint32_t>(getpid()));  // Run() forks the fixture
  EXPECT_GT(h.process_start_ticks(), 0u);
  char real[PATH_MAX];
  ASSERT_NE(realpath(FixturePath("snapshot_fields").c_str(), real), nullptr);
  EXPECT_EQ(h.exe_path(), real);
  std::string build_id = BuildIdOf(real);
  ASSERT_EQ(build_id.size(), 20u);  // --build-id=sha1
  EXPECT_EQ(h.exe_build_id(), build_id);
  ASSERT_EQ(h.command_line_size(), 3);
  EXPECT_EQ(h.command_line(0), FixturePath("snapshot_fields"));
  EXPECT_EQ(h.command_line(1), "an-argument");
  EXPECT_EQ(h.command_line(2), "");
  EXPECT_GE(h.time_unix_ns(), started_ns_);
  EXPECT_LE(h.time_unix_ns(), ended_ns_);
  EXPECT_GE(h.start_time_unix_ns(), started_ns_);
  EXPECT_LE(h.start_time_unix_ns(), h.time_unix_ns());
  EXPECT_LE(h.time_since_start_us(), (ended_ns_ - started_ns_) / 1000);
  EXPECT_EQ(h.sequence(), 1u);
  EXPECT_EQ(h.trigger(), v1::TRIGGER_API);
  EXPECT_EQ(h.label(), "fields");
  EXPECT_EQ(h.unwind_method(), v1::UNWIND_METHOD_CFI);
  EXPECT_EQ(h.max_depth(), 48u);
  EXPECT_EQ(h.forked_from_pid(), 0u);
  EXPECT_EQ(h.sample_interval_bytes(), 0u);
  uint64_t max_birth = 0;
  for (const Allocation& row : rows_) max_birth = std::max(max_birth, row.birth_sequence);
  EXPECT_GT(h.next_birth_sequence(), max_birth);
}

TEST_F(SnapshotFieldsTest, ProcessMemory) {
  const v1::ProcessMemory& m = snapshot_.memory();
  EXPECT_GT(m.vm_rss(), 0u);
  EXPECT_GE(m.vm_size(), m.vm_rss());
  EXPECT_GE(m.vm_hwm(), m.vm_rss());
  EXPECT_GT(m.rss_anon(), 0u);
  EXPECT_GT(m.rss_file(), 0u);
  EXPECT_EQ(m.vm_rss(), m.rss_anon() + m.rss_file() + m.rss_shmem());
  EXPECT_EQ(m.vm_swap(), 0u);  // no swap on the test machines; the field is read, not invented
  EXPECT_GT(m.pss(), 0u);
  EXPECT_GT(m.pss_anon(), 0u);
  EXPECT_GT(m.pss_file(), 0u);
  EXPECT_GT(m.anonymous(), 0u);
  EXPECT_TRUE(m.has_mallinfo());
  EXPECT_GT(m.malloc_arena(), 0u);
  // Everything the program holds from malloc is in use according to glibc.
  EXPECT_GE(m.malloc_in_use(), LiveBytes(snapshot_, v1::KIND_HEAP));
  EXPECT_GT(m.malloc_free_held() + m.malloc_top_releasable() + 1, 0u);
  // glibc's arenas, main first; read right after mallinfo2, so they sum to
  // its figures (give or take the fixture's threads, and the flag bits
  // malloc_info leaves in binned chunk sizes).
  ASSERT_GE(m.malloc_arenas_size(), 1);
  EXPECT_FALSE(m.malloc_arenas_truncated());
  uint64_t free_bytes = 0;
  uint64_t system_bytes = 0;
  for (int i = 0; i < m.malloc_arenas_size(); ++i) {
    const v1::MallocArena& arena = m.malloc_arenas(i);
    EXPECT_EQ(arena.number(), static_cast<uint32_t>(i));
    EXPECT_GT(arena.system_bytes(), 0u);
    EXPECT_LE(arena.free_bytes(), arena.system_bytes() + 7 * arena.free_chunks());
    EXPECT_LE(arena.trimmable_bytes(), arena.free_bytes());
    EXPECT_GE(arena.aspace_bytes(), arena.aspace_mprotect_bytes());
    EXPECT_EQ(arena.subheaps() == 0, i == 0) << "only thread arenas have subheaps";
    free_bytes += arena.free_bytes();
    system_bytes += arena.system_bytes();
  }
  EXPECT_NEAR(static_cast<double>(free_bytes), static_cast<double>(m.malloc_free_held()),
              64.0 * 1024);
  EXPECT_NEAR(static_cast<double>(system_bytes), static_cast<double>(m.malloc_arena()),
              256.0 * 1024);
}

TEST_F(SnapshotFieldsTest, Modules) {
  std::set<std::string> paths;
  std::set<uint32_t> ids;
  for (const v1::Module& module : snapshot_.modules()) {
    paths.insert(module.path());
    EXPECT_TRUE(ids.insert(module.id()).second) << "duplicate id " << module.id();
    EXPECT_FALSE(module.unloaded()) << module.path();
    EXPECT_GE(module.executable_segments_size(), 1) << module.path();
    for (const v1::Segment& segment : module.executable_segments()) {
      EXPECT_LT(segment.start(), segment.end());
      EXPECT_GE(segment.start(), module.load_bias());
    }
    if (module.path() == snapshot_.header().exe_path()) {
      EXPECT_EQ(module.build_id(), snapshot_.header().exe_build_id());
    }
    if (module.path().find("libc.so.6") != std::string::npos) {
      EXPECT_EQ(module.build_id(), BuildIdOf(module.path()));
    }
  }
  EXPECT_TRUE(paths.count(snapshot_.header().exe_path()));
  EXPECT_TRUE(paths.count(ShimPath()) ||
              paths.count(std::string(realpath(ShimPath().c_str(), nullptr))));
  bool has_libc = false;
  for (const std::string& path : paths) has_libc |= path.find("libc.so.6") != std::string::npos;
  EXPECT_TRUE(has_libc);
}

TEST_F(SnapshotFieldsTest, AllocationsAndStacks) {
  ASSERT_EQ(facts_["site"].size(), 2u);
  uint64_t site_begin = facts_["site"][0];
  uint64_t site_end = facts_["site"][1];
  uint64_t main_tid = facts_["main_tid"].at(0);
  uint64_t worker_tid = facts_["worker_tid"].at(0);
  std::map<uint64_t, const Allocation*> site_rows;  // by size
  for (const Allocation& row : rows_) {
    EXPECT_LE(row.birth_time_us, snapshot_.header().time_since_start_us());
    EXPECT_EQ(row.tag_id, 0u);
    if (row.kind == v1::KIND_HEAP && row.stack_id != 0) {
      const v1::Stack* stack = tool::FindStack(snapshot_, row.stack_id);
      ASSERT_NE(stack, nullptr);
      ASSERT_GT(stack->frames_size(), 0);
      if (stack->frames(0) >= site_begin && stack->frames(0) < site_end) site_rows[row.size] = &row;
    }
  }
  ASSERT_EQ(site_rows.size(), 4u);
  for (uint64_t size : {1000u, 2000u, 3000u}) {
    ASSERT_TRUE(site_rows.count(size)) << size;
    EXPECT_EQ(site_rows[size]->thread_id, main_tid);
    EXPECT_EQ(site_rows[size]->flags, 0u);
  }
  ASSERT_TRUE(site_rows.count(777));
  EXPECT_EQ(site_rows[777]->thread_id, worker_tid);
  EXPECT_NE(worker_tid, main_tid);
  // Births are numbered in allocation order.
  EXPECT_LT(site_rows[1000]->birth_sequence, site_rows[2000]->birth_sequence);
  EXPECT_LT(site_rows[3000]->birth_sequence, site_rows[777]->birth_sequence);

  const Allocation* anon = nullptr;
  const Allocation* file = nullptr;
  for (const Allocation& row : rows_) {
    if (row.address == facts_["anon"].at(0)) anon = &row;
    if (row.address == facts_["file"].at(0)) file = &row;
  }
  ASSERT_NE(anon, nullptr);
  EXPECT_EQ(anon->kind, v1::KIND_MMAP_ANON);
  EXPECT_EQ(anon->size, 3u * 4096);
  EXPECT_EQ(anon->flags,
            uint64_t(PROT_READ | PROT_WRITE) | (uint64_t(MAP_PRIVATE | MAP_ANONYMOUS) << 8));
  EXPECT_NE(anon->stack_id, 0u);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->kind, v1::KIND_MMAP_FILE);
  EXPECT_EQ(file->size, 4096u);
  EXPECT_EQ(file->flags, uint64_t(PROT_READ) | (uint64_t(MAP_PRIVATE) << 8));
  // Birth order holds within a thread (the mapping came after the main
  // thread's 3000-byte block) and relative to snapshots; across threads
  // numbers are only unique (each thread takes them in blocks).
  EXPECT_GT(anon->birth_sequence, site_rows[3000]->birth_sequence);
  EXPECT_NE(anon->birth_sequence, site_rows[777]->birth_sequence);

  // Only referenced stacks are written, each once.
  std::set<uint32_t> referenced;
  for (const Allocation& row : rows_) {
    if (row.stack_id != 0) referenced.insert(row.stack_id);
  }
  std::set<uint32_t> written;
  for (const v1::Stack& stack : snapshot_.stacks()) {
    EXPECT_TRUE(written.insert(stack.id()).second);
    EXPECT_FALSE(stack.truncated());
  }
  EXPECT_EQ(written, referenced);
}

TEST_F(SnapshotFieldsTest, TotalsAgreeWithRows) {
  for (v1::Kind kind : {v1::KIND_HEAP, v1::KIND_MMAP_ANON, v1::KIND_MMAP_FILE}) {
    v1::KindTotals totals = TotalsFor(snapshot_, kind);
    EXPECT_EQ(totals.kind(), kind);
    EXPECT_EQ(totals.live_bytes(), LiveBytes(snapshot_, kind)) << tool::KindName(kind);
    EXPECT_EQ(totals.live_count(), LiveCount(snapshot_, kind)) << tool::KindName(kind);
    EXPECT_EQ(totals.allocated_bytes() - totals.freed_bytes(), totals.live_bytes());
    EXPECT_GE(totals.allocated_count(), totals.live_count());
  }
  EXPECT_GE(TotalsFor(snapshot_, v1::KIND_HEAP).freed_count(), 1u);  // the 5000-byte block
  EXPECT_GE(TotalsFor(snapshot_, v1::KIND_HEAP).freed_bytes(), 5000u);
}

TEST_F(SnapshotFieldsTest, Health) {
  const v1::ShimHealth& health = snapshot_.health();
  EXPECT_GT(health.arena_bytes(), 0u);
  EXPECT_EQ(health.arena_cap_bytes(), uint64_t{2} << 30);
  EXPECT_FALSE(health.degraded());
  EXPECT_EQ(health.dropped_records(), 0u);
  EXPECT_EQ(health.unwind_failures(), 0u);
  EXPECT_GE(health.stacks_interned(), static_cast<uint64_t>(snapshot_.stacks_size()));
  EXPECT_EQ(health.fp_fallbacks(), 0u);
  EXPECT_EQ(health.previous_write_us(), 0u);  // the first snapshot of the process
}

// The footer: the last 16 bytes of the file, in the one encoding readers look
// for, with the length and CRC-32 (zlib's, an implementation independent of
// the shim's) of every byte before them.
TEST_F(SnapshotFieldsTest, Footer) {
  EXPECT_TRUE(snapshot_.header().ends_with_footer());
  ASSERT_TRUE(snapshot_.has_footer());
  ASSERT_GT(file_bytes_.size(), 16u);
  const std::string before = file_bytes_.substr(0, file_bytes_.size() - 16);
  EXPECT_EQ(snapshot_.footer().length(), before.size());
  EXPECT_EQ(snapshot_.footer().crc32(), tool::SnapshotCrc32(before));
  const std::string tail = file_bytes_.substr(file_bytes_.size() - 16);
  EXPECT_EQ(tail.substr(0, 3), "\x7a\x0e\x09");
  EXPECT_EQ(tail[11], '\x15');
  // Everything before the footer parses on its own: the footer is appended,
  // not woven into the other fields.
  v1::Snapshot without;
  ASSERT_TRUE(without.ParseFromString(before));
  EXPECT_FALSE(without.has_footer());
  EXPECT_EQ(without.header().pid(), snapshot_.header().pid());
}

// A program that execs itself keeps its pid, and each new image starts its
// own sequence: no image may overwrite the snapshots of the one before.
TEST(SnapshotNamingTest, ExecOfTheSameProgramDoesNotOverwrite) {
  TempDir dir;
  RunOptions options;
  options.argv = {FixturePath("snapshot_fields"), "exec-self", "2"};
  options.env = {{"RETAIN_DIR", dir.path()}};
  options.preload = true;
  RunResult result = retain::test::Run(options);
  ASSERT_EQ(result.exit_code, 0) << result.stderr_data;
  std::vector<std::string> files = ListSnapshots(dir.path());
  // Three images: three "before-exec" snapshots, then the last one's exit.
  ASSERT_EQ(files.size(), 4u);
  std::set<uint32_t> sequences;
  int before_exec = 0;
  uint32_t pid = 0;
  for (const std::string& file : files) {
    v1::Snapshot snapshot = LoadSnapshot(file);
    sequences.insert(snapshot.header().sequence());
    if (pid == 0) pid = snapshot.header().pid();
    EXPECT_EQ(snapshot.header().pid(), pid);
    if (snapshot.header().label() == "before-exec") ++before_exec;
    EXPECT_NE(file.find("." + std::to_string(snapshot.header().sequence()) + ".pb"),
              std::string::npos)
        << file;
  }
  EXPECT_EQ(before_exec, 3);
  EXPECT_EQ(sequences, (std::set<uint32_t>{1, 2, 3, 4}));
}

// The shim's records live in its own mmap'd arena, never in the host's heap:
// with 200,000 small blocks held, glibc's in-use bytes are the program's
// blocks plus chunk headers, while the shim's arena holds the records.
TEST(SnapshotArenaTest, RecordsLiveOutsideTheHostHeap) {
  TempDir dir;
  RunOptions options;
  options.argv = {FixturePath("snapshot_fields"), "many", "200000"};
  options.env = {{"RETAIN_DIR", dir.path()}};
  options.preload = true;
  RunResult result = retain::test::Run(options);
  ASSERT_EQ(result.exit_code, 0) << result.stderr_data;
  v1::Snapshot many;
  for (const std::string& file : ListSnapshots(dir.path())) {
    v1::Snapshot snapshot = LoadSnapshot(file);
    if (snapshot.header().label() == "many") many = snapshot;
  }
  ASSERT_EQ(many.header().label(), "many");
  constexpr uint64_t kBlocks = 200000;
  uint64_t heap_live = LiveBytes(many, v1::KIND_HEAP);
  EXPECT_GE(heap_live, kBlocks * 16);
  // glibc's overhead for a 16-byte block is a 16-byte header; a shim record
  // in the heap would add at least 40 more bytes per block.
  EXPECT_LT(many.memory().malloc_in_use(), heap_live + kBlocks * 24);
  EXPECT_GT(many.health().arena_bytes(), kBlocks * 40);
}

}  // namespace
}  // namespace retain::test
