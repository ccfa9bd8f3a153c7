// The CFI unwinder (shim/src/unwind/cfi_unwinder.h) against libunwind: this test
// program replaces malloc, and while a probe is armed on a thread every
// malloc call captures its caller's stack twice, with CfiUnwind and with
// libunwind's unw_backtrace (loaded privately, as the shim does), and
// compares the two frame lists. The code walked through is built without
// frame pointers (cfi_fixture.h): -O2 recursion with different frame
// layouts, alloca and VLAs (rbp-based CFA), libstdc++ (operator new,
// std::vector, std::string), libc (qsort's callback, strdup), a shared
// library, a second thread, a signal handler. Also: garbage stacks never
// crash the walk.
//
// This file is built with frame pointers: the malloc replacement's frame is
// where both walks start.
#include "unwind/cfi_unwinder.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/shim/unwind/cfi_fixture.h"
#include "unwind/stack_hash.h"

extern "C" void* __libc_malloc(size_t size);

namespace retain::shim {
namespace {

using cfi_fixture::Leaf;

constexpr int kMaxFrames = 128;
using BacktraceFn = int (*)(void**, int);
BacktraceFn g_unw_backtrace;

struct Mismatch {
  int cfi_count;
  int libunwind_count;
  uintptr_t cfi[kMaxFrames];
  uintptr_t libunwind[kMaxFrames];
};

std::atomic<int> g_probes;
std::atomic<int> g_matches;
std::atomic<int> g_fallbacks;
std::atomic<int> g_mismatches;
std::atomic<long> g_frames;
std::atomic<bool> g_have_mismatch;
// Walks that gave their stack's hash (unwind/stack_hash.h), and those whose
// hash was not StackHash of the frames they gave.
std::atomic<int> g_hashed;
std::atomic<int> g_hash_mismatches;
Mismatch g_mismatch;

// Plain TLS of the executable: initial-exec, no allocation on access.
thread_local bool t_armed;
thread_local bool t_inside;
thread_local uintptr_t t_stack_low;
thread_local uintptr_t t_stack_high;
// When not 0, the most frames a probe's CFI walk may give (a capture's
// depth limit); libunwind's stack is compared up to it.
thread_local int t_max_frames;
// Probes walk with CfiUnwindLazily (the shim's capture) instead of
// CfiUnwind, and take the frames it leaves pending from the memo.
thread_local bool t_lazy;
// Lazy walks whose frames were pending.
std::atomic<int> g_pending;

// Keys of walks cut at their depth limit (CfiStackHash::cut_key), each with
// the frames of the first walk that gave it: a later walk with the same key
// must have given the same frames. Filled by one thread at a time.
struct CutKey {
  uint64_t key;
  std::vector<uintptr_t> frames;
};
std::vector<CutKey>* g_cut_keys;  // allocated by the test, outside probes
std::atomic<int> g_cut_keyed;
std::atomic<int> g_cut_key_repeats;
std::atomic<int> g_cut_key_mismatches;

void NoteCutKey(uint64_t key, const uintptr_t* frames, int count, int max) {
  g_cut_keyed.fetch_add(1);
  if (count != max) g_cut_key_mismatches.fetch_add(1);  // only walks cut at the limit
  if (g_cut_keys == nullptr) return;
  for (const CutKey& seen : *g_cut_keys) {
    if (seen.key != key) continue;
    g_cut_key_repeats.fetch_add(1);
    if (seen.frames != std::vector<uintptr_t>(frames, frames + count)) {
      g_cut_key_mismatches.fetch_add(1);
    }
    return;
  }
  // Allocates: the probe's malloc passes through (t_inside is set).
  g_cut_keys->push_back({key, std::vector<uintptr_t>(frames, frames + count)});
}

// Both walks, from the frame of the malloc replacement.
__attribute__((noinline)) void Probe(const uintptr_t* malloc_frame) {
  const UnwindRegisters regs = CallerOfFrame(malloc_frame);
  void* by_libunwind[kMaxFrames];
  const int libunwind_count = g_unw_backtrace(by_libunwind, kMaxFrames);
  // by_libunwind starts inside Probe, then malloc: skip to malloc's caller.
  int skip = 0;
  while (skip < libunwind_count && skip < 4 &&
         reinterpret_cast<uintptr_t>(by_libunwind[skip]) != regs.ip) {
    ++skip;
  }
  uintptr_t by_cfi[kMaxFrames];
  CfiStackHash hash;
  const int max = t_max_frames > 0 ? std::min(t_max_frames, kMaxFrames - skip) : kMaxFrames - skip;
  const int cfi_count = t_lazy
                            ? CfiUnwindLazily(regs, t_stack_low, t_stack_high, by_cfi, max, &hash)
                            : CfiUnwind(regs, t_stack_low, t_stack_high, by_cfi, max, &hash);
  if (cfi_count > 0 && t_lazy && hash.pending_ips != nullptr) {
    g_pending.fetch_add(1);
    if (CfiFirstPendingFrame(hash) != regs.ip) g_mismatches.fetch_add(1);
    memset(by_cfi, 0, sizeof(by_cfi));  // nothing of the walk's may be left there
    CfiWritePendingFrames(hash, by_cfi, cfi_count);
  }
  g_probes.fetch_add(1);
  if (cfi_count >= 0 && hash.known) {
    g_hashed.fetch_add(1);
    if (hash.value != StackHash(by_cfi, cfi_count, false)) g_hash_mismatches.fetch_add(1);
  }
  if (cfi_count >= 0 && hash.cut_key) NoteCutKey(hash.value, by_cfi, cfi_count, max);
  if (cfi_count < 0) {
    g_fallbacks.fetch_add(1);
    return;
  }
  g_frames.fetch_add(cfi_count);
  bool same = cfi_count == std::min(libunwind_count - skip, max);
  for (int i = 0; same && i < cfi_count; ++i) {
    same = by_cfi[i] == reinterpret_cast<uintptr_t>(by_libunwind[skip + i]);
  }
  if (same) {
    g_matches.fetch_add(1);
    return;
  }
  g_mismatches.fetch_add(1);
  if (!g_have_mismatch.exchange(true)) {
    g_mismatch.cfi_count = cfi_count;
    g_mismatch.libunwind_count = std::min(libunwind_count - skip, max);
    memcpy(g_mismatch.cfi, by_cfi, sizeof(uintptr_t) * cfi_count);
    for (int i = skip; i < libunwind_count; ++i) {
      g_mismatch.libunwind[i - skip] = reinterpret_cast<uintptr_t>(by_libunwind[i]);
    }
  }
}

// DISABLED_Speed: times both walks from one malloc call, `t_bench_rounds`
// times each.
thread_local int t_bench_rounds;
struct BenchResult {
  double cfi_ns;
  double libunwind_ns;
  int frames;
};
BenchResult g_bench;

double NowNs() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) * 1e9 + static_cast<double>(now.tv_nsec);
}

