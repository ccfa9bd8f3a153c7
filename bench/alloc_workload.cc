// alloc_workload: an allocation-heavy, deterministic workload for measuring
// the shim's overhead beside other heap profilers (bench/overhead_bench.sh).
//
//   bench_alloc_workload [OPERATIONS_PER_THREAD=2000000] [WORK_ITERATIONS=56]
//                        [SIZE_MIX=mixed|small] [PATHS=shallow|deep]
//
// `8 small` is the low-work workload of bench/README.md (~50-100 ns of the
// program's own work per allocation call, every block 1-256 bytes); `8 small
// deep` the same with call paths 60-100 frames deep, past the default
// RETAIN_DEPTH (48): every stack is cut there.
//
// Two threads. Each repeatedly descends through a call path 8-42 frames deep
// (60-100 with PATHS=deep; recursion over four noinline functions chosen by a
// deterministic PRNG, ~500 distinct paths per thread) and, at the bottom, performs a short batch
// of operations through every allocation entry point: malloc, calloc,
// realloc, posix_memalign, memalign, aligned_alloc, operator new/delete,
// new[]/delete[], std::vector, std::string and std::map growth. Lifetimes
// are mixed: short (freed at once), medium (a ring of 4096 slots per thread)
// and never freed (LeakForever through malloc, calloc, new[], posix_memalign
// or realloc; sizes summed exactly). Each allocation call
// is accompanied by a small compute loop (~200 ns, WORK_ITERATIONS).
//
// At the end all memory but the leaked blocks is freed, RETAIN_SNAPSHOT("end")
// is taken (a no-op without libretain.so), and the program prints
//   allocation_calls N
//   leaked_bytes N leaked_count M
//   checksum X
// Built without -fno-omit-frame-pointer on purpose, like most programs;
// bench_alloc_workload_fp is the same source with frame pointers.
#include <malloc.h>
#include <retain/retain.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kThreads = 2;
constexpr int kRingSlots = 4096;
constexpr int kPaths = 500;
constexpr int kMaxLeaks = 1 << 16;

long g_work_iterations = 56;
// SIZE_MIX "small": every block 1-256 bytes (no large blocks, whose zeroing
// and first touch would dominate a low-work run).
bool g_small_sizes = false;
// PATHS "deep": 30-50 levels (60-100 frames) instead of 4-21.
bool g_deep_paths = false;

struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  uint32_t Below(uint32_t n) { return static_cast<uint32_t>((Next() >> 11) % n); }
};

enum SlotKind : uint8_t { kEmpty, kFree, kDeleteArray };

struct Slot {
  void* p = nullptr;
  size_t size = 0;
  SlotKind kind = kEmpty;
};

struct ThreadState {
  Rng rng;
  Slot ring[kRingSlots];
  uint64_t calls = 0;  // allocation calls (malloc-like, incl. container growth)
  uint64_t checksum = 0;
  uint64_t leaked_bytes = 0;
  uint64_t leaked_count = 0;
  void** leaks = nullptr;  // kMaxLeaks pointers, allocated up front
};

// ~200 ns of dependent arithmetic per allocation call.
__attribute__((noinline)) uint64_t Work(uint64_t x) {
  for (long i = 0; i < g_work_iterations; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    x ^= x >> 29;
  }
  return x;
}

void Touch(ThreadState& t, void* p, size_t n) {
  if (n == 0) return;
  auto* c = static_cast<unsigned char*>(p);
  c[0] = static_cast<unsigned char>(t.checksum);
  c[n - 1] = static_cast<unsigned char>(n);
  t.checksum += c[0] + c[n / 2] * 0 + c[n - 1];
}

size_t SmallSize(Rng& r) {
  // Mostly small, byte-granular, with an occasional larger block.
  if (g_small_sizes) return 1 + r.Below(256);
  uint32_t k = r.Below(100);
  if (k < 70) return 1 + r.Below(128);
  if (k < 95) return 129 + r.Below(2048);
  return 4096 + r.Below(60000);
}

void ReleaseSlot(Slot& s) {
  if (s.kind == kFree) free(s.p);
  if (s.kind == kDeleteArray) delete[] static_cast<char*>(s.p);
  s = Slot();
}

