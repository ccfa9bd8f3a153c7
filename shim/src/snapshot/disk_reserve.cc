// disk_reserve: see snapshot/disk_reserve.h.
#include "snapshot/disk_reserve.h"

#include <stdio.h>
#include <sys/statvfs.h>

namespace retain::shim {

uint64_t ReserveBytes(uint64_t filesystem_bytes, uint64_t configured) {
  if (configured != kAutoMinFree) return configured;
  constexpr uint64_t kFloor = uint64_t{64} << 20;
  constexpr uint64_t kCeiling = uint64_t{1} << 30;
  const uint64_t share = filesystem_bytes / 20;
  return share < kFloor ? kFloor : share > kCeiling ? kCeiling : share;
}

bool RoomForSnapshot(const char* dir, uint64_t expected_bytes, uint64_t configured, char* why,
                     size_t why_size) {
  if (configured == 0) return true;
  struct statvfs fs;
  if (statvfs(dir, &fs) != 0 || fs.f_frsize == 0) return true;
  const uint64_t total = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  // f_bavail: what an unprivileged writer may still take (the root reserve
  // of ext4 is not the host's to spend either).
  const uint64_t available = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  const uint64_t reserve = ReserveBytes(total, configured);
  if (available >= reserve && available - reserve >= expected_bytes) return true;
  snprintf(why, why_size,
           "%llu KiB free on RETAIN_DIR's filesystem, a snapshot of about %llu KiB would leave "
           "less than RETAIN_MIN_FREE (%llu KiB)",
           static_cast<unsigned long long>(available >> 10),
           static_cast<unsigned long long>(expected_bytes >> 10),
           static_cast<unsigned long long>(reserve >> 10));
  return false;
}

}  // namespace retain::shim