__attribute__((noinline)) void Bench(const uintptr_t* malloc_frame) {
  const UnwindRegisters regs = CallerOfFrame(malloc_frame);
  uintptr_t frames[kMaxFrames];
  void* by_libunwind[kMaxFrames];
  g_unw_backtrace(by_libunwind, kMaxFrames);  // warm libunwind's cache
  g_bench.frames = CfiUnwind(regs, t_stack_low, t_stack_high, frames, kMaxFrames);
  double start = NowNs();
  for (int i = 0; i < t_bench_rounds; ++i) {
    CfiUnwind(regs, t_stack_low, t_stack_high, frames, kMaxFrames);
    asm volatile("" ::: "memory");
  }
  g_bench.cfi_ns = (NowNs() - start) / t_bench_rounds;
  start = NowNs();
  for (int i = 0; i < t_bench_rounds; ++i) {
    g_unw_backtrace(by_libunwind, kMaxFrames);
    asm volatile("" ::: "memory");
  }
  g_bench.libunwind_ns = (NowNs() - start) / t_bench_rounds;
}

}  // namespace
}  // namespace retain::shim

// Replaces the process's malloc (libstdc++'s operator new and libc's strdup
// call it through the PLT). Memory comes from glibc, so glibc's free, calloc
// and realloc still apply to it.
extern "C" __attribute__((noinline)) void* malloc(size_t size) {
  using namespace retain::shim;
  if (t_armed && !t_inside) {
    t_inside = true;  // libunwind may allocate on a thread's first walk
    if (t_bench_rounds > 0) {
      Bench(static_cast<const uintptr_t*>(__builtin_frame_address(0)));
    } else {
      Probe(static_cast<const uintptr_t*>(__builtin_frame_address(0)));
    }
    t_inside = false;
  }
  return __libc_malloc(size);
}

