// stack_tree: the retained (diff) or live (one snapshot) bytes of a diff as
// a tree of stacks, for an icicle or flame graph: the root "all", below it
// one node per memory domain ("host", "device:cuda:0"), then the frames of
// each stack, outermost caller first, as --folded prints them (where
// --folded writes a device's domain as a root frame "[device:cuda:0]" and
// the host's not at all, the tree names every domain).
//
// Every node carries its bytes and those of all below it, in the diff's
// measure and in each of allocated, resident and swapped bytes, and its
// allocation count; a node's own bytes (stacks that end at it) are its
// bytes less its children's. So the root's figures are the diff's retained
// totals, host and devices together, in every measure, whatever is pruned.
//
// The tree is bounded: at most `node_limit` nodes whatever the snapshot
// (1M allocations, 100k distinct stacks). When the whole tree does not fit,
// the nodes that weigh most are kept, largest first, and the children of a
// kept node that were left out are merged into one child named "(other)"
// holding their sums: the sums stay exact, only the detail goes. A node's
// weight is the larger of its shares of the root in allocated and in
// resident (+ swapped) bytes, so a page that switches measure still finds
// the big stacks of either; a node under 1/node_limit of the root in both
// is too small to draw and always merged.
//
// Thread-compatible: a builder per thread; BuildStackTree and
// DiffStackTree are pure apart from the OwnerResolver's cache.
#ifndef RETAIN_TOOLS_LIB_STACK_TREE_H_
#define RETAIN_TOOLS_LIB_STACK_TREE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tools/lib/diff.h"
#include "tools/lib/measure.h"
#include "tools/lib/owner.h"

namespace retain::tool {

inline constexpr size_t kDefaultStackTreeNodes = 5000;
inline constexpr char kStackTreeRoot[] = "all";
inline constexpr char kStackTreeOther[] = "(other)";
inline constexpr char kStackTreeNoStack[] = "(no stack)";

struct StackTreeNode {
  int64_t id = 0;       // its index in StackTree::nodes
  int64_t parent = -1;  // -1 for the root; parents come before children
  std::string name;     // "all", a domain, or a frame
  int64_t bytes = 0;    // in the measure: this node and all below it
  ByteMeasures by;      // the same in every measure
  int64_t count = 0;    // allocations
};

struct StackTree {
  Measure measure = Measure::kResident;
  size_t node_limit = kDefaultStackTreeNodes;
  // Bytes (in the measure) of the "(other)" nodes: what was merged away.
  int64_t pruned_bytes = 0;
  // Depth first, children by bytes (descending, then name), an "(other)"
  // child last; nodes[0] is the root.
  std::vector<StackTreeNode> nodes;
};

// Collects stacks, then builds the bounded tree.
class StackTreeBuilder {
 public:
  explicit StackTreeBuilder(Measure measure) : measure_(measure) { nodes_.emplace_back(); }

  // Adds `bytes` and `count` under `domain`, then `frames_leaf_first` from
  // the last (the outermost caller) to the first; no frames: one frame
  // "(no stack)". Nothing is added when every figure is 0.
  void Add(const std::string& domain, const std::vector<std::string>& frames_leaf_first,
           const ByteMeasures& bytes, int64_t count);

  // The tree, pruned to `node_limit` nodes (at least 2: the root and an
  // "(other)").
  StackTree Build(size_t node_limit = kDefaultStackTreeNodes) const;

  // Nodes collected so far, the root included (before pruning).
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    int32_t parent = -1;
    uint32_t name = 0;  // in names_
    ByteMeasures by;
    int64_t count = 0;
    std::vector<int32_t> children;
  };
  int32_t Child(int32_t parent, const std::string& name);

  Measure measure_;
  std::vector<Node> nodes_;
  std::vector<std::string> names_;
  absl::flat_hash_map<std::string, uint32_t> name_ids_;
  absl::flat_hash_map<uint64_t, int32_t> child_of_;  // (parent, name) -> node
};

// The tree of a diff: its retained stack shares (DiffResult::retained_stacks;
// in live and exact mode every share, whatever the measure, so the root
// equals the totals in each), each under the frames of its owner
// (`owners` resolves them from `after`, as --folded does); in aggregate
// mode each row's retained bytes under its example stack (or, for an owner
// with no allocation in `after`, the owner's own frames).
StackTree DiffStackTree(const DiffResult& diff, OwnerResolver& owners,
                        size_t node_limit = kDefaultStackTreeNodes);

// The "stacks" object of retain-diff's JSON (docs/retain-diff.md).
std::string StackTreeJson(const StackTree& tree);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_STACK_TREE_H_
