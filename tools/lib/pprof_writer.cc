// pprof_writer: builds a pprof Profile (proto/profile.proto) from samples of
// retain snapshots, interning strings, mappings, locations and functions so
// each appears once, then serializes and gzips it.
//
// Thread-compatible: the builder is local to one EncodePprof call; the
// Symbolizer passed in is used from the calling thread only.
#include "tools/lib/pprof_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "profile.pb.h"

namespace retain::tool {
namespace {

// Every frame of a retain stack is a return address, frames[0] included:
// the shim drops its own frames, so frames[0] is where the allocation
// function returns to in its caller (shim/src/unwind/stack_table.h). pprof wants
// the call instruction, so step back one byte; the symbolizer must look up
// the same byte (an inlined call that ends its inline range, or a call that
// ends a function, would otherwise resolve to the code after it). The
// symbolizer subtracts one for every frame index above 0, hence
// kReturnAddressFrame for every frame.
constexpr int kReturnAddressFrame = 1;

uint64_t CallAddress(uint64_t return_address) {
  return return_address > 0 ? return_address - 1 : return_address;
}

// The executable ranges of one snapshot's modules, sorted by start, for
// finding the module that contains an address.
struct ModuleRange {
  uint64_t start = 0;
  uint64_t end = 0;
  int module_index = 0;
};

class ProfileBuilder {
 public:
  explicit ProfileBuilder(Symbolizer& symbolizer) : symbolizer_(symbolizer) {
    Intern("");  // entry 0 is always the empty string
  }

  // Index of `text` in the string table, added on first use.
  int64_t Intern(absl::string_view text) {
    auto [it, inserted] = strings_.try_emplace(text, profile_.string_table_size());
    if (inserted) profile_.add_string_table(std::string(text));
    return it->second;
  }

  // Id of the Location of a return address of a stack of `snapshot`.
  uint64_t LocationId(const v1::Snapshot& snapshot, uint64_t address) {
    const uint64_t call_address = CallAddress(address);
    const uint64_t mapping_id = MappingId(snapshot, call_address);
    // Identical mappings (the same module at the same place: two snapshots
    // of one process) share locations; addresses outside every module are
    // only known to be the same within one snapshot.
    const LocationKey key{mapping_id, mapping_id != 0 ? nullptr : &snapshot, call_address};
    auto [it, inserted] = locations_.try_emplace(key, profile_.location_size() + 1);
    if (!inserted) return it->second;

    pprof::Location* location = profile_.add_location();
    location->set_id(it->second);
    location->set_mapping_id(mapping_id);
    location->set_address(call_address);
    const SymbolizedAddress& symbolized =
        symbolizer_.Symbolize(snapshot, address, kReturnAddressFrame);
    // SourceFrame order is already pprof's: innermost inlined function first.
    for (const SourceFrame& frame : symbolized.frames) {
      if (frame.function.empty()) continue;  // no name: leave it to pprof
      pprof::Line* line = location->add_line();
      line->set_function_id(FunctionId(frame.function, frame.file));
      line->set_line(frame.line);
    }
    return it->second;
  }

  // Sets each mapping's has_* flags from its locations: a flag is set only
  // when it holds for every location, so pprof still symbolizes mappings
  // that were left partly unsymbolized (when it can find the file).
  void FinishMappings() {
    struct Coverage {
      bool functions = true;
      bool filenames = true;
      bool line_numbers = true;
    };
    std::vector<Coverage> coverage(profile_.mapping_size());
    for (const pprof::Location& location : profile_.location()) {
      if (location.mapping_id() == 0) continue;
      Coverage& c = coverage[location.mapping_id() - 1];
      if (location.line_size() == 0) c.functions = c.filenames = c.line_numbers = false;
      for (const pprof::Line& line : location.line()) {
        const pprof::Function& function = profile_.function(line.function_id() - 1);
        if (function.filename() == 0) c.filenames = false;
        if (line.line() == 0) c.line_numbers = false;
      }
    }
    for (int i = 0; i < profile_.mapping_size(); ++i) {
      pprof::Mapping* mapping = profile_.mutable_mapping(i);
      const Coverage& c = coverage[i];
      mapping->set_has_functions(c.functions);
      mapping->set_has_filenames(c.functions && c.filenames);
      mapping->set_has_line_numbers(c.functions && c.line_numbers);
      // Names and files for every address mean the debug information was
      // read, inlined frames included.
      mapping->set_has_inline_frames(c.functions && c.filenames);
    }
  }

  // Adds the mapping of the snapshot's executable now, so that it comes
  // first: pprof takes the first mapping for the main binary (its "File:").
  void AddExecutableMapping(const v1::Snapshot& snapshot) {
    if (modules_.contains(&snapshot)) return;  // seen before
    SnapshotModules& modules = ModulesOf(snapshot);
    for (const ModuleRange& range : modules.ranges) {
      if (snapshot.modules(range.module_index).path() != snapshot.header().exe_path()) continue;
      uint64_t& id = modules.mapping_ids[range.module_index];
      if (id == 0) id = AddMapping(snapshot.modules(range.module_index));
      return;
    }
  }

