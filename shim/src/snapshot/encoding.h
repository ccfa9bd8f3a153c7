// encoding: the message layout of a snapshot (proto/retain.proto) over the
// wire encoder (snapshot/wire_encoder.h): the header, process memory (with glibc's arenas from
// snapshot/malloc_arenas.h), the modules, the allocation blocks (column-packed, kBlockRows rows
// each, with each row's residency from snapshot/residency.h), the stacks they reference, the tags,
// the per-kind totals, the GPU backings and devices, and the shim's health. Field numbers are
// retain.proto's (the health block's named in proto/health_fields.h);
// tests/preload/snapshot_fields_test.cc parses the output with the generated classes and checks
// every field.
//
// Thread and signal contract: works on the copies of snapshot/capture.h,
// outside the tables' locks, on the writer's thread with the writer's mutex
// held; reads /proc files and the module and stack tables (their locks), so
// never from a signal handler or a hook. Buffers are arena pages, never the
// host heap.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_ENCODING_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_ENCODING_H_

#include <string.h>

#include <cstddef>
#include <cstdint>

#include "base/arena.h"
#include "record/kinds.h"
#include "snapshot/capture.h"
#include "snapshot/file_output.h"
#include "snapshot/residency.h"
#include "snapshot/wire_encoder.h"
#include "snapshot/writer.h"

namespace retain::shim {

inline constexpr size_t kBlockRows = 4096;

// One row of an AllocationBlock, whatever table it came from.
struct Row {
  uint64_t address;
  uint64_t size;
  uint64_t birth_sequence;
  uint64_t birth_time_us;
  uint64_t flags;
  Residency residency;
  uint32_t stack_id;
  uint32_t thread_id;
  uint32_t tag_id;
  Kind kind;
  uint8_t attribution;
  uint8_t device;  // record/gpu_devices.h id; 0: none
};

// A set of stack ids that grows as needed (arena pages).
class IdSet {
 public:
  ~IdSet() { UnmapScratchPages(bits_, bytes_); }
  bool Add(uint32_t id) {
    if (id / 8 >= bytes_ && !Grow(id / 8 + 1)) return false;
    bits_[id / 8] |= static_cast<uint8_t>(1u << (id % 8));
    return true;
  }
  bool Contains(uint32_t id) const { return id / 8 < bytes_ && (bits_[id / 8] >> (id % 8)) & 1; }
  size_t limit() const { return bytes_ * 8; }

 private:
  bool Grow(size_t needed) {
    size_t bytes = bytes_ == 0 ? 65536 : bytes_ * 2;
    while (bytes < needed) bytes *= 2;
    auto* bits = static_cast<uint8_t*>(MapScratchPages(bytes));
    if (bits == nullptr) return false;
    if (bytes_ > 0) memcpy(bits, bits_, bytes_);
    UnmapScratchPages(bits_, bytes_);
    bits_ = bits;
    bytes_ = bytes;
    return true;
  }
  uint8_t* bits_ = nullptr;
  size_t bytes_ = 0;
};

// Encodes rows into AllocationBlock messages, kBlockRows at a time.
class BlockEncoder {
 public:
  BlockEncoder(ProtoBuffer& out, IdSet& stacks) : out_(out), stacks_(stacks) {}

  void Add(const Row& row) {
    address_.Varint(count_ == 0 ? row.address : row.address - previous_address_);
    previous_address_ = row.address;
    size_.Varint(row.size);
    kind_.Varint(static_cast<uint64_t>(row.kind));
    stack_.Varint(row.stack_id);
    sequence_.Varint(row.birth_sequence);
    time_.Varint(row.birth_time_us);
    thread_.Varint(row.thread_id);
    tag_.Varint(row.tag_id);
    flags_.Varint(row.flags);
    attribution_.Varint(row.attribution);
    // The residency columns start at the first nonzero value (earlier rows
    // are 0): most blocks have nothing swapped, many nothing resident.
    AddLazily(resident_, any_resident_, row.residency.resident);
    AddLazily(swapped_, any_swapped_, row.residency.swapped);
    // So does the device column: only GPU rows have one.
    AddLazily(device_, any_device_, row.device);
    any_tag_ |= row.tag_id != 0;
    any_attribution_ |= row.attribution != 0;
    any_flags_ |= row.flags != 0;
    if (row.stack_id != 0) stacks_.Add(row.stack_id);
    if (++count_ == kBlockRows) Flush();
  }

