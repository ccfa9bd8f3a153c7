// writer: see snapshot/writer.h. Field numbers below are those of
// proto/retain.proto; the wire-format test parses this output with the
// generated classes and checks every field.
#include "snapshot/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "base/arena.h"
#include "record/birth_sequence.h"
#include "base/config.h"
#include "snapshot/crc32.h"
#include "base/files.h"
#include "record/gpu_recorder.h"
#include "base/hook_table.h"
#include "unwind/libunwind_isolation.h"
#include "record/live_tables.h"
#include "base/log.h"
#include "unwind/module_table.h"
#include "base/process_info.h"
#include "record/recorder.h"
#include "record/sampler.h"
#include "unwind/stack_capture.h"
#include "unwind/stack_table.h"
#include "record/tag_table.h"
#include "base/thread_state.h"
#include "snapshot/wire_encoder.h"
#include "proto/health_fields.h"

namespace retain::shim {
namespace {

constexpr uint32_t kFormatVersion = 1;
constexpr size_t kBlockRows = 4096;
constexpr size_t kFlushBytes = size_t{1} << 20;

pthread_mutex_t g_write_mutex = PTHREAD_MUTEX_INITIALIZER;
uint32_t g_sequence;           // guarded by g_write_mutex
uint64_t g_previous_write_us;  // guarded by g_write_mutex

// One row of an AllocationBlock, whatever table it came from.
struct Row {
  uint64_t address;
  uint64_t size;
  uint64_t birth_sequence;
  uint64_t birth_time_us;
  uint64_t flags;
  uint32_t stack_id;
  uint32_t thread_id;
  uint32_t tag_id;
  Kind kind;
  uint8_t attribution;
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
    out_.MessageField(5, block_);
    for (ProtoBuffer* column : {&address_, &size_, &kind_, &stack_, &sequence_, &time_, &thread_,
                                &tag_, &flags_, &attribution_}) {
      if (column->failed()) failed_ = true;
      column->Clear();
    }
    if (block_.failed()) failed_ = true;
    count_ = 0;
    any_tag_ = any_flags_ = any_attribution_ = false;
  }

  bool failed() const { return failed_; }

 private:
  ProtoBuffer& out_;
  IdSet& stacks_;
  ProtoBuffer block_, address_, size_, kind_, stack_, sequence_, time_, thread_, tag_, flags_,
      attribution_;
  size_t count_ = 0;
  uint64_t previous_address_ = 0;
  bool any_tag_ = false;
  bool any_flags_ = false;
  bool any_attribution_ = false;
  bool failed_ = false;
};

// Streams the top-level buffer to the file in large pieces, keeping the
// length and CRC-32 of everything written for the footer.
class Output {
 public:
  explicit Output(int file) : file_(file) {}
  ProtoBuffer& buffer() { return buffer_; }
  bool MaybeFlush() { return buffer_.size() < kFlushBytes || Flush(); }
  bool Flush() {
    if (buffer_.failed()) return false;
    if (!WriteAllToShimFile(file_, buffer_.data(), buffer_.size())) return false;
    crc_ = Crc32Update(crc_, buffer_.data(), buffer_.size());
    length_ += buffer_.size();
    buffer_.Clear();
    return true;
  }
  // Flushes, then ends the file with the footer (Header.ends_with_footer).
  bool Finish() {
    if (!Flush()) return false;
    uint8_t footer[kFooterSize];
    EncodeFooter(length_, crc_, footer);
    return WriteAllToShimFile(file_, footer, sizeof(footer));
  }

 private:
  int file_;  // a own_fds handle
  ProtoBuffer buffer_;
  uint64_t length_ = 0;
  uint32_t crc_ = kCrc32Initial;
};

// Both tables and their counters as of one instant: the mappings lock and
// every heap shard lock are held together while they are copied (the
// program's allocating threads wait for the copy, a few milliseconds per
// hundred thousand records; they never wait for the encoding or the disk).
struct TableCapture {
  LiveRecord* heap = nullptr;
  size_t heap_count = 0;
  size_t heap_capacity = 0;
  MapRecord* maps = nullptr;
  size_t map_count = 0;
  size_t map_capacity = 0;
  KindCounters counters[kKindCount] = {};
  uint64_t next_birth_sequence = 0;
  uint64_t missed_frees = 0;
  // Requests opened and closed (record/tag_table.h) as of the copy.
  uint64_t requests_opened = 0;
  uint64_t requests_closed = 0;