// Never freed. The entry point varies (malloc, calloc, new[], posix_memalign,
// and a block grown by realloc to its final size), so a tracker is checked
// on each of them: the leaked total counts each block's final size once.
__attribute__((noinline)) void LeakForever(ThreadState& t, size_t n) {
  void* p = nullptr;
  switch (t.leaked_count % 5) {
    case 0:
      p = malloc(n);
      break;
    case 1:
      p = calloc(n, 1);
      break;
    case 2:
      p = new char[n];
      break;
    case 3:
      if (posix_memalign(&p, 64, n) != 0) abort();
      break;
    default:
      p = malloc(1 + n / 2);
      ++t.calls;
      Touch(t, p, 1 + n / 2);
      p = realloc(p, n);
      break;
  }
  ++t.calls;
  Touch(t, p, n);
  if (t.leaked_count < kMaxLeaks) t.leaks[t.leaked_count] = p;
  t.leaked_bytes += n;
  ++t.leaked_count;
}

__attribute__((noinline)) void VectorGrowth(ThreadState& t, uint32_t n) {
  std::vector<uint32_t> v;
  size_t cap = v.capacity();
  for (uint32_t i = 0; i < n; ++i) {
    v.push_back(i * 7);
    if (v.capacity() != cap) {
      cap = v.capacity();
      ++t.calls;
      t.checksum = Work(t.checksum + cap);
    }
  }
  t.checksum += v.back();
}

__attribute__((noinline)) void StringGrowth(ThreadState& t, uint32_t n) {
  std::string s;
  size_t cap = s.capacity();
  for (uint32_t i = 0; i < n; ++i) {
    s.append("abcdefgh", 1 + (i & 7));
    if (s.capacity() != cap) {
      cap = s.capacity();
      ++t.calls;
      t.checksum = Work(t.checksum + cap);
    }
  }
  t.checksum += s.size();
}

__attribute__((noinline)) void MapGrowth(ThreadState& t, uint32_t n) {
  std::map<uint32_t, uint64_t> m;
  for (uint32_t i = 0; i < n; ++i) {
    if (m.emplace(t.rng.Below(1000), i).second) {
      ++t.calls;
      t.checksum = Work(t.checksum + i);
    }
  }
  t.checksum += m.size();
}

__attribute__((noinline)) void MediumLived(ThreadState& t) {
  Slot& s = t.ring[t.rng.Below(kRingSlots)];
  uint32_t kind = t.rng.Below(6);
  if (kind == 2 && s.kind == kFree) {  // realloc an existing block
    size_t n = SmallSize(t.rng);
    void* p = realloc(s.p, n);
    ++t.calls;
    s.p = p;
    s.size = n;
    Touch(t, p, n);
    t.checksum = Work(t.checksum + n);
    return;
  }
  ReleaseSlot(s);
  size_t n = SmallSize(t.rng);
  void* p = nullptr;
  switch (kind) {
    case 0:
      p = malloc(n);
      s.kind = kFree;
      break;
    case 1:
      p = calloc(1 + n / 16, 16);
      n = (1 + n / 16) * 16;
      s.kind = kFree;
      break;
    case 2:
      p = realloc(nullptr, n);
      s.kind = kFree;
      break;
    case 3:
      if (posix_memalign(&p, 64, n) != 0) abort();
      s.kind = kFree;
      break;
    case 4:
      p = memalign(32, n);
      s.kind = kFree;
      break;
    default:
      p = new char[n];
      s.kind = kDeleteArray;
      break;
  }
  ++t.calls;
  s.p = p;
  s.size = n;
  Touch(t, p, n);
  t.checksum = Work(t.checksum + n);
}

__attribute__((noinline)) void ShortLived(ThreadState& t) {
  size_t n = SmallSize(t.rng);
  switch (t.rng.Below(5)) {
    case 0: {
      void* p = malloc(n);
      Touch(t, p, n);
      free(p);
      break;
    }
    case 1: {
      void* p = calloc(n, 1);
      Touch(t, p, n);
      free(p);
      break;
    }
    case 2: {
      auto* p = new uint64_t[1 + n / 8];
      Touch(t, p, 8);
      delete[] p;
      break;
    }
    case 3: {
      struct Node {
        uint64_t a[4];
      };
      Node* p = new Node();
      Touch(t, p, sizeof(Node));
      delete p;
      break;
    }
    default: {
      void* p = aligned_alloc(16, (n + 15) & ~size_t{15});
      Touch(t, p, n);
      free(p);
      break;
    }
  }
  ++t.calls;
  t.checksum = Work(t.checksum + n);
}

