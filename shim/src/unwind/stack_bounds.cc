// stack_bounds: see unwind/stack_bounds.h.
#include "unwind/stack_bounds.h"

#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/files.h"
#include "base/syscall_filter.h"

// The main thread's stack end as the loader found it (glibc's ld.so exports
// it; weak, so a libc without it leaves it null and no stack is the main one).
extern "C" void* __libc_stack_end __attribute__((weak));

namespace retain::shim {
namespace {

constexpr uintptr_t kPageSize = 4096;
constexpr int kMaxHexDigits = 16;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Stops at the mapping: a thread's stack is usually among the newest
// mappings, at the lowest addresses, near the start of the file.
bool FeedFinder(const char* piece, size_t length, void* context) {
  auto* finder = static_cast<MappingFinder*>(context);
  finder->Feed(piece, length);
  return !finder->found();
}

// pthread_getattr_np's main-thread rule, on the mapping [.., end) that holds
// `stack_end_pointer` and follows a mapping ending at `previous_end`.
StackBounds MainStackBounds(uintptr_t stack_end_pointer, uintptr_t end, uintptr_t previous_end) {
  const uintptr_t stack_end = (stack_end_pointer & ~(kPageSize - 1)) + kPageSize;
  rlimit limit{};
  if (getrlimit(RLIMIT_STACK, &limit) != 0) return {};
  // Unsigned arithmetic as glibc's: an unlimited or tiny limit wraps to a
  // size the previous mapping then caps.
  uintptr_t size = (static_cast<uintptr_t>(limit.rlim_cur) - (end - stack_end)) & ~(kPageSize - 1);
  if (size > stack_end - previous_end) size = stack_end - previous_end;
  return {stack_end - size, stack_end};
}

}  // namespace

void MappingFinder::EndOfRange() {
  if (!found_ && start_ <= address_ && address_ < end_) {
    found_ = true;
    found_start_ = start_;
    found_end_ = end_;
    found_previous_end_ = previous_end_;
  }
  previous_end_ = end_;
}

void MappingFinder::Feed(const char* piece, size_t length) {
  for (size_t i = 0; i < length; ++i) {
    const char c = piece[i];
    if (c == '\n') {
      state_ = State::kStart;
      start_ = end_ = 0;
      digits_ = 0;
      continue;
    }
    switch (state_) {
      case State::kStart:
        if (c == '-' && digits_ > 0) {
          state_ = State::kEnd;
          digits_ = 0;
        } else if (const int digit = HexDigit(c); digit >= 0 && digits_ < kMaxHexDigits) {
          start_ = start_ << 4 | static_cast<uintptr_t>(digit);
          ++digits_;
        } else {
          state_ = State::kRest;  // not a mapping line: skipped
        }
        break;
      case State::kEnd:
        if (c == ' ' && digits_ > 0) {
          EndOfRange();
          state_ = State::kRest;
        } else if (const int digit = HexDigit(c); digit >= 0 && digits_ < kMaxHexDigits) {
          end_ = end_ << 4 | static_cast<uintptr_t>(digit);
          ++digits_;
        } else {
          state_ = State::kRest;
        }
        break;
      case State::kRest:
        break;
    }
  }
}

namespace {

// Scans the maps for the finder's mapping; false when none holds its
// address or the file cannot be read.
bool FindMapping(MappingFinder* finder) {
  char buffer[1024];  // little of the host's stack: a thread's first capture may be on a small one
  int open_error = 0;
  const bool read =
      ReadFileInPieces("/proc/self/maps", buffer, sizeof(buffer), FeedFinder, finder, &open_error);
  // Hidden from the process (a sandbox's empty root, its broker), not just
  // out of descriptors for now: a sandbox may filter system calls too.
  if (ProcHiddenError(open_error)) NoteSyscallFilter(FilterLevel::kSandboxed);
  return read && finder->found();
}

}  // namespace

StackBounds StackBoundsFor(uintptr_t stack_pointer, uintptr_t thread_descriptor,
                           uintptr_t main_stack_end, bool main_thread) {
  StackBounds main_bounds;
  if (main_thread && main_stack_end != 0) {
    MappingFinder finder(main_stack_end);
    if (!FindMapping(&finder)) return {};
    main_bounds = MainStackBounds(main_stack_end, finder.end(), finder.previous_end());
    if (main_bounds.low <= stack_pointer && stack_pointer < main_bounds.high) return main_bounds;
  }
  // Another thread's (or, in a child forked by one, that thread's own, not
  // the main one's it inherited): whatever stack it is on just now, its
  // descriptor is at the top of its own.
  MappingFinder finder(thread_descriptor);
  if (FindMapping(&finder) && finder.start() < thread_descriptor &&
      (!main_thread || (finder.start() <= stack_pointer && stack_pointer < thread_descriptor))) {
    return {finder.start(), thread_descriptor};
  }
  // The main thread, on a stack of another kind just now (a coroutine's, a
  // signal handler's): its own is still the main one.
  return main_bounds;
}

StackBounds ReadThreadStackBounds() {
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const void* main_stack_end = &__libc_stack_end != nullptr ? __libc_stack_end : nullptr;
  return StackBoundsFor(here, static_cast<uintptr_t>(pthread_self()),
                        reinterpret_cast<uintptr_t>(main_stack_end),
                        syscall(SYS_gettid) == syscall(SYS_getpid));
}

}  // namespace retain::shim
