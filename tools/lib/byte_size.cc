// byte_size: see byte_size.h.
#include "tools/lib/byte_size.h"

#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace retain::tool {

std::string HumanBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  // Switch units before rounding would print "1024.0".
  while (value >= 1023.95 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string SignedBytes(int64_t bytes) {
  if (bytes == 0) return "0 B";
  // Negated in unsigned arithmetic: INT64_MIN has no positive int64_t.
  const uint64_t magnitude =
      bytes > 0 ? static_cast<uint64_t>(bytes) : uint64_t{0} - static_cast<uint64_t>(bytes);
  return absl::StrCat(bytes > 0 ? "+" : "-", HumanBytes(magnitude));
}

}  // namespace retain::tool
