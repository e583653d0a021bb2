// FitIndex: ordered, augmented search trees over GPUs (or nodes) so Best-Fit
// placement finds its GPU without visiting the cluster.
//
// Each tree is a treap ordered by FitKey (primary quantity, e.g. free memory;
// then a tie-break rank; then the id). Every entry carries FitAttrs (free
// compute, its node's free CPU and host memory, a model bit) and every subtree
// their aggregate (maxima and the OR of model bits), so a search skips whole
// subtrees that cannot hold the request. The aggregates prune conservatively;
// the caller's exact predicate has the last word, so answers are exact.
//
// Entries live in one pool indexed by slot (a GPU's or node's dense id), so an
// entry sits in at most one tree at a time and no operation allocates once the
// pool has grown. A tree is just its root slot, owned by the caller. Each
// entry is packed into one 64-byte cache line: ranks and ids are 32-bit, and
// attributes are stored saturated to 32 bits (model bits above 31 fold into
// bit 31) — both sides of every comparison are packed the same way, so
// packing can only weaken pruning, never hide a fitting entry.
//
// Cost: insert, erase and SetAttrs O(log n) expected; FindFirst O(log n) when
// a single attribute binds, more only when aggregates of different attributes
// pass in a subtree whose entries fail individually.
//
// Thread-safety: none; the owning Ledger serialises access.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace hf::ledger {

struct FitKey {
  std::int64_t primary = 0;  // e.g. free memory (MiB) or free GPU count
  std::uint64_t rank = 0;    // tie-break among equal primaries; < 2^32
  std::uint64_t id = 0;      // final tie-break; unique per entry; < 2^32

  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 false positive
  friend auto operator<=>(const FitKey&, const FitKey&) = default;
};

struct FitAttrs {
  std::int64_t compute_free = 0;
  std::int64_t cpu_free = 0;
  std::int64_t host_memory_free = 0;
  std::uint64_t model_mask = 0;

  friend bool operator==(const FitAttrs&, const FitAttrs&) = default;

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
  // REQUIRES: key.rank and key.id < 2^32.
  void Insert(Root& root, Slot slot, const FitKey& key, const FitAttrs& attrs);
  // Removes `slot` from `root`. REQUIRES: slot is in root.
  void Erase(Root& root, Slot slot);
  // Replaces the attributes of `slot` (key unchanged) and fixes aggregates
  // on its path, bottom-up, stopping where nothing changes.
  // REQUIRES: slot is in root.
  void SetAttrs(Root root, Slot slot, const FitAttrs& attrs);

  bool Contains(Slot slot) const {
    return slot < in_tree_.size() && in_tree_[slot] != 0;
  }
  FitKey KeyOf(Slot slot) const {
    const Entry& e = pool_[slot];
    return FitKey{e.primary, e.rank, e.id};
  }
  // The stored attributes (as packed: saturated to 32 bits).
  FitAttrs AttrsOf(Slot slot) const { return Unpack(pool_[slot].attrs); }

  // The smallest-key entry with key.primary >= min_primary whose attributes
  // cover `need` and for which `accept(slot)` is true; kNil if none.
  // `accept` is any callable bool(Slot).
  template <typename Accept>
  Slot FindFirst(Root root, std::int64_t min_primary, const FitAttrs& need,
                 const Accept& accept) const {
    const auto call = [&accept](Slot slot) {
      return static_cast<bool>(accept(slot));
    };
    using Call = decltype(call);
    const auto thunk = [](const void* ctx, Slot slot) {
      return (*static_cast<const Call*>(ctx))(slot);
    };
    return Find(root, min_primary, Pack(need), thunk, &call);
  }

  // Number of entries in the tree (O(1)).
  std::size_t SizeOf(Root root) const {
    return root == kNil ? 0 : pool_[root].size;
  }

 private:
  struct Packed {
    std::int32_t compute_free = 0;
    std::int32_t cpu_free = 0;
    std::int32_t host_memory_free = 0;
    std::uint32_t model_mask = 0;

    friend bool operator==(const Packed&, const Packed&) = default;
    bool Covers(const Packed& need) const {
      return compute_free >= need.compute_free && cpu_free >= need.cpu_free &&
             host_memory_free >= need.host_memory_free &&
             (model_mask & need.model_mask) != 0;
    }
  };
  struct alignas(64) Entry {
    std::int64_t primary = 0;
    std::uint32_t rank = 0;
    std::uint32_t id = 0;
    Packed attrs;
    Packed agg;  // aggregate over the subtree rooted here
    std::uint32_t priority = 0;
    std::uint32_t size = 0;
    Slot left = kNil;
    Slot right = kNil;

    bool KeyLess(const Entry& o) const {
      if (primary != o.primary) return primary < o.primary;
      if (rank != o.rank) return rank < o.rank;
      return id < o.id;
    }
  };
  static_assert(sizeof(Entry) == 64, "one cache line per entry");
  using AcceptFn = bool (*)(const void*, Slot);

  static Packed Pack(const FitAttrs& a);
  static FitAttrs Unpack(const Packed& p);

  void Pull(Slot t);
  Slot InsertAt(Slot t, Slot slot);
  Slot EraseAt(Slot t, Slot slot);
  Slot Merge(Slot a, Slot b);
  bool RefreshPath(Slot t, Slot slot);
  Slot Find(Slot t, std::int64_t min_primary, const Packed& need,
            AcceptFn accept, const void* ctx) const;

  std::vector<Entry> pool_;
  std::vector<std::uint8_t> in_tree_;
};

}  // namespace hf::ledger
