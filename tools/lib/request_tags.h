// request_tags: the requests a trend's snapshots report (Snapshot.tags),
// one entry per request, in the order they ended, each placed on the
// trend's x axis: the number of requests that had ended when it ended.
//
// A snapshot shows each tag that is open, still referenced by a live
// allocation, or ended and not shown by an earlier snapshot, so over a
// series every request appears at least once (unless more than 1024 ended
// between two snapshots: ShimHealth.tags_released_unreported). A request's
// end ordinal is read at the first snapshot (by sequence) that shows it
// ended: that snapshot's Header.requests_closed, less the requests it shows
// ending after it (they all first appear ended there too). Requests that
// end while a snapshot is being captured can shift an ordinal by one (the
// counters and the tags are read one after the other). Snapshots of shims
// that did not count requests (requests_closed 0) get ordinals by rank,
// in end order over the series.
//
// Its figures (bytes allocated while open, bytes still live) are those of
// the last snapshot that shows it; bytes are allocated bytes, as the shim
// counts them per tag.
//
// Memory: one entry per distinct request seen; past 4x the output's bound
// the oldest (by tag id, the order requests opened) are dropped, and the
// result says it was truncated.
//
// Thread-compatible.
#ifndef RETAIN_TOOLS_LIB_REQUEST_TAGS_H_
#define RETAIN_TOOLS_LIB_REQUEST_TAGS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "retain.pb.h"

namespace retain::tool {

// The newest requests kept ("request_tags" in the trend's JSON).
inline constexpr size_t kMaxRequestTags = 10000;

struct RequestTag {
  uint32_t tag_id = 0;
  std::string request_id;  // X-Request-Id or the API's id; "" if none
  std::string method;
  std::string path;
  int64_t end_ordinal = -1;  // -1: still open at the last snapshot that shows it
  bool aborted = false;
  uint64_t allocated_bytes = 0;  // allocated while it was open
  uint64_t live_bytes = 0;       // of those, live at `snapshot`
  size_t snapshot = 0;           // the last snapshot showing it, in sequence order
};

struct RequestTags {
  std::vector<RequestTag> tags;  // ended ones by end ordinal, then open ones by id
  bool truncated = false;        // older requests were left out (kMaxRequestTags)
};

class RequestTagCollector {
 public:
  explicit RequestTagCollector(size_t max_tags = kMaxRequestTags) : max_tags_(max_tags) {}

  // The tags of `snapshot`, the `column`-th added (any order of sequences).
  void Add(const v1::Snapshot& snapshot, size_t column);

  // `order[k]`: the column of the k-th snapshot by sequence;
  // `requests_closed[c]`: Header.requests_closed of column c.
  RequestTags Finish(const std::vector<size_t>& order,
                     const std::vector<uint64_t>& requests_closed) const;

 private:
  struct Seen {
    RequestTag tag;               // tag.snapshot holds the column until Finish
    uint64_t last_sequence = 0;   // of the snapshot its figures come from
    uint64_t ended_sequence = 0;  // the first snapshot showing it ended
    size_t ended_column = 0;      //   (valid when `ended`)
    uint64_t end_time_us = 0;
    bool ended = false;
  };
  void Prune();

  size_t max_tags_;
  absl::flat_hash_map<uint32_t, Seen> seen_;
  uint32_t dropped_below_ = 0;  // ids under this were dropped (Prune)
  bool truncated_ = false;
};

// The "request_tags" array and "request_tags_truncated" of the trend's JSON,
// as `"request_tags":[...],"request_tags_truncated":bool` (no braces).
std::string RequestTagsJson(const RequestTags& tags);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_REQUEST_TAGS_H_