  ~TableCapture() { Release(); }
  void Release() {
    UnmapScratchPages(heap, sizeof(LiveRecord) * heap_capacity);
    UnmapScratchPages(maps, sizeof(MapRecord) * map_capacity);
    heap = nullptr;
    maps = nullptr;
  }
};

void EncodeHeader(ProtoBuffer& out, Trigger trigger, const char* label, uint32_t sequence,
                  const TableCapture& capture) {
  ProtoBuffer header;
  header.UintField(1, kFormatVersion);
  header.UintField(2, Pid());
  header.UintField(3, static_cast<uint64_t>(getppid()));
  header.UintField(4, ProcessStartTicks());
  header.StringField(5, ExePath());
  if (const ModuleEntry* main = MainModule())
    header.BytesField(6, main->build_id, main->build_id_size);
  // argv, from /proc/self/cmdline (NUL-separated).
  constexpr size_t kCmdlineMax = 128 * 1024;
  if (auto* cmdline = static_cast<char*>(MapScratchPages(kCmdlineMax))) {
    ssize_t length = ReadSmallFile("/proc/self/cmdline", cmdline, kCmdlineMax);
    for (ssize_t start = 0; start < length;) {
      size_t arg_length = strlen(cmdline + start);
      header.RepeatedStringField(7, cmdline + start, arg_length);
      start += static_cast<ssize_t>(arg_length) + 1;
    }
    UnmapScratchPages(cmdline, kCmdlineMax);
  }
  header.UintField(8, NowUnixNs());
  // The clock birth times use, so every birth is at or before this.
  header.UintField(9, MicrosSinceStart());
  header.UintField(10, sequence);
  header.UintField(11, static_cast<uint32_t>(trigger));
  if (label != nullptr) header.BytesField(12, label, strnlen(label, 127));
  header.UintField(13, capture.next_birth_sequence);
  const Config& config = GetConfig();
  header.UintField(14, config.unwind == UnwindMode::kFramePointer ? 2
                       : config.unwind == UnwindMode::kLibunwind  ? 1
                                                                  : 3);
  header.UintField(15, static_cast<uint64_t>(config.depth));
  header.UintField(16, ForkedFromPid());
  header.UintField(17, ShimStartUnixNs());
  header.UintField(18, g_sample_interval);
  header.BoolField(19, true);  // Output::Finish writes the footer
  header.UintField(20, capture.requests_opened);
  header.UintField(21, capture.requests_closed);
  out.MessageField(1, header);
}

void EncodeMemory(ProtoBuffer& out) {
  char text[8192];
  ProtoBuffer memory;
  if (ReadSmallFile("/proc/self/status", text, sizeof(text)) > 0) {
    memory.UintField(1, ProcKilobytesField(text, "VmSize"));
    memory.UintField(2, ProcKilobytesField(text, "VmRSS"));
    memory.UintField(3, ProcKilobytesField(text, "VmHWM"));
    memory.UintField(4, ProcKilobytesField(text, "RssAnon"));
    memory.UintField(5, ProcKilobytesField(text, "RssFile"));
    memory.UintField(6, ProcKilobytesField(text, "RssShmem"));
    memory.UintField(7, ProcKilobytesField(text, "VmSwap"));
  }
  if (ReadSmallFile("/proc/self/smaps_rollup", text, sizeof(text)) > 0) {
    memory.UintField(8, ProcKilobytesField(text, "Pss"));
    memory.UintField(9, ProcKilobytesField(text, "Pss_Anon"));
    memory.UintField(10, ProcKilobytesField(text, "Pss_File"));
    memory.UintField(11, ProcKilobytesField(text, "Anonymous"));
  }
  // The calling thread is busy: mallinfo2's own locking cannot re-enter us.
  struct mallinfo2 info = mallinfo2();
  memory.UintField(12, info.uordblks + info.hblkhd);
  memory.UintField(13, info.fordblks);
  memory.UintField(14, info.hblkhd);
  memory.UintField(15, info.arena);
  memory.UintField(16, info.keepcost);
  memory.BoolField(17, true);
  out.MessageField(2, memory);
}

void EncodeModules(ProtoBuffer& out) {
  ProtoBuffer module;
  ProtoBuffer segment;
  ForEachModule([&](const ModuleEntry& entry) {
    module.Clear();
    module.UintField(1, entry.id);
    module.StringField(2, entry.path);
    module.BytesField(3, entry.build_id, entry.build_id_size);
    module.UintField(4, entry.load_bias);
    for (uint32_t i = 0; i < entry.segment_count; ++i) {
      segment.Clear();
      segment.UintField(1, entry.segments[i].start);
      segment.UintField(2, entry.segments[i].end);
      segment.UintField(3, entry.segments[i].file_offset);
      module.MessageField(5, segment);
    }
    module.BoolField(6, entry.unloaded);
    out.MessageField(3, module);
  });
}

bool CaptureTables(TableCapture& capture) {
  MmapTable& maps = ProgramMappings();
  for (int attempt = 0; attempt < 8; ++attempt) {
    maps.Lock();
    size_t map_estimate = maps.size();
    maps.Unlock();
    capture.Release();
    capture.heap_capacity = LiveRecordCount() * 9 / 8 + 1024 * (attempt + 1);
    capture.map_capacity = map_estimate + 64;
    capture.heap =
        static_cast<LiveRecord*>(MapScratchPages(sizeof(LiveRecord) * capture.heap_capacity));
    capture.maps =
        static_cast<MapRecord*>(MapScratchPages(sizeof(MapRecord) * capture.map_capacity));
    if (capture.heap == nullptr || capture.maps == nullptr) return false;
    maps.Lock();
    ForEachLiveTable([](LiveTable& table) { table.LockAll(); });
    size_t live_count = 0;
    ForEachLiveTable([&](LiveTable& table) { live_count += table.CountLocked(); });
    bool fits = live_count <= capture.heap_capacity && maps.size() <= capture.map_capacity;
    if (fits) {
      capture.heap_count = 0;
      capture.missed_frees = 0;
      ForEachLiveTable([&](LiveTable& table) {
        capture.heap_count += table.CopyLocked(capture.heap + capture.heap_count);
        table.SumCountersLocked(capture.counters);
        capture.missed_frees += table.missed_frees();
      });
      capture.map_count = maps.Copy(capture.maps, capture.map_capacity);
      for (int k = 0; k < kKindCount; ++k) capture.counters[k].Add(maps.counters(k));
      // Read with every table locked: every record numbered below this is
      // in the copy, and none numbered at or above it.
      capture.next_birth_sequence = Births().StartGeneration();
      // Blocks the heap table had no room for (degraded) are live all the
      // same: counted by usable size (record/recorder.h).
      KindCounters& heap = capture.counters[KindIndex(Kind::kHeap)];
      heap.live_bytes += DroppedHeapLiveBytes();
      heap.live_count += DroppedHeapLiveCount();
      capture.requests_opened = TagCount();
      capture.requests_closed = ClosedTagCount();
    }
    ForEachLiveTableReversed([](LiveTable& table) { table.UnlockAll(); });
    maps.Unlock();
    if (fits) return true;
  }
  return false;
}

// Heap rows sorted by address so the deltas stay small, then mapping rows
// (already in address order).
bool EncodeAllocations(Output& output, BlockEncoder& blocks, TableCapture& capture) {
  std::sort(capture.heap, capture.heap + capture.heap_count,
            [](const LiveRecord& a, const LiveRecord& b) { return a.address < b.address; });
  bool ok = true;
  for (size_t i = 0; i < capture.heap_count && ok; ++i) {
    const LiveRecord& r = capture.heap[i];
    blocks.Add(Row{r.address, r.size, r.birth_sequence, r.birth_time_us, r.flags, r.stack_id,
                   r.thread_id, r.tag_id, r.kind, r.attribution});
    if (i % kBlockRows == 0) ok = !blocks.failed() && output.MaybeFlush();
  }
  for (size_t i = 0; i < capture.map_count && ok; ++i) {
    const MapRecord& r = capture.maps[i];
    blocks.Add(Row{r.start, r.end - r.start, r.birth_sequence, r.birth_time_us, r.flags, r.stack_id,
                   r.thread_id, r.tag_id, r.kind, r.attribution});
  }
  blocks.Flush();
  return ok && !blocks.failed() && output.MaybeFlush();
}

bool EncodeStacks(Output& output, const IdSet& referenced) {
  ProtoBuffer stack;
  ProtoBuffer frames;
  uint32_t count = StackCount();
  for (uint32_t id = 1; id <= count; ++id) {
    if (!referenced.Contains(id)) continue;
    const StackEntry* entry = FindStackById(id);
    if (entry == nullptr) continue;
    stack.Clear();
    frames.Clear();
    for (int i = 0; i < entry->depth; ++i) frames.Varint(entry->frames[i]);
    stack.UintField(1, id);
    stack.PackedField(2, frames);
    stack.BoolField(3, entry->truncated != 0);
    output.buffer().MessageField(4, stack);
    if (!output.MaybeFlush()) return false;
  }
  return true;
}

// The tags a snapshot shows: each retained tag that is open, referenced by
// one of its rows, or ended and not shown by an earlier snapshot. Copied
// under the tag table's lock (an entry may be reused once released), with
// each tag's bytes still live in this snapshot.
struct TagRow {
  uint32_t id;
  TagSource source;
  bool ended;
  bool reported;
  uint32_t thread_id;
  uint64_t start_us;
  uint64_t end_us;
  uint64_t bytes_allocated;
  uint64_t live_bytes;
  uint64_t live_count;
  char request_id[sizeof(TagEntry::request_id)];
  char method[sizeof(TagEntry::method)];
  char path[sizeof(TagEntry::path)];
};

class TagCapture {
 public:
  ~TagCapture() { UnmapScratchPages(rows_, sizeof(TagRow) * capacity_); }

