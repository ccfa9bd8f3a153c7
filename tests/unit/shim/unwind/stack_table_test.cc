// Stack interning: one id per distinct stack, stable under threads.
#include "unwind/stack_table.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "unwind/stack_hash.h"

namespace retain::shim {
namespace {

TEST(StackTableTest, IdenticalStacksShareAnId) {
  uintptr_t a[] = {0x1000, 0x2000, 0x3000};
  uintptr_t b[] = {0x1000, 0x2000, 0x3001};
  uint32_t id_a = InternStack(a, 3, false);
  uint32_t id_b = InternStack(b, 3, false);
  ASSERT_NE(id_a, 0u);
  ASSERT_NE(id_b, 0u);
  EXPECT_NE(id_a, id_b);
  EXPECT_EQ(InternStack(a, 3, false), id_a);
  EXPECT_NE(InternStack(a, 2, false), id_a);  // a prefix is another stack
  EXPECT_NE(InternStack(a, 3, true), id_a);   // so is a truncated one
  const StackEntry* entry = FindStackById(id_a);
  ASSERT_NE(entry, nullptr);
  ASSERT_EQ(entry->depth, 3);
  EXPECT_EQ(entry->frames[2], 0x3000u);
  EXPECT_EQ(FindStackById(0), nullptr);
}

TEST(StackTableTest, ThreadsInterningTheSameStacksAgree) {
  constexpr int kThreads = 4;
  constexpr int kStacks = 20000;
  std::vector<std::vector<uint32_t>> ids(kThreads, std::vector<uint32_t>(kStacks));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &ids] {
      for (int i = 0; i < kStacks; ++i) {
        uintptr_t frames[4] = {0x400000u + uintptr_t(i), 0x500000, 0x600000, uintptr_t(i) * 7};
        ids[t][i] = InternStack(frames, 4, false);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<uint32_t> distinct;
  for (int i = 0; i < kStacks; ++i) {
    for (int t = 1; t < kThreads; ++t) ASSERT_EQ(ids[t][i], ids[0][i]);
    distinct.insert(ids[0][i]);
    const StackEntry* entry = FindStackById(ids[0][i]);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->frames[0], 0x400000u + uintptr_t(i));
  }
  EXPECT_EQ(distinct.size(), size_t{kStacks});
  EXPECT_GE(StackCount(), uint32_t{kStacks});
}

}  // namespace
}  // namespace retain::shim

namespace retain::shim {
namespace {

// More distinct stacks than the hash -> id cache has slots: slots are
// shared and overwritten, and every stack still gets its own id, the same
// every time, whose entry holds exactly its frames.
TEST(StackTableTest, ManyStacksThroughTheCacheKeepTheirIds) {
  constexpr int kStacks = 200000;
  std::vector<uint32_t> ids(kStacks);
  auto frames_of = [](int i, uintptr_t* frames) {
    for (int f = 0; f < 12; ++f) frames[f] = 0x400000 + uintptr_t(i) * 64 + uintptr_t(f) * 8;
  };
  std::set<uint32_t> distinct;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kStacks; ++i) {
      uintptr_t frames[12];
      frames_of(i, frames);
      const uint32_t id = InternStack(frames, 12, false);
      ASSERT_NE(id, 0u);
      if (round == 0) {
        ids[i] = id;
        distinct.insert(id);
      } else {
        ASSERT_EQ(id, ids[i]) << i;
      }
    }
  }
  EXPECT_EQ(distinct.size(), size_t{kStacks});
  for (int i = 0; i < kStacks; i += 997) {
    uintptr_t frames[12];
    frames_of(i, frames);
    const StackEntry* entry = FindStackById(ids[i]);
    ASSERT_NE(entry, nullptr);
    ASSERT_EQ(entry->depth, 12);
    for (int f = 0; f < 12; ++f) EXPECT_EQ(entry->frames[f], frames[f]);
  }
}

// A stack cut at the depth limit is hashed in four lanes
// (TruncatedStackHash), not by the fold: a change in any one frame still
// changes its hash, it never equals the same frames' uncut hash, and the
// table keeps it exactly like any other stack.
TEST(StackTableTest, TruncatedStacksAreHashedInLanesAndKeptExactly) {
  for (int depth : {1, 2, 3, 4, 5, 7, 48}) {
    std::vector<uintptr_t> frames(depth);
    for (int i = 0; i < depth; ++i) frames[i] = 0x7f0000001000u + uintptr_t(i) * 0x40;
    const uint64_t hash = StackHash(frames.data(), depth, true);
    EXPECT_EQ(hash, TruncatedStackHash(frames.data(), depth));
    // The same frames kept outermost first (as the CFI walker's memo keeps
    // them), with frames past the cut beyond them: the same hash.
    std::vector<uintptr_t> outer_first(frames.rbegin(), frames.rend());
    outer_first.insert(outer_first.begin(), {0x7f00000ff000u, 0x7f00000fe000u});
    const int top = static_cast<int>(outer_first.size());
    EXPECT_EQ(TruncatedStackHashOf([&](int i) { return outer_first[top - 1 - i]; }, depth), hash);
    EXPECT_NE(hash, StackHash(frames.data(), depth, false));
    for (int i = 0; i < depth; ++i) {
      std::vector<uintptr_t> changed = frames;
      changed[i] ^= 0x10;
      EXPECT_NE(StackHash(changed.data(), depth, true), hash) << depth << " " << i;
    }
    if (depth >= 2) {  // two frames swapped: another stack, another hash
      std::vector<uintptr_t> swapped = frames;
      std::swap(swapped[0], swapped[1]);
      EXPECT_NE(StackHash(swapped.data(), depth, true), hash) << depth;
    }
    const uint32_t id = InternStack(frames.data(), depth, true);
    ASSERT_NE(id, 0u);
    EXPECT_EQ(InternStack(frames.data(), depth, true), id);
    EXPECT_NE(InternStack(frames.data(), depth, false), id);
    const StackEntry* entry = FindStackById(id);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->depth, depth);
    EXPECT_EQ(entry->truncated, 1);
    for (int i = 0; i < depth; ++i) EXPECT_EQ(entry->frames[i], frames[i]);
  }
}

