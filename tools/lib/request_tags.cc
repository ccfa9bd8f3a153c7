// request_tags: see request_tags.h.
#include "tools/lib/request_tags.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/lib/dump_format.h"

namespace retain::tool {

void RequestTagCollector::Add(const v1::Snapshot& snapshot, size_t column) {
  const uint64_t sequence = snapshot.header().sequence();
  for (const v1::Tag& tag : snapshot.tags()) {
    if (tag.id() < dropped_below_) continue;
    auto [it, inserted] = seen_.try_emplace(tag.id());
    Seen& seen = it->second;
    if (inserted || sequence > seen.last_sequence) {
      seen.last_sequence = sequence;
      seen.tag.tag_id = tag.id();
      seen.tag.request_id = tag.request_id();
      seen.tag.method = tag.method();
      seen.tag.path = tag.path();
      seen.tag.aborted = tag.aborted();
      seen.tag.allocated_bytes = tag.bytes_allocated();
      seen.tag.live_bytes = tag.live_bytes();
      seen.tag.snapshot = column;
    }
    if (tag.end_time_us() != 0 && (!seen.ended || sequence < seen.ended_sequence)) {
      seen.ended = true;
      seen.ended_sequence = sequence;
      seen.ended_column = column;
      seen.end_time_us = tag.end_time_us();
    }
  }
  Prune();
}

void RequestTagCollector::Prune() {
  if (seen_.size() <= 4 * max_tags_) return;
  // Keep the newest 2x the bound, by id (the order requests opened).
  std::vector<uint32_t> ids;
  ids.reserve(seen_.size());
  for (const auto& [id, seen] : seen_) ids.push_back(id);
  const size_t drop = ids.size() - 2 * max_tags_;
  std::nth_element(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(drop), ids.end());
  dropped_below_ = ids[drop];
  for (size_t i = 0; i < drop; ++i) seen_.erase(ids[i]);
  truncated_ = true;
}

RequestTags RequestTagCollector::Finish(const std::vector<size_t>& order,
                                        const std::vector<uint64_t>& requests_closed) const {
  std::vector<size_t> position(order.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = k;
  auto by_end = [](const Seen* a, const Seen* b) {
    return std::tie(a->end_time_us, a->tag.tag_id) < std::tie(b->end_time_us, b->tag.tag_id);
  };

  // The ended ones, grouped by the first snapshot that shows them ended.
  std::map<size_t, std::vector<const Seen*>> groups;  // by column
  std::vector<const Seen*> open;
  for (const auto& [id, seen] : seen_) {
    if (seen.ended) {
      groups[seen.ended_column].push_back(&seen);
    } else {
      open.push_back(&seen);
    }
  }
  bool anchored = true;  // every group's snapshot counted its requests
  for (const auto& [column, group] : groups) {
    if (column >= requests_closed.size() || requests_closed[column] < group.size()) {
      anchored = false;
    }
  }
  std::vector<RequestTag> ended;
  if (anchored) {
    for (auto& [column, group] : groups) {
      std::vector<const Seen*> sorted = group;
      std::sort(sorted.begin(), sorted.end(), by_end);
      const int64_t closed = static_cast<int64_t>(requests_closed[column]);
      const int64_t n = static_cast<int64_t>(sorted.size());
      for (int64_t r = 0; r < n; ++r) {
        RequestTag& tag = ended.emplace_back(sorted[static_cast<size_t>(r)]->tag);
        tag.end_ordinal = std::max<int64_t>(1, closed - (n - 1 - r));
      }
    }
  } else {
    std::vector<const Seen*> all;
    for (const auto& [column, group] : groups) all.insert(all.end(), group.begin(), group.end());
    std::sort(all.begin(), all.end(), [&](const Seen* a, const Seen* b) {
      const size_t pa = position[a->ended_column], pb = position[b->ended_column];
      if (pa != pb) return pa < pb;
      return by_end(a, b);
    });
    for (size_t r = 0; r < all.size(); ++r) {
      ended.emplace_back(all[r]->tag).end_ordinal = static_cast<int64_t>(r + 1);
    }
  }
  std::sort(ended.begin(), ended.end(), [](const RequestTag& a, const RequestTag& b) {
    return std::tie(a.end_ordinal, a.tag_id) < std::tie(b.end_ordinal, b.tag_id);
  });
  std::sort(open.begin(), open.end(),
            [](const Seen* a, const Seen* b) { return a->tag.tag_id < b->tag.tag_id; });

  RequestTags result;
  result.truncated = truncated_;
  result.tags = std::move(ended);
  for (const Seen* seen : open) result.tags.push_back(seen->tag);
  for (RequestTag& tag : result.tags) {
    tag.snapshot = tag.snapshot < position.size() ? position[tag.snapshot] : 0;
  }
  if (result.tags.size() > max_tags_) {
    result.tags.erase(result.tags.begin(), result.tags.end() - static_cast<ptrdiff_t>(max_tags_));
    result.truncated = true;
  }
  return result;
}

std::string RequestTagsJson(const RequestTags& tags) {
  std::string out = "\"request_tags\":[";
  for (size_t i = 0; i < tags.tags.size(); ++i) {
    const RequestTag& tag = tags.tags[i];
    absl::StrAppend(
        &out, i == 0 ? "" : ",", "{\"tag_id\":", tag.tag_id,
        ",\"request_id\":", JsonString(tag.request_id), ",\"method\":", JsonString(tag.method),
        ",\"path\":", JsonString(tag.path),
        ",\"end_ordinal\":", tag.end_ordinal < 0 ? "null" : absl::StrCat(tag.end_ordinal),
        ",\"aborted\":", tag.aborted ? "true" : "false",
        ",\"allocated_bytes\":", tag.allocated_bytes, ",\"live_bytes\":", tag.live_bytes,
        ",\"snapshot\":", tag.snapshot, "}");
  }
  absl::StrAppend(&out, "],\"request_tags_truncated\":", tags.truncated ? "true" : "false");
  return out;
}

}  // namespace retain::tool
