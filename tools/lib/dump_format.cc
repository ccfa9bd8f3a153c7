// dump_format: the text and JSON renderings of one snapshot for retain-dump.
//
// Thread-compatible: pure functions. The JSON is written by hand (no JSON
// library in the tools' dependencies); JsonString is the one place strings
// from the snapshot enter it, so escaping lives in one function.
#include "tools/lib/dump_format.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "tools/lib/domain.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {
namespace {

std::string Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == absl::string_view::npos ? path : path.substr(slash + 1));
}

std::string ModuleName(const v1::Module& module) {
  // The main executable can come without a path from dl_iterate_phdr.
  if (module.path().empty()) return absl::StrCat("module-", module.id());
  return Basename(module.path());
}

std::string Hex(uint64_t value) { return absl::StrFormat("0x%x", value); }

std::string FormatTimeNs(uint64_t unix_ns) {
  if (unix_ns == 0) return "unknown";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                          absl::FromUnixNanos(static_cast<int64_t>(unix_ns)), absl::UTCTimeZone());
}

// Minimal JSON object/array assembly: values are already-encoded JSON text.
using Members = std::vector<std::pair<std::string, std::string>>;

std::string Object(const Members& members) {
  std::string out = "{";
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) out += ",";
    absl::StrAppend(&out, JsonString(members[i].first), ":", members[i].second);
  }
  out += "}";
  return out;
}

std::string Array(const std::vector<std::string>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ","), "]");
}

std::string Num(uint64_t value) { return absl::StrCat(value); }
std::string Bool(bool value) { return value ? "true" : "false"; }

// What the allocation rows hold, beside KindTotals: the two differ when the
// shim degraded (counted, not recorded) or sampled.
struct RecordedSummary {
  uint64_t rows = 0;
  uint64_t bytes = 0;
};

RecordedSummary Summarize(const std::vector<Allocation>& rows) {
  RecordedSummary summary;
  summary.rows = rows.size();
  for (const Allocation& row : rows) summary.bytes += row.size;
  return summary;
}

void AppendFrames(std::string* out, const v1::Stack* stack, const ModuleIndex& modules) {
  if (stack == nullptr) {
    absl::StrAppend(out, "        (no stack captured)\n");
    return;
  }
  if (stack->frames_size() == 0) absl::StrAppend(out, "        (empty stack)\n");
  for (uint64_t frame : stack->frames()) {
    absl::StrAppend(out, "        ", modules.FormatFrame(frame), "\n");
  }
  if (stack->truncated()) absl::StrAppend(out, "        ... (cut at the depth cap)\n");
}

}  // namespace

std::vector<StackUsage> TopStacks(const v1::Snapshot& snapshot, size_t n) {
  absl::flat_hash_map<uint32_t, StackUsage> by_stack;
  for (const Allocation& row : FlattenAllocations(snapshot)) {
    StackUsage& usage = by_stack[row.stack_id];
    usage.stack_id = row.stack_id;
    usage.live_bytes += row.size;
    usage.live_count += 1;
  }
  std::vector<StackUsage> all;
  all.reserve(by_stack.size());
  for (const auto& [id, usage] : by_stack) all.push_back(usage);
  std::sort(all.begin(), all.end(), [](const StackUsage& a, const StackUsage& b) {
    if (a.live_bytes != b.live_bytes) return a.live_bytes > b.live_bytes;
    if (a.live_count != b.live_count) return a.live_count > b.live_count;
    return a.stack_id < b.stack_id;
  });
  if (all.size() > n) all.resize(n);
  return all;
}

ModuleIndex::ModuleIndex(const v1::Snapshot& snapshot) {
  for (const v1::Module& module : snapshot.modules()) {
    for (const v1::Segment& segment : module.executable_segments()) {
      ranges_.push_back({segment.start(), segment.end(), &module});
    }
  }
}