namespace retain::shim {
namespace {

void Arm() {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_getattr_np(pthread_self(), &attr), 0);
  void* low = nullptr;
  size_t size = 0;
  pthread_attr_getstack(&attr, &low, &size);
  pthread_attr_destroy(&attr);
  t_stack_low = reinterpret_cast<uintptr_t>(low);
  t_stack_high = t_stack_low + size;
  t_armed = true;
}

void Disarm() { t_armed = false; }

std::string Describe(uintptr_t address) {
  Dl_info info;
  char text[64];
  snprintf(text, sizeof(text), "%#lx", static_cast<unsigned long>(address));
  std::string out = text;
  if (dladdr(reinterpret_cast<void*>(address), &info) != 0) {
    out += " ";
    out += info.dli_sname != nullptr ? info.dli_sname : "?";
    out += " in ";
    out += info.dli_fname != nullptr ? info.dli_fname : "?";
  }
  return out;
}

std::string DescribeMismatch() {
  if (!g_have_mismatch.load()) return "";
  std::string out = "first mismatch, cfi | libunwind:\n";
  const Mismatch& m = g_mismatch;
  for (int i = 0; i < std::max(m.cfi_count, m.libunwind_count); ++i) {
    out += "  " + std::to_string(i) + ": ";
    out += i < m.cfi_count ? Describe(m.cfi[i]) : "-";
    out += " | ";
    out += i < m.libunwind_count ? Describe(m.libunwind[i]) : "-";
    out += "\n";
  }
  return out;
}

class CfiUnwinderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Private, as in the shim: libunwind's _Unwind_* must not replace
    // libgcc's for gtest.
    void* handle = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle, nullptr) << dlerror();
    g_unw_backtrace = reinterpret_cast<BacktraceFn>(dlsym(handle, "unw_backtrace"));
    ASSERT_NE(g_unw_backtrace, nullptr);
  }

  void SetUp() override {
    g_probes = 0;
    g_matches = 0;
    g_fallbacks = 0;
    g_mismatches = 0;
    g_frames = 0;
    g_have_mismatch = false;
    g_hashed = 0;
    g_hash_mismatches = 0;
    g_cut_keyed = 0;
    g_cut_key_repeats = 0;
    g_cut_key_mismatches = 0;
    g_pending = 0;
  }

  // Every probe walked by CFI gave libunwind's frames, and at least
  // `min_probes` were walked by CFI.
  void ExpectAllMatch(int min_probes, bool fallbacks_allowed = false) {
    EXPECT_EQ(g_mismatches.load(), 0) << DescribeMismatch();
    EXPECT_EQ(g_hash_mismatches.load(), 0);
    EXPECT_EQ(g_cut_key_mismatches.load(), 0);
    EXPECT_GE(g_matches.load(), min_probes);
    if (!fallbacks_allowed) {
      EXPECT_EQ(g_fallbacks.load(), 0);
    }
    EXPECT_EQ(g_matches + g_fallbacks + g_mismatches, g_probes.load());
  }
};

