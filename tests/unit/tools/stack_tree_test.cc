// The stack tree of retain-diff's JSON ("stacks", tools/lib/stack_tree.h):
// stacks aggregated under their domain, outermost frame first; the root's
// figures are the diff's retained totals (host and devices) in every
// measure, in live, exact and aggregate mode; the domains and paths are
// those of --folded; pruning to the node limit keeps every sum exact and the
// limit holds on 100,000 distinct stacks.
#include "tools/lib/stack_tree.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "retain.pb.h"
#include "tools/lib/diff.h"
#include "tools/lib/diff_format.h"
#include "tools/lib/owner.h"
#include "tools/lib/symbolizer.h"

namespace retain::tool {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

ByteMeasures Bytes(int64_t allocated, int64_t resident, int64_t swapped = 0) {
  ByteMeasures by;
  by.allocated = allocated;
  by.resident = resident;
  by.swapped = swapped;
  return by;
}

bool Equal(const ByteMeasures& a, const ByteMeasures& b) {
  return a.allocated == b.allocated && a.resident == b.resident && a.swapped == b.swapped;
}

std::string Show(const ByteMeasures& by) {
  return absl::StrCat("{allocated ", by.allocated, ", resident ", by.resident, ", swapped ",
                      by.swapped, "}");
}

// "name bytes count" per node, indented by depth, for assertion messages
// and for comparing whole trees.
std::string Outline(const StackTree& tree) {
  std::vector<int> depth(tree.nodes.size(), 0);
  std::string out;
  for (const StackTreeNode& node : tree.nodes) {
    if (node.parent >= 0) depth[node.id] = depth[node.parent] + 1;
    absl::StrAppend(&out, std::string(2 * depth[node.id], ' '), node.name, " ", node.bytes, " ",
                    node.count, "\n");
  }
  return out;
}

// The checks every tree must pass: ids are indices, parents come first,
// every node with children holds exactly their sums when `leaves_only`
// (no stack ends at an inner node), the "(other)" nodes sum to pruned_bytes
// and the limit holds.
void CheckShape(const StackTree& tree, bool leaves_only) {
  ASSERT_FALSE(tree.nodes.empty());
  EXPECT_LE(tree.nodes.size(), tree.node_limit);
  EXPECT_EQ(tree.nodes[0].name, kStackTreeRoot);
  EXPECT_EQ(tree.nodes[0].parent, -1);
  std::vector<ByteMeasures> children_sum(tree.nodes.size());
  std::vector<int64_t> children_count(tree.nodes.size(), 0);
  std::vector<bool> has_children(tree.nodes.size(), false);
  int64_t other_bytes = 0;
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    const StackTreeNode& node = tree.nodes[i];
    ASSERT_EQ(node.id, static_cast<int64_t>(i));
    EXPECT_EQ(node.bytes, node.by.In(tree.measure)) << node.name;
    if (i == 0) continue;
    ASSERT_GE(node.parent, 0);
    ASSERT_LT(node.parent, node.id) << "parents come before children";
    children_sum[node.parent] += node.by;
    children_count[node.parent] += node.count;
    has_children[node.parent] = true;
    if (node.name == kStackTreeOther) other_bytes += node.bytes;
  }
  EXPECT_EQ(other_bytes, tree.pruned_bytes);
  if (!leaves_only) return;
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    if (!has_children[i]) continue;
    EXPECT_TRUE(Equal(tree.nodes[i].by, children_sum[i]))
        << tree.nodes[i].name << ": " << Show(tree.nodes[i].by) << " != children "
        << Show(children_sum[i]);
    EXPECT_EQ(tree.nodes[i].count, children_count[i]) << tree.nodes[i].name;
  }
}

