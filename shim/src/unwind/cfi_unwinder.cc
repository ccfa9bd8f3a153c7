// cfi_unwinder: see unwind/cfi_unwinder.h.
#include "unwind/cfi_unwinder.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "base/arena.h"
#include "base/large_static.h"
#include "base/thread_state.h"
#include "unwind/eh_frame.h"
#include "unwind/go_runtime.h"
#include "unwind/go_stack.h"
#include "unwind/stack_hash.h"

namespace retain::shim {
namespace {

// Rule cache entry: the return address in the top 47 bits, its rule in the
// low 17:
//   bit 0       1 = entry in use (0 = empty: a zero page is an empty table)
//   bit 1       CFA register: 0 = rsp, 1 = rbp
//   bits 2-11   CFA offset / 8, 1..1023 (frames up to 8 KiB)
//   bits 12-16  where the caller's rbp is: 0 = unchanged, k = at CFA - 8k
// A CFA offset field of 0 is no real rule (the return address would be below
// the stack pointer), so it marks the answers that are not rules:
// kFallbackRule, kOutermostRule, and the Go rules: code without unwind
// information in a Go module (unwind/go_runtime.h), where the walk goes on
// by go_stack's rules (kGoFrameRule; kGoCgoCallRule and
// kGoCgoCallOnSystemStackRule: the return addresses of asmcgocall's C
// calls). Rules that do not fit (odd or negative
// offsets, bigger frames, rbp above the CFA) are stored as kFallbackRule:
// libunwind handles those rare frames. Everything a hit needs is in one
// 64-bit word, so entries are read and written with single relaxed atomic
// accesses and never torn.
constexpr int kIpShift = 17;
constexpr uint64_t kRuleMask = (uint64_t{1} << kIpShift) - 1;
constexpr uintptr_t kIpLimit = uintptr_t{1} << 47;
constexpr uint64_t kValidBit = 1;
constexpr uint64_t kRbpBaseBit = 2;
constexpr int kOffsetShift = 2;
constexpr uint64_t kOffsetMask = 0x3ff;
constexpr int kSlotShift = 12;
constexpr uint64_t kSlotMask = 0x1f;
constexpr uint64_t kFallbackRule = kValidBit;
constexpr uint64_t kOutermostRule = kValidBit | (uint64_t{1} << kSlotShift);
constexpr uint64_t kGoFrameRule = kValidBit | (uint64_t{2} << kSlotShift);
constexpr uint64_t kGoCgoCallRule = kValidBit | (uint64_t{3} << kSlotShift);
constexpr uint64_t kGoCgoCallOnSystemStackRule = kValidBit | (uint64_t{4} << kSlotShift);
// The offset field: 0 in every answer that is not a frame rule.
constexpr uint64_t kOffsetBits = kOffsetMask << kOffsetShift;

// 2^16 entries (512 KiB of address space; pages are only backed once
// touched) in sets of 4 sharing a cache line: programs have thousands of hot
// return addresses, and in a direct-mapped table two that collide would
// evict each other on every walk, each time running the parser.
constexpr int kCacheBits = 16;
constexpr size_t kCacheEntries = size_t{1} << kCacheBits;
constexpr size_t kCacheBytes = kCacheEntries * sizeof(uint64_t);
constexpr size_t kWays = 4;

// libunwind's fast trace ends the stack at a return address below 0x4000
// (never code): so does this walk, to produce the same frames.
constexpr uintptr_t kLowestIp = 0x4000;

std::atomic<uint64_t*> g_cache;
std::atomic<uint64_t> g_misses;

uint64_t* Cache() {
  uint64_t* cache = g_cache.load(std::memory_order_acquire);
  if (cache != nullptr) return cache;
  auto* pages = static_cast<uint64_t*>(MapPages(kCacheBytes));
  if (pages == nullptr) return nullptr;  // arena cap reached: the caller falls back
  if (!g_cache.compare_exchange_strong(cache, pages, std::memory_order_acq_rel)) {
    UnmapPages(pages, kCacheBytes);  // another thread's table won
    return cache;
  }
  return pages;
}

// The first entry of ip's set. Shifts and a xor rather than a multiply: the
// index is on the walk's critical path (return address, index, rule, next
// return address). Bits 2.. of a return address already spread a module's
// call sites; the high bits tell modules apart.
size_t SetOf(uintptr_t ip) {
  return static_cast<size_t>(((ip >> 2) ^ (ip >> 18)) << 2) & (kCacheEntries - kWays);
}

uint64_t PackRule(const FrameRule& rule) {
  if (rule.kind == FrameRuleKind::kOutermost) return kOutermostRule;
  if (rule.kind != FrameRuleKind::kStandard) return kFallbackRule;
  const int64_t offset = rule.cfa_offset;
  if (offset <= 0 || offset % 8 != 0 || offset / 8 > static_cast<int64_t>(kOffsetMask)) {
    return kFallbackRule;
  }
  uint64_t slot = 0;
  if (rule.rbp_saved) {
    const int64_t at = rule.rbp_offset;
    if (at >= 0 || at % 8 != 0 || -at / 8 > static_cast<int64_t>(kSlotMask)) return kFallbackRule;
    slot = static_cast<uint64_t>(-at / 8);
  }
  return kValidBit | (rule.cfa_register == CfaRegister::kRbp ? kRbpBaseBit : 0) |
         (static_cast<uint64_t>(offset / 8) << kOffsetShift) | (slot << kSlotShift);
}

struct MissSearch {
  uintptr_t ip;
  uint64_t* entry;  // where the answer goes
  uint64_t rule;
};

// The rule of a return address no FDE covers: a Go rule when it lies in a
// registered Go module, else the fallback.
uint64_t RuleWithoutFde(uintptr_t ip) {
  const GoModule* module = FindGoModule(ip);
  if (module == nullptr) return kFallbackRule;
  if (ip == module->cgo_call_return) return kGoCgoCallRule;
  if (ip == module->cgo_call_return_on_system_stack) return kGoCgoCallOnSystemStackRule;
  return kGoFrameRule;
}

// dl_iterate_phdr callback: when `info` is the object whose code holds the
// call before search->ip, reads its rule and fills the cache entry. Both
// happen here, under the loader's lock: the object cannot be unmapped while
// its tables are read, and a dlclose that unmaps it afterwards is followed by
// CfiForgetRules, which then also drops this entry.
int VisitObject(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<MissSearch*>(data);
  const uintptr_t pc = search->ip - 1;
  const ElfW(Phdr)* eh_frame_hdr = nullptr;
  bool contains = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& phdr = info->dlpi_phdr[i];
    if (phdr.p_type == PT_GNU_EH_FRAME) eh_frame_hdr = &phdr;
    if (phdr.p_type != PT_LOAD || (phdr.p_flags & PF_X) == 0) continue;
    const uintptr_t start = info->dlpi_addr + phdr.p_vaddr;
    if (pc >= start && pc - start < phdr.p_memsz) contains = true;
  }
  if (!contains) return 0;
  bool covered = false;  // an FDE covers pc
  if (eh_frame_hdr != nullptr) {
    const uintptr_t hdr = info->dlpi_addr + eh_frame_hdr->p_vaddr;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& phdr = info->dlpi_phdr[i];
      if (phdr.p_type != PT_LOAD) continue;
      const uintptr_t start = info->dlpi_addr + phdr.p_vaddr;
      if (hdr < start || hdr - start >= phdr.p_memsz) continue;
      const EhFrameSection section{hdr, start, start + phdr.p_memsz};
      const FrameRule rule = FindFrameRule(section, pc);
      covered = rule.kind != FrameRuleKind::kNoFde;
      search->rule = PackRule(rule);
      break;
    }
  }
  if (!covered) search->rule = RuleWithoutFde(search->ip);
  std::atomic_ref<uint64_t>(*search->entry)
      .store((static_cast<uint64_t>(search->ip) << kIpShift) | search->rule,
             std::memory_order_relaxed);
  return 1;
}

