// owned_allocations: the loop every engine over a snapshot runs, "each live
// allocation, its owner, the owner's row", written once. ForEachOwnedAllocation
// flattens a snapshot's allocation blocks and resolves each allocation's
// owner (OwnerResolver caches per stack, kind, tag and device); OwnerRows keeps one
// row per owner key, in the order keys were first seen.
//
// Thread-compatible, like OwnerResolver: one resolver and its rows per
// thread.
#ifndef RETAIN_TOOLS_LIB_OWNED_ALLOCATIONS_H_
#define RETAIN_TOOLS_LIB_OWNED_ALLOCATIONS_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "retain.pb.h"
#include "tools/lib/owner.h"
#include "tools/lib/snapshot_reader.h"

namespace retain::tool {

// Calls visit(item, owner) for every item of `items` for which keep(item) is
// true, in their order. Items are allocations of `snapshot` (Allocation rows,
// e.g. CountedAllocations(snapshot)) or anything else that names a stack, a
// kind, a tag and a device of it (members stack_id, kind, tag_id, device; a
// StackShare).
// Owners are resolved only for the kept ones, so a filter also spares the
// symbolizer.
//   Keep:  bool(const Item&)
//   Visit: void(const Item&, const Owner&)
template <typename Items, typename Keep, typename Visit>
void ForEachOwnedAllocationIf(const v1::Snapshot& snapshot, const Items& items,
                              OwnerResolver& owners, Keep&& keep, Visit&& visit) {
  for (const auto& item : items) {
    if (!keep(item)) continue;
    visit(item, owners.Resolve(snapshot, item.stack_id, item.kind, item.tag_id, item.device));
  }
}

// Every live allocation of `snapshot` with its owner.
template <typename Visit>
void ForEachOwnedAllocation(const v1::Snapshot& snapshot, OwnerResolver& owners, Visit&& visit) {
  ForEachOwnedAllocationIf(
      snapshot, CountedAllocations(snapshot), owners, [](const Allocation&) { return true; },
      std::forward<Visit>(visit));
}

// Rows keyed by owner key, in first-seen order of keys. `Row` has a member
// `Owner owner`. A row groups every allocation whose owner has this key;
// under --by module or kind they may belong to different categories, and
// then the row belongs to none of them.
template <typename Row>
class OwnerRows {
 public:
  // The row of `owner`'s key, made (with `owner`) if it is new; `created`,
  // when given, says whether it was.
  Row& Get(const Owner& owner, bool* created = nullptr) {
    auto [it, inserted] = index_.emplace(owner.key, rows_.size());
    if (inserted) {
      rows_.emplace_back();
      rows_.back().owner = owner;
    } else if (rows_[it->second].owner.category != owner.category) {
      rows_[it->second].owner.category.clear();
      rows_[it->second].owner.bounded = false;
    }
    if (created != nullptr) *created = inserted;
    return rows_[it->second];
  }

  size_t size() const { return rows_.size(); }

  // The rows, in first-seen order. The table is spent: assign a new one to
  // use it again.
  std::vector<Row> Take() { return std::move(rows_); }

 private:
  absl::flat_hash_map<std::string, size_t> index_;
  std::vector<Row> rows_;
};

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_OWNED_ALLOCATIONS_H_