TEST(StackTreeBuilderTest, StacksAggregateUnderTheirDomainOutermostFrameFirst) {
  StackTreeBuilder builder(Measure::kResident);
  builder.Add("host", {"Leaf", "Mid", "main"}, Bytes(100, 60, 4), 1);
  builder.Add("host", {"Other", "Mid", "main"}, Bytes(500, 500), 2);
  builder.Add("host", {"main"}, Bytes(7, 7), 1);  // ends at an inner node
  builder.Add("device:cuda:0", {"Kernel", "main"}, Bytes(64, 64), 1);
  builder.Add("host", {}, Bytes(3, 0), 1);
  builder.Add("host", {"Nothing"}, Bytes(0, 0), 0);  // adds nothing
  const StackTree tree = builder.Build();
  CheckShape(tree, /*leaves_only=*/false);
  EXPECT_EQ(tree.measure, Measure::kResident);
  EXPECT_EQ(tree.node_limit, kDefaultStackTreeNodes);
  EXPECT_EQ(tree.pruned_bytes, 0);
  // Children by bytes in the measure (resident + swapped), descending.
  EXPECT_EQ(Outline(tree),
            "all 635 6\n"
            "  host 571 5\n"
            "    main 571 4\n"
            "      Mid 564 3\n"
            "        Other 500 2\n"
            "        Leaf 64 1\n"
            "    (no stack) 0 1\n"
            "  device:cuda:0 64 1\n"
            "    main 64 1\n"
            "      Kernel 64 1\n");
  EXPECT_TRUE(Equal(tree.nodes[0].by, Bytes(674, 631, 4)));
  EXPECT_TRUE(Equal(tree.nodes[4].by, Bytes(500, 500)));
  EXPECT_EQ(tree.nodes[4].parent, 3);
  EXPECT_EQ(tree.nodes[3].parent, 2);
}

TEST(StackTreeBuilderTest, TheAllocatedMeasureOrdersAndCountsByAllocatedBytes) {
  StackTreeBuilder builder(Measure::kAllocated);
  builder.Add("host", {"Untouched", "main"}, Bytes(400 * kMiB, 40 * kMiB), 1);
  builder.Add("host", {"Cache", "main"}, Bytes(50 * kMiB, 50 * kMiB), 1);
  const StackTree tree = builder.Build();
  ASSERT_EQ(tree.nodes.size(), 5u);
  EXPECT_EQ(tree.nodes[0].bytes, 450 * kMiB);
  EXPECT_EQ(tree.nodes[3].name, "Untouched");
  EXPECT_EQ(tree.nodes[4].name, "Cache");
  EXPECT_EQ(StackTreeJson(tree).substr(0, 60),
            "{\"measure\":\"allocated\",\"node_limit\":5000,\"pruned_bytes\":0,\"n");
}

TEST(StackTreeBuilderTest, PruningMergesTheSmallIntoOtherAndKeepsTheSums) {
  StackTreeBuilder builder(Measure::kResident);
  builder.Add("host", {"Big", "main"}, Bytes(1000, 1000), 1);
  for (int i = 0; i < 20; ++i) {
    builder.Add("host", {absl::StrCat("Small", i), "main"}, Bytes(10, 10), 1);
  }
  // 1 root + host + main + Big + 20 smalls = 24 nodes; 6 fit: all, host,
  // main, Big, then the largest smalls... the limit leaves room for one
  // "(other)" under main.
  const StackTree tree = builder.Build(6);
  CheckShape(tree, /*leaves_only=*/true);
  ASSERT_LE(tree.nodes.size(), 6u);
  EXPECT_EQ(tree.nodes[0].bytes, 1200);
  EXPECT_EQ(tree.nodes[3].name, "Big");
  EXPECT_EQ(tree.nodes.back().name, kStackTreeOther);
  EXPECT_EQ(tree.nodes.back().parent, 2) << "main's other";
  EXPECT_EQ(tree.pruned_bytes, tree.nodes.back().bytes);
  EXPECT_EQ(tree.nodes.back().count + (static_cast<int64_t>(tree.nodes.size()) - 5), 20)
      << Outline(tree);
  // Limits below 2 are 2: the root and one "(other)".
  const StackTree two = builder.Build(0);
  EXPECT_EQ(two.node_limit, 2u);
  EXPECT_EQ(Outline(two), "all 1200 21\n  (other) 1200 21\n");
  EXPECT_EQ(two.pruned_bytes, 1200);
}

