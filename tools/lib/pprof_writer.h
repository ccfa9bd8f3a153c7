// pprof_writer: encodes samples with their stacks as a pprof profile
// (profile.proto, the format pprof, Pyroscope and Parca read), gzip'd.
//
// Each distinct (module table, address) becomes one Location carrying its
// symbolized lines (inlined frames included, innermost first), each module a
// Mapping with its path and build-id, so pprof can also re-symbolize itself.
// Return addresses are written minus one (the call instruction), as pprof
// expects. String table entry 0 is "", ids start at 1.
#ifndef RETAIN_TOOLS_LIB_PPROF_WRITER_H_
#define RETAIN_TOOLS_LIB_PPROF_WRITER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "retain.pb.h"
#include "tools/lib/symbolizer.h"

namespace retain::tool {

struct ProfileSample {
  // The snapshot whose module table `stack` belongs to (samples of one
  // profile may come from different snapshots, e.g. two builds).
  const v1::Snapshot* snapshot = nullptr;
  std::vector<uint64_t> stack;  // Stack.frames: leaf first
  std::vector<int64_t> values;  // one per ProfileSpec::sample_types
  // String labels (e.g. {"kind", "heap"}, {"request", "req-17"}).
  std::vector<std::pair<std::string, std::string>> labels;
};

struct ProfileSpec {
  // {type, unit}, e.g. {"retained_space", "bytes"}, {"retained_objects", "count"}.
  std::vector<std::pair<std::string, std::string>> sample_types;
  int default_sample_type = 0;  // index into sample_types
  std::vector<ProfileSample> samples;
  int64_t time_nanos = 0;
  int64_t duration_nanos = 0;
  std::vector<std::string> comments;
  // Regex of frames pprof should hide (allocator plumbing).
  std::string drop_frames;
};

// The serialized (uncompressed) profile.proto message.
absl::StatusOr<std::string> EncodePprof(const ProfileSpec& spec, Symbolizer& symbolizer);

// EncodePprof, gzip'd, written to `path` (via a temporary file renamed into
// place).
absl::Status WritePprofFile(const ProfileSpec& spec, Symbolizer& symbolizer,
                            const std::string& path);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_PPROF_WRITER_H_