  // Copies the retained tags. False for lack of scratch memory.
  bool Capture() {
    // Tags opened between the count and the copy are left out (they are
    // newer than every row of the table capture).
    capacity_ = GetTagTableStats().retained + 64;
    rows_ = static_cast<TagRow*>(MapScratchPages(sizeof(TagRow) * capacity_));
    if (rows_ == nullptr) return false;
    ForEachRetainedTag(
        [](TagEntry* entry, void* argument) { static_cast<TagCapture*>(argument)->Add(*entry); },
        this);
    return true;
  }

  // Counts each row's bytes into its tag; a row whose tag was released
  // meanwhile (its request ended long ago) is shown with no tag.
  void CountLive(uint32_t* tag_id, uint64_t bytes) {
    if (*tag_id == 0) return;
    TagRow* row = Find(*tag_id);
    if (row == nullptr) {
      *tag_id = 0;
      return;
    }
    row->live_bytes += bytes;
    row->live_count += 1;
  }

  bool Encode(Output& output) const {
    ProtoBuffer tag;
    for (size_t i = 0; i < count_; ++i) {
      const TagRow& row = rows_[i];
      if (row.ended && row.reported && row.live_count == 0) continue;
      tag.Clear();
      tag.UintField(1, row.id);
      tag.StringField(2, row.request_id);
      tag.StringField(3, row.method);
      tag.StringField(4, row.path);
      tag.UintField(5, row.thread_id);
      tag.UintField(6, row.start_us);
      tag.UintField(7, row.end_us);
      tag.UintField(8, row.bytes_allocated);
      tag.UintField(9, row.live_bytes);
      tag.UintField(10, row.live_count);
      tag.UintField(11, static_cast<uint64_t>(row.source));
      output.buffer().MessageField(7, tag);
      if (!output.MaybeFlush()) return false;
    }
    return true;
  }

