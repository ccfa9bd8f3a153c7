// snapshot_reader: loads a retain snapshot file (proto/retain.proto) and
// flattens its columnar allocation blocks into rows.
//
// Thread-compatible: no shared state. Every failure is an absl::Status whose
// message names the file and says what is wrong in one line.
#ifndef RETAIN_TOOLS_LIB_SNAPSHOT_READER_H_
#define RETAIN_TOOLS_LIB_SNAPSHOT_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "retain.pb.h"

namespace retain::tool {

// One live allocation, decoded from an AllocationBlock.
struct Allocation {
  uint64_t address = 0;
  // Bytes this row stands for: the allocation's size, or in a sampled
  // snapshot (Header.sample_interval_bytes != 0) the estimate for a sampled
  // heap allocation, SampledEstimate(recorded_size, interval).
  uint64_t size = 0;
  uint64_t recorded_size = 0;  // the size the shim recorded
  // Of `size`, the bytes in RAM and the bytes swapped out when the snapshot
  // was taken (AllocationBlock.resident_bytes / swapped_bytes; 0 when the
  // snapshot has none, see HasResidency). A sampled heap row's are scaled
  // like `size` (by size / recorded_size), so they stand for the same
  // allocations.
  uint64_t resident_bytes = 0;
  uint64_t swapped_bytes = 0;
  v1::Kind kind = v1::KIND_UNSPECIFIED;
  uint32_t stack_id = 0;
  uint64_t birth_sequence = 0;
  uint64_t birth_time_us = 0;
  uint32_t thread_id = 0;
  uint32_t tag_id = 0;
  uint64_t flags = 0;
  v1::Attribution attribution = v1::ATTRIBUTION_NONE;  // how tag_id was chosen
  // The GPU device the memory is on: a Device.id of Snapshot.devices
  // (AllocationBlock.device); 0 for none, and in snapshots of older shims.
  uint32_t device = 0;
  // A GPU allocation made of host memory (Snapshot.gpu_backings), read as
  // one row: kind KIND_GPU_DRIVER_HOST, the GPU row's address, size, stack,
  // birth and tag, the resident and swapped bytes of its host blocks, and
  // here the GPU kind it was recorded as; KIND_UNSPECIFIED for other rows.
  v1::Kind backs_kind = v1::KIND_UNSPECIFIED;
  uint64_t backing_bytes = 0;   // the host blocks' sizes (their rows are gone)
  uint32_t backing_blocks = 0;  // how many there were
};

// The largest snapshot file read unless the caller allows more: 1 GiB. A
// snapshot takes 12 to 16 bytes per live allocation (14.4 at 1M in
// bench/README.md, 16.0 measured again with the stacks of bench_diff_workload),
// so 10 million live allocations, a large server, make one of 150-170 MB;
// 1 GiB leaves room for about 65 million. Parsed, a snapshot takes 8-10
// times its file size in memory (retain-dump: 141 MB peak for the 16.8 MB
// snapshot of 1M allocations), so 1 GiB already means ~10 GiB of RAM: a
// bigger file is refused before it is read, not after.
inline constexpr uint64_t kDefaultMaxSnapshotBytes = uint64_t{1} << 30;
// libprotobuf parses at most 2 GiB - 1 in one piece: no option goes beyond.
inline constexpr uint64_t kMaxParsableSnapshotBytes = (uint64_t{1} << 31) - 1;

struct ReadOptions {
  // Files larger than this are refused before they are read; at most
  // kMaxParsableSnapshotBytes.
  uint64_t max_bytes = kDefaultMaxSnapshotBytes;
  // The flag that raises max_bytes, named in the message that refuses a file.
  std::string max_bytes_flag = "--max-snapshot-size";
};

// Reads and validates a snapshot file; `path` "-" reads standard input (a
// file, a pipe or a socket; input_file.h). Only regular files are opened:
// a FIFO, a device or a directory is refused without reading it, and so is a
// file larger than options.max_bytes. Errors (InvalidArgument unless the
// file cannot be opened, NotFound / PermissionDenied then): those, and every
// error of ParseSnapshot.
absl::StatusOr<v1::Snapshot> ReadSnapshotFile(absl::string_view path,
                                              const ReadOptions& options = {});

// Same, from bytes already in memory; `name` is used in error messages.
// Errors, all InvalidArgument with a one-line message naming `name`:
//  - empty input; more than kMaxParsableSnapshotBytes;
//  - a file that ends with a footer (Snapshot.footer) whose length or CRC
//    does not match: "corrupted snapshot (CRC mismatch: the file was modified
//    or damaged)", "corrupted snapshot (its footer counts L bytes before it,
//    but N precede it)";
//  - a file whose header promises a footer (Header.ends_with_footer) that is
//    not there: "truncated snapshot (N of at least M bytes: the file ends
//    inside a field)", "truncated snapshot (N bytes: the footer the shim
//    writes last is missing)", "corrupted snapshot (...)";
//  - a snapshot of an older shim (no footer) cut inside a field: "truncated
//    snapshot (N of at least M bytes: ...)";
//  - not a protobuf; a protobuf that is not a retain snapshot (no header); a
//    format_version newer than FORMAT_VERSION_CURRENT; no health section
//    (cut between two fields); allocation blocks whose columns disagree in
//    length; stack ids referenced but not present.
// Snapshots of older shims, without a footer, are read as before.
absl::StatusOr<v1::Snapshot> ParseSnapshot(absl::string_view bytes, absl::string_view name);

// The CRC-32 the footer carries (zlib's crc32) of `bytes`.
uint32_t SnapshotCrc32(absl::string_view bytes);

// All live allocations of all blocks, in block order (each block sorted by
// address), as the shim wrote them. Assumes a snapshot that
// ReadSnapshotFile/ParseSnapshot accepted.
std::vector<Allocation> FlattenAllocations(const v1::Snapshot& snapshot);

// The rows as retain-diff counts them (domain.h): FlattenAllocations, with
// each GPU allocation made of host memory and its host blocks as one row
// (Allocation.backs_kind), and device memory resident as allocated where
// residency was measured.
std::vector<Allocation> CountedAllocations(const v1::Snapshot& snapshot);

// True when the shim measured the resident and swapped bytes of the rows and
// totals (Header.residency_measured). Snapshots of older shims have only
// allocated bytes: resident_bytes and swapped_bytes are 0 there, not "none".
bool HasResidency(const v1::Snapshot& snapshot);

// Bytes a sampled heap allocation of `size` stands for when the shim samples
// by bytes with mean `interval` (Poisson): it was recorded with probability
// 1 - exp(-size / interval), so it is weighted by the inverse; allocations of
// at least `interval` bytes are always recorded and stand for themselves.
uint64_t SampledEstimate(uint64_t size, uint64_t interval);

// Frames of stack `id`, or nullptr when the snapshot has no such stack.
const v1::Stack* FindStack(const v1::Snapshot& snapshot, uint32_t id);

// Length (1 to 4) of the valid UTF-8 sequence that starts at text[i], or 0
// when none does (stray continuation bytes, overlong forms, surrogates, code
// points above U+10FFFF, a sequence cut by the end). Requires i < size.
// String fields of a snapshot this reader returns are always valid UTF-8:
// bytes that were not (raw paths, argv) are replaced with U+FFFD.
size_t Utf8SequenceLength(absl::string_view text, size_t i);

// The snapshot's per-kind totals counted as CountedAllocations counts rows:
// a GPU allocation made of host memory moves from its GPU kind to
// KIND_GPU_DRIVER_HOST at its GPU size (its host blocks leave that kind),
// so device totals hold device memory only and nothing is counted twice;
// with residency, device kinds are resident as allocated (domain.h).
std::vector<v1::KindTotals> CountedTotals(const v1::Snapshot& snapshot);

// Human-readable name of a kind (proto/kinds.h): "heap", "mmap-anon", "mmap-file",
// "hip-device", ... ("unspecified" for 0, "kind-N" for unknown values).
std::string KindName(v1::Kind kind);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_SNAPSHOT_READER_H_
