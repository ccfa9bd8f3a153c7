// The Go part of a stack walk (shim/src/unwind/go_stack.h) on goroutine and
// thread stacks built in memory, and the decoding of the runtime's code it
// relies on (shim/src/unwind/go_runtime.h).
//
// The stacks are arrays laid out as the runtime lays them out (a frame: the
// caller's frame pointer, then the return address), around the transitions
// the walk knows: asmcgocall's slots (g, depth) on the thread's stack, a
// callback's way back through cgocallback and crosscall2, systemstack's
// switch. Code addresses are fake (the walk compares them, never reads
// them): a classifier tells Go code from C code as the CFI walker's rule
// cache would. Bad pointers point at a PROT_NONE page: a walk that read one
// would crash the test.
#include "unwind/go_stack.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>

#include <cstdint>
#include <vector>

#include "unwind/go_runtime.h"

namespace retain::shim {
namespace {

// Fake code: Go text, and C code outside it.
constexpr uintptr_t kText = 0x10000000;
constexpr uintptr_t kC = 0x20000000;
constexpr uintptr_t kCgoCallReturn = kText + 0x1042;
constexpr uintptr_t kCgoCallOnSystemStackReturn = kText + 0x1081;
constexpr uintptr_t kCgocallback = kText + 0x2000;
constexpr uintptr_t kSystemstack = kText + 0x3000;
constexpr uintptr_t kGoexit = kText + 0x4000;
constexpr uintptr_t kMstart = kText + 0x5000;

// A return address inside Go function `n`.
constexpr uintptr_t GoCode(int n) { return kText + 0x10000 + n * 0x100 + 0x21; }
constexpr uintptr_t CCode(int n) { return kC + n * 0x100 + 0x11; }

ReturnKind Classify(uintptr_t ip) {
  if (ip >= kC && ip < kC + 0x100000) return ReturnKind::kC;
  if (ip >= kText && ip < kText + 0x100000) return ReturnKind::kGo;
  return ReturnKind::kUnknown;
}

GoModule FakeModule() {
  GoModule module;
  module.text = {kText, kText + 0x100000};
  module.asmcgocall = {kText + 0x1000, kText + 0x1100};
  module.cgocallback = {kCgocallback, kCgocallback + 0x100};
  module.systemstack = {kSystemstack, kSystemstack + 0x100};
  module.mcall = {kText + 0x3100, kText + 0x3200};
  module.morestack = {kText + 0x3200, kText + 0x3300};
  module.goexit = {kGoexit, kGoexit + 0x10};
  module.mstart = {kMstart, kMstart + 0x10};
  module.rt0_go = {kText + 0x6000, kText + 0x6100};
  module.cgo_call_return = kCgoCallReturn;
  module.cgo_call_return_on_system_stack = kCgoCallOnSystemStackReturn;
  module.g_slot = 0x30;
  module.depth_slot = 0x28;
  return module;
}

// A stack: words, addressed by index.
struct Stack {
  explicit Stack(size_t words) : words(words, 0) {}
  uintptr_t At(size_t index) { return reinterpret_cast<uintptr_t>(&words[index]); }
  void Set(size_t index, uintptr_t value) { words[index] = value; }
  // A frame whose frame pointer is at `index`: the caller's frame pointer,
  // then the return address into the caller.
  void Frame(size_t index, uintptr_t next_bp, uintptr_t ret) {
    words[index] = next_bp;
    words[index + 1] = ret;
  }
  StackBounds Bounds() { return {At(0), At(0) + words.size() * sizeof(uintptr_t)}; }
  std::vector<uintptr_t> words;
};

// A page nothing may read.
uintptr_t Forbidden() {
  static void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return reinterpret_cast<uintptr_t>(page);
}

class GoStackTest : public ::testing::Test {
 protected:
  void SetUp() override { ForgetCheckedGsForTest(); }
  void TearDown() override { ForgetCheckedGsForTest(); }

