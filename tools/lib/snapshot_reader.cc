// snapshot_reader: reads a snapshot file, refuses anything that is not a
// well-formed retain snapshot this build understands, and decodes the
// columnar allocation blocks.
//
// Thread-compatible: no shared state. Validation happens once, here, so that
// every consumer (dump, diff, trend, exporters) may index columns and look up
// stacks without checking again.
#include "tools/lib/snapshot_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/kinds.h"
#include "tools/lib/domain.h"
#include "tools/lib/input_file.h"

namespace retain::tool {
namespace {

// The footer's fixed encoding (proto/retain.proto, message Footer).
constexpr size_t kFooterSize = 16;
constexpr unsigned char kFooterTag = (15 << 3) | 2;  // Snapshot.footer, length-delimited
constexpr unsigned char kFooterPayload = kFooterSize - 2;
constexpr unsigned char kLengthTag = (1 << 3) | 1;  // Footer.length, fixed64
constexpr unsigned char kCrcTag = (2 << 3) | 5;     // Footer.crc32, fixed32

uint64_t LittleEndian(absl::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) {
    value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return value;
}

struct FooterView {
  bool present = false;
  uint64_t length = 0;
  uint32_t crc32 = 0;
};

// How many of the footer's 4 fixed bytes the last 16 bytes have.
int FooterMarks(absl::string_view bytes) {
  if (bytes.size() < kFooterSize) return 0;
  absl::string_view tail = bytes.substr(bytes.size() - kFooterSize);
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(tail[i]); };
  return (byte(0) == kFooterTag) + (byte(1) == kFooterPayload) + (byte(2) == kLengthTag) +
         (byte(11) == kCrcTag);
}

uint64_t FooterLengthField(absl::string_view bytes) {
  return LittleEndian(bytes.substr(bytes.size() - kFooterSize + 3, 8));
}

// The footer, when the last 16 bytes have its encoding. Random data (or an
// older shim's health section) has those 4 fixed bytes and a length that
// matches the file (checked next) by chance with a probability below 2^-90.
FooterView FindFooter(absl::string_view bytes) {
  FooterView footer;
  if (FooterMarks(bytes) != 4) return footer;
  footer.present = true;
  footer.length = FooterLengthField(bytes);
  footer.crc32 =
      static_cast<uint32_t>(LittleEndian(bytes.substr(bytes.size() - kFooterSize + 12, 4)));
  return footer;
}

// A footer one of whose fixed bytes was damaged: the other three are there,
// and so is a length that counts the file exactly. (A file cut short does not
// end with 16 such bytes by chance.)
bool HasDamagedFooter(absl::string_view bytes) {
  return FooterMarks(bytes) == 3 && FooterLengthField(bytes) == bytes.size() - kFooterSize;
}

// The top-level fields of a file, walked without parsing them: enough to
// find the header of a file that no longer parses and to tell a file cut
// inside a field from one that is malformed. No allocation; linear.
struct TopLevelScan {
  enum Result { kComplete, kCutInside, kMalformed };
  Result result = kComplete;
  // kCutInside: the end of the field that was cut (at least; a cut inside a
  // varint gives one byte past the end). kMalformed: where the bad tag is.
  uint64_t offset = 0;
  // The payload of the first Snapshot.header field, when it is complete.
  bool has_header = false;
  absl::string_view header;
};

// 0: read; 1: the input ends inside it; 2: longer than 10 bytes.
int ReadVarint(absl::string_view bytes, size_t* pos, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*pos >= bytes.size()) return 1;
    const auto b = static_cast<unsigned char>(bytes[(*pos)++]);
    *value |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return 0;
  }
  return 2;
}