long Probed(int depth, unsigned seed, Leaf leaf) {
  Arm();
  long result = cfi_fixture::Descend(depth, seed, leaf);
  Disarm();
  return result;
}

TEST_F(CfiUnwinderTest, DeepRecursionWithoutFramePointers) {
  long sum = 0;
  for (int depth : {0, 1, 2, 7, 20, 41, 90}) {
    for (unsigned seed = 0; seed < 8; ++seed) sum += Probed(depth, seed, Leaf::kMalloc);
  }
  EXPECT_NE(sum, -1);
  ExpectAllMatch(56);
  // The deepest stacks fill the buffer: both walks stop at the same frame.
  EXPECT_GT(g_frames.load(), 56 * 10);
}

TEST_F(CfiUnwinderTest, ThroughLibstdcxx) {
  for (unsigned seed = 0; seed < 6; ++seed) {
    Probed(9, seed, Leaf::kNew);
    Probed(9, seed, Leaf::kVector);
    Probed(9, seed, Leaf::kString);
  }
  ExpectAllMatch(6 * 3);
}

TEST_F(CfiUnwinderTest, ThroughLibc) {
  for (unsigned seed = 0; seed < 6; ++seed) {
    Probed(5, seed, Leaf::kQsort);
    Probed(5, seed, Leaf::kStrdup);
  }
  ExpectAllMatch(6 * 2);
}

TEST_F(CfiUnwinderTest, ThroughASharedLibraryWithoutFramePointers) {
  for (unsigned seed = 0; seed < 6; ++seed) Probed(4, seed, Leaf::kSharedLib);
  // Two allocations per run: one in the library, one in the callback.
  ExpectAllMatch(12);
}

TEST_F(CfiUnwinderTest, AllocaAndVariableLengthArrays) {
  for (unsigned seed = 0; seed < 8; ++seed) {
    Probed(6, seed, Leaf::kAlloca);
    Probed(6, seed, Leaf::kVla);
  }
  ExpectAllMatch(16);
}

TEST_F(CfiUnwinderTest, SecondThread) {
  // The thread's stack ends in libstdc++'s thread entry, start_thread and
  // clone3 (its return address is undefined): not in main's _start.
  std::thread thread([] {
    for (unsigned seed = 0; seed < 8; ++seed) {
      Probed(12, seed, Leaf::kMalloc);
      Probed(3, seed, Leaf::kVector);
    }
  });
  thread.join();
  ExpectAllMatch(16);
}

// Every capture writes its thread's memo and reads its header: two threads'
// memos sharing a cache line moved it between their cores at every
// allocation (bench/README.md, sixth round). Four threads alive at once
// (a thread on a dead one's cached stack takes over its memo) each walk,
// then their memos are compared: each starts a line, none overlaps another.
TEST_F(CfiUnwinderTest, EachThreadsMemoHasCacheLinesOfItsOwn) {
  constexpr int kThreads = 4;
  CfiMemoPlace places[kThreads] = {};
  std::atomic<int> placed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&places, &placed, t] {
      Probed(5, static_cast<unsigned>(t), Leaf::kMalloc);
      places[t] = CfiThreadMemoForTesting(t_stack_high);
      placed.fetch_add(1);
      while (placed.load() < kThreads) std::this_thread::yield();
    });
  }
  for (std::thread& thread : threads) thread.join();
  ExpectAllMatch(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_NE(places[t].address, 0u) << "thread " << t;
    EXPECT_EQ(places[t].address % 64, 0u) << "thread " << t;
    EXPECT_EQ(places[t].bytes % 64, 0u);
    for (int u = 0; u < t; ++u) {
      // The lower one's last line is below the upper one's first.
      const uintptr_t lower = std::min(places[t].address, places[u].address);
      const uintptr_t upper = std::max(places[t].address, places[u].address);
      EXPECT_LT((lower + places[t].bytes - 1) / 64, upper / 64)  // both have the same size
          << "threads " << u << " and " << t;
    }
  }
}