  // Rows should arrive in address order, so the address deltas stay small;
  // the deltas wrap modulo 2^64 where they do not (heap rows, then mmap rows).
  void Flush() {
    if (count_ == 0) return;
    block_.Clear();
    block_.PackedField(1, address_);
    block_.PackedField(2, size_);
    block_.PackedField(3, kind_);
    block_.PackedField(4, stack_);
    block_.PackedField(5, sequence_);
    block_.PackedField(6, time_);
    block_.PackedField(7, thread_);
    if (any_tag_) block_.PackedField(8, tag_);
    if (any_flags_) block_.PackedField(9, flags_);
    if (any_attribution_) block_.PackedField(10, attribution_);
    if (any_resident_) block_.PackedField(11, resident_);
    if (any_swapped_) block_.PackedField(12, swapped_);
    if (any_device_) block_.PackedField(13, device_);
    out_.MessageField(5, block_);
    for (ProtoBuffer* column : {&address_, &size_, &kind_, &stack_, &sequence_, &time_, &thread_,
                                &tag_, &flags_, &attribution_, &resident_, &swapped_, &device_}) {
      if (column->failed()) failed_ = true;
      column->Clear();
    }
    if (block_.failed()) failed_ = true;
    count_ = 0;
    any_tag_ = any_flags_ = any_attribution_ = any_resident_ = any_swapped_ = any_device_ = false;
  }

  bool failed() const { return failed_; }

 private:
  void AddLazily(ProtoBuffer& column, bool& any, uint64_t value) {
    if (!any) {
      if (value == 0) return;
      for (size_t i = 0; i < count_; ++i) column.Varint(0);
      any = true;
    }
    column.Varint(value);
  }

  ProtoBuffer& out_;
  IdSet& stacks_;
  ProtoBuffer block_, address_, size_, kind_, stack_, sequence_, time_, thread_, tag_, flags_,
      attribution_, resident_, swapped_, device_;
  size_t count_ = 0;
  uint64_t previous_address_ = 0;
  bool any_tag_ = false;
  bool any_flags_ = false;
  bool any_attribution_ = false;
  bool any_resident_ = false;
  bool any_swapped_ = false;
  bool any_device_ = false;
  bool failed_ = false;
};

// What the writer remembers between snapshots, for the health block: the
// previous write's duration, and why the last snapshot could not be written
// and how many could not (the host's stderr is not the place).
struct WriterHistory {
  uint64_t previous_write_us;
  uint64_t failed_snapshots;
  const char* last_failure;
};

// `residency_measured`: the meter's Begin succeeded (Header.residency_measured).
void EncodeHeader(ProtoBuffer& out, Trigger trigger, const char* label,
                  uint64_t requests_at_trigger, uint32_t sequence, const TableCapture& capture,
                  bool residency_measured);
void EncodeMemory(ProtoBuffer& out);
void EncodeModules(ProtoBuffer& out);
// Heap rows sorted by address so the deltas stay small (and the meter's
// mincore windows serve many rows), then mapping rows (already in address
// order). Each row of a measured kind gets its residency from `meter`,
// summed per kind into `residency`.
bool EncodeAllocations(Output& output, BlockEncoder& blocks, TableCapture& capture,
                       ResidencyMeter& meter, ResidencyTotals& residency);
bool EncodeStacks(Output& output, const IdSet& referenced);
void EncodeTotals(ProtoBuffer& out, const KindCounters* counters, const ResidencyTotals& residency);
// Snapshot.gpu_backings: which driver host blocks back which GPU record.
void EncodeGpuBackings(ProtoBuffer& out);
// Snapshot.devices: the GPU devices records name (record/gpu_devices.h).
void EncodeGpuDevices(ProtoBuffer& out);
void EncodeHealth(ProtoBuffer& out, const TableCapture& capture, const WriterHistory& history);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_ENCODING_H_