TopLevelScan ScanTopLevel(absl::string_view bytes) {
  TopLevelScan scan;
  size_t pos = 0;
  const auto cut = [&](uint64_t end) {
    scan.result = TopLevelScan::kCutInside;
    scan.offset = end;
    return scan;
  };
  const auto malformed = [&](size_t at) {
    scan.result = TopLevelScan::kMalformed;
    scan.offset = at;
    return scan;
  };
  while (pos < bytes.size()) {
    const size_t start = pos;
    uint64_t tag = 0;
    if (int r = ReadVarint(bytes, &pos, &tag); r != 0) {
      return r == 1 ? cut(bytes.size() + 1) : malformed(start);
    }
    const uint64_t field = tag >> 3;
    if (field == 0 || field > 536870911) return malformed(start);  // 2^29 - 1: the largest
    uint64_t value = 0;
    switch (tag & 7) {
      case 0:  // varint
        if (int r = ReadVarint(bytes, &pos, &value); r != 0) {
          return r == 1 ? cut(bytes.size() + 1) : malformed(start);
        }
        break;
      case 1:  // fixed64
        if (bytes.size() - pos < 8) return cut(pos + 8);
        pos += 8;
        break;
      case 5:  // fixed32
        if (bytes.size() - pos < 4) return cut(pos + 4);
        pos += 4;
        break;
      case 2:  // length-delimited
        if (int r = ReadVarint(bytes, &pos, &value); r != 0) {
          return r == 1 ? cut(bytes.size() + 1) : malformed(start);
        }
        if (value > bytes.size() - pos) {
          // Saturated: a damaged length can be anything up to 2^64 - 1.
          return cut(value > std::numeric_limits<uint64_t>::max() - pos
                         ? std::numeric_limits<uint64_t>::max()
                         : pos + value);
        }
        if (field == 1 && !scan.has_header) {
          scan.has_header = true;
          scan.header = bytes.substr(pos, value);
        }
        pos += value;
        break;
      default:  // groups (never written by the shim) and wire types 6, 7
        return malformed(start);
    }
  }
  return scan;
}

// Checks the framing of a snapshot before it is parsed: the footer's length
// and CRC where there is one; where there is none, whether the header
// promised one (then the file was cut or damaged) or the file was cut inside
// a field. OK means: parse it.
absl::Status CheckFraming(absl::string_view bytes, absl::string_view name) {
  const FooterView footer = FindFooter(bytes);
  if (footer.present) {
    const uint64_t before = bytes.size() - kFooterSize;
    if (footer.length != before) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: corrupted snapshot (its footer counts %u bytes before it, but %u precede it)", name,
          footer.length, before));
    }
    if (SnapshotCrc32(bytes.substr(0, before)) != footer.crc32) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": corrupted snapshot (CRC mismatch: the file was modified or damaged)"));
    }
    return absl::OkStatus();
  }
  const TopLevelScan scan = ScanTopLevel(bytes);
  v1::Header header;
  const bool has_header =
      scan.has_header &&
      header.ParseFromArray(scan.header.data(), static_cast<int>(scan.header.size())) &&
      header.format_version() != 0;
  if (!has_header) return absl::OkStatus();  // not a snapshot: the parse says so
  if (header.ends_with_footer() && HasDamagedFooter(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": corrupted snapshot (its footer is damaged)"));
  }
  // Older shims' snapshots too: a file that ends inside a field was cut.
  if (scan.result == TopLevelScan::kCutInside) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: truncated snapshot (%u of at least %u bytes: the file ends inside "
                        "a field)",
                        name, bytes.size(), std::max<uint64_t>(scan.offset, bytes.size() + 1)));
  }
  if (!header.ends_with_footer()) return absl::OkStatus();  // an older shim's snapshot
  if (scan.result == TopLevelScan::kMalformed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: corrupted snapshot (no footer, and the bytes at offset %u are not protobuf)", name,
        scan.offset));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: truncated snapshot (%u bytes: the footer the shim writes last is missing)", name,
      bytes.size()));
}

// Paths, arguments and labels are `bytes` in the schema, so a snapshot with
// a file name that is not UTF-8 parses like any other.
bool ParseSnapshotBytes(absl::string_view bytes, v1::Snapshot* snapshot) {
  return snapshot->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

// Checks one column against address_delta. `optional` columns may also be
// empty, which the schema defines as "all zero".
absl::Status CheckColumn(absl::string_view name, int block_index, absl::string_view column,
                         int column_size, int expected, bool optional) {
  if (column_size == expected) return absl::OkStatus();
  if (optional && column_size == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: corrupt snapshot: allocation block %d: column %s has %d values but address_delta "
      "has %d%s",
      name, block_index, column, column_size, expected, optional ? " (and it is not empty)" : ""));
}