  pprof::Profile& profile() { return profile_; }

 private:
  using LocationKey = std::tuple<uint64_t, const v1::Snapshot*, uint64_t>;
  using MappingKey = std::tuple<std::string, std::string, uint64_t, uint64_t, uint64_t>;

  struct SnapshotModules {
    std::vector<ModuleRange> ranges;    // sorted by start
    std::vector<uint64_t> mapping_ids;  // per module index; 0 until first used
  };

  SnapshotModules& ModulesOf(const v1::Snapshot& snapshot) {
    auto [it, inserted] = modules_.try_emplace(&snapshot);
    if (inserted) {
      SnapshotModules& m = it->second;
      m.mapping_ids.assign(snapshot.modules_size(), 0);
      for (int i = 0; i < snapshot.modules_size(); ++i) {
        for (const v1::Segment& segment : snapshot.modules(i).executable_segments()) {
          if (segment.end() > segment.start()) {
            m.ranges.push_back({segment.start(), segment.end(), i});
          }
        }
      }
      std::sort(m.ranges.begin(), m.ranges.end(),
                [](const ModuleRange& a, const ModuleRange& b) { return a.start < b.start; });
    }
    return it->second;
  }

  // Id of the Mapping of the module containing `address`, 0 if none does.
  uint64_t MappingId(const v1::Snapshot& snapshot, uint64_t address) {
    SnapshotModules& modules = ModulesOf(snapshot);
    auto after = std::upper_bound(
        modules.ranges.begin(), modules.ranges.end(), address,
        [](uint64_t value, const ModuleRange& range) { return value < range.start; });
    if (after == modules.ranges.begin()) return 0;
    const ModuleRange& range = *(after - 1);
    if (address >= range.end) return 0;
    uint64_t& id = modules.mapping_ids[range.module_index];
    if (id == 0) id = AddMapping(snapshot.modules(range.module_index));
    return id;
  }

  // The module's executable segments as one range: from the lowest start to
  // the highest end, mapped from the lowest segment's file offset (modules
  // have one executable segment in practice).
  uint64_t AddMapping(const v1::Module& module) {
    uint64_t start = std::numeric_limits<uint64_t>::max();
    uint64_t limit = 0;
    uint64_t file_offset = 0;
    for (const v1::Segment& segment : module.executable_segments()) {
      if (segment.end() <= segment.start()) continue;
      if (segment.start() < start) {
        start = segment.start();
        file_offset = segment.file_offset();
      }
      limit = std::max(limit, segment.end());
    }
    const std::string build_id = absl::BytesToHexString(module.build_id());
    MappingKey key{module.path(), build_id, start, limit, file_offset};
    auto [it, inserted] = mappings_.try_emplace(std::move(key), profile_.mapping_size() + 1);
    if (!inserted) return it->second;
    pprof::Mapping* mapping = profile_.add_mapping();
    mapping->set_id(it->second);
    mapping->set_memory_start(start);
    mapping->set_memory_limit(limit);
    mapping->set_file_offset(file_offset);
    mapping->set_filename(Intern(module.path()));
    mapping->set_build_id(Intern(build_id));
    return it->second;
  }

  uint64_t FunctionId(const std::string& name, const std::string& file) {
    auto [it, inserted] =
        functions_.try_emplace(std::make_pair(name, file), profile_.function_size() + 1);
    if (!inserted) return it->second;
    pprof::Function* function = profile_.add_function();
    function->set_id(it->second);
    function->set_name(Intern(name));
    function->set_system_name(function->name());  // only the demangled name is known
    function->set_filename(Intern(file));
    return it->second;
  }

