// snapshot_reader: reads a snapshot file, refuses anything that is not a
// well-formed retain snapshot this build understands, and decodes the
// columnar allocation blocks.
//
// Thread-compatible: no shared state. Validation happens once, here, so that
// every consumer (dump, diff, trend, exporters) may index columns and look up
// stacks without checking again.
#include "tools/lib/snapshot_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace retain::tool {
namespace {

// Closes a file descriptor on every return path.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

absl::Status OpenError(absl::string_view path, int error) {
  std::string message = absl::StrCat(path, ": cannot open: ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InvalidArgumentError(message);
  }
}

// Reads the whole file. A regular file's size is known up front; anything
// else (a pipe, /dev/stdin) is read until end of file.
absl::StatusOr<std::string> ReadWholeFile(absl::string_view path) {
  const std::string path_string(path);
  int fd = open(path_string.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenError(path, errno);
  FdCloser closer(fd);

  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a snapshot file"));
  }
  std::string bytes;
  if (S_ISREG(st.st_mode) && st.st_size > 0) bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": read failed: ", std::strerror(errno)));
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  return bytes;
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

absl::StatusOr<v1::Snapshot> ReadSnapshotFile(absl::string_view path) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(path);
  if (!bytes.ok()) return bytes.status();
  return ParseSnapshot(*bytes, path);
}

absl::StatusOr<v1::Snapshot> ParseSnapshot(absl::string_view bytes, absl::string_view name) {
  if (bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": empty file, not a retain snapshot"));
  }
  // libprotobuf takes an int length; a larger input cannot be parsed in one piece.
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %u bytes is larger than this reader can parse (2 GiB)", name, bytes.size()));
  }
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

uint64_t SampledEstimate(uint64_t size, uint64_t interval) {
  if (interval == 0 || size >= interval || size == 0) return size;
  const double p = -std::expm1(-static_cast<double>(size) / static_cast<double>(interval));
  return static_cast<uint64_t>(std::llround(static_cast<double>(size) / p));
}

std::vector<Allocation> FlattenAllocations(const v1::Snapshot& snapshot) {
  // Only the malloc family is sampled (sampler.h in the shim).
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
      rows.push_back(row);
    }
  }
  return rows;
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

std::string KindName(v1::Kind kind) {
  switch (kind) {
    case v1::KIND_UNSPECIFIED:
      return "unspecified";
    case v1::KIND_HEAP:
      return "heap";
    case v1::KIND_MMAP_ANON:
      return "mmap-anon";
    case v1::KIND_MMAP_FILE:
      return "mmap-file";
    case v1::KIND_GPU_DRIVER_HOST:
      return "gpu-driver-host";
    case v1::KIND_HIP_DEVICE:
      return "hip-device";
    case v1::KIND_HIP_HOST:
      return "hip-host";
    case v1::KIND_HIP_MANAGED:
      return "hip-managed";
    case v1::KIND_VULKAN_DEVICE:
      return "vulkan-device";
    case v1::KIND_CUDA_DEVICE:
      return "cuda-device";
    case v1::KIND_CUDA_HOST:
      return "cuda-host";
    case v1::KIND_CUDA_MANAGED:
      return "cuda-managed";
    case v1::KIND_METAL:
      return "metal";
    default:
      // Open enum: a newer shim may write kinds this build does not know.
      return absl::StrCat("kind-", static_cast<int>(kind));
  }
}

}  // namespace retain::tool
