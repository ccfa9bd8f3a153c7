// cfi_fixture_lib: a shared library built without frame pointers (see
// cfi_fixture.h).
#include <stdlib.h>

#include "cfi_fixture.h"

extern "C" __attribute__((noinline, visibility("default"))) long cfi_fixture_lib_descend(
    int depth, long (*callback)(int), int argument) {
  volatile char pad[48];  // a frame of its own size
  pad[depth % 48] = static_cast<char>(depth);
  long result;
  if (depth > 0) {
    result = cfi_fixture_lib_descend(depth - 1, callback, argument + 1) + pad[depth % 48];
  } else {
    void* volatile p = malloc(static_cast<size_t>(argument % 200) + 1);  // volatile: not elided
    result = callback(argument) + (reinterpret_cast<long>(p) & 1);
    free(p);
  }
  asm volatile("" ::: "memory");  // no tail call: every level keeps its frame
  return result;
}
