// stack_hash: the hash the stack table keys stacks by, defined so that it
// can be computed while walking.
//
// The hash folds the return addresses from the OUTERMOST frame inwards, one
// step per frame, then mixes in the depth and the truncation flag. A walker
// that remembers its previous walk (unwind/cfi_unwinder.h) keeps the fold's
// value at each remembered frame: a walk that reuses the outer part of the
// previous one then folds only its new inner frames, and the stack table
// skips hashing the whole stack again (InternStackHashed). Any other caller
// hashes the frames with StackHash; both give the same value for the same
// frames, which the stack table relies on.
//
// Each step is a bijection of the state for a fixed frame and of the frame
// for a fixed state, so two stacks that differ in one frame never share a
// hash. Pure functions: thread- and async-signal-safe.
#ifndef RETAIN_SHIM_SRC_UNWIND_STACK_HASH_H_
#define RETAIN_SHIM_SRC_UNWIND_STACK_HASH_H_

#include <cstdint>

namespace retain::shim {

// The fold's value before any frame (outside the outermost one).
constexpr uint64_t kStackHashSeed = 0xcbf29ce484222325ull;

// One frame further in.
inline uint64_t StackHashStep(uint64_t state, uintptr_t frame) {
  const uint64_t h = (state ^ static_cast<uint64_t>(frame)) * 0x9E3779B97F4A7C15ull;
  return (h << 27) | (h >> 37);
}

// The hash of a stack whose fold over all its frames is `state`.
inline uint64_t StackHashFinish(uint64_t state, int depth, bool truncated) {
  uint64_t h = state ^ (static_cast<uint64_t>(depth) << 1) ^ (truncated ? 1 : 0);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

// The hash of frames[0..depth) (innermost first).
inline uint64_t StackHash(const uintptr_t* frames, int depth, bool truncated) {
  uint64_t state = kStackHashSeed;
  for (int i = depth - 1; i >= 0; --i) state = StackHashStep(state, frames[i]);
  return StackHashFinish(state, depth, truncated);
}

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_STACK_HASH_H_