  // After the snapshot is complete: its ended tags have been shown.
  void MarkReported() const {
    for (size_t i = 0; i < count_; ++i) {
      if (!rows_[i].ended || rows_[i].reported) continue;
      if (TagEntry* entry = FindTag(rows_[i].id)) {
        entry->reported.store(true, std::memory_order_relaxed);
      }
    }
  }

 private:
  void Add(const TagEntry& entry) {
    if (count_ == capacity_) return;
    TagRow& row = rows_[count_++];
    row.id = entry.id;
    row.source = entry.source;
    row.end_us = entry.end_us.load(std::memory_order_acquire);
    row.ended = row.end_us != 0;
    row.reported = entry.reported.load(std::memory_order_relaxed);
    row.thread_id = entry.thread_id;
    row.start_us = entry.start_us;
    row.bytes_allocated = entry.bytes_allocated.load(std::memory_order_relaxed);
    memcpy(row.request_id, entry.request_id, sizeof(row.request_id));
    memcpy(row.method, entry.method, sizeof(row.method));
    memcpy(row.path, entry.path, sizeof(row.path));
  }

  // Rows are in id order.
  TagRow* Find(uint32_t id) {
    size_t low = 0;
    size_t high = count_;
    while (low < high) {
      size_t middle = low + (high - low) / 2;
      if (rows_[middle].id < id) {
        low = middle + 1;
      } else {
        high = middle;
      }
    }
    return low < count_ && rows_[low].id == id ? &rows_[low] : nullptr;
  }

