// cfi_unwinder: a stack walk through code without frame pointers, from the
// DWARF call frame information every x86-64 object carries (.eh_frame), with
// each return address's rule cached.
//
// libunwind's unw_backtrace does the same job in ~10 ns a frame; here a frame
// costs one lookup in a lock-free rule cache plus the one or two loads from
// the stack the rule says. The cache is a table of 2^16 64-bit words in sets
// of four, shared by all threads: the return address (x86-64 user addresses
// fit in 47 bits) packed with its rule. A miss finds the object containing the
// address with dl_iterate_phdr and reads the rule from its .eh_frame_hdr and
// .eh_frame (unwind/eh_frame.h) inside the callback, so the loader's lock keeps the
// object mapped while it is read; it happens once per return address, and
// "this address needs the fallback" is cached too.
//
// Consecutive walks on a thread mostly share their outer frames, so each
// thread also keeps its previous walk; a walk that meets it checks that the
// stack still holds each remembered return address (and saved rbp where it
// matters) instead of walking those frames again: ~2 ns a frame instead of
// ~7. Exact: a frame is reused only when the walk would compute it anyway.
// The memo also keeps, per frame, the stack hash's fold from the outermost
// frame in (unwind/stack_hash.h): a walk that ends as the memo does gives its
// stack's hash at the cost of folding its new frames only.
//
// Only the common frame layouts are handled: CFA = rsp or rbp + offset, the
// return address at CFA - 8, the caller's rbp unchanged or saved in the frame.
// Anything else (signal frames, CFA expressions, code without unwind
// information, JIT code, a stack read out of bounds) makes the whole walk
// report failure, and the caller captures that stack with libunwind instead,
// so stacks are exactly libunwind's either way.
//
// One exception: code without unwind information in a Go module (a cgo
// program; unwind/go_runtime.h). Go's linker writes no .eh_frame, so a C
// function called from Go returns into code no rule covers: there the walk
// goes on by go_stack's rules (unwind/go_stack.h), through the goroutine's
// frames by their frame pointers, and back to this walker for the C code of
// a callback's caller. Programs without Go pay nothing for it: the check is
// folded into the test for the other answers that are not rules.
//
// Thread-safe, but one walk must not interrupt another on the same thread
// (a signal handler): they would share the thread's memo; the shim's
// re-entry guard sees to that. Never allocates from the host heap, takes no
// lock on the hot path (a cache miss takes the loader's, through
// dl_iterate_phdr, as libunwind does; a thread's first walk the arena's, for
// its memo), never faults on a bad stack (every read is checked against the
// thread's stack bounds) and leaves errno alone. x86-64 only: elsewhere
// CfiUnwind always reports failure.
#ifndef RETAIN_SHIM_SRC_UNWIND_CFI_UNWINDER_H_
#define RETAIN_SHIM_SRC_UNWIND_CFI_UNWINDER_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim {

// The three registers a walk tracks, at a call site: `ip` is a return
// address (the walk looks up ip - 1, the call), `sp` the stack pointer just
// after the call returned (the callee's CFA), `bp` rbp at that point.
struct UnwindRegisters {
  uintptr_t ip;
  uintptr_t sp;
  uintptr_t bp;
};

// The registers of the caller of the function whose frame pointer is `fp`,
// for a function that keeps one (push rbp; mov rsp, rbp).
inline UnwindRegisters CallerOfFrame(const uintptr_t* fp) {
  return {fp[1], reinterpret_cast<uintptr_t>(fp + 2), fp[0]};
}

// Writes the return addresses of the stack starting at `regs` (frames[0] is
// regs.ip) into frames[0..max), reading the stack only inside
// [stack_low, stack_high). Returns the number written; it stops at the
// outermost frame (an undefined return address, as _start and clone mark
// it, or a return address of 0) or at `max`. Returns -1 when some frame
// cannot be walked here: the caller must use another unwinder.
// `hash`, when not null, receives StackHash(frames, count, false)
// (unwind/stack_hash.h) when the walk could give it without hashing every
// frame (it ended as the thread's memo of it does, below `max`): then
// hash->known is true. A walk cut at `max` (count == max) gives a key of
// its stack instead, when its memo holds it: hash->cut_key is true and
// hash->value is a hash of the memo's fold over the remembered frames,
// outermost first (this walk's frames and those past the cut an earlier
// walk recorded), of their count and of `count`, so two walks with equal
// keys gave the same frames, as far as a 64-bit hash tells. Not the
// stack's hash (a cut stack's hash starts at the cut, where no fold does):
// for caches only (InternStackKeyed).
struct CfiStackHash {
  bool known;
  bool cut_key;
  uint64_t value;
  // CfiUnwindLazily only: not null when the frames were left unwritten.
  // They are then the innermost ones of the thread's memo, outermost first:
  // frames[i] is pending_ips[pending_count - 1 - i] (CfiWritePendingFrames).
  const uintptr_t* pending_ips;
  int pending_count;
};
// `regs` by reference: a 24-byte struct by value is copied through memory
// with a 16-byte load of two 8-byte stores, which stalls store forwarding.
int CfiUnwind(const UnwindRegisters& regs, uintptr_t stack_low, uintptr_t stack_high,
              uintptr_t* frames, int max, CfiStackHash* hash = nullptr);

// CfiUnwind for a caller that needs the frames only now and then (the
// stack table, for a stack whose hash it has not seen): a walk that gives
// a hash or a key and reused the thread's memo may leave `frames`
// unwritten (hash->pending_ips set), saving a store per frame. Such frames
// stay readable until the thread's next walk; CfiWritePendingFrames writes
// them. Otherwise as CfiUnwind.
int CfiUnwindLazily(const UnwindRegisters& regs, uintptr_t stack_low, uintptr_t stack_high,
                    uintptr_t* frames, int max, CfiStackHash* hash);

// The first frame of a walk whose frames are pending (its return address
// into the code that called).
inline uintptr_t CfiFirstPendingFrame(const CfiStackHash& hash) {
  return hash.pending_ips[hash.pending_count - 1];
}

// frames[i] of a walk whose frames are pending.
inline uintptr_t CfiPendingFrame(const CfiStackHash& hash, int i) {
  return hash.pending_ips[hash.pending_count - 1 - i];
}

// Writes the `count` frames CfiUnwindLazily left pending into `frames`.
inline void CfiWritePendingFrames(const CfiStackHash& hash, uintptr_t* frames, int count) {
  for (int i = 0; i < count; ++i) frames[i] = CfiPendingFrame(hash, i);
}

// Where the calling thread's memo of its previous walk is (claimed now if
// it has none; address 0 when none can be had), for tests: each thread's
// must be on cache lines no other thread's shares.
struct CfiMemoPlace {
  uintptr_t address;
  size_t bytes;
};
CfiMemoPlace CfiThreadMemoForTesting(uintptr_t stack_high);

// Forgets every cached rule. Call after an object was unloaded: another one
// may be loaded at the same addresses.
void CfiForgetRules();

// How many objects the loader has unloaded so far (dl_iterate_phdr's
// dlpi_subs): compared before and after a dlclose, it tells whether the
// rules must be forgotten (most dlclose calls only drop a reference).
uint64_t LoaderUnloadCount();

// Rule-cache lookups that missed (each ran the parser once), for tests.
uint64_t CfiCacheMisses();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_CFI_UNWINDER_H_
