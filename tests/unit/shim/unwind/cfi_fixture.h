// cfi_fixture: code the CFI unwinder test walks through (cfi_unwinder_test.cc).
// cfi_fixture_nofp.cc and cfi_fixture_lib.cc are built with -O2
// -fomit-frame-pointer, like most programs and Debian's runtimes: their
// frames can only be passed with the call frame information.
#ifndef RETAIN_TESTS_UNIT_CFI_FIXTURE_H_
#define RETAIN_TESTS_UNIT_CFI_FIXTURE_H_

namespace cfi_fixture {

// What the innermost frame of a walk does. Each allocates from the heap,
// through a different runtime path.
enum class Leaf {
  kMalloc,     // malloc directly
  kNew,        // operator new[] (libstdc++) -> malloc
  kVector,     // std::vector growth
  kString,     // std::string growth
  kQsort,      // a qsort comparator (called from libc) that allocates
  kStrdup,     // strdup (libc) -> malloc
  kSharedLib,  // into cfi_fixture_lib.so, built without frame pointers
  kAlloca,     // a frame with alloca: its CFA is rbp-based
  kVla,        // a variable-length array, the same
  kAlternate,  // AlternateCallers(4 + seed % 3): the middle of the stack changes
};

// Descends `depth` frames through four functions with different frame
// layouts (a big local buffer, many callee-saved registers, alloca, a VLA),
// chosen by `seed`, then runs `leaf`. Returns a checksum (keeps the calls
// from being optimised away).
long Descend(int depth, unsigned seed, Leaf leaf);

// Allocates `rounds` times from one leaf function called alternately by two
// different callers with frames of one size: consecutive stacks are equal
// but for one return address in the middle, at the same stack address.
long AlternateCallers(int rounds);

}  // namespace cfi_fixture

// cfi_fixture_lib.so: recurses `depth` frames, then mallocs and calls
// `callback` (back in the test's code), which may allocate too.
extern "C" long cfi_fixture_lib_descend(int depth, long (*callback)(int), int argument);

#endif  // RETAIN_TESTS_UNIT_CFI_FIXTURE_H_