// The cache missed: find the rule once. An address in no loaded object (JIT
// code, a corrupt stack) is cached as the fallback too: the fallback is
// always right, only slower.
__attribute__((noinline, cold)) uint64_t LookUpSlow(uint64_t* set, uintptr_t ip) {
  const uint64_t miss = g_misses.fetch_add(1, std::memory_order_relaxed);
  // An empty way, else one chosen round-robin by the miss count (threads
  // racing here may pick the same one or store ip twice: both harmless).
  uint64_t* entry = &set[miss % kWays];
  for (size_t way = 0; way < kWays; ++way) {
    if (std::atomic_ref<uint64_t>(set[way]).load(std::memory_order_relaxed) == 0) {
      entry = &set[way];
      break;
    }
  }
  MissSearch search{ip, entry, kFallbackRule};
  if (dl_iterate_phdr(VisitObject, &search) == 0) {
    std::atomic_ref<uint64_t>(*entry).store((static_cast<uint64_t>(ip) << kIpShift) | kFallbackRule,
                                            std::memory_order_relaxed);
  }
  return search.rule;
}

inline uint64_t LookUp(uint64_t* cache, uintptr_t ip) {
  if (ip >= kIpLimit) return kFallbackRule;
  uint64_t* set = &cache[SetOf(ip)];
  for (size_t way = 0; way < kWays; ++way) {
    const uint64_t word = std::atomic_ref<uint64_t>(set[way]).load(std::memory_order_relaxed);
    if ((word >> kIpShift) == ip && (word & kValidBit) != 0) return word & kRuleMask;
  }
  return LookUpSlow(set, ip);
}

// ---- The walk, and the memo of the previous walk on this thread ----
//
// Consecutive captures on a thread mostly share their outer frames (the
// same request handler, loop, thread entry; only the innermost calls
// differ), and walking a frame is a chain of dependent loads (rule, then
// return address, then the next rule). So each thread keeps the frames of
// its previous walk, and a walk that reaches a state (ip, sp, rbp) found
// there only checks that the stack still holds what that walk read (each
// return address and saved rbp at its recorded address: independent loads,
// no rule lookups) and copies the rest. Exact: from equal registers, the
// same rules and the same values in the slots read, a walk takes the same
// steps; a slot that changed ends the reuse and the walk goes on normally
// from the last checked frame. Reuse also needs the same stack bounds and
// the same rule generation (CfiForgetRules may have changed the rules).
//
// "Equal registers" leaves out rbp where the rest of the walk never reads
// it (no rbp-based CFA before the caller's rbp is reloaded from a slot):
// code without frame pointers uses rbp as an ordinary register, whose value
// at the innermost frames changes from call to call.

// Frames kept: captures take at most RETAIN_DEPTH + 1 (48 + 1 by default);
// a deeper walk is simply not remembered.
constexpr int kMemoFrames = 64;

struct MemoFrame {
  uintptr_t ip;
  uintptr_t sp;
  uintptr_t bp;
  // The step from this frame: where it read the caller's rbp (0: rbp was
  // kept; slots are 8-aligned), and in the low bits:
  uintptr_t step;
};
constexpr uintptr_t kStepUsesBp = 1;  // its CFA is rbp-based
constexpr uintptr_t kStepFlags = 7;
// The step from a walk's last frame, where it stopped short of the
// outermost one (its depth limit, Go code): not taken, so no remembered
// frame was computed from it, and it needs no rbp (marking it as reading rbp
// would make every frame inside it that keeps rbp need its rbp too, and
// send the checks of a stack cut at the depth limit off their fast path). A
// walk that goes on from that frame steps it with its own rbp, carried out
// from where it met the memo through the slots the steps reload it from.
constexpr uintptr_t kStepNotTaken = 0;

