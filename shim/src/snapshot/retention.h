// retention: RETAIN_KEEP and RETAIN_KEEP_BYTES, the bound on the disk a
// process's snapshots take in continuous mode. The writer records each
// snapshot it wrote (its sequence number and size); past the bound, the
// oldest are deleted, by the name this process gave them
// ($RETAIN_DIR/<exe>.<pid>.<sequence>.pb): only files this process wrote,
// never a directory scan, never another process's file. The newest snapshot
// always stays, whatever the byte budget.
//
// The record is a fixed ring of kMaxKeep entries (no allocation). With only
// a byte budget, a process that wrote more than kMaxKeep snapshots within
// it deletes the oldest as the ring wraps: at most kMaxKeep are kept.
// A snapshot that was moved or deleted meanwhile is forgotten (its unlink
// fails and nothing else is touched).
//
// Thread contract: KeptSnapshots is not synchronized; the writer calls it
// with its mutex held (snapshot/writer.cc). Never from a signal handler.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_RETENTION_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_RETENTION_H_

#include <cstddef>
#include <cstdint>

#include "base/config.h"

namespace retain::shim {

class KeptSnapshots {
 public:
  // Records a snapshot just written.
  void Add(uint32_t sequence, uint64_t bytes);
  // The oldest snapshot that must go to keep at most `keep_count` snapshots
  // (0: no limit) and `keep_bytes` bytes (0: no limit), or one that must go
  // because the ring is full: true with its sequence, and forgets it. False
  // when what is kept is within the bounds.
  bool PopExcess(uint64_t keep_count, uint64_t keep_bytes, uint32_t* sequence);
  size_t count() const { return count_; }
  uint64_t bytes() const { return bytes_; }
  void Reset() { first_ = count_ = 0, bytes_ = 0; }

 private:
  struct Entry {
    uint32_t sequence;
    uint64_t bytes;
  };
  Entry ring_[kMaxKeep + 1] = {};  // one more than kept: the newest before pruning
  size_t first_ = 0;
  size_t count_ = 0;
  uint64_t bytes_ = 0;
};

// After the writer wrote snapshot `sequence` of `bytes` bytes: records it
// and deletes the snapshots RETAIN_KEEP / RETAIN_KEEP_BYTES say must go.
// With the writer's mutex held.
void KeepSnapshot(uint32_t sequence, uint64_t bytes);
// fork(): the child's snapshots are its own; it forgets the parent's.
void RetentionResetInChild();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_RETENTION_H_
