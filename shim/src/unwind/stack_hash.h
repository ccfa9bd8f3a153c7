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
// frames, which the stack table relies on. A truncated stack (cut at the
// depth limit) is never folded by a walker: its hash is computed in four
// lanes instead (TruncatedStackHash), four times shorter a chain.
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

// The hash of a stack cut at the depth limit, frames[0..depth) (innermost
// first). No walker folds such a stack (its outermost kept frame is not the
// stack's outermost, where a walk's fold starts), so its hash need not be the
// fold's: four lanes of it, which break the fold's chain of dependent
// multiplies (48 frames: 12 steps of latency instead of 48). Frames that
// differ in one place still always give different hashes: each lane's step
// is a bijection of its frame, and the lanes are combined by steps that are
// bijections of either argument.
// `frame(i)` gives frames[i]: the frames may be in an array of another order
// (the CFI walker's memo keeps them outermost first).
template <typename FrameAt>
inline uint64_t TruncatedStackHashOf(FrameAt frame, int depth) {
  uint64_t lane[4] = {kStackHashSeed, kStackHashSeed ^ 1, kStackHashSeed ^ 2, kStackHashSeed ^ 3};
  int i = depth - 1;
  for (; i >= 3; i -= 4) {
    lane[0] = StackHashStep(lane[0], frame(i));
    lane[1] = StackHashStep(lane[1], frame(i - 1));
    lane[2] = StackHashStep(lane[2], frame(i - 2));
    lane[3] = StackHashStep(lane[3], frame(i - 3));
  }
  for (; i >= 0; --i) lane[0] = StackHashStep(lane[0], frame(i));
  const uint64_t state =
      StackHashStep(StackHashStep(StackHashStep(lane[0], lane[1]), lane[2]), lane[3]);
  return StackHashFinish(state, depth, true);
}

inline uint64_t TruncatedStackHash(const uintptr_t* frames, int depth) {
  return TruncatedStackHashOf([frames](int i) { return frames[i]; }, depth);
}

// The hash of frames[0..depth) (innermost first): the fold's, except for a
// truncated stack (TruncatedStackHash).
inline uint64_t StackHash(const uintptr_t* frames, int depth, bool truncated) {
  if (truncated) return TruncatedStackHash(frames, depth);
  uint64_t state = kStackHashSeed;
  for (int i = depth - 1; i >= 0; --i) state = StackHashStep(state, frames[i]);
  return StackHashFinish(state, depth, false);
}

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_STACK_HASH_H_
