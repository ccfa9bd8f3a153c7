// retention: see snapshot/retention.h.
#include "snapshot/retention.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/large_static.h"
#include "base/log.h"
#include "base/process_info.h"

namespace retain::shim {
namespace {

constexpr size_t kRingSize = kMaxKeep + 1;
RETAIN_LARGE_STATIC constinit KeptSnapshots g_kept;  // guarded by the writer's mutex

}  // namespace

void KeptSnapshots::Add(uint32_t sequence, uint64_t bytes) {
  if (count_ == kRingSize) {  // PopExcess keeps it below; never overwrite
    bytes_ -= ring_[first_].bytes;
    first_ = (first_ + 1) % kRingSize;
    --count_;
  }
  ring_[(first_ + count_) % kRingSize] = Entry{sequence, bytes};
  ++count_;
  bytes_ += bytes;
}

bool KeptSnapshots::PopExcess(uint64_t keep_count, uint64_t keep_bytes, uint32_t* sequence) {
  if (count_ <= 1) return false;  // the newest always stays
  const bool over = count_ > kMaxKeep || (keep_count != 0 && count_ > keep_count) ||
                    (keep_bytes != 0 && bytes_ > keep_bytes);
  if (!over) return false;
  const Entry& oldest = ring_[first_];
  *sequence = oldest.sequence;
  bytes_ -= oldest.bytes;
  first_ = (first_ + 1) % kRingSize;
  --count_;
  return true;
}

void KeepSnapshot(uint32_t sequence, uint64_t bytes) {
  const Config& config = GetConfig();
  // Without RETAIN_KEEP or RETAIN_KEEP_BYTES every snapshot stays, however
  // many (the ring's own bound applies only when pruning was asked for).
  if (config.keep_count == 0 && config.keep_bytes == 0) return;
  g_kept.Add(sequence, bytes);
  uint32_t old;
  while (g_kept.PopExcess(config.keep_count, config.keep_bytes, &old)) {
    char path[sizeof(config.dir) + 128];
    snprintf(path, sizeof(path), "%s/%s.%u.%u.pb", config.dir, ExeBaseName(), Pid(), old);
    if (unlink(path) != 0 && errno != ENOENT) {
      LogDiagnostic("cannot delete old snapshot %s: %s", path, strerror(errno));
    }
  }
}

void RetentionResetInChild() { g_kept.Reset(); }

}  // namespace retain::shim