absl::Status ValidateBlock(absl::string_view name, int block_index, const v1::AllocationBlock& b,
                           const absl::flat_hash_set<uint32_t>& stack_ids) {
  const int rows = b.address_delta_size();
  struct Column {
    absl::string_view name;
    int size;
    bool optional;
  };
  const Column columns[] = {
      {"size", b.size_size(), false},
      {"kind", b.kind_size(), false},
      {"stack_id", b.stack_id_size(), false},
      {"birth_sequence", b.birth_sequence_size(), false},
      {"birth_time_us", b.birth_time_us_size(), false},
      {"thread_id", b.thread_id_size(), false},
      {"tag_id", b.tag_id_size(), true},
      {"flags", b.flags_size(), true},
      {"attribution", b.attribution_size(), true},
      {"resident_bytes", b.resident_bytes_size(), true},
      {"swapped_bytes", b.swapped_bytes_size(), true},
      {"device", b.device_size(), true},
  };
  for (const Column& column : columns) {
    if (absl::Status s =
            CheckColumn(name, block_index, column.name, column.size, rows, column.optional);
        !s.ok()) {
      return s;
    }
  }
  for (int row = 0; row < rows; ++row) {
    const uint32_t id = b.stack_id(row);
    // 0 is "no stack captured", never a Stack entry.
    if (id != 0 && !stack_ids.contains(id)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: corrupt snapshot: allocation block %d row %d refers to stack %u, which the "
          "snapshot does not contain",
          name, block_index, row, id));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::Snapshot> ReadSnapshotFile(absl::string_view path, const ReadOptions& options) {
  const uint64_t max_bytes = std::min(options.max_bytes, kMaxParsableSnapshotBytes);
  absl::StatusOr<std::string> bytes =
      ReadBoundedFile(path, max_bytes, "snapshot", options.max_bytes_flag);
  if (!bytes.ok()) return bytes.status();
  return ParseSnapshot(*bytes, path == kStdinPath ? "stdin" : path);
}

uint32_t SnapshotCrc32(absl::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

absl::StatusOr<v1::Snapshot> ParseSnapshot(absl::string_view bytes, absl::string_view name) {
  if (bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": empty file, not a retain snapshot"));
  }
  // libprotobuf takes an int length; a larger input cannot be parsed in one piece.
  if (bytes.size() > kMaxParsableSnapshotBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %u bytes is larger than this reader can parse (2 GiB)", name, bytes.size()));
  }
  if (absl::Status framing = CheckFraming(bytes, name); !framing.ok()) return framing;
  v1::Snapshot snapshot;
  if (!ParseSnapshotBytes(bytes, &snapshot)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": not a retain snapshot: not a valid protobuf message (truncated or corrupt?)"));
  }
  // Random bytes can happen to decode as a message of unknown fields; a real
  // snapshot always starts with a header carrying its format version.
  if (!snapshot.has_header() || snapshot.header().format_version() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a retain snapshot (no header with a format version)"));
  }
  const uint32_t version = snapshot.header().format_version();
  if (version > static_cast<uint32_t>(v1::FORMAT_VERSION_CURRENT)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: written by a newer retain (format %u, this reader knows %d)", name,
                        version, static_cast<int>(v1::FORMAT_VERSION_CURRENT)));
  }

  // A footer anywhere but in the last 16 bytes (CheckFraming verified that
  // one): two files joined, or a damaged one.
  if (snapshot.has_footer() && !FindFooter(bytes).present) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": corrupted snapshot (a footer that is not at the end of the file)"));
  }

  // The shim writes the health section last: without it the file was cut
  // short, possibly exactly between two fields (which parses cleanly).
  if (!snapshot.has_health()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": truncated snapshot: it ends before the health section the shim writes last"));
  }

  absl::flat_hash_set<uint32_t> stack_ids;
  stack_ids.reserve(snapshot.stacks_size());
  for (const v1::Stack& stack : snapshot.stacks()) stack_ids.insert(stack.id());
  for (int i = 0; i < snapshot.allocations_size(); ++i) {
    if (absl::Status s = ValidateBlock(name, i, snapshot.allocations(i), stack_ids); !s.ok()) {
      return s;
    }
  }
  return snapshot;
}

bool HasResidency(const v1::Snapshot& snapshot) { return snapshot.header().residency_measured(); }

