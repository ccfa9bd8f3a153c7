// cfi_unwinder: see cfi_unwinder.h.
#include "cfi_unwinder.h"

#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "arena.h"
#include "eh_frame.h"

namespace retain::shim {
namespace {

// Rule cache entry: the return address in the top 47 bits, its rule in the
// low 17:
//   bit 0       1 = entry in use (0 = empty: a zero page is an empty table)
//   bit 1       CFA register: 0 = rsp, 1 = rbp
//   bits 2-11   CFA offset / 8, 1..1023 (frames up to 8 KiB)
//   bits 12-16  where the caller's rbp is: 0 = unchanged, k = at CFA - 8k
// A CFA offset field of 0 is no real rule (the return address would be below
// the stack pointer), so it marks the two answers that are not rules:
// kFallbackRule and kOutermostRule. Rules that do not fit (odd or negative
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

// The first entry of ip's set.
size_t SetOf(uintptr_t ip) {
  return static_cast<size_t>((ip * 0x9e3779b97f4a7c15ull) >> (64 - kCacheBits)) & ~(kWays - 1);
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
  if (eh_frame_hdr != nullptr) {
    const uintptr_t hdr = info->dlpi_addr + eh_frame_hdr->p_vaddr;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
      const ElfW(Phdr)& phdr = info->dlpi_phdr[i];
      if (phdr.p_type != PT_LOAD) continue;
      const uintptr_t start = info->dlpi_addr + phdr.p_vaddr;
      if (hdr < start || hdr - start >= phdr.p_memsz) continue;
      const EhFrameSection section{hdr, start, start + phdr.p_memsz};
      search->rule = PackRule(FindFrameRule(section, pc));
      break;
    }
  }
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

}  // namespace

int CfiUnwind(UnwindRegisters regs, uintptr_t stack_low, uintptr_t stack_high, uintptr_t* frames,
              int max) {
#if defined(__x86_64__)
  uint64_t* cache = Cache();
  if (cache == nullptr) return -1;
  uintptr_t ip = regs.ip;
  uintptr_t sp = regs.sp;
  uintptr_t bp = regs.bp;
  if (sp < stack_low || sp >= stack_high || (sp & 7) != 0) return -1;
  int count = 0;
  while (count < max && ip >= kLowestIp) {
    frames[count++] = ip;
    if (count == max) break;
    const uint64_t rule = LookUp(cache, ip);
    if (rule == kOutermostRule) break;
    if (rule == kFallbackRule) return -1;
    const uintptr_t base = (rule & kRbpBaseBit) != 0 ? bp : sp;
    const uintptr_t cfa = base + ((rule >> kOffsetShift) & kOffsetMask) * 8;
    // The return address sits at CFA - 8: above sp, inside the stack. A
    // wrapped sum (rbp garbage) fails the first test.
    if (cfa <= sp || cfa > stack_high || (cfa & 7) != 0) return -1;
    const uintptr_t next_ip = reinterpret_cast<const uintptr_t*>(cfa)[-1];
    const uint64_t slot = (rule >> kSlotShift) & kSlotMask;
    if (slot != 0) {
      const uintptr_t saved_bp_at = cfa - slot * 8;
      if (saved_bp_at < sp) return -1;
      bp = *reinterpret_cast<const uintptr_t*>(saved_bp_at);
    }
    sp = cfa;
    ip = next_ip;
  }
  return count;
#else
  (void)regs;
  (void)stack_low;
  (void)stack_high;
  (void)frames;
  (void)max;
  return -1;
#endif
}

void CfiForgetRules() {
  uint64_t* cache = g_cache.load(std::memory_order_acquire);
  if (cache == nullptr) return;
  const int saved_errno = errno;  // called from the dlclose hook
  // Back to zero pages (empty entries) without touching them one by one; a
  // raw system call, like the arena's, so no hook sees it.
  if (syscall(SYS_madvise, cache, kCacheBytes, MADV_DONTNEED) != 0) {
    for (size_t i = 0; i < kCacheEntries; ++i) {
      std::atomic_ref<uint64_t>(cache[i]).store(0, std::memory_order_relaxed);
    }
  }
  errno = saved_errno;
}

uint64_t CfiCacheMisses() { return g_misses.load(std::memory_order_relaxed); }

}  // namespace retain::shim