  TagRow* rows_ = nullptr;
  size_t count_ = 0;
  size_t capacity_ = 0;
};

void CountTagBytes(TableCapture& capture, TagCapture& tags) {
  for (size_t i = 0; i < capture.heap_count; ++i) {
    tags.CountLive(&capture.heap[i].tag_id, capture.heap[i].size);
  }
  for (size_t i = 0; i < capture.map_count; ++i) {
    tags.CountLive(&capture.maps[i].tag_id, capture.maps[i].end - capture.maps[i].start);
  }
}

void EncodeTotals(ProtoBuffer& out, const KindCounters* counters) {
  ProtoBuffer totals;
  for (int k = 0; k < kKindCount; ++k) {
    const KindCounters& c = counters[k];
    if (c.allocated_count == 0 && c.live_count == 0 && c.freed_count == 0) continue;
    totals.Clear();
    totals.UintField(1, static_cast<uint64_t>(kAllKinds[k]));
    totals.UintField(2, c.live_bytes);
    totals.UintField(3, c.live_count);
    totals.UintField(4, c.allocated_bytes);
    totals.UintField(5, c.allocated_count);
    totals.UintField(6, c.freed_bytes);
    totals.UintField(7, c.freed_count);
    out.MessageField(6, totals);
  }
}

// Why the last snapshot could not be written, and how many could not: for
// the next snapshot's health block (the host's stderr is not the place).
uint64_t g_failed_snapshots;
char g_last_failure[256];

void EncodeHealth(ProtoBuffer& out, const TableCapture& capture) {
  MmapTable& mappings = ProgramMappings();
  mappings.Lock();
  uint64_t mmap_dropped = mappings.dropped();
  uint64_t mmap_dropped_bytes = mappings.dropped_bytes();
  uint64_t unknown_unmaps = mappings.unknown_unmaps();
  mappings.Unlock();
  ProtoBuffer health;
  health.UintField(health_field::kArenaBytes, ArenaBytes());
  health.UintField(health_field::kArenaCapBytes, ArenaCap());
  uint64_t dropped = mmap_dropped;
  uint64_t dropped_bytes = mmap_dropped_bytes;
  ForEachLiveTable([&](LiveTable& table) {
    dropped += table.dropped();
    dropped_bytes += table.dropped_bytes();
  });
  health.BoolField(health_field::kDegraded, ArenaExhausted() || dropped > 0);
  health.UintField(health_field::kDroppedRecords, dropped);
  health.UintField(health_field::kUnwindFailures, UnwindFailures());
  health.UintField(health_field::kReentriesSkipped, ReentriesSkipped());
  health.UintField(health_field::kUnknownFrees,
                   UnknownFrees() + unknown_unmaps + UnknownGpuFrees());
  health.UintField(health_field::kBootstrapBytes, BootstrapBytes());
  health.UintField(health_field::kStacksInterned, StackCount());
  health.UintField(health_field::kFpFallbacks, FramePointerFallbacks());
  health.UintField(health_field::kPreviousWriteUs, g_previous_write_us);
  health.UintField(health_field::kDroppedBytes, dropped_bytes);
  health.UintField(health_field::kMissedFrees, capture.missed_frees);
  uint64_t live_table_bytes = 0;
  ForEachLiveTable([&](LiveTable& table) { live_table_bytes += table.MemoryBytes(); });
  health.UintField(health_field::kLiveTableBytes, live_table_bytes);
  health.UintField(health_field::kStackTableBytes, StackTableBytes());
  health.UintField(health_field::kCfiFallbacks, CfiFallbacks());
  health.UintField(health_field::kLibunwindValidations, LibunwindValidations());
  const TagTableStats tags = GetTagTableStats();
  health.UintField(health_field::kTagTableBytes, tags.bytes);
  health.UintField(health_field::kTagsRetained, tags.retained);
  health.UintField(health_field::kTagsReleased, tags.released);
  health.UintField(health_field::kTagsReleasedUnreported, tags.released_unreported);
  health.UintField(health_field::kDroppedLiveBytes, DroppedHeapLiveBytes());
  health.UintField(health_field::kDroppedLiveCount, DroppedHeapLiveCount());
  health.UintField(health_field::kFailedSnapshots, g_failed_snapshots);
  if (g_failed_snapshots != 0) health.StringField(health_field::kLastFailure, g_last_failure);
  out.MessageField(8, health);
}

void RecordFailure(const char* format, ...) __attribute__((format(printf, 1, 2)));
void RecordFailure(const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(g_last_failure, sizeof(g_last_failure), format, args);
  va_end(args);
  ++g_failed_snapshots;
  LogWarning("%s", g_last_failure);
}

// 0, or the errno that keeps `dir` from holding snapshots.
int EnsureDirectory(const char* dir) {
  struct stat st;
  if (stat(dir, &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  if (mkdir(dir, 0700) == 0 || errno == EEXIST) return 0;
  return errno;
}

bool WriteLocked(Trigger trigger, const char* label, char* path_out, size_t path_size) {
  const Config& config = GetConfig();
  if (int error = EnsureDirectory(config.dir); error != 0) {
    RecordFailure("cannot write snapshots to RETAIN_DIR '%s': %s", config.dir, strerror(error));
    return false;
  }
  // A program that exec()s itself keeps its pid and starts a new shim whose
  // sequence restarts: skip numbers the previous image already used rather
  // than overwrite its snapshots.
  char path[sizeof(config.dir) + 128];
  uint32_t sequence;
  struct stat existing;
  do {
    sequence = ++g_sequence;
    snprintf(path, sizeof(path), "%s/%s.%u.%u.pb", config.dir, ExeBaseName(), Pid(), sequence);
  } while (stat(path, &existing) == 0);
  char temp_path[sizeof(path) + 16];
  snprintf(temp_path, sizeof(temp_path), "%s/.%s.%u.%u.pb.tmp", config.dir, ExeBaseName(), Pid(),
           sequence);
  int file = OpenShimFile(temp_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (file < 0) {
    RecordFailure("cannot create %s: %s", temp_path, strerror(errno));
    return false;
  }
  uint64_t started_us = PreciseMicrosSinceStart();
  RefreshModules();
  bool ok;
  {
    TableCapture capture;
    TagCapture tags;
    ok = CaptureTables(capture) && tags.Capture();
    if (ok) CountTagBytes(capture, tags);
    Output output(file);
    IdSet referenced;
    if (ok) {
      EncodeHeader(output.buffer(), trigger, label, sequence, capture);
      EncodeMemory(output.buffer());
      EncodeModules(output.buffer());
      ok = output.Flush();
    }
    if (ok) {
      BlockEncoder blocks(output.buffer(), referenced);
      ok = EncodeAllocations(output, blocks, capture);
    }
    ok = ok && EncodeStacks(output, referenced) && tags.Encode(output);
    if (ok) {
      EncodeTotals(output.buffer(), capture.counters);
      EncodeHealth(output.buffer(), capture);
      ok = output.Finish();
    }
    if (ok) tags.MarkReported();
  }
  int saved_errno = errno;
  CloseShimFile(file);
  if (ok && rename(temp_path, path) != 0) {
    ok = false;
    saved_errno = errno;
  }
  if (!ok) {
    RecordFailure("cannot write snapshot %s: %s", path,
                  ArenaExhausted() ? "shim memory cap reached" : strerror(saved_errno));
    unlink(temp_path);
    return false;
  }
  g_previous_write_us = PreciseMicrosSinceStart() - started_us;
  LogDiagnostic("wrote %s in %lu us", path, static_cast<unsigned long>(g_previous_write_us));
  if (path_out != nullptr && path_size > 0) snprintf(path_out, path_size, "%s", path);
  return true;
}

}  // namespace

bool WriteSnapshot(Trigger trigger, const char* label, char* path_out, size_t path_size) {
  if (!RealFunctionsReady()) return false;
  BusyScope busy;
  int saved = errno;
  pthread_mutex_lock(&g_write_mutex);
  bool ok = WriteLocked(trigger, label, path_out, path_size);
  pthread_mutex_unlock(&g_write_mutex);
  errno = saved;
  return ok;
}

void SnapshotWriterLockForFork() { pthread_mutex_lock(&g_write_mutex); }
void SnapshotWriterUnlockForFork() { pthread_mutex_unlock(&g_write_mutex); }
void SnapshotWriterResetInChild() {
  pthread_mutex_init(&g_write_mutex, nullptr);
  g_sequence = 0;
}

}  // namespace retain::shim
