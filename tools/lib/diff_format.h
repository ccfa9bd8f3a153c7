// diff_format: retain-diff's outputs. Text (an aligned table with human
// units), JSON (the schema in docs/retain-diff.md, for scripts and
// retain-bisect), folded stacks (flamegraph.pl, speedscope, inferno) and
// the ProfileSpec the pprof writer turns into a profile.
#ifndef RETAIN_TOOLS_LIB_DIFF_FORMAT_H_
#define RETAIN_TOOLS_LIB_DIFF_FORMAT_H_

#include <string>

#include "tools/lib/byte_size.h"  // SignedBytes, for the callers
#include "tools/lib/diff.h"
#include "tools/lib/owner.h"
#include "tools/lib/pprof_writer.h"
#include "tools/lib/stack_tree.h"
#include "tools/lib/trend.h"

namespace retain::tool {

struct FormatOptions {
  int top = 20;  // rows shown (0: all)
  GroupBy by = GroupBy::kSite;
  std::vector<std::string> warnings;  // symbolizer warnings, shown once
  // DegradedWarning() of the snapshots; shown first, as a WARNING line in
  // the table, as the first of "warnings" in JSON (with "degraded": true).
  std::string degraded_warning;
  // HeapUnrecordedWarning() of the snapshots: a WARNING line after it, and
  // in JSON's "warnings" after it.
  std::string heap_warning;
  // The diff's stack tree (DiffStackTree): "stacks" in JSON; null when
  // not given.
  const StackTree* stacks = nullptr;
};

std::string FormatDiffText(const DiffResult& diff, const FormatOptions& options);
std::string FormatDiffJson(const DiffResult& diff, const FormatOptions& options);
std::string FormatTrendText(const TrendResult& trend, const FormatOptions& options);
std::string FormatTrendJson(const TrendResult& trend, const FormatOptions& options);

// One line per (owner stack) with retained bytes in the measure:
// "root;...;leaf BYTES", frames outermost first. Lines sum to the total
// retained bytes.
std::string FormatDiffFolded(const DiffResult& diff, OwnerResolver& owners);

// The retained (or, for one snapshot, live) allocations as pprof samples:
// retained_space/retained_objects (inuse_space/inuse_objects for one
// snapshot): allocated bytes and counts; with residency (the snapshots have
// it) a third, retained_resident_space (inuse_resident_space): resident +
// swapped bytes, the default under the resident measure. Labels kind and
// request.
ProfileSpec DiffProfile(const DiffResult& diff);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_DIFF_FORMAT_H_
