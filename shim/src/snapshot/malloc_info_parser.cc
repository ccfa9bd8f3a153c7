// malloc_info_parser: see snapshot/malloc_info_parser.h.
#include "snapshot/malloc_info_parser.h"

#include <string.h>

namespace retain::shim {
namespace {

bool StartsWith(const char* line, size_t size, const char* prefix) {
  const size_t length = strlen(prefix);
  return size >= length && memcmp(line, prefix, length) == 0;
}

// The value of ` name="digits"` in the line. glibc prints every figure as an
// unsigned decimal; one that does not fit 64 bits is not glibc's.
bool Attribute(const char* line, size_t size, const char* name, uint64_t* value) {
  const size_t name_length = strlen(name);
  for (size_t i = 0; i + name_length + 3 <= size; ++i) {
    if (line[i] != ' ' || memcmp(line + i + 1, name, name_length) != 0 ||
        line[i + 1 + name_length] != '=' || line[i + 2 + name_length] != '"') {
      continue;
    }
    uint64_t result = 0;
    size_t at = i + 3 + name_length;
    const size_t first = at;
    for (; at < size && line[at] >= '0' && line[at] <= '9'; ++at) {
      const uint64_t digit = static_cast<uint64_t>(line[at] - '0');
      if (result > (UINT64_MAX - digit) / 10) return false;
      result = result * 10 + digit;
    }
    if (at == first || at >= size || line[at] != '"') return false;
    *value = result;
    return true;
  }
  return false;
}

// ` type="name"`.
bool TypeIs(const char* line, size_t size, const char* type) {
  char pattern[32];
  const size_t length = strlen(type);
  if (length + 9 > sizeof(pattern)) return false;
  memcpy(pattern, " type=\"", 7);
  memcpy(pattern + 7, type, length);
  pattern[7 + length] = '"';
  const size_t pattern_length = length + 8;
  for (size_t i = 0; i + pattern_length <= size; ++i) {
    if (memcmp(line + i, pattern, pattern_length) == 0) return true;
  }
  return false;
}

}  // namespace

MallocInfoParser::MallocInfoParser(uint64_t page_size, MallocArenaSink sink, void* context)
    : page_size_(page_size == 0 ? 4096 : page_size), sink_(sink), context_(context) {}

void MallocInfoParser::Feed(const char* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    const char c = data[i];
    if (c == '\n') {
      if (overlong_) {
        damaged_ = true;
      } else {
        Line(line_, line_size_);
      }
      line_size_ = 0;
      overlong_ = false;
    } else if (line_size_ < kMaxLine) {
      line_[line_size_++] = c;
    } else {
      overlong_ = true;
    }
  }
}

void MallocInfoParser::Line(const char* line, size_t size) {
  while (size > 0 && (*line == ' ' || *line == '\t')) {
    ++line;
    --size;
  }
  if (ended_) return;
  if (StartsWith(line, size, "</malloc>")) {
    ended_ = true;
    if (in_heap_) damaged_ = true;
    return;
  }
  if (StartsWith(line, size, "<heap ")) {
    if (in_heap_) damaged_ = true;  // the previous one never closed
    ++seen_;
    uint64_t number = 0;
    in_heap_ = Attribute(line, size, "nr", &number) && number <= UINT32_MAX;
    if (!in_heap_) damaged_ = true;
    arena_ = {};
    arena_.number = static_cast<uint32_t>(number);
    has_rest_ = false;
    fast_chunks_ = rest_bytes_ = rest_chunks_ = 0;
    return;
  }
  // Outside an arena: the totals over all of them, and the <malloc> line.
  if (!in_heap_) return;
  uint64_t a = 0;
  uint64_t b = 0;
  if (StartsWith(line, size, "</heap>")) {
    in_heap_ = false;
    if (!has_rest_) {
      damaged_ = true;
      return;
    }
    arena_.free_bytes = arena_.fast_bytes + rest_bytes_;
    arena_.free_chunks = fast_chunks_ + rest_chunks_;
    if (reported_ >= kMaxArenas) {
      damaged_ = true;
      return;
    }
    ++reported_;
    sink_(arena_, context_);
  } else if (StartsWith(line, size, "<size ") || StartsWith(line, size, "<unsorted ")) {
    // A size class: `count` free chunks of `total` bytes. Of each chunk,
    // malloc_trim's MADV_DONTNEED skips the partial pages at both ends (and
    // the chunk header): at most two pages.
    if (Attribute(line, size, "total", &a) && Attribute(line, size, "count", &b)) {
      const uint64_t kept = b > UINT64_MAX / (2 * page_size_) ? UINT64_MAX : b * 2 * page_size_;
      if (a > kept) arena_.trimmable_bytes += a - kept;
    }
  } else if (StartsWith(line, size, "<total ")) {
    if (!Attribute(line, size, "count", &a) || !Attribute(line, size, "size", &b)) return;
    if (TypeIs(line, size, "fast")) {
      fast_chunks_ = a;
      arena_.fast_bytes = b;
    } else if (TypeIs(line, size, "rest")) {
      rest_chunks_ = a;
      rest_bytes_ = b;
      has_rest_ = true;
    }
  } else if (StartsWith(line, size, "<system ")) {
    if (!Attribute(line, size, "size", &a)) return;
    if (TypeIs(line, size, "current")) arena_.system_bytes = a;
    if (TypeIs(line, size, "max")) arena_.system_max_bytes = a;
  } else if (StartsWith(line, size, "<aspace ")) {
    if (!Attribute(line, size, "size", &a)) return;
    if (TypeIs(line, size, "total")) arena_.aspace_bytes = a;
    if (TypeIs(line, size, "mprotect")) arena_.aspace_mprotect_bytes = a;
    if (TypeIs(line, size, "subheaps")) {
      arena_.subheaps = a > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(a);
    }
  }
}

bool MallocInfoParser::Finish() {
  // A last line without its newline was cut.
  if (line_size_ > 0 || overlong_) damaged_ = true;
  line_size_ = 0;
  overlong_ = false;
  return ended_ && !damaged_ && !in_heap_ && reported_ == seen_;
}

}  // namespace retain::shim