const v1::Module* ModuleIndex::Find(uint64_t address) const {
  const v1::Module* found = nullptr;
  for (const Range& range : ranges_) {
    if (address < range.start || address >= range.end) continue;
    if (!range.module->unloaded()) return range.module;
    if (found == nullptr) found = range.module;
  }
  return found;
}

std::string ModuleIndex::FormatFrame(uint64_t address) const {
  const v1::Module* module = Find(address);
  if (module == nullptr) return Hex(address);
  return absl::StrCat(ModuleName(*module), "+", Hex(address - module->load_bias()));
}

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  out.reserve(text.size() + 2);
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      size_t length = Utf8SequenceLength(text, i);
      if (length == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text.data() + i, length);
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += "\"";
  return out;
}

std::string TriggerName(v1::Trigger trigger) {
  switch (trigger) {
    case v1::TRIGGER_UNSPECIFIED:
      return "unspecified";
    case v1::TRIGGER_EXIT:
      return "exit";
    case v1::TRIGGER_SIGNAL:
      return "signal";
    case v1::TRIGGER_API:
      return "api";
    case v1::TRIGGER_CONTROL:
      return "control";
    case v1::TRIGGER_EVERY_N_REQUESTS:
      return "every-n-requests";
    case v1::TRIGGER_INTERVAL:
      return "interval";
    case v1::TRIGGER_STOP_SIGNAL:
      return "stop-signal";
    default:
      return absl::StrCat("trigger-", static_cast<int>(trigger));
  }
}

std::string UnwindMethodName(v1::UnwindMethod method) {
  switch (method) {
    case v1::UNWIND_METHOD_UNSPECIFIED:
      return "unspecified";
    case v1::UNWIND_METHOD_LIBUNWIND:
      return "libunwind";
    case v1::UNWIND_METHOD_FRAME_POINTER:
      return "frame-pointer";
    case v1::UNWIND_METHOD_CFI:
      return "cfi";
    default:
      return absl::StrCat("unwind-", static_cast<int>(method));
  }
}

namespace {

// Live rows (any kind: pinned host memory names its device too) per
// Device.id.
struct DeviceUse {
  uint64_t bytes = 0;
  uint64_t count = 0;
};
absl::flat_hash_map<uint32_t, DeviceUse> UseByDevice(const v1::Snapshot& snapshot) {
  absl::flat_hash_map<uint32_t, DeviceUse> use;
  if (snapshot.devices_size() == 0) return use;
  for (const Allocation& row : FlattenAllocations(snapshot)) {
    if (row.device == 0) continue;
    use[row.device].bytes += row.size;
    use[row.device].count += 1;
  }
  return use;
}

// "device:cuda:1": a device's domain by its own API (domain.h).
std::string DeviceDomain(const v1::Device& device) {
  switch (device.api()) {
    case v1::DEVICE_API_HIP:
      return absl::StrCat("device:hip:", device.index());
    case v1::DEVICE_API_CUDA:
      return absl::StrCat("device:cuda:", device.index());
    case v1::DEVICE_API_VULKAN:
      return absl::StrCat("device:vulkan:", device.index());
    case v1::DEVICE_API_METAL:
      return absl::StrCat("device:metal:", device.index());
    default:
      return absl::StrCat("device:unknown:", device.index());
  }
}

}  // namespace