inline uintptr_t SlotOfStep(uintptr_t step) { return step & ~kStepFlags; }

// Outermost frame first, so a walk that shares the outer part rewrites only
// the inner end. On cache lines of its own: every capture writes its
// thread's memo (the count, the inner frames, needs_bp at the end) and reads
// its header, so two threads' memos sharing a line would move that line
// between their cores at every allocation.
struct alignas(64) WalkMemo {
  uintptr_t stack_low;
  uintptr_t stack_high;
  uint64_t generation;
  int count;
  bool complete;  // frame 0 is the outermost frame (its rule says so)
  // Frame i's MemoFrame fields, one array each: a reuse reads only ip and
  // sp of four frames at a time, from two lines instead of four.
  uintptr_t ip[kMemoFrames];
  uintptr_t sp[kMemoFrames];
  uintptr_t bp[kMemoFrames];
  uintptr_t step[kMemoFrames];
  // fold[i]: the stack hash's fold (unwind/stack_hash.h) over frames 0..i's
  // return addresses, outermost first; kept in step with the frames, so a
  // walk that ends as the memo does has its stack's hash without hashing it.
  uint64_t fold[kMemoFrames];
  // Bit i: the walk on from frame i reads its rbp (its step is rbp-based,
  // or keeps rbp for a frame further out that reads it), so frame i is
  // reused only with the same rbp; a reuse tests four frames with one shift
  // and mask.
  uint64_t needs_bp;

  MemoFrame Frame(int i) const { return {ip[i], sp[i], bp[i], step[i]}; }
};

// Stores `kept[0..count)` (a walk's frames, innermost first) as
// memo frames first..first + count (outermost first), in one pass: each
// frame's bit of needs_bp (given whether the frame
// outside `first` needs its rbp), and the fold of the hash over its return
// address.
void StoreFrames(WalkMemo& memo, int first, const MemoFrame* kept, int count, bool outer_needs) {
  if (count == 0) return;  // (first may then be kMemoFrames)
  uint64_t mask = memo.needs_bp & ((uint64_t{1} << first) - 1);
  uint64_t state = first == 0 ? kStackHashSeed : memo.fold[first - 1];
  for (int i = 0; i < count; ++i) {
    const MemoFrame& frame = kept[count - 1 - i];
    const bool needs =
        (frame.step & kStepUsesBp) != 0 || (SlotOfStep(frame.step) == 0 && outer_needs);
    memo.ip[first + i] = frame.ip;
    memo.sp[first + i] = frame.sp;
    memo.bp[first + i] = frame.bp;
    memo.step[first + i] = frame.step;
    mask |= uint64_t{needs} << (first + i);
    state = StackHashStep(state, frame.ip);
    memo.fold[first + i] = state;
    outer_needs = needs;
  }
  memo.needs_bp = mask;
}

// Memos are 2.5 KiB: not in TLS, whose initial-exec part must stay small (a
// copy of libretain.so that the Vulkan loader dlopen()s in a process without
// LD_PRELOAD gets its TLS from glibc's small static TLS surplus). They live
// in slots keyed by the thread's stack top, which no two live threads share:
// a thread claims a free slot once (remembered in ThreadState), and a new
// thread on a reused stack (glibc caches thread stacks) takes over the slot
// of the dead one, memo included; that memo is as good as its own (every
// step it reuses is checked against the stack). When no slot is free within
// a few probes, the thread walks without a memo.
struct MemoSlot {
  std::atomic<uintptr_t> key;  // stack_high of the owner; 0 = free
  std::atomic<WalkMemo*> memo;
};
constexpr uint32_t kMemoSlots = 1024;
constexpr uint32_t kMemoProbes = 8;
RETAIN_LARGE_STATIC MemoSlot g_memo_slots[kMemoSlots];

// ThreadMemo for a thread that has not claimed its slot yet (or whose
// stack changed).
__attribute__((noinline)) WalkMemo* ClaimThreadMemo(uintptr_t stack_high) {
  const uint32_t home = static_cast<uint32_t>((stack_high >> 12) * 0x9e3779b1u) % kMemoSlots;
  for (uint32_t probe = 0; probe < kMemoProbes; ++probe) {
    const uint32_t index = (home + probe) % kMemoSlots;
    MemoSlot& slot = g_memo_slots[index];
    uintptr_t key = slot.key.load(std::memory_order_acquire);
    if (key != stack_high && (key != 0 || !slot.key.compare_exchange_strong(
                                              key, stack_high, std::memory_order_acq_rel))) {
      continue;  // another thread's stack (or just claimed by one)
    }
    // Only the owner gets here: it allocates the memo on first use.
    WalkMemo* memo = slot.memo.load(std::memory_order_acquire);
    if (memo == nullptr) {
      static_assert(alignof(WalkMemo) == kCacheLine);
      memo = static_cast<WalkMemo*>(ArenaAllocateLines(sizeof(WalkMemo)));  // zeroed: empty
      if (memo == nullptr) return nullptr;
      slot.memo.store(memo, std::memory_order_release);
    }
    g_thread.cfi_memo_slot = index + 1;
    return memo;
  }
  return nullptr;
}

// This thread's memo, or nullptr.
__attribute__((always_inline)) inline WalkMemo* ThreadMemo(uintptr_t stack_high) {
  const uint32_t cached = g_thread.cfi_memo_slot;
  if (cached != 0) {
    MemoSlot& slot = g_memo_slots[cached - 1];
    if (slot.key.load(std::memory_order_relaxed) == stack_high) {
      return slot.memo.load(std::memory_order_relaxed);
    }
  }
  return ClaimThreadMemo(stack_high);
}