// Keys (InternStackKeyed, the CFI walker's keys of stacks cut at the depth
// limit): a stack reached by several keys, and by its frames, is one stack
// with one id, and the table holds it once; another stack under another key
// gets its own id. The key the thread used last gives that id again; any
// other key goes through the stack's hash.
TEST(StackTableTest, KeysOfOneStackGiveItsOneId) {
  uintptr_t frames[48];
  for (int i = 0; i < 48; ++i) frames[i] = 0x7f1000002000u + uintptr_t(i) * 0x30;
  const uint32_t before = StackCount();
  const uint32_t id = InternStackKeyed(frames, 48, true, 0x1234567890abcdefu);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(StackCount(), before + 1);
  EXPECT_EQ(InternStackKeyed(frames, 48, true, 0x1234567890abcdefu), id);  // the last stack
  EXPECT_EQ(InternStackKeyed(frames, 48, true, 0x0fedcba987654321u), id);  // a second key
  EXPECT_EQ(InternStack(frames, 48, true), id);                            // by its frames
  EXPECT_EQ(InternStackKeyed(frames, 48, true, 0x1234567890abcdefu), id);  // not the last key
  EXPECT_EQ(StackCount(), before + 1);
  uintptr_t other[48];
  for (int i = 0; i < 48; ++i) other[i] = frames[i];
  other[47] += 8;  // the outermost kept frame differs
  const uint32_t other_id = InternStackKeyed(other, 48, true, 0x5555aaaa5555aaaau);
  ASSERT_NE(other_id, 0u);
  EXPECT_NE(other_id, id);
  EXPECT_EQ(InternStack(other, 48, true), other_id);
  EXPECT_EQ(StackCount(), before + 2);
  // A key, then another stack by its hash, then the key again: the key's
  // stack, not the one interned last.
  EXPECT_EQ(InternStackKeyed(frames, 48, true, 0x1234567890abcdefu), id);
  EXPECT_EQ(InternStack(other, 48, true), other_id);
  EXPECT_EQ(InternStackKeyed(frames, 48, true, 0x1234567890abcdefu), id);
  const StackEntry* entry = FindStackById(other_id);
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->truncated, 1);
  for (int i = 0; i < 48; ++i) EXPECT_EQ(entry->frames[i], other[i]);
}

// What a capture asks before it has the frames in hand (the CFI walker
// left them in its memo): a stack the thread interned last, or one in the
// hash -> id cache, is found by its hash alone; an unseen hash is not (the
// capture then interns the frames); a key finds the thread's last stack
// only, and NoteStackKey files that stack under a key.
TEST(StackTableTest, StacksSeenBeforeAreFoundByHashOrKeyAlone) {
  uintptr_t frames[20];
  for (int i = 0; i < 20; ++i) frames[i] = 0x7f2000003000u + uintptr_t(i) * 0x28;
  const uint64_t hash = StackHash(frames, 20, false);
  EXPECT_EQ(FindStackIdByHash(hash), 0u);  // never interned
  const uint32_t id = InternStackHashed(frames, 20, false, hash);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(FindStackIdByHash(hash), id);  // the thread's last stack
  uintptr_t other[20];
  for (int i = 0; i < 20; ++i) other[i] = frames[i] + 0x1000;
  const uint64_t other_hash = StackHash(other, 20, false);
  const uint32_t other_id = InternStackHashed(other, 20, false, other_hash);
  ASSERT_NE(other_id, 0u);
  EXPECT_NE(other_id, id);
  EXPECT_EQ(FindStackIdByHash(hash), id);  // from the cache, and now the last again
  EXPECT_EQ(FindStackIdByKey(0x2222333344445555u), 0u);
  NoteStackKey(0x2222333344445555u);
  EXPECT_EQ(FindStackIdByKey(0x2222333344445555u), id);
  EXPECT_EQ(FindStackIdByHash(other_hash), other_id);
  EXPECT_EQ(FindStackIdByKey(0x2222333344445555u), 0u);  // the last stack is another
  EXPECT_EQ(FindStackIdByHash(hash ^ 1), 0u);
}

}  // namespace
}  // namespace retain::shim