void AllocatingHandler(int) {
  void* p = malloc(40);
  free(p);
}

TEST_F(CfiUnwinderTest, SignalHandlerFallsBackOrMatches) {
  struct sigaction action = {};
  struct sigaction old = {};
  action.sa_handler = AllocatingHandler;
  sigemptyset(&action.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &action, &old), 0);
  Arm();
  for (int i = 0; i < 4; ++i) raise(SIGUSR1);
  Disarm();
  sigaction(SIGUSR1, &old, nullptr);
  // The handler's caller is the kernel's signal frame (__restore_rt, an 'S'
  // FDE): the CFI walk hands such stacks to libunwind.
  EXPECT_EQ(g_probes.load(), 4);
  EXPECT_EQ(g_fallbacks.load(), 4);
  EXPECT_EQ(g_mismatches.load(), 0) << DescribeMismatch();
}

TEST_F(CfiUnwinderTest, RulesAreCachedAfterTheFirstWalk) {
  uint64_t misses = 0;
  for (int i = 0; i < 21; ++i) {  // one call site: the same stack every time
    Probed(10, 3, Leaf::kMalloc);
    if (i == 0) misses = CfiCacheMisses();
  }
  EXPECT_EQ(CfiCacheMisses(), misses);
  CfiForgetRules();
  Probed(10, 3, Leaf::kMalloc);
  EXPECT_GT(CfiCacheMisses(), misses);
  ExpectAllMatch(22);
}

// The per-thread memo of the previous walk: stacks that differ only in one
// return address in the middle (same stack address, same frame sizes) must
// not be taken for the previous one.
TEST_F(CfiUnwinderTest, MemoNoticesAChangedCallerInTheMiddle) {
  Arm();
  const long sum = cfi_fixture::AlternateCallers(40);
  Disarm();
  EXPECT_EQ(sum, 40 * 41);  // each caller returns twice its size
  ExpectAllMatch(40);
  // The same again below a varying depth of frames with alloca (rbp-based
  // CFAs) and other layouts.
  for (unsigned seed = 0; seed < 4; ++seed) {
    for (int depth = 1; depth < 6; ++depth) Probed(depth, seed, Leaf::kVector);
  }
  ExpectAllMatch(40 + 20);
}

// The middle of the stack changes below frames with rbp-based CFAs and rbp
// saved in a slot (alloca, VLAs, many registers, chosen by the seed): each
// walk leaves the remembered one where the caller alternates, steps on by
// rule, recomputes rbp through the frames it reused, and meets the memo
// again further out; the walks after it reuse what it left in the memo.
TEST_F(CfiUnwinderTest, LeavingAndMeetingTheMemoAgainBelowRbpFrames) {
  for (int depth = 1; depth < 7; ++depth) {
    for (unsigned seed = 0; seed < 8; ++seed) {
      Probed(depth, seed, Leaf::kAlternate);
      Probed(depth, seed, Leaf::kMalloc);
    }
  }
  ExpectAllMatch(6 * 8 * (4 + 1));
  EXPECT_GE(g_hashed.load(), 6 * 8 * 4);
}

// The dlclose hook forgets the rules only when the loader really unloaded
// an object: LoaderUnloadCount moves then, and only then.
TEST_F(CfiUnwinderTest, LoaderUnloadCountMovesWhenAnObjectGoes) {
  const char* kLibrary = "libresolv.so.2";  // glibc's, not linked by this test
  if (dlopen(kLibrary, RTLD_NOW | RTLD_NOLOAD) != nullptr) GTEST_SKIP() << "already loaded";
  const uint64_t before = LoaderUnloadCount();
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) GTEST_SKIP() << dlerror();
  void* again = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  ASSERT_EQ(dlclose(again), 0);  // drops a reference only
  EXPECT_EQ(LoaderUnloadCount(), before);
  ASSERT_EQ(dlclose(handle), 0);
  EXPECT_GT(LoaderUnloadCount(), before);
}