uint64_t SampledEstimate(uint64_t size, uint64_t interval) {
  if (interval == 0 || size >= interval || size == 0) return size;
  const double p = -std::expm1(-static_cast<double>(size) / static_cast<double>(interval));
  return static_cast<uint64_t>(std::llround(static_cast<double>(size) / p));
}

namespace {

// Folds each GPU row that Snapshot.gpu_backings says is made of host memory
// and its host blocks' rows into one gpu-driver-host row (Allocation's
// backs_kind). A link whose GPU row or host rows are gone (freed between
// the shim's copies) joins what is there; one with neither changes nothing.
void MergeGpuBackings(const v1::Snapshot& snapshot, std::vector<Allocation>& rows) {
  absl::flat_hash_map<uint64_t, size_t> host_rows;  // address -> row
  absl::flat_hash_map<std::pair<int, uint64_t>, size_t> gpu_rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].kind == v1::KIND_GPU_DRIVER_HOST) {
      host_rows.emplace(rows[i].address, i);
    } else if (rows[i].kind != v1::KIND_HEAP && rows[i].kind != v1::KIND_MMAP_ANON &&
               rows[i].kind != v1::KIND_MMAP_FILE) {
      gpu_rows.emplace(std::make_pair(static_cast<int>(rows[i].kind), rows[i].address), i);
    }
  }
  std::vector<bool> gone(rows.size(), false);
  bool merged = false;
  for (const v1::GpuBacking& link : snapshot.gpu_backings()) {
    auto gpu = gpu_rows.find(std::make_pair(static_cast<int>(link.kind()), link.handle()));
    if (gpu == gpu_rows.end()) continue;
    Allocation& row = rows[gpu->second];
    if (row.backs_kind != v1::KIND_UNSPECIFIED) continue;  // a handle linked twice
    bool any = false;
    uint64_t resident = 0, swapped = 0, bytes = 0;
    uint32_t blocks = 0;
    for (uint64_t address : link.host_address()) {
      auto host = host_rows.find(address);
      if (host == host_rows.end() || gone[host->second]) continue;
      const Allocation& block = rows[host->second];
      resident += block.resident_bytes;
      swapped += block.swapped_bytes;
      bytes += block.size;
      ++blocks;
      gone[host->second] = true;
      any = true;
    }
    if (!any) continue;
    row.backs_kind = row.kind;
    row.kind = v1::KIND_GPU_DRIVER_HOST;
    row.resident_bytes = resident;
    row.swapped_bytes = swapped;
    row.backing_bytes = bytes;
    row.backing_blocks = blocks;
    merged = true;
  }
  if (!merged) return;
  size_t kept = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!gone[i]) rows[kept++] = rows[i];
  }
  rows.resize(kept);
}

}  // namespace

