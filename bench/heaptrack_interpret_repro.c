// heaptrack_interpret_repro.c: a 20-line program whose heaptrack data
// heaptrack 1.4's interpreter cannot process (bench/README.md, "heaptrack").
//
//   gcc -O1 -g bench/heaptrack_interpret_repro.c -o /tmp/repro
//   heaptrack --raw -o /tmp/repro.ht /tmp/repro 200000 12 4096
//   (ulimit -v 4000000; zstd -dc /tmp/repro.ht.raw.zst |
//      /usr/lib/heaptrack/libexec/heaptrack_interpret >/dev/null)   # std::bad_alloc
//
// ARGS: calls, depth, sizes. Each call mallocs 1..sizes bytes (and frees it)
// at the bottom of a call path `depth` levels deep through two functions, the
// path picked by the bits of a hash of the call number: 2^depth distinct
// stacks. With 200000 calls, depth 12 (4096 stacks, ~20k trace nodes) and
// 4096 sizes (~200k distinct (size, stack) pairs) the interpreter's memory
// doubles to the cap (2.4 GB RSS under a 4 GB address-space cap, 9.5 GB under
// 12 GB) and it aborts; with depth 15 and 128 sizes (65k pairs), or one stack
// and 200k sizes, it stays at 100 MB. Recording itself is fine.
#include <stdlib.h>

void* PathA(unsigned bits, int depth, size_t n);
void* PathB(unsigned bits, int depth, size_t n);
__attribute__((noinline)) void* Step(unsigned bits, int depth, size_t n) {
  if (depth == 0) return malloc(n);
  return (bits & 1) ? PathA(bits >> 1, depth - 1, n) : PathB(bits >> 1, depth - 1, n);
}
__attribute__((noinline)) void* PathA(unsigned bits, int depth, size_t n) {
  void* p = Step(bits, depth, n);
  __asm__ volatile("" ::: "memory");  // no tail call: one frame per level
  return p;
}
__attribute__((noinline)) void* PathB(unsigned bits, int depth, size_t n) {
  void* p = Step(bits, depth, n);
  __asm__ volatile("" ::: "memory");
  return p;
}
int main(int argc, char** argv) {
  if (argc != 4) return 2;
  int calls = atoi(argv[1]), depth = atoi(argv[2]), sizes = atoi(argv[3]);
  for (int i = 0; i < calls; ++i) {
    size_t n = 1 + (size_t)((i * 40503u) >> 9) % (size_t)sizes;
    free(Step((unsigned)i * 2654435761u, depth, n));
  }
  return 0;
}
