// residency: see snapshot/residency.h.
#include "snapshot/residency.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/arena.h"
#include "base/files.h"
#include "base/own_fds.h"
#include "base/syscall_filter.h"

namespace retain::shim {
namespace {

constexpr uint8_t kSentinel = 0xFF;  // mincore writes 0 or 1 per page
constexpr uint64_t kPagemapSwapped = uint64_t{1} << 62;
constexpr uint64_t kPagemapPresent = uint64_t{1} << 63;

}  // namespace

ResidencyMeter::~ResidencyMeter() {
  UnmapScratchPages(vector_, kWindowPages);
  UnmapScratchPages(pagemap_, kWindowPages * sizeof(uint64_t));
  ShimFdClose(pagemap_handle_);
}

bool ResidencyMeter::Begin() {
  int saved = errno;
  // mincore is outside what seccomp filters often allow (systemd's
  // @system-service set): under one, the pagemap's present bits say which
  // pages are resident (base/syscall_filter.h).
  char status[8192];
  int open_error = 0;
  const bool status_read =
      ReadSmallFile("/proc/self/status", status, sizeof(status), &open_error) > 0;
  NoteSyscallFilterFromStatus(status_read, open_error, status);
  pagemap_only_ = pagemap_only_ || AvoidMincore();
  long page_size = sysconf(_SC_PAGESIZE);
  if (page_size <= 0 || (page_size & (page_size - 1)) != 0) return false;
  page_shift_ = static_cast<size_t>(__builtin_ctzl(static_cast<unsigned long>(page_size)));
  vector_ = static_cast<uint8_t*>(MapScratchPages(kWindowPages));
  if (vector_ == nullptr) {
    errno = saved;
    return false;
  }
  // Without swap entries no page can be swapped: skip the pagemap.
  if (pagemap_only_ || (status_read && ProcKilobytesField(status, "VmSwap") > 0)) {
    pagemap_ = static_cast<uint64_t*>(MapScratchPages(kWindowPages * sizeof(uint64_t)));
    if (pagemap_ != nullptr) pagemap_handle_ = ShimOpen("/proc/self/pagemap", O_RDONLY);
  }
  if (pagemap_only_ && pagemap_handle_ < 0) {
    errno = saved;
    return false;  // neither way is open: not measured
  }
  ready_ = true;
  errno = saved;
  return true;
}

bool ResidencyMeter::Load(uintptr_t page, uintptr_t last_page) {
  if (pagemap_only_) return LoadFromPagemap(page, last_page);
  // The whole window first; where the kernel stops at a hole without
  // filling the vector up to it, the row's pages alone, then one page.
  size_t row_pages = last_page - page + 1;
  const size_t row_length = row_pages < kWindowPages ? row_pages : kWindowPages;
  size_t lengths[] = {rows_only_ ? row_length : kWindowPages, row_length, 1};
  size_t tried = 0;
  for (size_t length : lengths) {
    if (tried != 0 && length >= tried) continue;
    tried = length;
    memset(vector_, kSentinel, length);
    ++calls_;
    size_t valid = length;
    if (mincore(reinterpret_cast<void*>(page << page_shift_), length << page_shift_, vector_) !=
        0) {
      // ENOMEM: a hole (or past the top of the address space). The pages
      // before it are filled in.
      const void* hole = memchr(vector_, kSentinel, length);
      valid = hole != nullptr ? static_cast<size_t>(static_cast<const uint8_t*>(hole) - vector_)
                              : length;
    }
    if (valid > 0) {
      window_first_ = page;
      window_pages_ = valid;
      pagemap_loaded_ = false;
      return true;
    }
  }
  return false;
}

// The pagemap lists every page of the address space, mapped or not (a hole
// reads as neither present nor swapped), so the window is always whole.
bool ResidencyMeter::LoadFromPagemap(uintptr_t page, uintptr_t last_page) {
  const size_t row_pages = last_page - page + 1;
  const size_t length =
      rows_only_ ? (row_pages < kWindowPages ? row_pages : kWindowPages) : kWindowPages;
  window_first_ = page;
  window_pages_ = length;
  pagemap_loaded_ = false;
  if (!ReadPagemapWindow()) return false;
  for (size_t i = 0; i < length; ++i) vector_[i] = (pagemap_[i] & kPagemapPresent) != 0 ? 1 : 0;
  return true;
}

bool ResidencyMeter::ReadPagemapWindow() {
  pagemap_loaded_ = true;
  const size_t want = window_pages_ * sizeof(uint64_t);
  size_t got = 0;
  {
    ShimFdUse use(pagemap_handle_);
    while (use.fd() >= 0 && got < want) {
      ++calls_;
      ssize_t n = syscall(SYS_pread64, use.fd(), reinterpret_cast<char*>(pagemap_) + got,
                          want - got, static_cast<off_t>(window_first_ * sizeof(uint64_t) + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
  }
  if (got < want) memset(reinterpret_cast<char*>(pagemap_) + got, 0, want - got);
  return got > 0;
}

bool ResidencyMeter::Swapped(size_t index) {
  if (pagemap_handle_ < 0) return false;
  if (!pagemap_loaded_) ReadPagemapWindow();
  return (pagemap_[index] & kPagemapSwapped) != 0;
}

Residency ResidencyMeter::Measure(uintptr_t start, uint64_t size) {
  Residency out;
  if (!ready_ || size == 0) return out;
  int saved = errno;
  uintptr_t end = start + size;
  if (end < start) end = UINTPTR_MAX;
  const uintptr_t first = start >> page_shift_;
  const uintptr_t last = (end - 1) >> page_shift_;
  const uint64_t page_bytes = uint64_t{1} << page_shift_;
  for (uintptr_t page = first; page <= last;) {
    if (page < window_first_ || page >= window_first_ + window_pages_) {
      // Not mapped: freed since the capture; what is left of it counts 0.
      if (!Load(page, last)) break;
    }
    const uintptr_t window_last = window_first_ + window_pages_ - 1;
    const uintptr_t stop = last < window_last ? last : window_last;
    for (; page <= stop; ++page) {
      const size_t index = page - window_first_;
      const bool resident = (vector_[index] & 1) != 0;
      if (!resident && !Swapped(index)) continue;
      uint64_t bytes = page_bytes;
      if (page == first || page == last) {
        uintptr_t low = page << page_shift_;
        uintptr_t high = low + page_bytes;
        if (low < start) low = start;
        if (high > end || high == 0) high = end;
        bytes = high - low;
      }
      (resident ? out.resident : out.swapped) += bytes;
    }
  }
  errno = saved;
  return out;
}

}  // namespace retain::shim