// 100,000 distinct stacks, 4 to 16 frames deep over 3,000 function names,
// sizes spread over six orders of magnitude, every stack ending in a leaf of
// its own (so every inner node holds exactly its children's sums), on the
// host and two devices.
TEST(StackTreeBuilderTest, TheLimitHoldsOnAHundredThousandStacksAndEverySumStaysExact) {
  std::mt19937_64 random(20261202);
  StackTreeBuilder builder(Measure::kResident);
  ByteMeasures total;
  int64_t count = 0;
  const std::vector<std::string> domains = {"host", "host", "host", "device:cuda:0",
                                            "device:cuda:1"};
  for (int s = 0; s < 100000; ++s) {
    std::vector<std::string> frames = {absl::StrCat("leaf#", s)};
    const int depth = 3 + static_cast<int>(random() % 13);
    for (int d = 0; d < depth; ++d) {
      // Callers near the root come from fewer names, as in real programs.
      const uint64_t names = d + 1 == depth ? 4 : 3000 / static_cast<uint64_t>(depth - d);
      frames.push_back(absl::StrCat("f", random() % names));
    }
    const int64_t allocated = int64_t{1} << (random() % 20);
    const int64_t resident = static_cast<int64_t>(random() % static_cast<uint64_t>(allocated + 1));
    const int64_t swapped = s % 7 == 0 ? allocated - resident : 0;
    const ByteMeasures by = Bytes(allocated, resident, swapped);
    const int64_t n = 1 + static_cast<int64_t>(random() % 5);
    // One big stack, 10% of everything: it must be kept by name.
    const ByteMeasures big = Bytes(int64_t{1} << 30, int64_t{1} << 30);
    builder.Add(domains[random() % domains.size()], frames, s == 4242 ? big : by, n);
    total += s == 4242 ? big : by;
    count += n;
  }
  EXPECT_GT(builder.size(), 200000u) << "the input is bigger than any limit below";
  for (size_t limit : {size_t{5000}, size_t{1000}, size_t{50}, size_t{3}}) {
    SCOPED_TRACE(absl::StrCat("node limit ", limit));
    const StackTree tree = builder.Build(limit);
    CheckShape(tree, /*leaves_only=*/true);
    EXPECT_TRUE(Equal(tree.nodes[0].by, total)) << Show(tree.nodes[0].by) << " " << Show(total);
    EXPECT_EQ(tree.nodes[0].count, count);
    EXPECT_GT(tree.pruned_bytes, 0);
    bool big_kept = false;
    for (const StackTreeNode& node : tree.nodes) {
      big_kept |= node.name == "leaf#4242";
      // A node left with no children is a real leaf or an "(other)".
      if (node.name == kStackTreeOther || node.id == 0) continue;
      // Kept nodes weigh at least 1/limit of the root in some measure.
      const double share = std::max(
          static_cast<double>(std::abs(node.by.allocated)) / static_cast<double>(total.allocated),
          static_cast<double>(std::abs(node.by.resident + node.by.swapped)) /
              static_cast<double>(total.resident + total.swapped));
      EXPECT_GE(share * static_cast<double>(limit), 1.0) << node.name;
    }
    if (limit >= 50) {
      EXPECT_TRUE(big_kept) << "the biggest stack is drawn";
    }
    if (limit == 5000) {
      EXPECT_GT(tree.nodes.size(), 1000u) << "the limit is used, not wasted";
    }
  }
}

// --- Trees of real diffs (ComputeDiff on snapshots built here) ---