// The step by `rule` (a frame rule: its offset field is not 0) from the
// frame whose stack pointer and rbp are `sp` and `bp`: its caller's
// registers in `caller`, and in `step` the step as the memo keeps it (the
// slot rbp was reloaded from, kStepUsesBp when the CFA is rbp-based). False
// when a read would leave [sp, high): the walk cannot go on here. (Separate
// outputs rather than a struct returned: GCC kept that one in memory, 24
// more instructions per capture.)
__attribute__((always_inline)) inline bool StepByRule(uint64_t rule, uintptr_t sp, uintptr_t bp,
                                                      uintptr_t high, uintptr_t& caller_ip,
                                                      uintptr_t& caller_sp, uintptr_t& caller_bp,
                                                      uintptr_t& step) {
  const uintptr_t base = (rule & kRbpBaseBit) != 0 ? bp : sp;
  const uintptr_t cfa = base + ((rule >> kOffsetShift) & kOffsetMask) * 8;
  // The return address sits at CFA - 8: above sp, inside the stack. A
  // wrapped sum (rbp garbage) fails the first test.
  if (cfa <= sp || cfa > high || (cfa & 7) != 0) return false;
  uintptr_t next_bp = bp;
  uintptr_t bp_slot = 0;
  if (const uint64_t slot = (rule >> kSlotShift) & kSlotMask; slot != 0) {
    bp_slot = cfa - slot * 8;
    if (bp_slot < sp) return false;
    next_bp = *reinterpret_cast<const uintptr_t*>(bp_slot);
  }
  caller_ip = reinterpret_cast<const uintptr_t*>(cfa)[-1];
  caller_sp = cfa;
  caller_bp = next_bp;
  step = bp_slot | ((rule & kRbpBaseBit) != 0 ? kStepUsesBp : 0);
  return true;
}

// Checks remembered frames k - 1, k - 2, ... stop against the stack and
// writes their return addresses, innermost first, at `out` while they hold
// (kWrite false: only advances `out`, the frames stay in the memo).
// Returns the frame it stopped at: `stop` when all held, else k where frame
// k - 1's slot (or the rbp the step from frame k reloads, where a step
// further out reads it) changed.
template <bool kWrite>
__attribute__((always_inline)) inline int CheckRemembered(const WalkMemo& memo, int k, int stop,
                                                          uintptr_t*& out) {
  // Both reads inside [sp, stack_high): recorded by a walk of this
  // thread's stack with these bounds, at or above this walk's sp. A saved
  // rbp is checked only where the rest of the walk reads it (in code
  // without frame pointers it is mostly data, and that branch is mostly
  // not taken). The loops run for every reused frame (most of a stack),
  // so each instruction counts. __restrict: the frames written are not
  // the memo's (the compiler cannot know, both are uintptr_t). Inlined in
  // both walks: called, it cost 60 more instructions per capture.
  uintptr_t* __restrict to = out;
  const uintptr_t* __restrict ips = memo.ip;
  const uintptr_t* __restrict sps = memo.sp;
  // Four frames at a time while none needs its rbp checked: their four
  // slots are read before any is compared (each is at or above this
  // walk's sp, so readable), one test for all four. A block that differs
  // goes to the loop below, which finds the frame.
  const uint64_t needs_bp = memo.needs_bp;
  const uint64_t below_k = k >= 64 ? ~uint64_t{0} : (uint64_t{1} << k) - 1;
  if ((needs_bp & below_k & ~((uint64_t{1} << stop) - 1)) == 0) {
    // No frame of the range needs its rbp: the test is the slots alone,
    // then one at a time for the frame that differs.
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    while (k - 4 >= stop) {
      const int b = k - 4;
      const __m128i low_ips = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ips + b));
      const __m128i high_ips = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ips + b + 2));
      const __m128i low_slots =
          _mm_set_epi64x(static_cast<int64_t>(reinterpret_cast<const uintptr_t*>(sps[b + 1])[-1]),
                         static_cast<int64_t>(reinterpret_cast<const uintptr_t*>(sps[b])[-1]));
      const __m128i high_slots =
          _mm_set_epi64x(static_cast<int64_t>(reinterpret_cast<const uintptr_t*>(sps[b + 3])[-1]),
                         static_cast<int64_t>(reinterpret_cast<const uintptr_t*>(sps[b + 2])[-1]));
      const __m128i differ =
          _mm_or_si128(_mm_xor_si128(low_slots, low_ips), _mm_xor_si128(high_slots, high_ips));
      if (_mm_movemask_epi8(_mm_cmpeq_epi8(differ, zero)) != 0xffff) break;
      // Innermost first: ips[b + 3], ips[b + 2], ips[b + 1], ips[b].
      if constexpr (kWrite) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(to), _mm_shuffle_epi32(high_ips, 0x4e));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(to + 2), _mm_shuffle_epi32(low_ips, 0x4e));
      }
      to += 4;
      k = b;
    }
