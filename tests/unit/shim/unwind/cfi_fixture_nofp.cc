// cfi_fixture_nofp: see cfi_fixture.h. Built with -O2 -fomit-frame-pointer.
#include <alloca.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "cfi_fixture.h"

namespace cfi_fixture {
namespace {

// Allocations the compiler may not elide (malloc then free of an unused
// block is removed at -O2).
void* volatile g_keep;
template <typename T>
T* Keep(T* p) {
  g_keep = p;
  return p;
}

int CompareAndAllocate(const void* a, const void* b) {
  void* p = Keep(malloc(24));  // inside qsort: libc's frames are between here and the caller
  const int x = *static_cast<const int*>(a);
  const int y = *static_cast<const int*>(b);
  free(p);
  return (x > y) - (x < y);
}

long FromSharedLib(int argument) {
  char* copy = Keep(strdup("through the shared library and back"));
  const long result = static_cast<long>(strlen(copy)) + argument;
  free(copy);
  return result;
}

__attribute__((noinline)) long RunLeaf(Leaf leaf, unsigned seed) {
  long result = 0;
  switch (leaf) {
    case Leaf::kMalloc: {
      void* p = Keep(malloc(seed % 100 + 1));
      result = reinterpret_cast<long>(p) & 3;
      free(p);
      break;
    }
    case Leaf::kNew: {
      int* p = Keep(new int[seed % 50 + 1]);
      p[0] = 1;
      result = p[0];
      delete[] p;
      break;
    }
    case Leaf::kVector: {
      std::vector<int> v;
      for (unsigned i = 0; i < 40 + seed % 9; ++i) v.push_back(static_cast<int>(i));
      result = static_cast<long>(v.size());
      break;
    }
    case Leaf::kString: {
      std::string s;
      for (unsigned i = 0; i < 60 + seed % 7; ++i) s += static_cast<char>('a' + i % 26);
      result = static_cast<long>(s.size());
      break;
    }
    case Leaf::kQsort: {
      int values[8] = {5, 3, 7, 1, static_cast<int>(seed % 10), 4, 2, 6};
      qsort(values, 8, sizeof(int), CompareAndAllocate);
      result = values[0];
      break;
    }
    case Leaf::kStrdup: {
      char* copy = Keep(strdup("a string to copy"));
      result = static_cast<long>(strlen(copy));
      free(copy);
      break;
    }
    case Leaf::kSharedLib:
      result = cfi_fixture_lib_descend(static_cast<int>(seed % 5) + 1, FromSharedLib, 3);
      break;
    case Leaf::kAlloca: {
      // alloca makes the frame's size dynamic: gcc then keeps rbp as a frame
      // pointer and the CFA is rbp + 16.
      const size_t n = seed % 64 + 16;
      auto* buffer = static_cast<char*>(alloca(n));
      memset(buffer, 1, n);
      void* p = Keep(malloc(n));
      result = buffer[n - 1] + (reinterpret_cast<long>(p) & 1);
      free(p);
      break;
    }
    case Leaf::kVla: {
      const size_t n = seed % 32 + 8;
      volatile char buffer[n];
      buffer[0] = 2;
      char* copy = Keep(strdup("vla"));
      result = buffer[0] + copy[0];
      free(copy);
      break;
    }
    case Leaf::kAlternate:
      result = AlternateCallers(4 + static_cast<int>(seed % 3));
      break;
  }
  asm volatile("" ::: "memory");
  return result;
}

long Next(int depth, unsigned seed, Leaf leaf);

// Four frame shapes, so the walk meets different CFA offsets and rbp saves.
__attribute__((noinline)) long WithBuffer(int depth, unsigned seed, Leaf leaf) {
  volatile char buffer[300];
  buffer[seed % 300] = static_cast<char>(seed);
  long result = Next(depth - 1, seed * 7 + 1, leaf) + buffer[seed % 300];
  asm volatile("" ::: "memory");
  return result;
}

__attribute__((noinline)) long WithRegisters(int depth, unsigned seed, Leaf leaf) {
  // Values live across the call: rbx, rbp, r12-r15 are pushed, rbp among
  // them (as a general register, not a frame pointer).
  long a = seed * 3, b = seed * 5, c = seed * 11, d = seed * 13, e = seed * 17, f = seed * 19;
  asm volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f));
  long result = Next(depth - 1, seed * 5 + 3, leaf);
  asm volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f));
  return result + a + b + c + d + e + f;
}

__attribute__((noinline)) long WithAlloca(int depth, unsigned seed, Leaf leaf) {
  auto* buffer = static_cast<volatile char*>(alloca(seed % 200 + 8));
  buffer[0] = 1;
  long result = Next(depth - 1, seed * 3 + 5, leaf) + buffer[0];
  asm volatile("" ::: "memory");
  return result;
}

__attribute__((noinline)) long WithVla(int depth, unsigned seed, Leaf leaf) {
  volatile long values[seed % 16 + 1];
  values[0] = depth;
  long result = Next(depth - 1, seed * 9 + 7, leaf) + values[0];
  asm volatile("" ::: "memory");
  return result;
}

long Next(int depth, unsigned seed, Leaf leaf) {
  if (depth <= 0) return RunLeaf(leaf, seed);
  switch (seed % 4) {
    case 0:
      return WithBuffer(depth, seed, leaf);
    case 1:
      return WithRegisters(depth, seed, leaf);
    case 2:
      return WithAlloca(depth, seed, leaf);
    default:
      return WithVla(depth, seed, leaf);
  }
}

__attribute__((noinline)) long AllocatingLeaf(int size) {
  void* p = Keep(malloc(static_cast<size_t>(size)));
  free(p);
  return size;
}

// Same frame size, different code (pad[0] vs pad[1]: not merged by the
// compiler).
__attribute__((noinline)) long CallerA(int size) {
  volatile char pad[64];
  pad[0] = static_cast<char>(size);
  long result = AllocatingLeaf(size) + pad[0];
  asm volatile("" ::: "memory");
  return result;
}

__attribute__((noinline)) long CallerB(int size) {
  volatile char pad[64];
  pad[1] = static_cast<char>(size);
  long result = AllocatingLeaf(size) + pad[1];
  asm volatile("" ::: "memory");
  return result;
}

}  // namespace

long Descend(int depth, unsigned seed, Leaf leaf) { return Next(depth, seed, leaf); }

long AlternateCallers(int rounds) {
  long sum = 0;
  for (int i = 0; i < rounds; ++i) sum += i % 2 == 0 ? CallerA(i + 1) : CallerB(i + 1);
  return sum;
}

}  // namespace cfi_fixture