__attribute__((noinline)) void Leaf(ThreadState& t) {
  for (int i = 0; i < 8; ++i) {
    uint32_t k = t.rng.Below(1000);
    if (k == 0) {
      LeakForever(t, 1 + t.rng.Below(4096));
    } else if (k < 480) {
      ShortLived(t);
    } else if (k < 900) {
      MediumLived(t);
    } else if (k < 935) {
      VectorGrowth(t, 1 + t.rng.Below(200));
    } else if (k < 970) {
      StringGrowth(t, 1 + t.rng.Below(200));
    } else {
      MapGrowth(t, 1 + t.rng.Below(12));
    }
  }
}

// The call path: four functions recursing into one another, the choice at
// each level taken from the path's own PRNG (so a path id names one stack).
uint64_t Step(ThreadState& t, Rng path, int depth);
__attribute__((noinline)) uint64_t PathA(ThreadState& t, Rng path, int depth) {
  uint64_t r = Step(t, path, depth - 1);
  return r + static_cast<uint64_t>(depth);
}
__attribute__((noinline)) uint64_t PathB(ThreadState& t, Rng path, int depth) {
  uint64_t r = Step(t, path, depth - 1);
  return r ^ static_cast<uint64_t>(depth) * 3;
}
__attribute__((noinline)) uint64_t PathC(ThreadState& t, Rng path, int depth) {
  uint64_t r = Step(t, path, depth - 1);
  return r * 5 + 1;
}
__attribute__((noinline)) uint64_t PathD(ThreadState& t, Rng path, int depth) {
  uint64_t r = Step(t, path, depth - 1);
  return r - 7;
}
__attribute__((noinline)) uint64_t Step(ThreadState& t, Rng path, int depth) {
  if (depth <= 0) {
    Leaf(t);
    return t.checksum;
  }
  uint64_t r;
  switch (path.Below(4)) {
    case 0:
      r = PathA(t, path, depth);
      break;
    case 1:
      r = PathB(t, path, depth);
      break;
    case 2:
      r = PathC(t, path, depth);
      break;
    default:
      r = PathD(t, path, depth);
      break;
  }
  return r + 1;
}

void Run(ThreadState* t, int id, long operations) {
  t->rng.s = 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(id + 1);
  t->leaks = static_cast<void**>(calloc(kMaxLeaks, sizeof(void*)));
  long batches = operations / 8;
  for (long b = 0; b < batches; ++b) {
    uint32_t path_id = t->rng.Below(kPaths);
    // Frames per path: 8..42 (deep: 60..100), counting Step + Path* pairs
    // (2 per level).
    const int levels =
        g_deep_paths ? 30 + static_cast<int>(path_id % 21) : 4 + static_cast<int>(path_id % 18);
    Rng path{0xD1B54A32D192ED03ULL * (path_id + 1)};
    t->checksum += Step(*t, path, levels);
  }
  for (Slot& s : t->ring) ReleaseSlot(s);
}

}  // namespace

int main(int argc, char** argv) {
  long operations = argc > 1 ? atol(argv[1]) : 2000000;
  if (argc > 2) g_work_iterations = atol(argv[2]);
  if (argc > 3) g_small_sizes = strcmp(argv[3], "small") == 0;
  if (argc > 4) g_deep_paths = strcmp(argv[4], "deep") == 0;

  auto w0 = std::chrono::steady_clock::now();
  uint64_t x = Work(1);
  for (int i = 0; i < 99999; ++i) x = Work(x);
  double work_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - w0).count() /
      100000;

  std::vector<ThreadState*> states;
  for (int i = 0; i < kThreads; ++i) states.push_back(new ThreadState());
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(Run, states[i], i, operations);
  for (auto& th : threads) th.join();

  uint64_t calls = 0, checksum = x & 1, leaked_bytes = 0, leaked_count = 0;
  for (ThreadState* t : states) {
    calls += t->calls;
    checksum = checksum * 31 + t->checksum;
    leaked_bytes += t->leaked_bytes;
    leaked_count += t->leaked_count;
  }
  // Only the LeakForever blocks stay live (their pointer arrays are freed).
  for (ThreadState* t : states) {
    free(t->leaks);
    delete t;
  }
  threads.clear();
  threads.shrink_to_fit();
  states.clear();
  states.shrink_to_fit();

  RETAIN_SNAPSHOT("end");
  printf("work_ns_per_call %.0f\n", work_ns);
  printf("allocation_calls %llu\n", static_cast<unsigned long long>(calls));
  printf("leaked_bytes %llu leaked_count %llu\n", static_cast<unsigned long long>(leaked_bytes),
         static_cast<unsigned long long>(leaked_count));
  printf("checksum %016llx\n", static_cast<unsigned long long>(checksum));
  return 0;
}