#endif
    for (; k > stop && reinterpret_cast<const uintptr_t*>(sps[k - 1])[-1] == ips[k - 1]; --k) {
      if constexpr (kWrite) *to = ips[k - 1];
      ++to;
    }
  } else {
    while (k - 4 >= stop) {
      const int b = k - 4;
      const uintptr_t differ = (reinterpret_cast<const uintptr_t*>(sps[b + 3])[-1] ^ ips[b + 3]) |
                               (reinterpret_cast<const uintptr_t*>(sps[b + 2])[-1] ^ ips[b + 2]) |
                               (reinterpret_cast<const uintptr_t*>(sps[b + 1])[-1] ^ ips[b + 1]) |
                               (reinterpret_cast<const uintptr_t*>(sps[b])[-1] ^ ips[b]);
      if ((differ | ((needs_bp >> b) & 0xf)) != 0) break;
      if constexpr (kWrite) {
        to[0] = ips[b + 3];
        to[1] = ips[b + 2];
        to[2] = ips[b + 1];
        to[3] = ips[b];
      }
      to += 4;
      k = b;
    }
    for (; k > stop; --k) {
      const uintptr_t to_ip = ips[k - 1];
      if (reinterpret_cast<const uintptr_t*>(sps[k - 1])[-1] != to_ip) break;
      if (((needs_bp >> (k - 1)) & 1) != 0) {
        const uintptr_t slot = SlotOfStep(memo.step[k]);
        if (slot != 0 && *reinterpret_cast<const uintptr_t*>(slot) != memo.bp[k - 1]) break;
      }
      if constexpr (kWrite) *to = to_ip;
      ++to;
    }
  }
  out = to;
  return k;
}

// Bumped by CfiForgetRules: memos from before hold steps taken by old rules.
std::atomic<uint64_t> g_generation;

class Walk {
 public:
  Walk(uint64_t* cache, WalkMemo* memo, uintptr_t low, uintptr_t high, uintptr_t* frames, int max)
      : cache_(cache), memo_(memo), low_(low), high_(high), frames_(frames), max_(max) {}

  int Run(const UnwindRegisters& regs) {
    const WalkMemo& memo = *memo_;
    int join = -1;  // the innermost remembered frame this walk may still meet
    if (memo.count > 0 && memo.stack_low == low_ && memo.stack_high == high_ &&
        memo.generation == g_generation.load(std::memory_order_relaxed)) {
      join = memo.count - 1;
    }
    uintptr_t ip = regs.ip;
    uintptr_t sp = regs.sp;
    uintptr_t bp = regs.bp;
    bool complete = false;
    for (;;) {
      // Here (ip, sp, bp) is a frame not yet emitted.
      if (ip < kLowestIp) break;
      bool emitted = false;
      if (join >= 0) {
        while (join >= 0 && memo.sp[join] < sp) --join;
        if (join >= 0 && memo.sp[join] == sp && memo.ip[join] == ip &&
            (((memo.needs_bp >> join) & 1) == 0 || memo.bp[join] == bp)) {
          if (Reuse(join, bp)) return count_;
          // A slot changed above the last frame reused, or the remembered
          // walk ended at its own depth limit: go on from that frame. The
          // walk may meet the remembered one again further out (two paths
          // that differ in the middle).
          ip = memo.ip[reused_last_];
          sp = memo.sp[reused_last_];
          bp = resume_bp_;
          join = reused_last_ - 1;
          emitted = true;
        }
      }
      if (!emitted) frames_[count_++] = ip;
      if (count_ == max_) {
        Keep({ip, sp, bp, kStepNotTaken});
        break;
      }
      const uint64_t rule = LookUp(cache_, ip);
      if ((rule & kOffsetBits) == 0) {  // not a frame rule
        if (rule == kOutermostRule) {
          Keep({ip, sp, bp, 0});
          complete = true;
          break;
        }
        if (rule == kFallbackRule) return -1;
        // Go code: the caller walks on with go_stack from here.
        Keep({ip, sp, bp, kStepNotTaken});
        go_rule_ = rule;
        go_at_ = {ip, sp, bp};
        break;
      }
      uintptr_t next_ip, next_sp, next_bp, step;
      if (!StepByRule(rule, sp, bp, high_, next_ip, next_sp, next_bp, step)) return -1;
      Keep({ip, sp, bp, step});
      ip = next_ip;
      sp = next_sp;
      bp = next_bp;
    }
    Remember(complete);
    return count_;
  }

  // Where Run stopped at Go code: its rule (0: it did not) and registers.
  uint64_t go_rule() const { return go_rule_; }
  UnwindRegisters go_at() const { return go_at_; }

 private:
  // This walk is at memo frame `join`: emits the remembered frames from
  // there outwards while the stack still holds what they were read from.
  // Returns true when that finished the walk (and updated the memo); else
  // the walk goes on from frames[reused_last_], already emitted.
  // `bp`: this walk's rbp at frames[join] (which may differ from the
  // remembered one where the walk does not read it).
  bool Reuse(int join, uintptr_t bp) {
    const WalkMemo& memo = *memo_;
    int k = join;
    frames_[count_++] = memo.ip[k];
    const int room = max_ - count_;
    const int stop = k > room ? k - room : 0;  // the depth limit
    uintptr_t* out = frames_ + count_;
    k = CheckRemembered<true>(memo, k, stop, out);
    count_ = static_cast<int>(out - frames_);
    const bool ends = count_ == max_ || (k == 0 && memo.complete);
    if (ends && !left_memo_) {
      // Ends inside the remembered walk: the memo keeps its outer part
      // (frames 0..join, every step of which a later walk checks again) and
      // gets this walk's inner frames.
      UpdateInner(join);
      return true;
    }
    // Frames join..k become this walk's own, with this walk's rbp values
    // (the remembered ones may differ where no step read them, and from k
    // on they may be read): the slots the steps reload rbp from are read
    // again (the same addresses: the steps up to k were checked).
    for (int i = join; i > k; --i) {
      MemoFrame frame = memo.Frame(i);
      frame.bp = bp;
      Keep(frame);
      const uintptr_t slot = SlotOfStep(frame.step);
      if (slot != 0) bp = *reinterpret_cast<const uintptr_t*>(slot);
    }
    if (ends) {
      // The walk left the memo before and met it again: remember it whole.
      // Frame k is the outermost one, or one whose step was not taken.
      const bool complete = k == 0 && memo.complete;
      Keep({memo.ip[k], memo.sp[k], bp, kStepNotTaken});
      Remember(complete);
      return true;
    }
    // The walk leaves the memo at frame k (kept by the caller, with the step
    // it takes from there).
    left_memo_ = true;
    resume_bp_ = bp;
    reused_last_ = k;
    return false;
  }