// Random sequences of walks: each reuses what it can of the previous one
// (same outer frames, a different middle, different rbp values at the
// join) and must still match libunwind frame for frame.
void RandomSequences() {
  std::mt19937 random(99);
  const Leaf leaves[] = {Leaf::kMalloc, Leaf::kNew,    Leaf::kVector, Leaf::kString,
                         Leaf::kStrdup, Leaf::kAlloca, Leaf::kVla,    Leaf::kSharedLib};
  Arm();
  for (int i = 0; i < 400; ++i) {
    const int depth = static_cast<int>(random() % 30);
    const unsigned seed = static_cast<unsigned>(random() % 16);
    cfi_fixture::Descend(depth, seed, leaves[random() % 8]);
    if (i % 50 == 0) cfi_fixture::AlternateCallers(6);
  }
  Disarm();
}

TEST_F(CfiUnwinderTest, MemoUnderRandomSequences) {
  RandomSequences();
  ExpectAllMatch(400);
  // Most walks reuse the previous one and give their hash (checked above
  // against StackHash of their frames).
  EXPECT_GE(g_hashed.load(), 200);
}

// The same walks as the shim's capture takes them: those that reuse the
// memo leave their frames there, and give libunwind's when written out.
TEST_F(CfiUnwinderTest, LazyWalksUnderRandomSequences) {
  t_lazy = true;
  RandomSequences();
  t_lazy = false;
  ExpectAllMatch(400);
  EXPECT_GE(g_hashed.load(), 200);
  EXPECT_GE(g_pending.load(), 200);
}

// The same under a depth limit that cuts most stacks, changed every few
// walks: a walk cut inside the remembered one (the memo keeps the frames past
// the cut), one that runs past the end of a memo that was itself cut and
// steps on from there, one that meets the memo again and is cut after it,
// and a stack that ends before the limit after a cut one. Each gives exactly
// libunwind's first frames, as many as the limit allows.
void RandomSequencesCutAtTheDepthLimit() {
  std::mt19937 random(7);
  const Leaf leaves[] = {Leaf::kMalloc, Leaf::kNew,       Leaf::kVector,
                         Leaf::kString, Leaf::kStrdup,    Leaf::kAlloca,
                         Leaf::kVla,    Leaf::kSharedLib, Leaf::kAlternate};
  const int limits[] = {1, 2, 5, 9, 16, 24, 33, 49};
  std::vector<CutKey> cut_keys;
  cut_keys.reserve(1000);
  g_cut_keys = &cut_keys;
  Arm();
  for (int i = 0; i < 600; ++i) {
    if (i % 5 == 0) t_max_frames = limits[random() % 8];
    const int depth = static_cast<int>(random() % 40);
    const unsigned seed = static_cast<unsigned>(random() % 16);
    cfi_fixture::Descend(depth, seed, leaves[random() % 9]);
    if (i % 60 == 0) cfi_fixture::AlternateCallers(6);
  }
  Disarm();
  t_max_frames = 0;
  g_cut_keys = nullptr;
}

TEST_F(CfiUnwinderTest, MemoUnderRandomSequencesCutAtTheDepthLimit) {
  RandomSequencesCutAtTheDepthLimit();
  ExpectAllMatch(600);
  // The walks that ended short of the limit as the memo does gave their
  // hash (checked against their frames above); those cut at it, a key that
  // only walks with the same frames shared.
  EXPECT_GE(g_hashed.load(), 20);
  EXPECT_GE(g_cut_keyed.load(), 300);
  EXPECT_GE(g_cut_key_repeats.load(), 30);
}

