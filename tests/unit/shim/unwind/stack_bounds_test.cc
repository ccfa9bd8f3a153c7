// unwind/stack_bounds: the /proc/self/maps scan on hand-made text fed in
// pieces of every size, and the bounds it gives on real stacks against what
// glibc's pthread_getattr_np says of the same threads.
#include "unwind/stack_bounds.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "gtest/gtest.h"

extern "C" void* __libc_stack_end;

namespace retain::shim {
namespace {

// A line longer than any piece (and than the shim's 1 KiB buffer), a line
// that is not a mapping, and the last line without its newline.
const std::string kMaps =
    "55d0c0000000-55d0c0001000 r--p 00000000 08:01 42 /usr/bin/server\n"
    "55d0c0001000-55d0c0005000 r-xp 00001000 08:01 42 /usr/bin/server\n"
    "7f0000000000-7f0000800000 rw-p 00000000 00:00 0 /" +
    std::string(3000, 'x') +
    "\n"
    "not a mapping at all\n"
    "7f0000801000-7f0001000000 rw-p 00000000 00:00 0\n"
    "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]";

MappingFinder FeedInPieces(uintptr_t address, size_t piece) {
  MappingFinder finder(address);
  for (size_t at = 0; at < kMaps.size(); at += piece) {
    finder.Feed(kMaps.data() + at, std::min(piece, kMaps.size() - at));
  }
  return finder;
}

TEST(MappingFinder, FindsTheMappingWhateverThePieces) {
  for (size_t piece = 1; piece <= 120; ++piece) {
    SCOPED_TRACE(piece);
    MappingFinder finder = FeedInPieces(0x7f0000900000, piece);
    ASSERT_TRUE(finder.found());
    EXPECT_EQ(finder.start(), 0x7f0000801000u);
    EXPECT_EQ(finder.end(), 0x7f0001000000u);
    // The long line before the junk line is the one before it.
    EXPECT_EQ(finder.previous_end(), 0x7f0000800000u);
  }
}

TEST(MappingFinder, StartsAreInsideAndEndsAreNot) {
  EXPECT_EQ(FeedInPieces(0x55d0c0001000, 7).start(), 0x55d0c0001000u);
  EXPECT_EQ(FeedInPieces(0x55d0c0000fff, 7).start(), 0x55d0c0000000u);
  EXPECT_EQ(FeedInPieces(0x55d0c0000000, 7).previous_end(), 0u);      // the first line
  EXPECT_EQ(FeedInPieces(0x7ffc00020fff, 7).end(), 0x7ffc00021000u);  // no newline at the end
  EXPECT_FALSE(FeedInPieces(0x7f0000800000, 7).found());  // the gap between two mappings
  EXPECT_FALSE(FeedInPieces(0x7ffc00021000, 7).found());
  EXPECT_FALSE(FeedInPieces(0x1000, 7).found());
}

TEST(MappingFinder, ForgetsAHalfReadRangeAtTheNextLine) {
  MappingFinder finder(0x2500);
  const std::string text = "12zz-3000 rw-p\n2000-3000 rw-p\n";
  finder.Feed(text.data(), text.size());
  ASSERT_TRUE(finder.found());
  EXPECT_EQ(finder.start(), 0x2000u);
}

struct GlibcBounds {
  uintptr_t low;
  uintptr_t high;
};

GlibcBounds Glibc() {
  pthread_attr_t attr;
  EXPECT_EQ(pthread_getattr_np(pthread_self(), &attr), 0);
  void* low = nullptr;
  size_t size = 0;
  pthread_attr_getstack(&attr, &low, &size);
  pthread_attr_destroy(&attr);
  return {reinterpret_cast<uintptr_t>(low), reinterpret_cast<uintptr_t>(low) + size};
}

// GoogleTest runs the tests on the main thread: its bounds are glibc's, to
// the byte.
TEST(StackBounds, TheMainThreadsAreGlibcs) {
  ASSERT_EQ(static_cast<pid_t>(syscall(SYS_gettid)), getpid());
  const StackBounds ours = ReadThreadStackBounds();
  const GlibcBounds glibc = Glibc();
  EXPECT_EQ(ours.low, glibc.low);
  EXPECT_EQ(ours.high, glibc.high);
}

// `size` bytes of read-write memory between two inaccessible pages, so the
// kernel cannot merge it with a neighbouring mapping: a mapping of its own.
class GuardedRegion {
 public:
  explicit GuardedRegion(size_t size) : size_(size) {
    auto* region = static_cast<char*>(
        mmap(nullptr, size + 2 * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (region == MAP_FAILED) return;
    region_ = region;
    if (mprotect(region_ + kPage, size, PROT_READ | PROT_WRITE) != 0) ADD_FAILURE() << "mprotect";
  }
  ~GuardedRegion() {
    if (region_ != nullptr) munmap(region_, size_ + 2 * kPage);
  }
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;
  char* start() const { return region_ == nullptr ? nullptr : region_ + kPage; }

 private:
  static constexpr size_t kPage = 4096;
  size_t size_;
  char* region_ = nullptr;
};

struct ThreadResult {
  StackBounds ours;
  GlibcBounds glibc;
  uintptr_t descriptor;
  uintptr_t frame;
};

void* BoundsOnThisThread(void* argument) {
  auto* result = static_cast<ThreadResult*>(argument);
  result->ours = ReadThreadStackBounds();
  result->glibc = Glibc();
  result->descriptor = static_cast<uintptr_t>(pthread_self());
  result->frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  return nullptr;
}

ThreadResult RunThread(const pthread_attr_t* attr) {
  ThreadResult result{};
  pthread_t thread;
  EXPECT_EQ(pthread_create(&thread, attr, BoundsOnThisThread, &result), 0);
  pthread_join(thread, nullptr);
  return result;
}

// Another thread: from glibc's low end (above the guard page, a mapping of
// its own) up to the thread's descriptor, which sits at the top of the
// stack block, above every frame.
TEST(StackBounds, AnotherThreadsRunFromItsLowEndToItsDescriptor) {
  const ThreadResult result = RunThread(nullptr);
  EXPECT_EQ(result.ours.low, result.glibc.low);
  EXPECT_EQ(result.ours.high, result.descriptor);
  EXPECT_LT(result.ours.high, result.glibc.high);
  EXPECT_GT(result.frame, result.ours.low);
  EXPECT_LT(result.frame, result.ours.high);
}

// A stack the program gave its thread (pthread_attr_setstack), in a mapping
// of its own between two inaccessible pages.
TEST(StackBounds, AThreadOnAStackOfTheProgramsOwn) {
  constexpr size_t kStack = 256 * 1024;
  GuardedRegion region(kStack);
  char* stack = region.start();
  ASSERT_NE(stack, nullptr);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, stack, kStack);
  const ThreadResult result = RunThread(&attr);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(result.ours.low, reinterpret_cast<uintptr_t>(stack));
  EXPECT_EQ(result.ours.high, result.descriptor);
  EXPECT_LE(result.ours.high, reinterpret_cast<uintptr_t>(stack + kStack));
  EXPECT_GT(result.frame, result.ours.low);
  EXPECT_LT(result.frame, result.ours.high);
}

// The main thread running on another stack when its bounds are read (a
// coroutine's, a signal handler's alternate one): still its own stack's, so
// the other one is outside them.
TEST(StackBounds, TheMainThreadsOwnWhileOnAnotherStack) {
  constexpr size_t kSize = 64 * 1024;
  GuardedRegion region(kSize);
  ASSERT_NE(region.start(), nullptr);
  const auto elsewhere = reinterpret_cast<uintptr_t>(region.start() + kSize / 2);
  const StackBounds bounds =
      StackBoundsFor(elsewhere, static_cast<uintptr_t>(pthread_self()),
                     reinterpret_cast<uintptr_t>(__libc_stack_end), /*main_thread=*/true);
  const GlibcBounds glibc = Glibc();
  EXPECT_EQ(bounds.low, glibc.low);
  EXPECT_EQ(bounds.high, glibc.high);
  EXPECT_FALSE(elsewhere >= bounds.low && elsewhere < bounds.high);
}

// A thread whose descriptor is in no mapping (a raw clone's borrowed one
// would be somewhere else entirely): no bounds, so libunwind takes its
// stacks.
TEST(StackBounds, NoneWithoutADescriptorOnAStack) {
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const StackBounds bounds = StackBoundsFor(here, 0x1000, 0, /*main_thread=*/false);
  EXPECT_EQ(bounds.low, 0u);
  EXPECT_EQ(bounds.high, 0u);
}

}  // namespace
}  // namespace retain::shim