std::string FormatDumpText(const v1::Snapshot& snapshot, const DumpOptions& options) {
  const v1::Header& h = snapshot.header();
  const v1::ProcessMemory& m = snapshot.memory();
  const v1::ShimHealth& health = snapshot.health();
  std::string out;

  absl::StrAppendFormat(&out, "snapshot            %s (format %u)\n", options.source,
                        h.format_version());
  absl::StrAppendFormat(&out, "executable          %s\n",
                        h.exe_path().empty() ? "(unknown)" : h.exe_path());
  if (!h.exe_build_id().empty()) {
    absl::StrAppendFormat(&out, "build id            %s\n",
                          absl::BytesToHexString(h.exe_build_id()));
  }
  if (h.command_line_size() > 0) {
    absl::StrAppendFormat(&out, "command line        %s\n", absl::StrJoin(h.command_line(), " "));
  }
  absl::StrAppendFormat(&out, "pid                 %u (ppid %u)\n", h.pid(), h.ppid());
  if (h.forked_from_pid() != 0) {
    absl::StrAppendFormat(&out, "forked from pid     %u (table inherited from the parent)\n",
                          h.forked_from_pid());
  } else {
    absl::StrAppend(&out, "forked from pid     none\n");
  }
  absl::StrAppendFormat(&out, "sequence            %u, trigger %s\n", h.sequence(),
                        TriggerName(h.trigger()));
  if (!h.label().empty()) absl::StrAppendFormat(&out, "label               %s\n", h.label());
  absl::StrAppendFormat(&out, "time                %s (%.3f s after the shim started)\n",
                        FormatTimeNs(h.time_unix_ns()),
                        static_cast<double>(h.time_since_start_us()) / 1e6);
  absl::StrAppendFormat(&out, "next birth sequence %u\n", h.next_birth_sequence());
  // The reader refuses a file whose footer does not check out, so a footer
  // here is a verified one.
  if (snapshot.has_footer()) {
    absl::StrAppendFormat(&out, "footer              %u bytes, CRC-32 %08x verified\n",
                          snapshot.footer().length(), snapshot.footer().crc32());
  } else {
    absl::StrAppend(&out, "footer              none (an older shim's snapshot: not checked)\n");
  }
  absl::StrAppendFormat(&out, "unwind              %s, max depth %u\n",
                        UnwindMethodName(h.unwind_method()), h.max_depth());
  if (h.sample_interval_bytes() != 0) {
    absl::StrAppendFormat(&out, "sampling            one allocation per %s\n",
                          HumanBytes(h.sample_interval_bytes()));
  }

  absl::StrAppend(&out, "\nProcess memory\n");
  absl::StrAppendFormat(&out, "  VmRSS     %10s   (VmHWM %s, VmSize %s)\n", HumanBytes(m.vm_rss()),
                        HumanBytes(m.vm_hwm()), HumanBytes(m.vm_size()));
  absl::StrAppendFormat(&out, "  RssAnon   %10s\n", HumanBytes(m.rss_anon()));
  absl::StrAppendFormat(&out, "  RssFile   %10s\n", HumanBytes(m.rss_file()));
  absl::StrAppendFormat(&out, "  RssShmem  %10s\n", HumanBytes(m.rss_shmem()));
  absl::StrAppendFormat(&out, "  VmSwap    %10s\n", HumanBytes(m.vm_swap()));
  absl::StrAppendFormat(&out, "  Pss       %10s   (anon %s, file %s)\n", HumanBytes(m.pss()),
                        HumanBytes(m.pss_anon()), HumanBytes(m.pss_file()));
  if (m.has_mallinfo()) {
    absl::StrAppendFormat(&out, "  malloc    %10s   in use\n", HumanBytes(m.malloc_in_use()));
    absl::StrAppendFormat(&out,
                          "            %10s   free but held by the allocator (arena %s, mmapped "
                          "%s, releasable top %s)\n",
                          HumanBytes(m.malloc_free_held()), HumanBytes(m.malloc_arena()),
                          HumanBytes(m.malloc_mmapped()), HumanBytes(m.malloc_top_releasable()));
  } else {
    absl::StrAppend(&out, "  malloc    not reported (no mallinfo2)\n");
  }

  absl::StrAppend(&out, "\nTotals by kind (since the shim started)\n");
  absl::StrAppendFormat(&out, "  %-16s %10s %10s %10s %10s %10s %10s\n", "kind", "live", "count",
                        "allocated", "count", "freed", "count");
  for (const v1::KindTotals& t : snapshot.totals()) {
    absl::StrAppendFormat(&out, "  %-16s %10s %10u %10s %10u %10s %10u\n", KindName(t.kind()),
                          HumanBytes(t.live_bytes()), t.live_count(),
                          HumanBytes(t.allocated_bytes()), t.allocated_count(),
                          HumanBytes(t.freed_bytes()), t.freed_count());
  }
  if (snapshot.totals_size() == 0) absl::StrAppend(&out, "  (none)\n");
  const RecordedSummary recorded = Summarize(FlattenAllocations(snapshot));
  absl::StrAppendFormat(&out,
                        "  recorded: %u live allocations, %s, in %d blocks; %d stacks, %d "
                        "modules, %d tags\n",
                        recorded.rows, HumanBytes(recorded.bytes), snapshot.allocations_size(),
                        snapshot.stacks_size(), snapshot.modules_size(), snapshot.tags_size());

  if (snapshot.devices_size() > 0) {
    absl::StrAppend(&out, "\nGPU devices (Snapshot.devices; live: the rows that name each)\n");
    const absl::flat_hash_map<uint32_t, DeviceUse> use = UseByDevice(snapshot);
    for (const v1::Device& device : snapshot.devices()) {
      const auto it = use.find(device.id());
      const DeviceUse live = it == use.end() ? DeviceUse() : it->second;
      const std::string uuid = FormatUuid(device.uuid(), device.api());
      absl::StrAppendFormat(&out, "  #%-3u %-16s %10s %6u  %s%s%s\n", device.id(),
                            DeviceDomain(device), HumanBytes(live.bytes), live.count,
                            device.name().empty() ? "(no name)" : device.name(),
                            uuid.empty() ? "" : "  ", uuid);
    }
  }

  absl::StrAppend(&out, "\nShim health\n");
  absl::StrAppendFormat(
      &out, "  arena             %s of %s cap%s\n", HumanBytes(health.arena_bytes()),
      HumanBytes(health.arena_cap_bytes()),
      health.degraded() ? ", DEGRADED: new allocations counted, not recorded" : "");
  absl::StrAppendFormat(&out, "  dropped records   %u\n", health.dropped_records());
  absl::StrAppendFormat(&out,
                        "  unwind failures   %u (frame-pointer fallbacks %u, CFI fallbacks %u)\n",
                        health.unwind_failures(), health.fp_fallbacks(), health.cfi_fallbacks());
  absl::StrAppendFormat(&out, "  reentries skipped %u\n", health.reentries_skipped());
  absl::StrAppendFormat(&out, "  unknown frees     %u\n", health.unknown_frees());
  absl::StrAppendFormat(&out, "  bootstrap bytes   %u\n", health.bootstrap_bytes());
  absl::StrAppendFormat(&out, "  stacks interned   %u (%s)\n", health.stacks_interned(),
                        HumanBytes(health.stack_table_bytes()));
  uint64_t live_records = 0;
  for (const v1::KindTotals& t : snapshot.totals()) {
    if (t.kind() == v1::KIND_HEAP || t.kind() == v1::KIND_GPU_DRIVER_HOST ||
        t.kind() >= v1::KIND_HIP_DEVICE) {
      live_records += t.live_count();
    }
  }
  absl::StrAppendFormat(&out, "  live table        %s", HumanBytes(health.live_table_bytes()));
  if (live_records > 0) {
    absl::StrAppendFormat(&out, " (%.1f bytes per live record)",
                          static_cast<double>(health.live_table_bytes()) / live_records);
  }
  absl::StrAppend(&out, "\n");
  absl::StrAppendFormat(&out, "  previous write    %u us\n", health.previous_write_us());

  if (options.top > 0) {
    const std::vector<StackUsage> all = TopStacks(snapshot, SIZE_MAX);
    const size_t shown = std::min(all.size(), static_cast<size_t>(options.top));
    const ModuleIndex modules(snapshot);
    absl::StrAppendFormat(&out, "\nTop %u of %u stacks by live bytes\n", shown, all.size());
    if (all.empty()) absl::StrAppend(&out, "  (no live allocations recorded)\n");
    for (size_t i = 0; i < shown; ++i) {
      const StackUsage& usage = all[i];
      const v1::Stack* stack = usage.stack_id == 0 ? nullptr : FindStack(snapshot, usage.stack_id);
      const std::string name =
          usage.stack_id == 0 ? "no stack" : absl::StrCat("stack ", usage.stack_id);
      absl::StrAppendFormat(&out, "  #%-3d %-12s %10s in %u allocation%s\n", i + 1, name,
                            HumanBytes(usage.live_bytes), usage.live_count,
                            usage.live_count == 1 ? "" : "s");
      AppendFrames(&out, stack, modules);
    }
  }
  return out;
}