struct Alloc {
  uint64_t address;
  int64_t size;
  int64_t resident;
  uint32_t stack;  // 1..4 (Stacks below)
  v1::Kind kind;
  uint32_t device;  // Device.id; 0: none
  uint64_t birth;
  int64_t swapped = 0;
};

// Stacks of unsymbolized addresses (no modules: frames read "0x4010a0"),
// leaf first, sharing callers.
void AddStacks(v1::Snapshot& snapshot) {
  const std::vector<std::vector<uint64_t>> stacks = {
      {0x401100, 0x402200, 0x403300},
      {0x401110, 0x402200, 0x403300},
      {0x404400, 0x403300},
      {0x405500, 0x406600, 0x403300},
  };
  for (size_t i = 0; i < stacks.size(); ++i) {
    v1::Stack* stack = snapshot.add_stacks();
    stack->set_id(static_cast<uint32_t>(i + 1));
    for (uint64_t frame : stacks[i]) stack->add_frames(frame);
  }
}

v1::Snapshot SnapshotOf(const std::vector<Alloc>& allocs, uint64_t sequence, uint64_t next_birth,
                        uint32_t pid = 7) {
  v1::Snapshot snapshot;
  v1::Header* header = snapshot.mutable_header();
  header->set_format_version(1);
  header->set_exe_path("/srv/server");
  header->set_pid(pid);
  header->set_sequence(sequence);
  header->set_next_birth_sequence(next_birth);
  header->set_time_unix_ns(sequence * 1000000000);
  header->set_residency_measured(true);
  snapshot.mutable_memory()->set_rss_anon(512 * kMiB);
  snapshot.mutable_memory()->set_vm_rss(512 * kMiB);
  v1::Device* device = snapshot.add_devices();
  device->set_id(1);
  device->set_api(v1::DEVICE_API_CUDA);
  device->set_index(0);
  device->set_name("NVIDIA H200");
  AddStacks(snapshot);
  v1::AllocationBlock* block = snapshot.add_allocations();
  std::map<int, v1::KindTotals> totals;
  uint64_t previous = 0;
  for (const Alloc& a : allocs) {
    block->add_address_delta(block->address_delta_size() == 0 ? a.address : a.address - previous);
    previous = a.address;
    block->add_size(a.size);
    block->add_kind(a.kind);
    block->add_stack_id(a.stack);
    block->add_birth_sequence(a.birth);
    block->add_birth_time_us(a.birth);
    block->add_thread_id(1);
    block->add_tag_id(0);
    block->add_device(a.device);
    block->add_resident_bytes(a.resident);
    block->add_swapped_bytes(a.swapped);
    v1::KindTotals& t = totals[a.kind];
    t.set_kind(a.kind);
    t.set_live_bytes(t.live_bytes() + a.size);
    t.set_live_count(t.live_count() + 1);
    t.set_resident_bytes(t.resident_bytes() + a.resident);
    t.set_swapped_bytes(t.swapped_bytes() + a.swapped);
  }
  for (const auto& [kind, t] : totals) *snapshot.add_totals() = t;
  return snapshot;
}

class DiffTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<OwnerResolver>> owners =
        OwnerResolver::Create(symbolizer_, OwnerOptions());
    ASSERT_TRUE(owners.ok()) << owners.status();
    owners_ = *std::move(owners);
  }

  DiffResult Diff(const v1::Snapshot* before, const v1::Snapshot& after,
                  Measure measure = Measure::kResident) {
    DiffOptions options;
    options.measure = measure;
    options.force = true;
    absl::StatusOr<DiffResult> diff = ComputeDiff(before, after, *owners_, options);
    EXPECT_TRUE(diff.ok()) << diff.status();
    return diff.ok() ? *std::move(diff) : DiffResult();
  }

  // The root is the retained total, host and devices, in every measure;
  // each domain's node is its domain's total.
  void ExpectTotals(const DiffResult& diff, const StackTree& tree) {
    ByteMeasures all = diff.total_retained;
    int64_t count = diff.total_retained_count;
    std::map<std::string, ByteMeasures> domains = {{"host", diff.total_retained}};
    for (const DomainTotal& device : diff.devices) {
      all += device.retained;
      count += device.retained_count;
      domains[device.domain] = device.retained;
    }
    EXPECT_TRUE(Equal(tree.nodes[0].by, all)) << Show(tree.nodes[0].by) << " " << Show(all);
    EXPECT_EQ(tree.nodes[0].count, count);
    for (const StackTreeNode& node : tree.nodes) {
      if (node.parent != 0 || node.name == kStackTreeOther) continue;
      ASSERT_TRUE(domains.count(node.name)) << node.name;
      EXPECT_TRUE(Equal(node.by, domains[node.name])) << node.name << " " << Show(node.by);
    }
  }

  // Each stack's own bytes in the tree (its bytes less its children's),
  // keyed as --folded writes the stack: "[domain];" before a device's
  // frames, ' ' as '_' and ';' as ','.
  std::map<std::string, int64_t> TreeAsFolded(const StackTree& tree) {
    std::vector<std::string> path(tree.nodes.size());
    std::vector<int64_t> own(tree.nodes.size(), 0);
    for (const StackTreeNode& node : tree.nodes) {
      own[node.id] += node.bytes;
      if (node.parent < 0) continue;
      own[node.parent] -= node.bytes;
      std::string name = absl::StrReplaceAll(node.name, {{";", ","}, {" ", "_"}});
      if (node.parent == 0) {
        path[node.id] = node.name == "host" ? "" : absl::StrCat("[", node.name, "]");
      } else {
        path[node.id] = path[node.parent].empty() ? name : path[node.parent] + ";" + name;
      }
    }
    std::map<std::string, int64_t> folded;
    for (const StackTreeNode& node : tree.nodes) {
      if (node.parent > 0 && own[node.id] != 0) folded[path[node.id]] += own[node.id];
    }
    return folded;
  }

  std::map<std::string, int64_t> Folded(const DiffResult& diff) {
    std::map<std::string, int64_t> folded;
    for (absl::string_view line :
         absl::StrSplit(FormatDiffFolded(diff, *owners_), '\n', absl::SkipEmpty())) {
      const size_t space = line.rfind(' ');
      folded[std::string(line.substr(0, space))] += std::stoll(std::string(line.substr(space + 1)));
    }
    return folded;
  }

  Symbolizer symbolizer_;
  std::unique_ptr<OwnerResolver> owners_;
};

const std::vector<Alloc> kBefore = {
    {0x10000, 4 * kMiB, 1 * kMiB, 1, v1::KIND_HEAP, 0, 1},
    {0x20000, 64 * kMiB, 64 * kMiB, 4, v1::KIND_CUDA_DEVICE, 1, 2},
};
// Born after `before` (birth >= 10): retained; 0x10000 grew by 2 MiB of
// touched pages (retained under the resident measure, with no count).
const std::vector<Alloc> kAfter = {
    {0x10000, 4 * kMiB, 3 * kMiB, 1, v1::KIND_HEAP, 0, 1},
    {0x20000, 64 * kMiB, 64 * kMiB, 4, v1::KIND_CUDA_DEVICE, 1, 2},
    {0x30000, 1 * kMiB, 1 * kMiB, 1, v1::KIND_HEAP, 0, 11},
    {0x40000, 2 * kMiB, 512 * 1024, 2, v1::KIND_HEAP, 0, 12, 256 * 1024},
    {0x50000, 8 * kMiB, 0, 3, v1::KIND_HEAP, 0, 13},  // never touched
    {0x60000, 16 * kMiB, 16 * kMiB, 4, v1::KIND_CUDA_DEVICE, 1, 14},
    {0x70000, 100, 100, 0, v1::KIND_HEAP, 0, 15},  // no stack
};

