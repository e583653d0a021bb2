// FitIndex: ordered, augmented search trees over GPUs (or nodes) so Best-Fit
// placement finds its GPU without visiting the cluster.
//
// Each tree is a treap ordered by Key (primary quantity, e.g. free memory;
// then a tie-break rank; then the id). Every entry carries FitAttrs (free
// compute, its node's free CPU and host memory, a model bit) and every subtree
// their aggregate (maxima and the OR of model bits), so a search skips whole
// subtrees that cannot hold the request. The aggregates prune conservatively;
// the caller's exact predicate has the last word, so answers are exact.
//
// Entries live in one pool indexed by slot (a GPU's or node's dense id), so an
// entry sits in at most one tree at a time and no operation allocates once the
// pool has grown. A tree is just its root slot, owned by the caller.
//
// Cost: insert, erase and refresh O(log n) expected; FindFirst O(log n) when a
// single attribute binds, more only when aggregates of different attributes
// pass in a subtree whose entries fail individually.
//
// Thread-safety: none; the owning Ledger serialises access.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace hf::ledger {

struct FitKey {
  std::int64_t primary = 0;  // e.g. free memory (MiB) or free GPU count
  std::uint64_t rank = 0;    // tie-break among equal primaries (node rank)
  std::uint64_t id = 0;      // final tie-break; unique per entry

  friend auto operator<=>(const FitKey&, const FitKey&) = default;
};

struct FitAttrs {
  std::int64_t compute_free = 0;
  std::int64_t cpu_free = 0;
  std::int64_t host_memory_free = 0;
  std::uint64_t model_mask = 0;

  // True when these attributes (or an aggregate of them) can satisfy `need`.
  bool Covers(const FitAttrs& need) const {
    return compute_free >= need.compute_free && cpu_free >= need.cpu_free &&
           host_memory_free >= need.host_memory_free &&
           (model_mask & need.model_mask) != 0;
  }
};

class FitIndex {
 public:
  using Slot = std::uint32_t;
  static constexpr Slot kNil = std::numeric_limits<Slot>::max();
  using Root = Slot;  // kNil = empty tree

  // Inserts `slot` (not in any tree) into `root`.
  void Insert(Root& root, Slot slot, const FitKey& key, const FitAttrs& attrs);
  // Removes `slot` from `root`. REQUIRES: slot is in root.
  void Erase(Root& root, Slot slot);
  // Replaces the attributes of `slot` (key unchanged) and fixes aggregates
  // on its path. REQUIRES: slot is in root.
  void SetAttrs(Root root, Slot slot, const FitAttrs& attrs);

  bool Contains(Slot slot) const {
    return slot < pool_.size() && pool_[slot].in_tree;
  }
  const FitKey& KeyOf(Slot slot) const { return pool_[slot].key; }

  // The smallest-key entry with key.primary >= min_primary whose attributes
  // cover `need` and for which `accept(slot)` is true; kNil if none.
  Slot FindFirst(Root root, std::int64_t min_primary, const FitAttrs& need,
                 const std::function<bool(Slot)>& accept) const;

  // Number of entries in the tree (O(1)).
  std::size_t SizeOf(Root root) const {
    return root == kNil ? 0 : pool_[root].size;
  }

 private:
  struct Entry {
    FitKey key;
    FitAttrs attrs;
    FitAttrs agg;  // aggregate over the subtree rooted here
    std::uint32_t priority = 0;
    std::uint32_t size = 0;
    Slot left = kNil;
    Slot right = kNil;
    bool in_tree = false;
  };

  void Pull(Slot t);
  Slot InsertAt(Slot t, Slot slot);
  Slot EraseAt(Slot t, const FitKey& key);
  Slot Merge(Slot a, Slot b);
  bool RefreshPath(Slot t, const FitKey& key);
  Slot Find(Slot t, std::int64_t min_primary, const FitAttrs& need,
            const std::function<bool(Slot)>& accept) const;

  std::vector<Entry> pool_;
};

}  // namespace hf::ledger