std::vector<Allocation> FlattenAllocations(const v1::Snapshot& snapshot) {
  // Only the malloc family is sampled (record/sampler.h in the shim).
  const uint64_t interval = snapshot.header().sample_interval_bytes();
  size_t total = 0;
  for (const v1::AllocationBlock& block : snapshot.allocations()) {
    total += static_cast<size_t>(block.address_delta_size());
  }
  std::vector<Allocation> rows;
  rows.reserve(total);
  for (const v1::AllocationBlock& block : snapshot.allocations()) {
    const bool has_tags = block.tag_id_size() > 0;
    const bool has_flags = block.flags_size() > 0;
    const bool has_attribution = block.attribution_size() > 0;
    const bool has_resident = block.resident_bytes_size() > 0;
    const bool has_swapped = block.swapped_bytes_size() > 0;
    const bool has_device = block.device_size() > 0;
    // Each block restarts from an absolute address, so blocks can be
    // written (and read) independently.
    uint64_t address = 0;
    for (int i = 0; i < block.address_delta_size(); ++i) {
      address = i == 0 ? block.address_delta(0) : address + block.address_delta(i);
      Allocation row;
      row.address = address;
      row.recorded_size = block.size(i);
      row.kind = block.kind(i);
      row.size = row.kind == v1::KIND_HEAP ? SampledEstimate(row.recorded_size, interval)
                                           : row.recorded_size;
      row.stack_id = block.stack_id(i);
      row.birth_sequence = block.birth_sequence(i);
      row.birth_time_us = block.birth_time_us(i);
      row.thread_id = block.thread_id(i);
      row.tag_id = has_tags ? block.tag_id(i) : 0;
      row.flags = has_flags ? block.flags(i) : 0;
      row.attribution = has_attribution ? block.attribution(i) : v1::ATTRIBUTION_NONE;
      row.resident_bytes = has_resident ? block.resident_bytes(i) : 0;
      row.swapped_bytes = has_swapped ? block.swapped_bytes(i) : 0;
      row.device = has_device ? block.device(i) : 0;
      if (row.size != row.recorded_size && row.recorded_size != 0) {
        // A sampled row stands for size / recorded_size allocations like it.
        const double scale = static_cast<double>(row.size) / static_cast<double>(row.recorded_size);
        row.resident_bytes =
            static_cast<uint64_t>(std::llround(static_cast<double>(row.resident_bytes) * scale));
        row.swapped_bytes =
            static_cast<uint64_t>(std::llround(static_cast<double>(row.swapped_bytes) * scale));
      }
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<Allocation> CountedAllocations(const v1::Snapshot& snapshot) {
  std::vector<Allocation> rows = FlattenAllocations(snapshot);
  if (snapshot.gpu_backings_size() > 0) MergeGpuBackings(snapshot, rows);
  // Device memory is committed when it is allocated (domain.h): where
  // residency was measured, its resident bytes are its size.
  if (HasResidency(snapshot)) {
    for (Allocation& row : rows) {
      if (IsDeviceKind(row.kind)) row.resident_bytes = row.size;
    }
  }
  return rows;
}

std::vector<v1::KindTotals> CountedTotals(const v1::Snapshot& snapshot) {
  std::vector<v1::KindTotals> totals(snapshot.totals().begin(), snapshot.totals().end());
  if (snapshot.gpu_backings_size() > 0) {
    auto index_of = [&](v1::Kind kind) {
      for (size_t i = 0; i < totals.size(); ++i) {
        if (totals[i].kind() == kind) return i;
      }
      totals.emplace_back().set_kind(kind);
      return totals.size() - 1;
    };
    auto minus = [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
    for (const Allocation& row : CountedAllocations(snapshot)) {
      if (row.backs_kind == v1::KIND_UNSPECIFIED) continue;
      const size_t host_at = index_of(v1::KIND_GPU_DRIVER_HOST);
      const size_t device_at = index_of(row.backs_kind);
      v1::KindTotals& device = totals[device_at];
      device.set_live_bytes(minus(device.live_bytes(), row.size));
      device.set_live_count(minus(device.live_count(), 1));
      // The host blocks were counted by their sizes; the row counts its own.
      v1::KindTotals& host = totals[host_at];
      host.set_live_bytes(minus(host.live_bytes() + row.size, row.backing_bytes));
      host.set_live_count(minus(host.live_count() + 1, row.backing_blocks));
    }
  }
  // Device memory is committed when allocated: resident as allocated.
  if (HasResidency(snapshot)) {
    for (v1::KindTotals& t : totals) {
      if (IsDeviceKind(t.kind())) t.set_resident_bytes(t.live_bytes());
    }
  }
  return totals;
}

const v1::Stack* FindStack(const v1::Snapshot& snapshot, uint32_t id) {
  // Linear: callers that look up many stacks build their own index.
  for (const v1::Stack& stack : snapshot.stacks()) {
    if (stack.id() == id) return &stack;
  }
  return nullptr;
}

size_t Utf8SequenceLength(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length;
  uint32_t code_point;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
    code_point = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    code_point = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    code_point = lead & 0x07;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3f);
  }
  if ((length == 3 && code_point < 0x800) || (length == 4 && code_point < 0x10000) ||
      code_point > 0x10ffff || (code_point >= 0xd800 && code_point <= 0xdfff)) {
    return 0;
  }
  return length;
}

// proto/kinds.h's numbers are the generated enum's.
#define RETAIN_CHECK_KIND(shim, proto, value, name) \
  static_assert(v1::proto == (value), #proto " in proto/kinds.h");
RETAIN_FOR_EACH_KIND(RETAIN_CHECK_KIND)
#undef RETAIN_CHECK_KIND

std::string KindName(v1::Kind kind) {
  if (const char* name = kinds::NameOf(static_cast<int>(kind))) return name;
  // Open enum: a newer shim may write kinds this build does not know.
  return absl::StrCat("kind-", static_cast<int>(kind));
}

}  // namespace retain::tool