TEST_F(CfiUnwinderTest, LazyWalksUnderRandomSequencesCutAtTheDepthLimit) {
  t_lazy = true;
  RandomSequencesCutAtTheDepthLimit();
  t_lazy = false;
  ExpectAllMatch(600);
  EXPECT_GE(g_hashed.load(), 20);
  EXPECT_GE(g_cut_keyed.load(), 300);
  EXPECT_GE(g_cut_key_repeats.load(), 30);
  EXPECT_GE(g_pending.load(), 300);
}

// Not a test: ns per walk and per frame, CFI against unw_backtrace, from a
// malloc 30 frames down (plus gtest's). Run with
// --gtest_also_run_disabled_tests --gtest_filter='*Speed*'.
TEST_F(CfiUnwinderTest, DISABLED_Speed) {
  t_bench_rounds = 200000;
  Probed(30, 1, Leaf::kMalloc);
  t_bench_rounds = 0;
  printf("frames %d: cfi %.1f ns (%.2f ns/frame), unw_backtrace %.1f ns (%.2f ns/frame)\n",
         g_bench.frames, g_bench.cfi_ns, g_bench.cfi_ns / g_bench.frames, g_bench.libunwind_ns,
         g_bench.libunwind_ns / g_bench.frames);
}

// Addresses of real code, so garbage stacks reach the rule lookups and the
// parser, not only the "not in any object" path.
std::vector<uintptr_t> CodeAddresses() {
  std::vector<uintptr_t> out;
  const void* functions[] = {reinterpret_cast<const void*>(&cfi_fixture::Descend),
                             reinterpret_cast<const void*>(&malloc),
                             reinterpret_cast<const void*>(&qsort),
                             reinterpret_cast<const void*>(&strdup),
                             reinterpret_cast<const void*>(&CfiUnwind),
                             reinterpret_cast<const void*>(&cfi_fixture_lib_descend)};
  for (const void* f : functions) {
    for (uintptr_t offset = 0; offset < 512; offset += 3) {
      out.push_back(reinterpret_cast<uintptr_t>(f) + offset);
    }
  }
  return out;
}

TEST_F(CfiUnwinderTest, GarbageStacksNeverCrash) {
  std::mt19937_64 random(12345);
  const std::vector<uintptr_t> code = CodeAddresses();
  constexpr size_t kWords = 4096;
  std::vector<uintptr_t> stack(kWords);
  const auto low = reinterpret_cast<uintptr_t>(stack.data());
  const uintptr_t high = low + kWords * sizeof(uintptr_t);
  uintptr_t frames[64];
  int walked = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    if (trial % 100 == 0) {  // a new stack: code addresses, stack addresses, noise
      for (uintptr_t& word : stack) {
        switch (random() % 4) {
          case 0:
            word = code[random() % code.size()];
            break;
          case 1:
            word = low + (random() % (kWords + 64)) * 8 - 256;
            break;
          case 2:
            word = random() % 64;
            break;
          default:
            word = random();
        }
      }
    }
    UnwindRegisters regs{code[random() % code.size()], low + (random() % kWords) * 8,
                         trial % 2 == 0 ? low + (random() % kWords) * 8 : random()};
    if (trial % 7 == 0) regs.sp += random() % 8;  // misaligned
    const int count = CfiUnwind(regs, low, high, frames, 64);
    ASSERT_GE(count, -1);
    ASSERT_LE(count, 64);
    if (count > 1) ++walked;
  }
  EXPECT_GT(walked, 0);  // some walks got past a frame: the checks were reached

  // Registers outside the stack are refused before any read.
  UnwindRegisters outside{code[0], high, low};
  EXPECT_EQ(CfiUnwind(outside, low, high, frames, 64), -1);
  outside.sp = low - 8;
  EXPECT_EQ(CfiUnwind(outside, low, high, frames, 64), -1);
  // A return address of 0 is the end of the stack, not a frame.
  UnwindRegisters zero{0, low, low};
  EXPECT_EQ(CfiUnwind(zero, low, high, frames, 64), 0);
}

}  // namespace
}  // namespace retain::shim
