// The malloc_info parser (snapshot/malloc_arenas.h) on this test process's
// own malloc_info output, whole and in pieces, cut short, damaged, and on
// hand-made text for the trimmable bound; and ReadMallocArenas run here.
#include "snapshot/malloc_arenas.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace retain::shim {
namespace {

std::vector<MallocArenaInfo>* Arenas(void* context) {
  return static_cast<std::vector<MallocArenaInfo>*>(context);
}

void Collect(const MallocArenaInfo& arena, void* context) { Arenas(context)->push_back(arena); }

struct Parsed {
  std::vector<MallocArenaInfo> arenas;
  bool complete = false;
  uint32_t seen = 0;
};

// Feeds `text` in pieces of `piece` bytes.
Parsed Parse(const std::string& text, size_t piece = 1 << 20, uint64_t page = 4096) {
  Parsed parsed;
  MallocInfoParser parser(page, &Collect, &parsed.arenas);
  for (size_t at = 0; at < text.size(); at += piece) {
    parser.Feed(text.data() + at, std::min(piece, text.size() - at));
  }
  parsed.complete = parser.Finish();
  parsed.seen = parser.seen();
  EXPECT_EQ(parser.reported(), parsed.arenas.size());
  return parsed;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// A thread that allocates and keeps a block while it lives, so the process
// has a thread arena besides the main one.
class ArenaThread {
 public:
  ArenaThread() {
    pthread_mutex_lock(&mutex_);
    pthread_create(&thread_, nullptr, &Run, this);
    while (!started_) pthread_cond_wait(&cond_, &mutex_);
    pthread_mutex_unlock(&mutex_);
  }
  ~ArenaThread() {
    pthread_mutex_lock(&mutex_);
    stop_ = true;
    pthread_cond_broadcast(&cond_);
    pthread_mutex_unlock(&mutex_);
    pthread_join(thread_, nullptr);
  }

 private:
  static void* Run(void* self_pointer) {
    auto* self = static_cast<ArenaThread*>(self_pointer);
    // Blocks freed with one kept after them: free memory the arena holds.
    std::vector<void*> blocks;
    for (int i = 0; i < 64; ++i) blocks.push_back(malloc(4000));
    void* keep = malloc(4000);
    for (void* block : blocks) free(block);
    pthread_mutex_lock(&self->mutex_);
    self->started_ = true;
    pthread_cond_broadcast(&self->cond_);
    while (!self->stop_) pthread_cond_wait(&self->cond_, &self->mutex_);
    pthread_mutex_unlock(&self->mutex_);
    free(keep);
    return nullptr;
  }

  pthread_t thread_;
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond_ = PTHREAD_COND_INITIALIZER;
  bool started_ = false;
  bool stop_ = false;
};

// malloc_info's text, with mallinfo2's fordblks taken just before it with
// nothing allocated or freed in between (the stream is an unbuffered
// fmemopen over a static buffer, opened first).
struct Info {
  std::string text;
  uint64_t fordblks = 0;
};
Info RealMallocInfo() {
  static char buffer[1 << 20];
  FILE* stream = fmemopen(buffer, sizeof(buffer), "w");
  EXPECT_NE(stream, nullptr);
  setvbuf(stream, nullptr, _IONBF, 0);
  Info info;
  info.fordblks = mallinfo2().fordblks;
  EXPECT_EQ(malloc_info(0, stream), 0);
  const long length = ftell(stream);
  fclose(stream);
  info.text.assign(buffer, static_cast<size_t>(length));
  return info;
}

TEST(MallocArenasTest, ParsesThisProcessAsMallinfoCountsIt) {
  ArenaThread thread;
  const Info info = RealMallocInfo();
  const Parsed parsed = Parse(info.text);
  ASSERT_TRUE(parsed.complete) << info.text;
  const size_t heaps = Count(info.text, "<heap nr=");
  ASSERT_GE(heaps, 2u) << "the main arena and the thread's";
  ASSERT_EQ(parsed.arenas.size(), heaps);
  uint64_t free_bytes = 0;
  for (size_t i = 0; i < parsed.arenas.size(); ++i) {
    const MallocArenaInfo& arena = parsed.arenas[i];
    SCOPED_TRACE(arena.number);
    EXPECT_EQ(arena.number, i) << "glibc numbers them in its order";
    EXPECT_GT(arena.system_bytes, 0u);
    EXPECT_GE(arena.system_max_bytes, arena.system_bytes);
    EXPECT_LE(arena.free_bytes, arena.system_bytes);
    EXPECT_LE(arena.fast_bytes, arena.free_bytes);
    EXPECT_GE(arena.free_chunks, 1u) << "the top chunk counts";
    EXPECT_LE(arena.trimmable_bytes, arena.free_bytes);
    if (arena.number == 0) {
      // glibc prints system_mem for both.
      EXPECT_EQ(arena.aspace_bytes, arena.system_bytes);
      EXPECT_EQ(arena.aspace_mprotect_bytes, arena.system_bytes);
      EXPECT_EQ(arena.subheaps, 0u);
    } else {
      EXPECT_GE(arena.subheaps, 1u);
      EXPECT_GE(arena.aspace_bytes, arena.aspace_mprotect_bytes);
    }
    free_bytes += arena.free_bytes;
  }
  // mallinfo2 sums what malloc_info lists, fast and rest, the tops included,
  // but malloc_info adds the binned chunks' raw size fields, flag bits and
  // all (PREV_INUSE and the like: up to 7 bytes a chunk).
  uint64_t chunks = 0;
  for (const MallocArenaInfo& arena : parsed.arenas) chunks += arena.free_chunks;
  EXPECT_GE(free_bytes, info.fordblks);
  EXPECT_LE(free_bytes, info.fordblks + 7 * chunks);
  // The thread's arena holds its 64 freed blocks (about 250 KiB).
  EXPECT_GE(parsed.arenas[1].free_bytes, 64u * 4000);
}

TEST(MallocArenasTest, PiecesOfAnySizeParseTheSame) {
  ArenaThread thread;
  const Info info = RealMallocInfo();
  const Parsed whole = Parse(info.text);
  for (size_t piece : {1, 2, 7, 64, 4096}) {
    SCOPED_TRACE(piece);
    const Parsed pieces = Parse(info.text, piece);
    EXPECT_TRUE(pieces.complete);
    ASSERT_EQ(pieces.arenas.size(), whole.arenas.size());
    for (size_t i = 0; i < whole.arenas.size(); ++i) {
      EXPECT_EQ(memcmp(&pieces.arenas[i], &whole.arenas[i], sizeof(MallocArenaInfo)), 0) << i;
    }
  }
}

TEST(MallocArenasTest, CutShortReportsTheArenasBeforeTheCutAndSaysSo) {
  ArenaThread thread;
  const Info info = RealMallocInfo();
  const size_t first_end = info.text.find("</heap>\n");
  const size_t second = info.text.find("<heap nr=\"1\">");
  ASSERT_NE(first_end, std::string::npos);
  ASSERT_NE(second, std::string::npos);
  // Inside the second arena: the first is whole, the second is not.
  const size_t inside = info.text.find("<system type=\"current\"", second);
  Parsed cut = Parse(info.text.substr(0, inside));
  EXPECT_FALSE(cut.complete);
  ASSERT_EQ(cut.arenas.size(), 1u);
  EXPECT_EQ(cut.arenas[0].number, 0u);
  EXPECT_EQ(cut.seen, 2u);
  // Right after an arena: no </malloc>, so not whole.
  cut = Parse(info.text.substr(0, first_end + 8));
  EXPECT_FALSE(cut.complete);
  EXPECT_EQ(cut.arenas.size(), 1u);
  // In the middle of a line, and with nothing at all.
  cut = Parse(info.text.substr(0, info.text.size() - 3));
  EXPECT_FALSE(cut.complete);
  EXPECT_EQ(cut.arenas.size(), Count(info.text, "<heap nr="));
  EXPECT_FALSE(Parse("").complete);
}

TEST(MallocArenasTest, DamagedTextIsNotWhole) {
  const std::string arena =
      "<heap nr=\"0\">\n<sizes>\n</sizes>\n<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
      "<total type=\"rest\" count=\"1\" size=\"100\"/>\n</heap>\n";
  const std::string whole = "<malloc version=\"1\">\n" + arena + "</malloc>\n";
  ASSERT_TRUE(Parse(whole).complete);
  EXPECT_EQ(Parse(whole).arenas[0].free_bytes, 100u);
  // An overlong line, an arena without its totals, one never closed, a
  // figure that is not a number.
  EXPECT_FALSE(
      Parse("<malloc>\n" + std::string(1000, 'x') + "\n" + arena + "</malloc>\n").complete);
  const Parsed no_totals = Parse("<heap nr=\"0\">\n</heap>\n</malloc>\n");
  EXPECT_FALSE(no_totals.complete);
  EXPECT_TRUE(no_totals.arenas.empty());
  EXPECT_FALSE(Parse("<heap nr=\"0\">\n" + arena + "</malloc>\n").complete);
  const Parsed not_a_number = Parse("<heap nr=\"x\">\n</heap>\n</malloc>\n");
  EXPECT_FALSE(not_a_number.complete);
  EXPECT_TRUE(not_a_number.arenas.empty());
  EXPECT_FALSE(Parse("<heap nr=\"99999999999999999999999\">\n</heap>\n</malloc>\n").complete);
}

TEST(MallocArenasTest, TrimmableBytesLeaveTwoPagesPerChunk) {
  const std::string text =
      "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n"
      "  <size from=\"17\" to=\"32\" total=\"320\" count=\"10\"/>\n"  // small: nothing
      "  <size from=\"1048576\" to=\"1048576\" total=\"2097152\" count=\"2\"/>\n"
      "  <unsorted from=\"20000\" to=\"20000\" total=\"20000\" count=\"1\"/>\n"
      "</sizes>\n<total type=\"fast\" count=\"10\" size=\"320\"/>\n"
      "<total type=\"rest\" count=\"4\" size=\"2200000\"/>\n"
      "<system type=\"current\" size=\"3000000\"/>\n<system type=\"max\" size=\"4000000\"/>\n"
      "<aspace type=\"total\" size=\"3000000\"/>\n<aspace type=\"mprotect\" size=\"3000000\"/>\n"
      "</heap>\n<total type=\"fast\" count=\"10\" size=\"320\"/>\n</malloc>\n";
  const Parsed parsed = Parse(text, 5);
  ASSERT_TRUE(parsed.complete);
  ASSERT_EQ(parsed.arenas.size(), 1u);
  const MallocArenaInfo& arena = parsed.arenas[0];
  EXPECT_EQ(arena.trimmable_bytes, (2097152u - 2 * 2 * 4096) + (20000u - 2 * 4096));
  EXPECT_EQ(arena.free_bytes, 2200320u);
  EXPECT_EQ(arena.free_chunks, 14u);
  EXPECT_EQ(arena.fast_bytes, 320u);
  EXPECT_EQ(arena.system_bytes, 3000000u);
  EXPECT_EQ(arena.system_max_bytes, 4000000u);
  // The totals after the arenas are not an arena's.
  EXPECT_EQ(Parse(text, 5, 65536).arenas[0].trimmable_bytes, 2097152u - 2 * 2 * 65536);
}

TEST(MallocArenasTest, AtMostMaxArenasAreReported) {
  const std::string arena =
      "<total type=\"fast\" count=\"0\" size=\"0\"/>\n<total type=\"rest\" count=\"1\" "
      "size=\"100\"/>\n</heap>\n";
  std::string text = "<malloc version=\"1\">\n";
  for (uint32_t i = 0; i <= MallocInfoParser::kMaxArenas; ++i) {
    text += "<heap nr=\"" + std::to_string(i) + "\">\n" + arena;
  }
  text += "</malloc>\n";
  const Parsed parsed = Parse(text);
  EXPECT_FALSE(parsed.complete);
  EXPECT_EQ(parsed.arenas.size(), MallocInfoParser::kMaxArenas);
  EXPECT_EQ(parsed.seen, MallocInfoParser::kMaxArenas + 1);
}

TEST(MallocArenasTest, ReadMallocArenasRunsMallocInfo) {
  ArenaThread thread;
  std::vector<MallocArenaInfo> arenas;
  arenas.reserve(1024);  // nothing allocated while the sink runs
  errno = 1234;
  const MallocArenasResult result = ReadMallocArenas(&Collect, &arenas);
  EXPECT_EQ(errno, 1234);
  ASSERT_TRUE(result.ran);
  EXPECT_TRUE(result.complete);
  EXPECT_EQ(result.arenas, arenas.size());
  EXPECT_GE(arenas.size(), 2u);
  EXPECT_EQ(arenas[0].number, 0u);
}

}  // namespace
}  // namespace retain::shim