std::string FormatDumpJson(const v1::Snapshot& snapshot, const DumpOptions& options) {
  const v1::Header& h = snapshot.header();
  const v1::ProcessMemory& m = snapshot.memory();
  const v1::ShimHealth& health = snapshot.health();

  std::vector<std::string> command_line;
  for (const std::string& arg : h.command_line()) command_line.push_back(JsonString(arg));
  const std::string header = Object({
      {"format_version", Num(h.format_version())},
      {"pid", Num(h.pid())},
      {"ppid", Num(h.ppid())},
      {"process_start_ticks", Num(h.process_start_ticks())},
      {"exe_path", JsonString(h.exe_path())},
      {"exe_build_id", JsonString(absl::BytesToHexString(h.exe_build_id()))},
      {"command_line", Array(command_line)},
      {"time_unix_ns", Num(h.time_unix_ns())},
      {"time", JsonString(FormatTimeNs(h.time_unix_ns()))},
      {"time_since_start_us", Num(h.time_since_start_us())},
      {"start_time_unix_ns", Num(h.start_time_unix_ns())},
      {"sequence", Num(h.sequence())},
      {"trigger", JsonString(TriggerName(h.trigger()))},
      {"label", JsonString(h.label())},
      {"next_birth_sequence", Num(h.next_birth_sequence())},
      {"unwind_method", JsonString(UnwindMethodName(h.unwind_method()))},
      {"max_depth", Num(h.max_depth())},
      {"forked_from_pid", Num(h.forked_from_pid())},
      {"sample_interval_bytes", Num(h.sample_interval_bytes())},
      {"ends_with_footer", Bool(h.ends_with_footer())},
  });
  const std::string footer = snapshot.has_footer()
                                 ? Object({
                                       {"length", Num(snapshot.footer().length())},
                                       {"crc32", Num(snapshot.footer().crc32())},
                                   })
                                 : "null";
  const std::string memory = Object({
      {"vm_size", Num(m.vm_size())},
      {"vm_rss", Num(m.vm_rss())},
      {"vm_hwm", Num(m.vm_hwm())},
      {"rss_anon", Num(m.rss_anon())},
      {"rss_file", Num(m.rss_file())},
      {"rss_shmem", Num(m.rss_shmem())},
      {"vm_swap", Num(m.vm_swap())},
      {"pss", Num(m.pss())},
      {"pss_anon", Num(m.pss_anon())},
      {"pss_file", Num(m.pss_file())},
      {"anonymous", Num(m.anonymous())},
      {"has_mallinfo", Bool(m.has_mallinfo())},
      {"malloc_in_use", Num(m.malloc_in_use())},
      {"malloc_free_held", Num(m.malloc_free_held())},
      {"malloc_mmapped", Num(m.malloc_mmapped())},
      {"malloc_arena", Num(m.malloc_arena())},
      {"malloc_top_releasable", Num(m.malloc_top_releasable())},
  });
  std::vector<std::string> totals;
  for (const v1::KindTotals& t : snapshot.totals()) {
    totals.push_back(Object({
        {"kind", JsonString(KindName(t.kind()))},
        {"live_bytes", Num(t.live_bytes())},
        {"live_count", Num(t.live_count())},
        {"allocated_bytes", Num(t.allocated_bytes())},
        {"allocated_count", Num(t.allocated_count())},
        {"freed_bytes", Num(t.freed_bytes())},
        {"freed_count", Num(t.freed_count())},
    }));
  }
  std::vector<std::string> devices;
  const absl::flat_hash_map<uint32_t, DeviceUse> use = UseByDevice(snapshot);
  for (const v1::Device& device : snapshot.devices()) {
    const auto it = use.find(device.id());
    const DeviceUse live = it == use.end() ? DeviceUse() : it->second;
    const std::string uuid = FormatUuid(device.uuid(), device.api());
    devices.push_back(Object({
        {"id", Num(device.id())},
        {"domain", JsonString(DeviceDomain(device))},
        {"index", Num(device.index())},
        {"name", JsonString(device.name())},
        {"uuid", uuid.empty() ? "null" : JsonString(uuid)},
        {"live_bytes", Num(live.bytes)},
        {"live_count", Num(live.count)},
    }));
  }
  const RecordedSummary recorded = Summarize(FlattenAllocations(snapshot));
  const std::string counts = Object({
      {"live_allocations", Num(recorded.rows)},
      {"live_bytes", Num(recorded.bytes)},
      {"allocation_blocks", Num(snapshot.allocations_size())},
      {"stacks", Num(snapshot.stacks_size())},
      {"modules", Num(snapshot.modules_size())},
      {"tags", Num(snapshot.tags_size())},
  });
  const std::string health_json = Object({
      {"arena_bytes", Num(health.arena_bytes())},
      {"live_table_bytes", Num(health.live_table_bytes())},
      {"stack_table_bytes", Num(health.stack_table_bytes())},
      {"arena_cap_bytes", Num(health.arena_cap_bytes())},
      {"degraded", Bool(health.degraded())},
      {"dropped_records", Num(health.dropped_records())},
      {"unwind_failures", Num(health.unwind_failures())},
      {"reentries_skipped", Num(health.reentries_skipped())},
      {"unknown_frees", Num(health.unknown_frees())},
      {"bootstrap_bytes", Num(health.bootstrap_bytes())},
      {"stacks_interned", Num(health.stacks_interned())},
      {"fp_fallbacks", Num(health.fp_fallbacks())},
      {"cfi_fallbacks", Num(health.cfi_fallbacks())},
      {"previous_write_us", Num(health.previous_write_us())},
  });
  std::vector<std::string> top_json;
  if (options.top > 0) {
    const ModuleIndex modules(snapshot);
    for (const StackUsage& usage : TopStacks(snapshot, static_cast<size_t>(options.top))) {
      const v1::Stack* stack = usage.stack_id == 0 ? nullptr : FindStack(snapshot, usage.stack_id);
      std::vector<std::string> frames;
      if (stack != nullptr) {
        for (uint64_t frame : stack->frames()) {
          const v1::Module* module = modules.Find(frame);
          frames.push_back(Object({
              {"address", JsonString(Hex(frame))},
              {"module", module == nullptr ? "null" : JsonString(module->path())},
              {"offset", module == nullptr ? "null" : JsonString(Hex(frame - module->load_bias()))},
              {"frame", JsonString(modules.FormatFrame(frame))},
          }));
        }
      }
      top_json.push_back(Object({
          {"stack_id", Num(usage.stack_id)},
          {"live_bytes", Num(usage.live_bytes)},
          {"live_count", Num(usage.live_count)},
          {"truncated", Bool(stack != nullptr && stack->truncated())},
          {"frames", Array(frames)},
      }));
    }
  }
  return Object({
             {"source", JsonString(options.source)},
             {"header", header},
             {"memory", memory},
             {"totals", Array(totals)},
             {"devices", Array(devices)},
             {"recorded", counts},
             {"health", health_json},
             {"footer", footer},
             {"top_stacks", Array(top_json)},
         }) +
         "\n";
}

}  // namespace retain::tool