  // Records the state of a frame (and how the step from it read rbp).
  void Keep(MemoFrame frame) {
    if (kept_ < kMemoFrames) kept_frames_[kept_] = frame;
    ++kept_;
  }

  // Makes this walk, all of it in kept_frames_, the thread's memo.
  // `complete`: it ended at the outermost frame.
  void Remember(bool complete) {
    WalkMemo& memo = *memo_;
    memo.count = 0;
    if (kept_ > kMemoFrames) return;  // too deep to remember
    StoreFrames(memo, 0, kept_frames_, kept_, false);
    memo.stack_low = low_;
    memo.stack_high = high_;
    memo.generation = g_generation.load(std::memory_order_relaxed);
    memo.complete = complete;
    memo.count = kept_;
  }

  // This walk's frames before it met the memo at `join` replace the memo's
  // frames inside join.
  void UpdateInner(int join) {
    WalkMemo& memo = *memo_;
    const int total = join + 1 + kept_;
    if (kept_ > kMemoFrames || total > kMemoFrames) {
      memo.count = 0;
      return;
    }
    StoreFrames(memo, join + 1, kept_frames_, kept_, (memo.needs_bp >> join) & 1);
    memo.count = total;
  }

  uint64_t* const cache_;
  WalkMemo* const memo_;  // never null: a thread without one walks with an empty scratch memo
  const uintptr_t low_;
  const uintptr_t high_;
  uintptr_t* const frames_;
  const int max_;
  int count_ = 0;
  int reused_last_ = 0;
  uintptr_t resume_bp_ = 0;
  bool left_memo_ = false;  // the walk met the memo and left it again
  // The frames this walk stepped from, innermost first (for the memo).
  MemoFrame kept_frames_[kMemoFrames];
  int kept_ = 0;
  uint64_t go_rule_ = 0;
  UnwindRegisters go_at_;  // set with go_rule_
};

// A walk that ended without ending as the memo does (it left it, or never
// met it): its frames, all in `kept` (innermost first), become the memo, as
// Walk::Remember. Returns `count`, the walk's frame count.
__attribute__((noinline)) int RememberWhole(WalkMemo& memo, const MemoFrame* kept, int kept_count,
                                            bool complete, ptrdiff_t count) {
  StoreFrames(memo, 0, kept, kept_count, false);
  memo.complete = complete;
  memo.count = kept_count;
  return static_cast<int>(count);
}

// ---- The common case, without the general walk's bookkeeping ----
//
// Most walks step a few new inner frames by their rules, meet the memo and
// find its remembered slots unchanged out to the outermost frame or to the
// depth limit, perhaps after leaving it once where the middle of the stack
// changed and meeting it again further out. FastWalk does that in locals.
// A walk that never meets the memo again after leaving it (or never meets
// it), or that runs past the end of a memo cut at its own depth limit,
// steps on by rule to the outermost frame or to the depth limit and is
// remembered whole, as the general walk does. It gives up (-1) before it
// changes the memo on anything else: a frame without a plain rule (Go code,
// the fallback), a return address below kLowestIp, more frames than a memo
// holds. The general walk (Walk::Run) then takes the stack from the start.
//
// The frames are the general walk's: the same steps, the same joins (each
// frame not yet emitted is compared with the memo before it is stepped),
// the same checks of the remembered slots, the same depth limit. So is the
// memo it leaves, with one difference that no later walk can see: the
// general walk, once it left the memo and met it again, rewrites all of it,
// outer frames included (and drops those past a depth limit); this one
// rewrites only the frames inside the last join, as when it never left. The
// outer frames' return addresses, stack pointers, steps, folds and needs_bp
// bits are the same either way (each depends only on the frame and those
// further out, all checked or, past a depth limit, recorded by an earlier
// walk and checked again by any walk that reuses them), and of their rbp
// values the general walk would store this walk's, which differ from the
// remembered ones only where no step reads them (needs_bp clear): no walk
// compares those.
//
// (Stacks cut at the depth limit took the general walk until the eighth
// round of bench/README.md: a third of the shim's instructions per call on
// the deep workload.)