  // The thread's stack as asmcgocall leaves it for its C call: at.sp is the
  // C function's CFA (index 10); g and the depth in the slots above.
  UnwindRegisters CgoCall(uintptr_t g, uintptr_t depth, uintptr_t bp) {
    thread_.Set(10 + 0x30 / 8, g);
    thread_.Set(10 + 0x28 / 8, depth);
    return {kCgoCallReturn, thread_.At(10), bp};
  }

  std::vector<uintptr_t> Walk(GoEntry entry, UnwindRegisters at, int max = 32,
                              GoWalkResult* result_out = nullptr) {
    uintptr_t frames[64];
    const GoWalkResult result =
        WalkGoFrames(module_, entry, at, thread_.Bounds(), Classify, frames, max);
    if (result_out != nullptr) *result_out = result;
    return std::vector<uintptr_t>(frames, frames + result.count);
  }

  GoModule module_ = FakeModule();
  Stack thread_{512};
  Stack goroutine_{512};
  uintptr_t g_[8] = {};
};

// The goroutine's stack of a Go function that called C: from the goroutine's
// SP at the call (index 100: the return address into asmcgocall's caller)
// up to the goroutine's first frame.
TEST_F(GoStackTest, CgoCallFromAGoroutineReachesGoexit) {
  g_[0] = goroutine_.At(0);
  g_[1] = goroutine_.At(512);                            // g.stack.hi
  goroutine_.Set(100, GoCode(1));                        // into cgocall (via the ABI wrapper)
  goroutine_.Frame(104, goroutine_.At(110), GoCode(2));  // cgocall -> main._Cfunc_f
  goroutine_.Frame(110, goroutine_.At(120), GoCode(3));  // -> main.allocDirect
  goroutine_.Frame(120, goroutine_.At(130), GoCode(4));  // -> main.main
  goroutine_.Frame(130, 0, kGoexit + 1);                 // -> runtime.goexit
  const uintptr_t depth = goroutine_.At(512) - goroutine_.At(100);
  const UnwindRegisters at = CgoCall(reinterpret_cast<uintptr_t>(g_), depth, goroutine_.At(104));
  const std::vector<uintptr_t> expected = {GoCode(1), GoCode(2), GoCode(3), GoCode(4), kGoexit + 1};

  const uint64_t reads = GoKernelReadsForTest();
  EXPECT_EQ(Walk(GoEntry::kCgoCall, at), expected);
  EXPECT_EQ(GoKernelReadsForTest() - reads, 1u) << "g is read by the kernel once";
  EXPECT_EQ(Walk(GoEntry::kCgoCall, at), expected);
  EXPECT_EQ(GoKernelReadsForTest() - reads, 1u) << "then it is known";
}

// The depth is what locates the goroutine's SP (its stack may have moved in
// a callback since the call): g.stack.hi - depth.
TEST_F(GoStackTest, TheDepthIsFromTheCurrentStackTop) {
  Stack moved(512);
  g_[0] = moved.At(0);
  g_[1] = moved.At(512);
  moved.Set(200, GoCode(1));
  moved.Frame(204, 0, kGoexit + 1);
  const UnwindRegisters at =
      CgoCall(reinterpret_cast<uintptr_t>(g_), moved.At(512) - moved.At(200), moved.At(204));
  EXPECT_EQ(Walk(GoEntry::kCgoCall, at), (std::vector<uintptr_t>{GoCode(1), kGoexit + 1}));
}

TEST_F(GoStackTest, ABadGIsNeverRead) {
  const uintptr_t depth = 64;
  EXPECT_TRUE(Walk(GoEntry::kCgoCall, CgoCall(Forbidden(), depth, goroutine_.At(104))).empty());
  EXPECT_TRUE(Walk(GoEntry::kCgoCall, CgoCall(0, depth, goroutine_.At(104))).empty());
  EXPECT_TRUE(Walk(GoEntry::kCgoCall, CgoCall(Forbidden() + 3, depth, 0)).empty());
  // The slots themselves lie outside the thread's stack.
  EXPECT_TRUE(
      Walk(GoEntry::kCgoCall, {kCgoCallReturn, thread_.Bounds().high - 16, goroutine_.At(104)})
          .empty());
}

TEST_F(GoStackTest, GStackBoundsAreChecked) {
  goroutine_.Set(100, GoCode(1));
  goroutine_.Frame(104, 0, kGoexit + 1);
  const uintptr_t g = reinterpret_cast<uintptr_t>(g_);
  // hi below lo; a stack over the runtime's 1 GiB limit; a depth past the
  // stack's size; an unaligned depth.
  g_[0] = goroutine_.At(512);
  g_[1] = goroutine_.At(0);
  EXPECT_TRUE(Walk(GoEntry::kCgoCall, CgoCall(g, 64, goroutine_.At(104))).empty());
  g_[0] = goroutine_.At(0);
  g_[1] = goroutine_.At(0) + (uintptr_t{2} << 30);
  EXPECT_TRUE(Walk(GoEntry::kCgoCall, CgoCall(g, 64, goroutine_.At(104))).empty());
  g_[1] = goroutine_.At(512);
  EXPECT_TRUE(Walk(GoEntry::kCgoCall, CgoCall(g, 8 * 513, goroutine_.At(104))).empty());
  EXPECT_TRUE(Walk(GoEntry::kCgoCall, CgoCall(g, 8 * 412 + 3, goroutine_.At(104))).empty());
  // A frame pointer below the goroutine's SP at the call.
  EXPECT_EQ(Walk(GoEntry::kCgoCall, CgoCall(g, 8 * 412, goroutine_.At(90))),
            (std::vector<uintptr_t>{GoCode(1)}));
}

TEST_F(GoStackTest, EveryFramePointerStaysInsideTheGoroutinesStack) {
  g_[0] = goroutine_.At(0);
  g_[1] = goroutine_.At(512);
  goroutine_.Set(100, GoCode(1));
  goroutine_.Frame(104, goroutine_.At(110), GoCode(2));
  const uintptr_t g = reinterpret_cast<uintptr_t>(g_);
  const UnwindRegisters at = CgoCall(g, 8 * 412, goroutine_.At(104));
  const std::vector<uintptr_t> two = {GoCode(1), GoCode(2)};
  for (uintptr_t bad : {Forbidden(), goroutine_.At(512) - 8, goroutine_.At(104), goroutine_.At(100),
                        goroutine_.At(111) + 4, uintptr_t{0}}) {
    goroutine_.Frame(110, bad, GoCode(3));
    const std::vector<uintptr_t> three = {GoCode(1), GoCode(2), GoCode(3)};
    EXPECT_EQ(Walk(GoEntry::kCgoCall, at), three) << std::hex << bad;
  }
  // A return address that is neither Go code nor C code ends the walk.
  goroutine_.Frame(110, goroutine_.At(120), 0x1234);
  EXPECT_EQ(Walk(GoEntry::kCgoCall, at), two);
  // So does C code on a goroutine's stack (C runs on the thread's only).
  goroutine_.Frame(110, goroutine_.At(120), CCode(1));
  GoWalkResult result;
  EXPECT_EQ(Walk(GoEntry::kCgoCall, at, 32, &result), two);
  EXPECT_FALSE(result.resume);
}

TEST_F(GoStackTest, StopsAtMax) {
  g_[0] = goroutine_.At(0);
  g_[1] = goroutine_.At(512);
  goroutine_.Set(100, GoCode(1));
  goroutine_.Frame(104, goroutine_.At(110), GoCode(2));
  goroutine_.Frame(110, goroutine_.At(120), GoCode(3));
  goroutine_.Frame(120, 0, kGoexit + 1);
  const UnwindRegisters at = CgoCall(reinterpret_cast<uintptr_t>(g_), 8 * 412, goroutine_.At(104));
  EXPECT_EQ(Walk(GoEntry::kCgoCall, at, 1), (std::vector<uintptr_t>{GoCode(1)}));
  EXPECT_EQ(Walk(GoEntry::kCgoCall, at, 3),
            (std::vector<uintptr_t>{GoCode(1), GoCode(2), GoCode(3)}));
  EXPECT_TRUE(Walk(GoEntry::kCgoCall, at, 0).empty());
}

// C -> Go -> C: the goroutine's frames of the callback end at cgocallbackg's
// return into cgocallback, whose frame is on the thread's stack, then
// crosscall2's, then the C function that called Go: the CFI walker's.
TEST_F(GoStackTest, ACallbackGoesBackToItsCCaller) {
  g_[0] = goroutine_.At(0);
  g_[1] = goroutine_.At(512);
  goroutine_.Set(100, GoCode(1));                        // cgocall
  goroutine_.Frame(104, goroutine_.At(110), GoCode(2));  // main._Cfunc_malloc
  goroutine_.Frame(110, goroutine_.At(120), GoCode(3));  // main.allocInCallback
  goroutine_.Frame(120, goroutine_.At(130), GoCode(4));  // main.goCallback ... cgocallbackg
  // cgocallbackg.abi0's frame: its caller is cgocallback, on the thread's stack.
  goroutine_.Frame(130, thread_.At(300), kCgocallback + 0x54);
  thread_.Frame(300, thread_.At(310), GoCode(9));  // cgocallback -> crosscall2
  thread_.Frame(310, thread_.At(400), CCode(1));   // crosscall2 -> the C caller
  const UnwindRegisters at = CgoCall(reinterpret_cast<uintptr_t>(g_), 8 * 412, goroutine_.At(104));
  GoWalkResult result;
  EXPECT_EQ(Walk(GoEntry::kCgoCall, at, 32, &result),
            (std::vector<uintptr_t>{GoCode(1), GoCode(2), GoCode(3), GoCode(4), kCgocallback + 0x54,
                                    GoCode(9)}));
  ASSERT_TRUE(result.resume);
  EXPECT_EQ(result.resume_at.ip, CCode(1));
  EXPECT_EQ(result.resume_at.sp, thread_.At(312));  // crosscall2's CFA
  EXPECT_EQ(result.resume_at.bp, thread_.At(400));

  // cgocallback's saved frame pointer must be on the thread's stack.
  goroutine_.Frame(130, Forbidden(), kCgocallback + 0x54);
  EXPECT_EQ(Walk(GoEntry::kCgoCall, at, 32, &result).size(), 5u);
  EXPECT_FALSE(result.resume);
}

// The Go heap's mmaps: x_cgo_mmap (C) returns into callCgoMmap (a Go
// function with a frame), on the thread's stack, where the runtime moved
// through systemstack; its saved frame pointer leads to the goroutine's
// stack, whose bounds are not known there: each page is checked first.
TEST_F(GoStackTest, SystemstackLeadsToTheGoroutine) {
  thread_.Frame(20, thread_.At(30), GoCode(1));                // callCgoMmap -> mmap.func1
  thread_.Frame(30, thread_.At(40), GoCode(2));                // -> runtime.mmap
  thread_.Frame(40, goroutine_.At(200), kSystemstack + 0x12);  // ... -> systemstack
  goroutine_.Frame(200, goroutine_.At(210), GoCode(3));        // (*mheap).alloc's caller
  goroutine_.Frame(210, goroutine_.At(220), GoCode(4));
  goroutine_.Frame(220, 0, kGoexit + 1);
  const UnwindRegisters at{GoCode(0), thread_.At(12), thread_.At(20)};
  const uint64_t reads = GoKernelReadsForTest();
  EXPECT_EQ(Walk(GoEntry::kGoFrame, at),
            (std::vector<uintptr_t>{GoCode(1), GoCode(2), kSystemstack + 0x12, GoCode(3), GoCode(4),
                                    kGoexit + 1}));
  const uint64_t pages = GoKernelReadsForTest() - reads;
  EXPECT_GE(pages, 1u);
  EXPECT_LE(pages, 2u) << "frames in one page are checked once";

  // A goroutine frame pointer into a page nothing may read: the walk ends
  // before it.
  thread_.Frame(40, Forbidden() + 64, kSystemstack + 0x12);
  EXPECT_EQ(Walk(GoEntry::kGoFrame, at),
            (std::vector<uintptr_t>{GoCode(1), GoCode(2), kSystemstack + 0x12}));
  // The Go function's frame must lie above the C function's CFA.
  EXPECT_TRUE(Walk(GoEntry::kGoFrame, {GoCode(0), thread_.At(25), thread_.At(20)}).empty());
}

// asmcgocall on the thread's own stack (g0: a new thread's start, the
// runtime's own C calls): the depth slot holds the caller's SP.
TEST_F(GoStackTest, CgoCallOnTheThreadsStack) {
  thread_.Set(10 + 0x28 / 8, thread_.At(50));
  thread_.Set(10 + 0x30 / 8, 0);
  thread_.Set(50, GoCode(1));                    // into newm1
  thread_.Frame(54, thread_.At(60), GoCode(2));  // newm1 -> newm
  thread_.Frame(60, thread_.At(70), kMstart + 5);
  thread_.Frame(70, thread_.At(80), GoCode(7));  // never reached: mstart is a thread's first
  const UnwindRegisters at{kCgoCallOnSystemStackReturn, thread_.At(10), thread_.At(54)};
  EXPECT_EQ(Walk(GoEntry::kCgoCallOnSystemStack, at),
            (std::vector<uintptr_t>{GoCode(1), GoCode(2), kMstart + 5}));
  // The saved SP below the C function's CFA, or outside the thread's stack.
  thread_.Set(10 + 0x28 / 8, thread_.At(5));
  EXPECT_TRUE(Walk(GoEntry::kCgoCallOnSystemStack, at).empty());
  thread_.Set(10 + 0x28 / 8, Forbidden());
  EXPECT_TRUE(Walk(GoEntry::kCgoCallOnSystemStack, at).empty());
}

// ---- go_runtime ------------------------------------------------------------

// runtime.asmcgocall.abi0 as Go 1.19.8 (Debian 12) compiled it, at
// 0x45f2e0 in the tests' Go fixture (objdump -d).
constexpr uint8_t kAsmcgocall119[] = {
    0x48, 0x8b, 0x44, 0x24, 0x08, 0x48, 0x8b, 0x5c, 0x24, 0x10, 0x48, 0x89, 0xe2, 0x64, 0x48, 0x8b,
    0x3c, 0x25, 0xf8, 0xff, 0xff, 0xff, 0x48, 0x83, 0xff, 0x00, 0x74, 0x67, 0x4c, 0x8b, 0x47, 0x30,
    0x49, 0x8b, 0x70, 0x50, 0x48, 0x39, 0xf7, 0x74, 0x5a, 0x49, 0x8b, 0x30, 0x48, 0x39, 0xf7, 0x74,
    0x52, 0xe8, 0x6a, 0xd3, 0xff, 0xff, 0x64, 0x48, 0x89, 0x34, 0x25, 0xf8, 0xff, 0xff, 0xff, 0x48,
    0x8b, 0x66, 0x38, 0x48, 0x83, 0xec, 0x40, 0x48, 0x83, 0xe4, 0xf0, 0x48, 0x89, 0x7c, 0x24, 0x30,
    0x48, 0x8b, 0x7f, 0x08, 0x48, 0x29, 0xd7, 0x48, 0x89, 0x7c, 0x24, 0x28, 0x48, 0x89, 0xdf, 0x48,
    0x89, 0xd9, 0xff, 0xd0, 0x48, 0x8b, 0x7c, 0x24, 0x30, 0x48, 0x8b, 0x77, 0x08, 0x48, 0x2b, 0x74,
    0x24, 0x28, 0x64, 0x48, 0x89, 0x3c, 0x25, 0xf8, 0xff, 0xff, 0xff, 0x48, 0x89, 0xf4, 0x89, 0x44,
    0x24, 0x18, 0xc3, 0x48, 0x83, 0xec, 0x40, 0x48, 0x83, 0xe4, 0xf0, 0x48, 0xc7, 0x44, 0x24, 0x30,
    0x00, 0x00, 0x00, 0x00, 0x48, 0x89, 0x54, 0x24, 0x28, 0x48, 0x89, 0xdf, 0x48, 0x89, 0xd9, 0xff,
    0xd0, 0x48, 0x8b, 0x74, 0x24, 0x28, 0x48, 0x89, 0xf4, 0x89, 0x44, 0x24, 0x18, 0xc3};

TEST(GoRuntimeTest, DecodesGo119Asmcgocall) {
  GoModule module;
  ASSERT_TRUE(
      DecodeAsmcgocall(kAsmcgocall119, sizeof(kAsmcgocall119), 0x45f2e0, nullptr, 0, 0, &module));
  EXPECT_EQ(module.cgo_call_return, 0x45f344u);  // after the first `call *%rax`
  EXPECT_EQ(module.cgo_call_return_on_system_stack, 0x45f381u);
  EXPECT_EQ(module.g_slot, 0x30u);
  EXPECT_EQ(module.depth_slot, 0x28u);
}

// The layout of the runtime's current source (g at 8(SP), the depth at
// 0(SP), the C function reached through asmcgocall_landingpad's tail call),
// assembled by hand from that source: not checked against a real build.
TEST(GoRuntimeTest, DecodesTheLandingPadLayout) {
  const uintptr_t address = 0x500000;
  const uintptr_t pad = 0x500800;
  std::vector<uint8_t> code = {0x48, 0x83, 0xec, 0x10, 0x48, 0x83, 0xe4, 0xf0};  // sub, and
  auto call_pad = [&]() {
    const uintptr_t next = address + code.size() + 5;
    const int32_t displacement = static_cast<int32_t>(pad - next);
    code.push_back(0xe8);
    for (int i = 0; i < 4; ++i) code.push_back(static_cast<uint8_t>(displacement >> (8 * i)));
    return next;
  };
  for (uint8_t b : {0x48, 0x89, 0x7c, 0x24, 0x08, 0x48, 0x8b, 0x7f, 0x08, 0x48, 0x29, 0xd7, 0x48,
                    0x89, 0x3c, 0x24}) {
    code.push_back(b);
  }
  const uintptr_t goroutine_return = call_pad();
  for (uint8_t b :
       {0xc3, 0x48, 0xc7, 0x44, 0x24, 0x08, 0x00, 0x00, 0x00, 0x00, 0x48, 0x89, 0x14, 0x24}) {
    code.push_back(b);
  }
  const uintptr_t system_return = call_pad();
  code.push_back(0xc3);
  const uint8_t landingpad[] = {0x48, 0x89, 0xdf, 0xff, 0xe0};
  GoModule module;
  ASSERT_TRUE(DecodeAsmcgocall(code.data(), code.size(), address, landingpad, sizeof(landingpad),
                               pad, &module));
  EXPECT_EQ(module.cgo_call_return, goroutine_return);
  EXPECT_EQ(module.cgo_call_return_on_system_stack, system_return);
  EXPECT_EQ(module.g_slot, 8u);
  EXPECT_EQ(module.depth_slot, 0u);
  // A landing pad with a frame of its own (Windows') is not this layout.
  const uint8_t windows_pad[] = {0x48, 0x83, 0xec, 0x20, 0x48, 0x89, 0xd9, 0xff, 0xd0};
  GoModule other;
  EXPECT_FALSE(DecodeAsmcgocall(code.data(), code.size(), address, windows_pad, sizeof(windows_pad),
                                pad, &other));
  EXPECT_EQ(other.cgo_call_return, 0u);
}

TEST(GoRuntimeTest, UnknownCodeIsNotDecoded) {
  GoModule module;
  // Another register for g; a second goroutine call site; cut short.
  std::vector<uint8_t> code(kAsmcgocall119, kAsmcgocall119 + sizeof(kAsmcgocall119));
  code[0x4d] = 0x74;  // mov %rsi,0x30(%rsp) where g is saved
  EXPECT_FALSE(DecodeAsmcgocall(code.data(), code.size(), 0x45f2e0, nullptr, 0, 0, &module));
  std::vector<uint8_t> twice(kAsmcgocall119, kAsmcgocall119 + sizeof(kAsmcgocall119));
  twice.insert(twice.end(), kAsmcgocall119 + 0x4b, kAsmcgocall119 + 0x64);
  EXPECT_FALSE(DecodeAsmcgocall(twice.data(), twice.size(), 0x45f2e0, nullptr, 0, 0, &module));
  EXPECT_FALSE(DecodeAsmcgocall(kAsmcgocall119, 0x63, 0x45f2e0, nullptr, 0, 0, &module));
  EXPECT_EQ(module.cgo_call_return, 0u);
}

// A program header table with one PT_NOTE segment holding `notes`.
struct NoteImage {
  explicit NoteImage(const std::vector<uint8_t>& notes) : bytes(notes) {
    phdr.p_type = PT_NOTE;
    phdr.p_vaddr = reinterpret_cast<uintptr_t>(bytes.data());
    phdr.p_memsz = bytes.size();
  }
  std::vector<uint8_t> bytes;
  ElfW(Phdr) phdr{};
};

std::vector<uint8_t> Note(const char* name, uint32_t name_size, uint32_t type, uint32_t desc_size) {
  std::vector<uint8_t> note(12 + ((name_size + 3) & ~3u) + ((desc_size + 3) & ~3u), 0);
  memcpy(&note[0], &name_size, 4);
  memcpy(&note[4], &desc_size, 4);
  memcpy(&note[8], &type, 4);
  memcpy(&note[12], name, name_size);
  return note;
}

TEST(GoRuntimeTest, RecognisesGosBuildIdNote) {
  std::vector<uint8_t> gnu = Note("GNU", 4, NT_GNU_BUILD_ID, 20);
  std::vector<uint8_t> go = Note("Go\0", 4, 4, 0x53);
  std::vector<uint8_t> both = gnu;
  both.insert(both.end(), go.begin(), go.end());
  NoteImage go_program(both);
  EXPECT_TRUE(HasGoNote(&go_program.phdr, 1, 0));
  NoteImage c_program(gnu);
  EXPECT_FALSE(HasGoNote(&c_program.phdr, 1, 0));
  // Owner "Go" with another type; a note cut short.
  NoteImage other_type(Note("Go\0", 4, 1, 8));
  EXPECT_FALSE(HasGoNote(&other_type.phdr, 1, 0));
  std::vector<uint8_t> cut = go;
  cut.resize(14);
  NoteImage truncated(cut);
  EXPECT_FALSE(HasGoNote(&truncated.phdr, 1, 0));
}

TEST(GoRuntimeTest, ModulesAreFoundByTheirText) {
  ForgetGoModulesForTest();
  EXPECT_FALSE(GoModulesRegistered());
  EXPECT_EQ(FindGoModule(kText + 5), nullptr);
  ASSERT_TRUE(RegisterGoModule(FakeModule()));
  EXPECT_TRUE(GoModulesRegistered());
  const GoModule* found = FindGoModule(kText + 5);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->cgo_call_return, kCgoCallReturn);
  EXPECT_EQ(FindGoModule(kText + 0x100000), nullptr);
  EXPECT_EQ(FindGoModule(kC), nullptr);
  ForgetGoModulesForTest();
  EXPECT_EQ(FindGoModule(kText + 5), nullptr);
}

TEST(GoRuntimeTest, CodeRangeHoldsReturnAddresses) {
  const CodeRange range{0x1000, 0x1010};
  EXPECT_TRUE(range.HoldsReturn(0x1001));
  EXPECT_TRUE(range.HoldsReturn(0x1010));  // a call as the last instruction
  EXPECT_FALSE(range.HoldsReturn(0x1000));
  EXPECT_FALSE(range.HoldsReturn(0x1011));
  EXPECT_FALSE(CodeRange{}.HoldsReturn(1));
  EXPECT_FALSE(CodeRange{}.HoldsReturn(0));
}

}  // namespace
}  // namespace retain::shim
