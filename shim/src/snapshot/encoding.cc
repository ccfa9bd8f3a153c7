// encoding: see snapshot/encoding.h.
#include "snapshot/encoding.h"

#include <malloc.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "base/arena.h"
#include "base/config.h"
#include "base/files.h"
#include "base/hook_table.h"
#include "base/process_info.h"
#include "proto/health_fields.h"
#include "record/gpu_backing.h"
#include "record/gpu_devices.h"
#include "record/gpu_recorder.h"
#include "record/live_tables.h"
#include "record/malloc_provider.h"
#include "record/recorder.h"
#include "record/sampler.h"
#include "record/tag_table.h"
#include "snapshot/malloc_arenas.h"
#include "snapshot/trim.h"
#include "unwind/libunwind_isolation.h"
#include "unwind/module_table.h"
#include "unwind/stack_capture.h"
#include "unwind/stack_table.h"

namespace retain::shim {
namespace {

constexpr uint32_t kFormatVersion = 1;

// ReadMallocArenas' sink: one MallocArena message per arena, into
// ProcessMemory.malloc_arenas as glibc prints them.
struct ArenaEncoding {
  ProtoBuffer* memory;
  ProtoBuffer arena;
};

void EncodeArena(const MallocArenaInfo& info, void* context) {
  auto* encoding = static_cast<ArenaEncoding*>(context);
  ProtoBuffer& arena = encoding->arena;
  arena.Clear();
  arena.UintField(1, info.number);
  arena.UintField(2, info.free_bytes);
  arena.UintField(3, info.free_chunks);
  arena.UintField(4, info.fast_bytes);
  arena.UintField(5, info.system_bytes);
  arena.UintField(6, info.system_max_bytes);
  arena.UintField(7, info.aspace_bytes);
  arena.UintField(8, info.aspace_mprotect_bytes);
  arena.UintField(9, info.subheaps);
  arena.UintField(10, info.trimmable_bytes);
  encoding->memory->MessageField(21, arena);
}

}  // namespace

void EncodeHeader(ProtoBuffer& out, Trigger trigger, const char* label,
                  uint64_t requests_at_trigger, uint32_t sequence, const TableCapture& capture,
                  bool residency_measured) {
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
  header.UintField(22, requests_at_trigger);
  header.UintField(23, capture.requests_aborted);
  header.BoolField(24, residency_measured);
  if (const char* foreign = ForeignMallocPath(); foreign[0] != '\0')
    header.StringField(25, foreign);
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
  const TrimHistory trims = GetTrimHistory();
  memory.UintField(18, trims.trims);
  memory.UintField(19, trims.returned_bytes);
  memory.UintField(20, trims.last_unix_ns);
  // Right after mallinfo2, so the arenas' free bytes sum to about its
  // fordblks (the host's threads allocate meanwhile).
  ArenaEncoding arenas{&memory, {}};
  const MallocArenasResult read = ReadMallocArenas(&EncodeArena, &arenas);
  memory.BoolField(22, read.ran && !read.complete);
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

bool EncodeAllocations(Output& output, BlockEncoder& blocks, TableCapture& capture,
                       ResidencyMeter& meter, ResidencyTotals& residency) {
  auto measure = [&](Kind kind, uintptr_t start, uint64_t size) {
    Residency r;
    if (MeasuresResidency(kind)) {
      const Residency* at_capture = capture.MeasuredAt(start, size);
      r = at_capture != nullptr ? *at_capture : meter.Measure(start, size);
    }
    residency.Add(kind, r);
    return r;
  };
  std::sort(capture.heap, capture.heap + capture.heap_count,
            [](const LiveRecord& a, const LiveRecord& b) { return a.address < b.address; });
  bool ok = true;
  for (size_t i = 0; i < capture.heap_count && ok; ++i) {
    const LiveRecord& r = capture.heap[i];
    blocks.Add(Row{r.address, r.size, r.birth_sequence, r.birth_time_us, r.flags,
                   measure(r.kind, r.address, r.size), r.stack_id, r.thread_id, r.tag_id, r.kind,
                   r.attribution, r.device});
    if (i % kBlockRows == 0) ok = !blocks.failed() && output.MaybeFlush();
  }
  for (size_t i = 0; i < capture.map_count && ok; ++i) {
    const MapRecord& r = capture.maps[i];
    blocks.Add(Row{r.start, r.end - r.start, r.birth_sequence, r.birth_time_us, r.flags,
                   measure(r.kind, r.start, r.end - r.start), r.stack_id, r.thread_id, r.tag_id,
                   r.kind, r.attribution, 0});
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

bool TagCapture::Encode(Output& output) const {
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
    tag.BoolField(12, row.aborted);
    output.buffer().MessageField(7, tag);
    if (!output.MaybeFlush()) return false;
  }
  return true;
}

void EncodeTotals(ProtoBuffer& out, const KindCounters* counters,
                  const ResidencyTotals& residency) {
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
    totals.UintField(8, residency.resident[k]);
    totals.UintField(9, residency.swapped[k]);
    out.MessageField(6, totals);
  }
}

void EncodeGpuBackings(ProtoBuffer& out) {
  // Links may be added meanwhile: room for all of them, up to the table's size.
  size_t room = GpuBackingCount();
  if (room == 0) return;
  room = room + 64 < kMaxGpuBackings ? room + 64 : kMaxGpuBackings;
  const size_t bytes = sizeof(GpuBacking) * room;
  auto* links = static_cast<GpuBacking*>(MapScratchPages(bytes));
  if (links == nullptr) return;  // the tools then count driver and device rows apart
  const size_t count = CopyGpuBackings(links, room);
  ProtoBuffer backing;
  ProtoBuffer addresses;
  for (size_t i = 0; i < count; ++i) {
    const GpuBacking& link = links[i];
    backing.Clear();
    addresses.Clear();
    backing.UintField(1, static_cast<uint64_t>(link.kind));
    backing.UintField(2, link.handle);
    for (uint8_t b = 0; b < link.count; ++b) addresses.Varint(link.host[b]);
    backing.PackedField(3, addresses);
    backing.UintField(4, link.host_bytes);
    out.MessageField(9, backing);
  }
  UnmapScratchPages(links, bytes);
}

void EncodeGpuDevices(ProtoBuffer& out) {
  if (GpuDeviceCount() == 0) return;
  GpuDeviceInfo devices[kMaxGpuDevices];
  const size_t count = CopyGpuDevices(devices, kMaxGpuDevices);
  ProtoBuffer device;
  for (size_t i = 0; i < count; ++i) {
    const GpuDeviceInfo& info = devices[i];
    device.Clear();
    device.UintField(1, info.id);
    device.UintField(2, static_cast<uint64_t>(info.api) + 1);  // DeviceApi: GpuApi + 1
    device.UintField(3, static_cast<uint32_t>(info.index));
    device.BytesField(4, info.name, strnlen(info.name, sizeof(info.name)));
    if (info.has_uuid) device.BytesField(5, info.uuid, sizeof(info.uuid));
    out.MessageField(10, device);
  }
}

void EncodeHealth(ProtoBuffer& out, const TableCapture& capture, const WriterHistory& history) {
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
  health.UintField(health_field::kPreviousWriteUs, history.previous_write_us);
  health.UintField(health_field::kDroppedBytes, dropped_bytes);
  health.UintField(health_field::kMissedFrees, capture.missed_frees);
  uint64_t live_table_bytes = 0;
  ForEachLiveTable([&](LiveTable& table) { live_table_bytes += table.MemoryBytes(); });
  health.UintField(health_field::kLiveTableBytes, live_table_bytes);
  health.UintField(health_field::kStackTableBytes, StackTableBytes());
  health.UintField(health_field::kCfiFallbacks, CfiFallbacks());
  health.UintField(health_field::kLibunwindValidations, LibunwindValidations());
  health.UintField(health_field::kGpuBackingsDropped, GpuBackingsDropped());
  const TagTableStats tags = GetTagTableStats();
  health.UintField(health_field::kTagTableBytes, tags.bytes);
  health.UintField(health_field::kTagsRetained, tags.retained);
  health.UintField(health_field::kTagsReleased, tags.released);
  health.UintField(health_field::kTagsReleasedUnreported, tags.released_unreported);
  health.UintField(health_field::kDroppedLiveBytes, DroppedHeapLiveBytes());
  health.UintField(health_field::kDroppedLiveCount, DroppedHeapLiveCount());
  health.UintField(health_field::kFailedSnapshots, history.failed_snapshots);
  if (history.failed_snapshots != 0) {
    health.StringField(health_field::kLastFailure, history.last_failure);
  }
  out.MessageField(8, health);
}

}  // namespace retain::shim