template <bool kWrite>
int FastWalk(uint64_t* cache, WalkMemo& memo, const UnwindRegisters& regs, uintptr_t high,
             uintptr_t* frames, int max) {
  // The frames stepped from, innermost first, as Walk::Keep keeps them.
  MemoFrame kept[kMemoFrames];
  int kept_count = 0;
  uintptr_t* out = frames;                   // the next frame's place
  uintptr_t* const last = frames + max - 1;  // a frame placed here reaches the depth limit
  uintptr_t ip = regs.ip;
  uintptr_t sp = regs.sp;
  uintptr_t bp = regs.bp;
  int join = memo.count - 1;  // the innermost remembered frame this walk may still meet
  for (;;) {
    // (ip, sp, bp) is a frame not yet emitted.
    if (ip < kLowestIp) return -1;
    while (join >= 0 && memo.sp[join] < sp) --join;
    if (join >= 0 && memo.sp[join] == sp && memo.ip[join] == ip &&
        (((memo.needs_bp >> join) & 1) == 0 || memo.bp[join] == bp)) {
      *out++ = ip;
      // Checked out to the outermost frame, or to the depth limit when the
      // memo reaches past it (as Walk::Reuse).
      const int room = static_cast<int>(last + 1 - out);
      const int stop = join > room ? join - room : 0;
      const int k = CheckRemembered<kWrite>(memo, join, stop, out);
      if (k == stop && (out > last || (k == 0 && memo.complete))) {
        // Ends at the depth limit or at the outermost frame: the memo keeps
        // its frames from `join` out (those past a depth limit too, as
        // Walk::UpdateInner) and gets this walk's inner ones.
        if (kept_count + join + 1 > kMemoFrames) return -1;
        StoreFrames(memo, join + 1, kept, kept_count, ((memo.needs_bp >> join) & 1) != 0);
        memo.count = kept_count + join + 1;
        return static_cast<int>(out - frames);
      }
      // Frame k - 1 changed, or frame k = 0 ends a memo cut at its own
      // depth limit (its step not taken) short of this walk's: frames
      // join .. k + 1 become this walk's own, with this walk's rbp (the
      // slots their steps reload it from were checked where it matters, and
      // are read again here), and the walk steps on from frame k, already
      // emitted.
      if (kept_count + (join - k) >= kMemoFrames) return -1;
      for (int i = join; i > k; --i) {
        kept[kept_count++] = {memo.ip[i], memo.sp[i], bp, memo.step[i]};
        const uintptr_t slot = SlotOfStep(memo.step[i]);
        if (slot != 0) bp = *reinterpret_cast<const uintptr_t*>(slot);
      }
      ip = memo.ip[k];
      sp = memo.sp[k];
      join = k - 1;
    } else {
      *out++ = ip;
    }
    if (kept_count == kMemoFrames) return -1;
    if (out > last) {
      // The depth limit, stepping (the step from here not taken). The walk
      // left the memo or never met it: it is remembered whole.
      kept[kept_count++] = {ip, sp, bp, kStepNotTaken};
      return RememberWhole(memo, kept, kept_count, false, out - frames);
    }
    // The step from (ip, sp, bp), by its rule.
    const uint64_t rule = LookUp(cache, ip);
    if ((rule & kOffsetBits) == 0) {  // not a frame rule
      if (rule != kOutermostRule) return -1;
      kept[kept_count++] = {ip, sp, bp, 0};
      return RememberWhole(memo, kept, kept_count, true, out - frames);
    }
    uintptr_t next_ip, next_sp, next_bp, step;
    if (!StepByRule(rule, sp, bp, high, next_ip, next_sp, next_bp, step)) return -1;
    kept[kept_count++] = {ip, sp, bp, step};
    ip = next_ip;
    sp = next_sp;
    bp = next_bp;
  }
}

ReturnKind ClassifyForGo(uintptr_t return_address) {
  uint64_t* cache = g_cache.load(std::memory_order_acquire);
  if (cache == nullptr) return ReturnKind::kUnknown;
  const uint64_t rule = LookUp(cache, return_address);
  if ((rule & kOffsetBits) != 0 || rule == kOutermostRule) return ReturnKind::kC;
  if (rule == kFallbackRule) return ReturnKind::kUnknown;
  return ReturnKind::kGo;
}

GoEntry EntryOf(uint64_t rule) {
  if (rule == kGoCgoCallRule) return GoEntry::kCgoCall;
  if (rule == kGoCgoCallOnSystemStackRule) return GoEntry::kCgoCallOnSystemStack;
  return GoEntry::kGoFrame;
}

// Segments after the first: a callback's C caller, then Go again... Each
// takes a C walk's memo (2.5 KiB) on the stack; a few are plenty (each needs a
// C -> Go -> C callback nesting).
constexpr int kMaxSegments = 8;

// A walk stopped at Go code (frames[count - 1] == at.ip): the Go frames by
// go_stack, and the C frames of callbacks' callers by this walker again,
// until the stack ends. Without the thread's memo: it keeps the first
// segment's.
__attribute__((noinline, cold)) int WalkThroughGo(uint64_t* cache, uint64_t rule,
                                                  UnwindRegisters at, uintptr_t low, uintptr_t high,
                                                  uintptr_t* frames, int count, int max) {
  for (int segment = 0; segment < kMaxSegments && count < max; ++segment) {
    const GoModule* module = FindGoModule(at.ip);
    if (module == nullptr) break;
    const GoWalkResult go = WalkGoFrames(*module, EntryOf(rule), at, {low, high}, ClassifyForGo,
                                         frames + count, max - count);
    count += go.count;
    if (!go.resume || count >= max) break;
    if (go.resume_at.sp < low || go.resume_at.sp >= high || (go.resume_at.sp & 7) != 0) break;
    WalkMemo scratch;
    scratch.count = 0;
    Walk walk{cache, &scratch, low, high, frames + count, max - count};
    const int more = walk.Run(go.resume_at);
    if (more < 0) break;  // C code this walker cannot pass: the stack so far
    count += more;
    rule = walk.go_rule();
    if (rule == 0) break;
    at = walk.go_at();
  }
  return count;
}

// After a walk of `count` frames that updated `memo`: the memo holds this
// walk's frames exactly when its count is the walk's, short of the depth
// limit; then its fold is this stack's hash, which `hash` (when not null)
// receives. A walk cut at the depth limit is the memo's innermost `count`
// frames whenever the memo holds at least that many (it may keep frames
// past the cut; a walk too deep to remember leaves it empty); then the fold
// over all of them, with both counts, is a key of the stack
// (CfiStackHash::cut_key).
inline void GiveHash(const WalkMemo& memo, int count, int max, CfiStackHash* hash) {
  if (hash == nullptr || count <= 0) return;
  if (count < max && memo.count == count) {
    hash->known = true;
    hash->value = StackHashFinish(memo.fold[count - 1], count, false);
  } else if (count == max && memo.count >= count) {
    // The walk's frames are the innermost `count` of the memo's: both
    // counts are in the key.
    hash->cut_key = true;
    hash->value =
        StackHashFinish(StackHashStep(memo.fold[memo.count - 1], count), memo.count, true);
  }
}