  Symbolizer& symbolizer_;
  pprof::Profile profile_;
  absl::flat_hash_map<std::string, int64_t> strings_;
  absl::flat_hash_map<const v1::Snapshot*, SnapshotModules> modules_;
  absl::flat_hash_map<MappingKey, uint64_t> mappings_;
  absl::flat_hash_map<LocationKey, uint64_t> locations_;
  absl::flat_hash_map<std::pair<std::string, std::string>, uint64_t> functions_;
};

absl::Status CheckSpec(const ProfileSpec& spec) {
  if (spec.sample_types.empty()) {
    return absl::InvalidArgumentError("pprof: a profile needs at least one sample type");
  }
  if (spec.default_sample_type < 0 ||
      spec.default_sample_type >= static_cast<int>(spec.sample_types.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("pprof: default_sample_type ", spec.default_sample_type,
                     " is not an index into the ", spec.sample_types.size(), " sample types"));
  }
  for (size_t i = 0; i < spec.samples.size(); ++i) {
    const ProfileSample& sample = spec.samples[i];
    if (sample.snapshot == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("pprof: sample ", i, " has no snapshot"));
    }
    if (sample.values.size() != spec.sample_types.size()) {
      return absl::InvalidArgumentError(absl::StrCat("pprof: sample ", i, " has ",
                                                     sample.values.size(), " values for ",
                                                     spec.sample_types.size(), " sample types"));
    }
  }
  return absl::OkStatus();
}

// gzip (RFC 1952) of `data`, at zlib's default level.
absl::StatusOr<std::string> Gzip(const std::string& data) {
  z_stream stream;
  std::memset(&stream, 0, sizeof(stream));
  // 15 + 16: the largest window, with a gzip header and trailer.
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return absl::InternalError("pprof: zlib deflateInit2 failed");
  }
  std::string out;
  out.resize(
      std::max<size_t>(deflateBound(&stream, std::min<uLong>(data.size(), 1u << 30)), 1u << 16));
  size_t in_offset = 0;
  size_t out_used = 0;
  int result = Z_OK;
  while (result != Z_STREAM_END) {
    // zlib counts in uInt: feed and drain at most 1 GiB at a time.
    const size_t in_chunk = std::min<size_t>(data.size() - in_offset, 1u << 30);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + in_offset));
    stream.avail_in = static_cast<uInt>(in_chunk);
    const bool last = in_offset + in_chunk == data.size();
    if (out.size() - out_used < (1u << 16)) out.resize(out.size() * 2);
    const size_t out_chunk = std::min<size_t>(out.size() - out_used, 1u << 30);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + out_used);
    stream.avail_out = static_cast<uInt>(out_chunk);
    result = deflate(&stream, last ? Z_FINISH : Z_NO_FLUSH);
    if (result == Z_STREAM_ERROR) {
      deflateEnd(&stream);
      return absl::InternalError("pprof: zlib deflate failed");
    }
    in_offset += in_chunk - stream.avail_in;
    out_used += out_chunk - stream.avail_out;
  }
  deflateEnd(&stream);
  out.resize(out_used);
  return out;
}

absl::Status WriteError(const std::string& path, absl::string_view what, int error) {
  return absl::InternalError(absl::StrCat(path, ": cannot ", what, ": ", std::strerror(error)));
}

// Writes `bytes` to a temporary file beside `path`, then renames it over
// `path`: a reader never sees a half-written profile.
absl::Status WriteAtomically(const std::string& path, const std::string& bytes) {
  std::string temp = absl::StrCat(path, ".tmp.XXXXXX");
  const int fd = mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return WriteError(path, "create a temporary file", errno);
  // mkostemp creates 0600; a profile is no secret (and umask cannot be read
  // without changing it for every thread).
  fchmod(fd, 0644);
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      close(fd);
      unlink(temp.c_str());
      return WriteError(path, "write", error);
    }
    written += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    const int error = errno;
    unlink(temp.c_str());
    return WriteError(path, "write", error);
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    unlink(temp.c_str());
    return WriteError(path, "rename the temporary file into place", error);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> EncodePprof(const ProfileSpec& spec, Symbolizer& symbolizer) {
  if (absl::Status status = CheckSpec(spec); !status.ok()) return status;
  ProfileBuilder builder(symbolizer);
  pprof::Profile& profile = builder.profile();

  for (const auto& [type, unit] : spec.sample_types) {
    pprof::ValueType* value_type = profile.add_sample_type();
    value_type->set_type(builder.Intern(type));
    value_type->set_unit(builder.Intern(unit));
  }
  profile.set_default_sample_type(profile.sample_type(spec.default_sample_type).type());

  for (const ProfileSample& in : spec.samples) builder.AddExecutableMapping(*in.snapshot);
  for (const ProfileSample& in : spec.samples) {
    pprof::Sample* sample = profile.add_sample();
    for (const uint64_t address : in.stack) {
      sample->add_location_id(builder.LocationId(*in.snapshot, address));
    }
    for (const int64_t value : in.values) sample->add_value(value);
    for (const auto& [key, value] : in.labels) {
      pprof::Label* label = sample->add_label();
      label->set_key(builder.Intern(key));
      label->set_str(builder.Intern(value));
    }
  }
  builder.FinishMappings();

  profile.set_time_nanos(spec.time_nanos);
  profile.set_duration_nanos(spec.duration_nanos);
  for (const std::string& comment : spec.comments) profile.add_comment(builder.Intern(comment));
  if (!spec.drop_frames.empty()) profile.set_drop_frames(builder.Intern(spec.drop_frames));

  std::string bytes;
  if (!profile.SerializeToString(&bytes)) {
    return absl::InternalError("pprof: the profile could not be serialized");
  }
  return bytes;
}

absl::Status WritePprofFile(const ProfileSpec& spec, Symbolizer& symbolizer,
                            const std::string& path) {
  absl::StatusOr<std::string> bytes = EncodePprof(spec, symbolizer);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<std::string> compressed = Gzip(*bytes);
  if (!compressed.ok()) return compressed.status();
  return WriteAtomically(path, *compressed);
}

}  // namespace retain::tool
