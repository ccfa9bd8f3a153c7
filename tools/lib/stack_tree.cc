// stack_tree: see stack_tree.h.
#include "tools/lib/stack_tree.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/lib/dump_format.h"

namespace retain::tool {

int32_t StackTreeBuilder::Child(int32_t parent, const std::string& name) {
  auto [name_it, new_name] = name_ids_.emplace(name, static_cast<uint32_t>(names_.size()));
  if (new_name) names_.push_back(name);
  const uint64_t key = (static_cast<uint64_t>(parent) << 32) | name_it->second;
  auto [child_it, new_child] = child_of_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (new_child) {
    Node node;
    node.parent = parent;
    node.name = name_it->second;
    nodes_.push_back(std::move(node));
    nodes_[static_cast<size_t>(parent)].children.push_back(child_it->second);
  }
  return child_it->second;
}

void StackTreeBuilder::Add(const std::string& domain,
                           const std::vector<std::string>& frames_leaf_first,
                           const ByteMeasures& bytes, int64_t count) {
  if (bytes.allocated == 0 && bytes.resident == 0 && bytes.swapped == 0 && count == 0) return;
  auto add = [&](int32_t node) {
    nodes_[static_cast<size_t>(node)].by += bytes;
    nodes_[static_cast<size_t>(node)].count += count;
  };
  add(0);
  int32_t node = Child(0, domain);
  add(node);
  if (frames_leaf_first.empty()) {
    add(Child(node, kStackTreeNoStack));
    return;
  }
  for (auto it = frames_leaf_first.rbegin(); it != frames_leaf_first.rend(); ++it) {
    node = Child(node, *it);
    add(node);
  }
}

StackTree StackTreeBuilder::Build(size_t node_limit) const {
  StackTree tree;
  tree.measure = measure_;
  tree.node_limit = std::max<size_t>(node_limit, 2);
  const size_t n = nodes_.size();
  std::vector<char> kept(n, 0);
  kept[0] = 1;
  if (n <= tree.node_limit) {
    std::fill(kept.begin(), kept.end(), 1);
  } else {
    // A node's weight: its larger share of the root, allocated or resident.
    const ByteMeasures& root = nodes_[0].by;
    const double root_allocated = std::abs(static_cast<double>(root.allocated));
    const double root_resident = std::abs(static_cast<double>(root.resident + root.swapped));
    auto share = [](int64_t part, double whole) {
      const double p = std::abs(static_cast<double>(part));
      if (whole == 0) return p == 0 ? 0.0 : 1.0;
      return p / whole;
    };
    auto weight = [&](int32_t i) {
      const ByteMeasures& by = nodes_[static_cast<size_t>(i)].by;
      return std::max(share(by.allocated, root_allocated),
                      share(by.resident + by.swapped, root_resident));
    };
    // Largest first; ties by index, so the tree is the same run after run.
    using Candidate = std::pair<double, int32_t>;
    auto lighter = [](const Candidate& a, const Candidate& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(lighter)> candidates(lighter);
    // Children of a kept node not kept (yet): while any is left, the node
    // needs an "(other)" child.
    std::vector<int32_t> left_out(n, 0);
    auto open = [&](int32_t i) {
      const Node& node = nodes_[static_cast<size_t>(i)];
      left_out[static_cast<size_t>(i)] = static_cast<int32_t>(node.children.size());
      for (int32_t child : node.children) candidates.emplace(weight(child), child);
    };
    size_t count = nodes_[0].children.empty() ? 1 : 2;
    open(0);
    const double limit = static_cast<double>(tree.node_limit);
    while (!candidates.empty()) {
      const auto [w, c] = candidates.top();
      candidates.pop();
      if (w * limit < 1) break;  // too small to draw, and so is every one after it
      const Node& node = nodes_[static_cast<size_t>(c)];
      const size_t parent = static_cast<size_t>(node.parent);
      // Keeping it adds its node and, if it has children, its own
      // "(other)"; it removes its parent's when it was the last left out.
      const size_t added = 1 + (node.children.empty() ? 0 : 1);
      const size_t removed = left_out[parent] == 1 ? 1 : 0;
      if (count + added - removed > tree.node_limit) continue;
      count = count + added - removed;
      kept[static_cast<size_t>(c)] = 1;
      --left_out[parent];
      open(c);
    }
  }

  // Depth first, parents before children.
  struct Item {
    int32_t node = 0;  // the trie node; for an "(other)", its parent's
    int64_t parent = -1;
    bool other = false;
    ByteMeasures by;  // an "(other)"'s sums
    int64_t count = 0;
  };
  auto in_measure = [&](const ByteMeasures& by) { return by.In(measure_); };
  std::vector<Item> stack = {Item{}};
  while (!stack.empty()) {
    Item item = stack.back();
    stack.pop_back();
    StackTreeNode& out = tree.nodes.emplace_back();
    out.id = static_cast<int64_t>(tree.nodes.size() - 1);
    out.parent = item.parent;
    if (item.other) {
      out.name = kStackTreeOther;
      out.by = item.by;
      out.count = item.count;
      out.bytes = in_measure(item.by);
      tree.pruned_bytes += out.bytes;
      continue;
    }
    const Node& node = nodes_[static_cast<size_t>(item.node)];
    out.name = item.node == 0 ? kStackTreeRoot : names_[node.name];
    out.by = node.by;
    out.count = node.count;
    out.bytes = in_measure(node.by);
    std::vector<int32_t> children;
    Item other{item.node, out.id, true, {}, 0};
    bool any_left_out = false;
    for (int32_t child : node.children) {
      const Node& c = nodes_[static_cast<size_t>(child)];
      if (kept[static_cast<size_t>(child)]) {
        children.push_back(child);
      } else {
        any_left_out = true;
        other.by += c.by;
        other.count += c.count;
      }
    }
    std::sort(children.begin(), children.end(), [&](int32_t a, int32_t b) {
      const Node& x = nodes_[static_cast<size_t>(a)];
      const Node& y = nodes_[static_cast<size_t>(b)];
      const int64_t xb = in_measure(x.by), yb = in_measure(y.by);
      if (xb != yb) return xb > yb;
      return names_[x.name] < names_[y.name];
    });
    // Pushed in reverse: the "(other)" comes out last.
    if (any_left_out) stack.push_back(other);
    for (auto it = children.rbegin(); it != children.rend(); ++it) {
      stack.push_back(Item{*it, out.id, false, {}, 0});
    }
  }
  return tree;
}

StackTree DiffStackTree(const DiffResult& diff, OwnerResolver& owners, size_t node_limit) {
  StackTreeBuilder builder(diff.measure.used);
  auto zero = [](const ByteMeasures& by, int64_t count) {
    return by.allocated == 0 && by.resident == 0 && by.swapped == 0 && count == 0;
  };
  if (diff.mode == DiffMode::kAggregate) {
    // The shares of an aggregate diff keep only owners that grew in the
    // measure; the rows keep every owner's figures in each.
    for (const DiffRow& row : diff.rows) {
      if (zero(row.retained, row.retained_count)) continue;
      if (row.example_stack_id == 0) {
        builder.Add(row.owner.domain, row.owner.frames, row.retained, row.retained_count);
        continue;
      }
      // Resolve's reference lives until the next Resolve: used at once.
      const Owner& example = owners.Resolve(*diff.after, row.example_stack_id, row.example_kind, 0,
                                            row.example_device);
      builder.Add(example.domain, example.frames, row.retained, row.retained_count);
    }
  } else {
    for (const StackShare& share : diff.retained_stacks) {
      if (zero(share.by, share.count)) continue;
      const Owner& owner =
          owners.Resolve(*diff.after, share.stack_id, share.kind, share.tag_id, share.device);
      builder.Add(owner.domain, owner.frames, share.by, share.count);
    }
  }
  return builder.Build(node_limit);
}

std::string StackTreeJson(const StackTree& tree) {
  std::string out = absl::StrCat("{\"measure\":", JsonString(MeasureName(tree.measure)),
                                 ",\"node_limit\":", tree.node_limit,
                                 ",\"pruned_bytes\":", tree.pruned_bytes, ",\"nodes\":[");
  for (const StackTreeNode& node : tree.nodes) {
    if (node.id != 0) out += ',';
    absl::StrAppend(&out, "{\"id\":", node.id, ",\"parent\":", node.parent,
                    ",\"name\":", JsonString(node.name), ",\"bytes\":", node.bytes,
                    ",\"allocated_bytes\":", node.by.allocated,
                    ",\"resident_bytes\":", node.by.resident,
                    ",\"swapped_bytes\":", node.by.swapped, ",\"count\":", node.count, "}");
  }
  out += "]}";
  return out;
}

}  // namespace retain::tool