// A thread without a memo slot: walks with an empty memo on the stack (not
// kept afterwards; only its header is read while empty). Out of line, so
// that the 2.5 KiB of that memo are on the host's stack only then.
__attribute__((noinline, cold)) int WalkWithoutMemo(uint64_t* cache, const UnwindRegisters& regs,
                                                    uintptr_t stack_low, uintptr_t stack_high,
                                                    uintptr_t* frames, int max) {
  WalkMemo scratch;
  scratch.count = 0;
  Walk walk{cache, &scratch, stack_low, stack_high, frames, max};
  const int count = walk.Run(regs);
  if (__builtin_expect(walk.go_rule() != 0, 0)) {
    return WalkThroughGo(cache, walk.go_rule(), walk.go_at(), stack_low, stack_high, frames, count,
                         max);
  }
  return count;
}

// The general walk with the thread's memo. Out of line, so that its 2 KiB
// of kept frames are on the host's stack only when FastWalk gave up.
__attribute__((noinline)) int WalkWithMemo(uint64_t* cache, WalkMemo* memo,
                                           const UnwindRegisters& regs, uintptr_t stack_low,
                                           uintptr_t stack_high, uintptr_t* frames, int max,
                                           CfiStackHash* hash) {
  Walk walk{cache, memo, stack_low, stack_high, frames, max};
  const int count = walk.Run(regs);
  // Stopped at Go code (a cgo program): the one branch programs without Go
  // pay, per walk.
  if (__builtin_expect(walk.go_rule() != 0, 0)) {
    return WalkThroughGo(cache, walk.go_rule(), walk.go_at(), stack_low, stack_high, frames, count,
                         max);
  }
  GiveHash(*memo, count, max, hash);
  return count;
}

// CfiUnwind, and with kLazy CfiUnwindLazily (`hash` then not null).
template <bool kLazy>
__attribute__((always_inline)) inline int Unwind(const UnwindRegisters& regs, uintptr_t stack_low,
                                                 uintptr_t stack_high, uintptr_t* frames, int max,
                                                 CfiStackHash* hash) {
  if (hash != nullptr) *hash = {false, false, 0, nullptr, 0};
#if defined(__x86_64__)
  uint64_t* cache = Cache();
  if (cache == nullptr) return -1;
  if (regs.sp < stack_low || regs.sp >= stack_high || (regs.sp & 7) != 0) return -1;
  WalkMemo* memo = ThreadMemo(stack_high);
  if (memo == nullptr) return WalkWithoutMemo(cache, regs, stack_low, stack_high, frames, max);
  if (memo->count > 0 && memo->stack_low == stack_low && memo->stack_high == stack_high &&
      memo->generation == g_generation.load(std::memory_order_relaxed)) {
    if (const int count = FastWalk<!kLazy>(cache, *memo, regs, stack_high, frames, max);
        count >= 0) {
      GiveHash(*memo, count, max, hash);
      if constexpr (kLazy) {
        // A walk that FastWalk finished left all its frames in the memo,
        // innermost last (it ends as the memo does, or is its innermost
        // `count` when cut at the depth limit).
        hash->pending_ips = memo->ip;
        hash->pending_count = memo->count;
        if (count == 0 || !(hash->known || hash->cut_key)) {
          CfiWritePendingFrames(*hash, frames, count);
          hash->pending_ips = nullptr;
          hash->pending_count = 0;
        }
      }
      return count;
    }
  }
  return WalkWithMemo(cache, memo, regs, stack_low, stack_high, frames, max, hash);
#else
  (void)regs;
  (void)stack_low;
  (void)stack_high;
  (void)frames;
  (void)max;
  return -1;
#endif
}

}  // namespace

int CfiUnwind(const UnwindRegisters& regs, uintptr_t stack_low, uintptr_t stack_high,
              uintptr_t* frames, int max, CfiStackHash* hash) {
  return Unwind<false>(regs, stack_low, stack_high, frames, max, hash);
}

int CfiUnwindLazily(const UnwindRegisters& regs, uintptr_t stack_low, uintptr_t stack_high,
                    uintptr_t* frames, int max, CfiStackHash* hash) {
  return Unwind<true>(regs, stack_low, stack_high, frames, max, hash);
}

CfiMemoPlace CfiThreadMemoForTesting(uintptr_t stack_high) {
  return {reinterpret_cast<uintptr_t>(ThreadMemo(stack_high)), sizeof(WalkMemo)};
}

void CfiForgetRules() {
  uint64_t* cache = g_cache.load(std::memory_order_acquire);
  if (cache == nullptr) return;
  const int saved_errno = errno;  // called from the dlclose hook
  // Back to zero pages (empty entries) without touching them one by one; a
  // raw system call, like the arena's, so no hook sees it.
  g_generation.fetch_add(1, std::memory_order_relaxed);
  if (syscall(SYS_madvise, cache, kCacheBytes, MADV_DONTNEED) != 0) {
    for (size_t i = 0; i < kCacheEntries; ++i) {
      std::atomic_ref<uint64_t>(cache[i]).store(0, std::memory_order_relaxed);
    }
  }
  errno = saved_errno;
}

uint64_t LoaderUnloadCount() {
  uint64_t subs = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) {
        // dlpi_subs exists from glibc 2.4 on; `size` says whether it is there.
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
          *static_cast<uint64_t*>(data) = info->dlpi_subs;
        } else {
          *static_cast<uint64_t*>(data) = ~uint64_t{0};  // unknown: always forget
        }
        return 1;  // the first object is enough: the counter is global
      },
      &subs);
  return subs;
}

uint64_t CfiCacheMisses() { return g_misses.load(std::memory_order_relaxed); }

}  // namespace retain::shim