TEST_F(DiffTreeTest, LiveTreeIsEverythingLiveByDomainAndStack) {
  const v1::Snapshot after = SnapshotOf(kAfter, 2, 20);
  const DiffResult diff = Diff(nullptr, after);
  const StackTree tree = DiffStackTree(diff, *owners_);
  CheckShape(tree, /*leaves_only=*/false);
  ExpectTotals(diff, tree);
  EXPECT_EQ(tree.nodes[0].count, 7);
  EXPECT_EQ(tree.nodes[1].name, "device:cuda:0") << "80 MiB of device memory first\n"
                                                 << Outline(tree);
  EXPECT_EQ(tree.nodes[1].bytes, 80 * kMiB);
  // The never-touched 8 MiB is a leaf of 0 bytes in the measure, there to
  // be drawn when the page switches to allocated bytes.
  bool untouched = false;
  for (const StackTreeNode& node : tree.nodes) {
    untouched |= node.bytes == 0 && node.by.allocated == 8 * kMiB && node.count == 1;
  }
  EXPECT_TRUE(untouched) << Outline(tree);
  EXPECT_EQ(TreeAsFolded(tree), Folded(diff)) << Outline(tree);
}

TEST_F(DiffTreeTest, ExactTreeHoldsTheRetainedBytesInEveryMeasure) {
  const v1::Snapshot before = SnapshotOf(kBefore, 1, 10);
  const v1::Snapshot after = SnapshotOf(kAfter, 2, 20);
  for (Measure measure : {Measure::kResident, Measure::kAllocated}) {
    SCOPED_TRACE(MeasureName(measure));
    const DiffResult diff = Diff(&before, after, measure);
    ASSERT_EQ(diff.mode, DiffMode::kExact);
    const StackTree tree = DiffStackTree(diff, *owners_);
    CheckShape(tree, /*leaves_only=*/false);
    ExpectTotals(diff, tree);
    EXPECT_EQ(tree.measure, measure);
    EXPECT_EQ(TreeAsFolded(tree), Folded(diff)) << Outline(tree);
    // 1 + 2 + 8 MiB + 100 B allocated on the host, 16 MiB on the device.
    EXPECT_EQ(tree.nodes[0].by.allocated, 27 * kMiB + 100);
    if (measure == Measure::kResident) {
      // The grown pages of 0x10000 count: 2 MiB, with no allocation.
      EXPECT_EQ(tree.nodes[0].bytes, 2 * kMiB + 1 * kMiB + 768 * 1024 + 100 + 16 * kMiB);
      EXPECT_EQ(tree.nodes[0].count, 5);
    }
  }
}

TEST_F(DiffTreeTest, AggregateTreeHoldsEveryOwnersGrowth) {
  const v1::Snapshot before = SnapshotOf(kBefore, 1, 10, /*pid=*/7);
  const v1::Snapshot after = SnapshotOf(kAfter, 2, 20, /*pid=*/8);
  const DiffResult diff = Diff(&before, after);
  ASSERT_EQ(diff.mode, DiffMode::kAggregate);
  const StackTree tree = DiffStackTree(diff, *owners_);
  CheckShape(tree, /*leaves_only=*/false);
  ExpectTotals(diff, tree);
  // The stacks are each owner's example, as --folded shows them.
  EXPECT_EQ(TreeAsFolded(tree), Folded(diff)) << Outline(tree);
}

TEST_F(DiffTreeTest, ThePrunedTreeOfADiffStillAddsUp) {
  const v1::Snapshot after = SnapshotOf(kAfter, 2, 20);
  const DiffResult diff = Diff(nullptr, after);
  const StackTree tree = DiffStackTree(diff, *owners_, 4);
  CheckShape(tree, /*leaves_only=*/false);
  EXPECT_LE(tree.nodes.size(), 4u);
  ExpectTotals(diff, tree);
  EXPECT_GT(tree.pruned_bytes, 0);
}

}  // namespace
}  // namespace retain::tool
